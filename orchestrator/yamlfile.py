"""Reading YAML files and turning validation errors into one line per problem, naming file and field."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .errors import InputError

# libyaml's safe loader where PyYAML was built with it (its wheels are): the same documents and errors,
# several times faster than the pure-Python one, and every command reads an inventory.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    """Parse a YAML file whose top level must be a mapping. Raises InputError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: {what} file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read {what} file: {exc}") from None
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{path}: malformed YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def describe_validation(path: Path, exc: ValidationError, prefix: str = "") -> str:
    """One line per problem: `file: <prefix>field 'a.b': message`."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        lines.append(f"{path}: {prefix}field '{loc}': {msg}" if loc else f"{path}: {prefix}{msg}")
    return "\n".join(lines)
