"""A job's cases, round by round: runner (rounds until sure, one record per round), supervise (the worker
processes, crashes and hangs; the only writer of results), headtohead (the contenders of a shape paired)."""
