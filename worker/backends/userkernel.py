"""Backends defined in the user's own Python files (a sweep's `{name: ..., file: ...}` backends).

The controller packs each file into the worker bundle as `worker/user/k<sha256[:16]>.py`, so it travels
content-addressed with the worker and a rerun uses the very bytes the run started with. A case names its
file by hash (`CaseSpec.kernel_sha256`). The file's contract:

    FAMILY = "bf16"                     # operand format its result is checked as: bf16 | fp8 | fp4
    MIN_CC = (9, 0)                     # optional; below it (or on a CPU) the case is `unsupported`
    def prepare(a, b, out_dtype):       # a: [M, K], b: [N, K], bf16, on the case's device
        return lambda: my_kernel(a, b)  # the callable that is timed; returns [M, N]

Output contract: every call returns one plain tensor of `out_dtype`, [M, N], on `a`'s device; a call
that returns anything else of tensors (fp32 where bf16 was asked, [M, N-1], another device, a list)
fails its case with the sentence naming both (verify.WrongOutput), before its values are compared.

Integrity (worker/check/integrity.py): between calls fleetbench flips the sign of `a` in place (raw writes:
`a._version` does not move) and expects the output negated, so a result cached or computed ahead fails. A prepare that converts `a` (quantizes,
copies) names what its callable reads instead: `run.reads = [a8]` (the tensors holding A's values as
the call reads them: float negated, float8 by its sign bit, uint8 as packed e2m1).

A file that does not import, or breaks the contract, makes its backend `unavailable` with the error's
last line and the line of the file it arose at; nothing else in the sweep is affected.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Callable, Optional, Union

from ..contract.catalog import FAMILIES, FP4_MIN_CC, BackendSpec

USER_DIR = Path(__file__).resolve().parents[1] / "user"  # worker/user/, where the bundle puts the files
_LOADED: dict[str, Union["UserKernel", str]] = {}


class UserKernel:
    """A loaded user file: its backend spec (family, minimum capability) and its `prepare`."""

    def __init__(self, spec: BackendSpec, prepare: Callable):
        self.spec = spec
        self._prepare = prepare

    def prepare(self, spec: BackendSpec, sets: list, out_dtype) -> Callable[[int], object]:
        """The built-in backends' signature: one user callable per input set, called by index; `reads`:
        per set, what the callable says it reads of A (its `reads`), else the `a` it was given; `expects`:
        per set, what each call must return (verify.Expected), checked on every call (a compare of dtype,
        shape and device, ~0.2 µs of host time; in graph timing only at capture, never at replay)."""
        import torch

        from ..check.verify import Expected, WrongOutput, output_problem

        calls = [self._prepare(a, b, out_dtype) for a, b in sets]
        bad = next((c for c in calls if not callable(c)), None)
        if bad is not None:
            raise TypeError(f"prepare() must return a callable, got {type(bad).__name__}")
        reads = [list(getattr(c, "reads", None) or [a]) for c, (a, _) in zip(calls, sets)]
        if any(type(t) is not torch.Tensor for r in reads for t in r):
            raise TypeError("a callable's `reads` must be a list of tensors (what its call reads of A)")

        expects = [Expected(out_dtype, (a.shape[0], b.shape[0]), a.device) for a, b in sets]
        tensor = torch.Tensor

        def run(i: int):
            result = calls[i]()
            want = expects[i]
            if type(result) is tensor:
                if result.dtype == want.dtype and result.shape == want.shape and result.device == want.device:
                    return result
            elif not isinstance(result, (list, tuple)):
                return result  # not a tensor at all: worker/check/integrity.py names it (lazy)
            problem = output_problem(result, want)
            if problem:
                raise WrongOutput(problem)
            return result

        run.reads = reads
        run.expects = expects
        return run


def file_for(sha256: str) -> Path:
    return USER_DIR / f"k{sha256[:16]}.py"


def declared_family(sha256: str) -> Optional[str]:
    """The FAMILY the file declares as a literal at its top level (`FAMILY = "bf16"`), read without running
    it; None where it declares none that way (or the file is missing or does not parse)."""
    import ast

    try:
        tree = ast.parse(file_for(sha256).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    family = None
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "FAMILY" for t in targets):
            value = node.value
            family = value.value if isinstance(value, ast.Constant) and value.value in FAMILIES else None
    return family


def load(name: str, sha256: str) -> Union[UserKernel, str]:
    """The user kernel `name` in file `sha256`, or why it cannot run (a one-line problem)."""
    key = f"{name}:{sha256}"
    if key not in _LOADED:
        _LOADED[key] = _load(name, sha256)
    return _LOADED[key]


def _load(name: str, sha256: str) -> Union[UserKernel, str]:
    path = file_for(sha256)
    if not path.is_file():
        return f"kernel file {path.name} is not in this worker bundle"
    module_name = f"fleetbench_user_{sha256[:16]}"
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    except BaseException as exc:  # a user file may raise anything at import, SystemExit included
        sys.modules.pop(module_name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        return f"{name}: its file does not import: {_where(exc, path)}{_last_line(exc)}"
    family = getattr(module, "FAMILY", None)
    if family not in FAMILIES:
        return f"{name}: FAMILY must be one of {', '.join(FAMILIES)} (got {family!r})"
    prepare = getattr(module, "prepare", None)
    if not callable(prepare):
        return f"{name}: the file defines no prepare(a, b, out_dtype)"
    min_cc = _min_cc(getattr(module, "MIN_CC", None))
    if isinstance(min_cc, str):
        return f"{name}: {min_cc}"
    if family == "fp4":  # FP4 below 10.0 writes garbage without an error, whatever the file says
        min_cc = max(min_cc or FP4_MIN_CC, FP4_MIN_CC)
    spec = BackendSpec(
        name=name, module="", family=family, import_name="", min_cc=min_cc, description=f"user kernel {path.name}"
    )
    return UserKernel(spec, prepare)


def _min_cc(value) -> Optional[tuple[int, int]] | str:
    if value is None:
        return None
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return (value[0], value[1])
    return f"MIN_CC must be a (major, minor) pair of integers (got {value!r})"


def _where(exc: BaseException, path: Path) -> str:
    """`line N (source text): ` of the user's file where `exc` arose, or "" when it arose elsewhere. The
    file travels under its hash, so the line and its text are what lead the user to their own file."""
    line = None
    if isinstance(exc, SyntaxError) and exc.filename == str(path):
        line = exc.lineno
    else:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
        line = frames[-1].lineno if frames else None
    if not line:
        return ""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return f"line {line}" + (f" ({text[:120]})" if text else "") + ": "


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in traceback.format_exception_only(type(exc), exc) if line.strip()]
    return lines[-1][:300] if lines else type(exc).__name__
