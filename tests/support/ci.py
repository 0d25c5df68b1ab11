"""What a test needs from the machine: in CI (CI=true, as .ci/run sets it) `make test` installs it, so a
missing piece is a failure there; elsewhere the test is skipped, saying what is missing."""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    """True when the tests run in CI (the environment variable CI is `true`)."""
    return os.environ.get("CI", "").lower() == "true"


def require(condition: object, message: str, *, module: bool = False) -> None:
    """Returns when `condition` holds. Otherwise fails the test in CI and skips it elsewhere (the whole
    module with `module=True`, for a check at import time), with `message` either way."""
    if condition:
        return
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=module)
