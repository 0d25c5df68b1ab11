"""Analysis: pure functions over stored runs: merged rows, diff with its statistics, history and steps."""
