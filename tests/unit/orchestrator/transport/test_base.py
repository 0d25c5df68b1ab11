"""The transport seam (orchestrator/transport/base.py): the one quoting of a remote command, login-relative paths."""

from __future__ import annotations

import shlex

from orchestrator.transport import login_relative, shell_command

HOSTILE = ["{'Desc':40s}", "it's", '"q"', "$(touch /tmp/pwned)", "`id`", "a b", "ünïcode", "x\ny", ""]


def test_shell_command_quotes_every_word_and_env():
    line = shell_command(["python3", *HOSTILE], {"K": "v w$x"})
    assert shlex.split(line) == ["env", "K=v w$x", "python3", *HOSTILE]


def test_login_relative_paths():
    assert login_relative("~/.fleetbench/x") == ".fleetbench/x"
    assert login_relative("~") == "." and login_relative("/abs") == "/abs"
