"""What several test modules share: helpers imported as `support.<module>` (tests/conftest.py puts the
tests folder on sys.path). Test modules import from here, never from each other."""
