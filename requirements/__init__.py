"""The hosts' pinned versions (host-constraints.txt), installed as the package data of
`orchestrator.requirements` (see pyproject.toml) so `fleetbench provision` finds them from a wheel."""
