"""The benchmark scripts, one folder per question (benchmarks/RESULTS.md). Each runs from the repo root as
`python -m benchmarks.<folder>.<script>`; what they share is in `benchmarks.harness`."""
