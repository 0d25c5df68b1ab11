"""Reading YAML files and turning validation errors into one line per problem, naming file and field;
the rule for text that tables show."""

from __future__ import annotations

import json
import math
import unicodedata
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, ValidationError

from ..errors import InputError

# libyaml's safe loader where PyYAML was built with it (its wheels are): the same documents and errors,
# several times faster than the pure-Python one, and every command reads an inventory.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _UniqueKeyLoader(_SAFE_LOADER):
    """The safe loader, refusing a mapping that gives a key twice (YAML says keys are unique; PyYAML
    keeps the last silently, so a field given twice would be half ignored). Keys that `<<` merges in
    may be overridden, as YAML intends."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key, _ in node.value:
                if key.tag == _MERGE_TAG or not isinstance(key, yaml.ScalarNode):
                    continue
                first = seen.setdefault((key.tag, key.value), key)
                if first is not key:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"key {key.value!r} given twice (first at line {first.start_mark.line + 1})",
                        key.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)


def read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    """Parse a YAML file whose top level must be a mapping. Raises InputError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: {what} file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read {what} file: {exc}") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{path}: malformed YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def refuse_non_finite(data: Any, path: Path, prefix: str = "") -> None:
    """InputError naming every field that holds an infinite or NaN number (YAML's .inf, -.inf, .nan).
    No setting means anything at infinity, and JSON (manifest.json, records, params) cannot hold one:
    refused here, for every field of the file, before any model sees it."""
    found = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            found.append(f"{path}: {prefix}field '{where}': {_yaml_spelling(value)} is not a finite number")
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{where}.{key}" if where else str(key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{where}.{i}" if where else str(i))

    walk(data, "")
    if found:
        raise InputError("\n".join(found))


def _yaml_spelling(value: float) -> str:
    return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")


def describe_validation(path: Path, exc: ValidationError, prefix: str = "") -> str:
    """One line per problem: `file: <prefix>field 'a.b': message`."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"].endswith(("_type", "_parsing")) and isinstance(err.get("input"), (bool, int, float, str)):
            # As YAML spelled it: true (also yes, on) is a boolean and "16" a string, neither a number.
            shown = json.dumps(err["input"])
            msg += f", got {shown if len(shown) <= 40 else shown[:37] + '...'}"
        lines.append(f"{path}: {prefix}field '{loc}': {msg}" if loc else f"{path}: {prefix}{msg}")
    return "\n".join(lines)


def _printable(text: str) -> str:
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Cf"):
            raise ValueError(f"{text!r} holds the control character {ch!r}: only printable text is allowed here")
    return text


# Text that tables and terminals show (names, labels, hosts, paths): control and format characters (an
# ANSI escape, a newline, a bidi override) are refused, so no file can recolour or rewrite the screen.
PrintableText = Annotated[str, AfterValidator(_printable)]
