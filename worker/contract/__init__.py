"""The worker's one door: everything the controller imports of the worker. The records and params of
every worker command, the protocol, the backend catalog and the pure statistics that the worker and the
controller both compute. Standard library and pydantic only (tests/test_structure.py): the controller
never imports torch, numpy or a runner through it."""
