"""What several test modules share: helpers imported as `support.<module>` (pyproject.toml's pytest
`pythonpath` puts the tests folder on sys.path, so a test in any sub-folder finds them). Test modules
import from here, never from each other."""
