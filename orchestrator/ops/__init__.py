"""Ops: maintenance on the hosts, on the same fan-out as a sweep: `hosts --check` (hostcheck), provision,
prune."""
