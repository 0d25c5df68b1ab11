"""Execution: launching a plan (run, rerun), the attempt of each job on its host (execute; attempt, the
one runner of a worker command, which sweeps, profile and crosscheck share; demux, remote), the one
fan-out every multi-host command uses, how an attempt ended (outcome), and the other commands that act
on hosts (hostcheck, provision, prune)."""
