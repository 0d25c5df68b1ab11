"""Issue 41: every option of every command says what it does in `--help`, and one with a default says
which. Walks the parsers `fleetbench` itself builds (orchestrator/cli.py), then asks each command for its
help as a user does."""

from __future__ import annotations

import argparse

import pytest

from orchestrator.cli import COMMANDS, _parser, main

# Options of commands other engineers own that still lack help (issue 41 lists them to them): allowed
# here until they are given one, never added to.
OWNED_ELSEWHERE = {("history", "--n"), ("history", "--k")}
SILENT_DEFAULTS = (None, False, [], argparse.SUPPRESS)


def options(parser: argparse.ArgumentParser, command: str = "fleetbench"):
    """(command, option, action) of every option and positional argument, subcommands included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from options(sub, name)
        else:
            yield command, (action.option_strings or [action.dest])[-1], action


def test_every_option_of_every_command_has_help():
    missing = {
        (command, option)
        for command, option, action in options(_parser())
        if not (action.help or "").strip() or action.help == argparse.SUPPRESS
    }
    assert not missing - OWNED_ELSEWHERE, sorted(missing - OWNED_ELSEWHERE)


def test_every_option_with_a_default_names_it():
    unnamed = [
        (command, option, action.default)
        for command, option, action in options(_parser())
        if not isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._StoreTrueAction))
        and not action.required
        and action.default not in SILENT_DEFAULTS
        and "default" not in (action.help or "")
    ]
    assert not unnamed, unnamed


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_of_each_command_shows_every_option_with_its_text(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "Traceback" not in out
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    for action in sub._actions:
        if action.option_strings and (command, action.option_strings[-1]) not in OWNED_ELSEWHERE:
            assert action.option_strings[-1] in out
            first_words = " ".join((action.help or "").split()[:3]).replace("%%", "%")
            assert first_words and first_words in " ".join(out.split()), (command, action.option_strings)


def test_provision_help_says_which_profile_each_host_gets_by_default(capsys):
    with pytest.raises(SystemExit):
        main(["provision", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "default: auto" in out and "cpu" in out and "never the CUDA stack" in out
