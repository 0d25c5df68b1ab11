"""Execution: launching a plan (run, rerun), the attempt of each job on its host (execute; attempt, the
one runner of a worker command, which sweeps, profile and crosscheck share; demux, remote), the one
fan-out every multi-host command uses, and what a stored run needs to run again (storedrun,
storedcases, with profile and crosscheck)."""
