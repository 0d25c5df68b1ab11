"""Sweep spec (YAML) -> validated Sweep -> the list of cases every host runs.

    name: glm5-tp8
    backends: [torch-bf16, torch-fp8, reference-nvfp4, "flashinfer-fp4-*", sgl-fp4-cutlass]
    shapes:
      - preset: glm5-tp8
      - {m: [16, 64], n: 2048, k: 6144, label: "MoE expert"}
      - {moe: {batch: [512, 4096], top_k: 8, experts: 256}, n: 2048, k: 6144, label: "MoE expert"}
      - {m: [16, 64], n: 768, k: 6144, backends: [torch-bf16, reference-nvfp4]}
    timing: {mode: graph, l2: cold, target_rel_ci: 0.01, budget_s: 0.5}

A backend may also be the user's own file, `{name: my-gemm, file: kernels/my_gemm.py}` (the path is
relative to the sweep file; the file's contract is in worker/backends/userkernel.py). Its bytes are read and
hashed here, travel inside the worker bundle, and each of its cases records the hash.

A shape entry runs every backend of the sweep that runs its kind (GEMM or MoE layer); with its own
`backends:` it runs only those it names, each one of the sweep's (so one run can hold a fused MoE block
and its two projections, each timed by other backends).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
from pathlib import Path
from typing import Annotated, Literal, Optional, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from worker.contract.catalog import CATALOG, MOE_CATALOG
from worker.contract.routing import describe as describe_routing
from worker.contract.routing import draw_counts, read_counts_file
from worker.contract.schema import CaseSpec, MoeSpec, TimingOptions

from ..errors import InputError
from . import defaults
from .yamlfile import PrintableText, describe_validation, read_yaml_mapping, refuse_non_finite

# GEMM libraries take their sizes as 32-bit integers (cuBLAS's m, n, k): a larger size is a typo.
MAX_SIZE = 2**31 - 1
# An MoE layer draws a routing over all its experts and runs a GEMM for each.
MAX_EXPERTS = 65536


def _sizes(value):
    """One whole number or a list of them, none above MAX_SIZE. YAML's true/false, 16.0 and '1e23' are
    not sizes: refused here, before a looser reading could turn them into 1 or 10**23."""
    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"expected a whole number or a list of them, got {json.dumps(v, default=str)}")
        if v > MAX_SIZE:
            raise ValueError(f"{v} is larger than {MAX_SIZE}, the largest size GEMM libraries take")
    return value


IntList = Annotated[Union[int, list[int]], BeforeValidator(_sizes)]

# Named shape sets: (label, Ms, N, K).
GLM5_M = [16, 32, 64, 128, 256, 512, 1024]
DEEPSEEK_M = [1, 16, 64, 256, 1024, 4096, 16384]
PRESETS: dict[str, list[tuple[str, list[int], int, int]]] = {
    # GLM-5-NVFP4 under TP8: MoE experts (per-expert M = batch*8/256) and attention projections.
    "glm5-tp8": [
        ("GLM-5 TP8 MoE expert", GLM5_M, 2048, 6144),
        ("GLM-5 TP8 attention proj", [16, 32, 64, 128, 256], 768, 6144),
    ],
    # DeepSeek-R1 FP4 (N, K) from sgl-kernel's bench_fp4_gemm.py.
    "deepseek-r1-tp8": [
        ("DeepSeek-R1 TP8 (512, 7168)", DEEPSEEK_M, 512, 7168),
        ("DeepSeek-R1 TP8 (7168, 256)", DEEPSEEK_M, 7168, 256),
        ("DeepSeek-R1 TP8 (7168, 2304)", DEEPSEEK_M, 7168, 2304),
        ("DeepSeek-R1 TP8 (4608, 7168)", DEEPSEEK_M, 4608, 7168),
    ],
    "deepseek-r1-tp4": [
        ("DeepSeek-R1 TP4 (1024, 7168)", DEEPSEEK_M, 1024, 7168),
        ("DeepSeek-R1 TP4 (7168, 512)", DEEPSEEK_M, 7168, 512),
        ("DeepSeek-R1 TP4 (7168, 4608)", DEEPSEEK_M, 7168, 4608),
        ("DeepSeek-R1 TP4 (9216, 7168)", DEEPSEEK_M, 9216, 7168),
    ],
}


def _as_list(v: IntList) -> list[int]:
    return [v] if isinstance(v, int) else list(v)


class MoE(BaseModel):
    """Per-expert M from a batch: ceil(batch * top_k / experts) tokens reach each expert on average."""

    model_config = ConfigDict(extra="forbid")
    batch: IntList
    top_k: int = Field(gt=0)
    experts: int = Field(gt=0)

    @model_validator(mode="after")
    def _top_k_fits(self) -> "MoE":
        if self.top_k > self.experts:
            raise ValueError("'top_k' must not exceed 'experts' (each token goes to top_k distinct experts)")
        return self

    def ms(self) -> list[tuple[int, int]]:
        return [(b, math.ceil(b * self.top_k / self.experts)) for b in _as_list(self.batch)]


# MoE layers (a `moe_layer` shape): experts, top_k and each expert GEMM's (label, N, K).
MOE_PRESETS: dict[str, tuple[int, int, list[tuple[str, int, int]]]] = {
    "glm5-tp8": (256, 8, [("GLM-5 TP8 MoE experts", 2048, 6144)]),
    # DeepSeek-R1: hidden 7168, expert intermediate 2048; w13 (gate+up) and w2 sharded by TP.
    "deepseek-r1-tp8": (256, 8, [("DeepSeek-R1 TP8 MoE w13", 512, 7168), ("DeepSeek-R1 TP8 MoE w2", 7168, 256)]),
    "deepseek-r1-tp4": (256, 8, [("DeepSeek-R1 TP4 MoE w13", 1024, 7168), ("DeepSeek-R1 TP4 MoE w2", 7168, 512)]),
}


class MoeLayer(BaseModel):
    """All expert GEMMs of one MoE layer per case; the routing decides each expert's M (worker/routing.py).

    moe_layer: {preset: glm5-tp8, tokens: [16, 256], routing: zipf, skew: 1.2}
    moe_layer: {experts: 8, top_k: 2, tokens: 64, routing: uniform}          # with n and k
    moe_layer: {experts: 256, top_k: 8, routing: file, counts_file: counts.json}
    """

    model_config = ConfigDict(extra="forbid")
    preset: Optional[str] = None
    experts: Optional[int] = Field(default=None, gt=0, le=MAX_EXPERTS)
    top_k: Optional[int] = Field(default=None, gt=0)
    tokens: Optional[IntList] = None
    routing: Literal["uniform", "zipf", "file"] = "uniform"
    skew: float = Field(default=1.0, ge=0)
    counts_file: Optional[PrintableText] = None
    _counts: Optional[list[int]] = PrivateAttr(default=None)  # read by load_sweep from counts_file

    @model_validator(mode="after")
    def _complete(self) -> "MoeLayer":
        if self.preset is not None:
            if self.preset not in MOE_PRESETS:
                raise ValueError(f"unknown MoE preset {self.preset!r} (known: {', '.join(MOE_PRESETS)})")
            if self.experts is not None or self.top_k is not None:
                raise ValueError("a preset sets its own experts and top_k")
            self.experts, self.top_k = MOE_PRESETS[self.preset][:2]
        elif self.experts is None or self.top_k is None:
            raise ValueError("'experts' and 'top_k' are required without a preset")
        if self.top_k > self.experts:
            raise ValueError("'top_k' must not exceed 'experts'")
        if self.routing == "file":
            if not self.counts_file or self.tokens is not None:
                raise ValueError("routing 'file' takes 'counts_file' (its counts give the tokens), not 'tokens'")
        elif self.counts_file is not None:
            raise ValueError("'counts_file' goes with routing 'file'")
        elif self.tokens is None or not _as_list(self.tokens) or any(t <= 0 for t in _as_list(self.tokens)):
            raise ValueError("'tokens' (positive, one or a list) is required")
        return self

    def layers(self, seed: int) -> list[tuple[int, MoeSpec]]:
        """(tokens, MoeSpec with the drawn per-expert counts) per tokens value."""
        if self.routing == "file":
            if self._counts is None:
                raise ValueError("counts_file was not read (load the sweep with load_sweep)")
            spec = MoeSpec(
                experts=self.experts,
                top_k=self.top_k,
                routing="file",
                source=Path(self.counts_file).name,
                counts=self._counts,
            )
            return [(math.ceil(sum(self._counts) / self.top_k), spec)]
        skew = self.skew if self.routing == "zipf" else None
        return [
            (
                t,
                MoeSpec(
                    experts=self.experts,
                    top_k=self.top_k,
                    routing=self.routing,
                    skew=skew,
                    counts=draw_counts(self.experts, self.top_k, t, self.routing, self.skew, seed),
                ),
            )
            for t in _as_list(self.tokens)
        ]


class ShapeEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preset: Optional[str] = None
    m: Optional[IntList] = None
    moe: Optional[MoE] = None
    moe_layer: Optional[MoeLayer] = None
    n: Optional[IntList] = None
    k: Optional[IntList] = None
    label: PrintableText = ""
    # The sweep's backends that run this entry (None: all of its kind); checked against the sweep's list
    # by Sweep.entry_backends.
    backends: Optional[list[PrintableText]] = None

    @field_validator("backends")
    @classmethod
    def _names_listed_once(cls, names: Optional[list[str]]) -> Optional[list[str]]:
        if names is not None:
            if not names:
                raise ValueError(
                    "an empty list runs nothing: name the backends this shape runs, or leave "
                    "'backends' out to run all the sweep's"
                )
            twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
            if twice is not None:
                raise ValueError(f"backend {twice!r} is named twice")
        return names

    @model_validator(mode="after")
    def _one_kind(self) -> "ShapeEntry":
        kinds = [x for x in ("preset", "m", "moe", "moe_layer") if getattr(self, x) is not None]
        if len(kinds) != 1:
            raise ValueError("give exactly one of 'preset', 'm', 'moe' or 'moe_layer'")
        if self.moe_layer is not None and self.moe_layer.preset is not None:
            if self.n is not None or self.k is not None:
                raise ValueError("an MoE preset sets its own n and k")
        elif self.preset is not None:
            if self.preset not in PRESETS:
                raise ValueError(f"unknown preset {self.preset!r} (known: {', '.join(PRESETS)})")
            if self.n is not None or self.k is not None:
                raise ValueError("a preset sets its own n and k")
        elif self.n is None or self.k is None:
            raise ValueError("'n' and 'k' are required with 'm', 'moe' or 'moe_layer' (without a preset)")
        for name in ("m", "n", "k"):
            values = getattr(self, name)
            if values is not None and any(v <= 0 for v in _as_list(values)):
                raise ValueError(f"'{name}' values must be positive")
            if values is not None and not _as_list(values):
                raise ValueError(f"'{name}' must not be empty")
        if self.moe is not None and any(b <= 0 for b in _as_list(self.moe.batch)):
            raise ValueError("'moe.batch' values must be positive")
        return self

    @property
    def workload(self) -> str:
        return "moe" if self.moe_layer is not None else "gemm"

    def moe_layers(self, seed: int) -> list[tuple[str, int, int, int, MoeSpec]]:
        """(label, tokens, n, k, MoeSpec) for every MoE layer this entry names."""
        layer = self.moe_layer
        if layer.preset is not None:
            nks = MOE_PRESETS[layer.preset][2]
        else:
            nks = [(self.label, n, k) for n in _as_list(self.n) for k in _as_list(self.k)]
        out = []
        for base, n, k in nks:
            for tokens, spec in layer.layers(seed):
                what = describe_routing(spec.routing, spec.skew, spec.source)
                label = f"{self.label or base} ({what}, {tokens} tokens, top-{spec.top_k}/{spec.experts})".strip()
                out.append((label, tokens, n, k, spec))
        return out

    def shapes(self) -> list[tuple[str, int, int, int]]:
        """(label, m, n, k) for every GEMM shape this entry names."""
        if self.preset is not None:
            return [(self.label or label, m, n, k) for label, ms, n, k in PRESETS[self.preset] for m in ms]
        out = []
        for n in _as_list(self.n):
            for k in _as_list(self.k):
                if self.moe is not None:
                    for batch, m in self.moe.ms():
                        label = f"{self.label} (batch {batch}, top-{self.moe.top_k}/{self.moe.experts})".strip()
                        out.append((label, m, n, k))
                else:
                    out.extend((self.label, m, n, k) for m in _as_list(self.m))
        return out


class UserBackend(BaseModel):
    """A backend defined in the user's own Python file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    file: PrintableText = Field(min_length=1)


class Sweep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: PrintableText = Field(min_length=1, max_length=80)
    description: str = ""
    backends: list[Union[str, UserBackend]] = Field(min_length=1)
    shapes: list[ShapeEntry] = Field(min_length=1)
    timing: TimingOptions = Field(default_factory=TimingOptions)
    out_dtype: Literal["bfloat16", "float16"] = "bfloat16"
    seed: int = 0
    device: Literal["auto", "cuda", "cpu"] = "auto"
    # Speed of light: each GPU's measured peaks, from the host's cache (measured when missing), measured
    # again (fresh), or not at all (off: no sol_us / pct_sol).
    calibration: Literal["cached", "fresh", "off"] = "cached"
    max_restarts: int = Field(default=2, ge=0, le=20)
    # A host that sends nothing (no output, no heartbeat) for this long is stalled: its run ends there.
    stall_timeout: float = Field(default=defaults.STALL_TIMEOUT_S, ge=15.0)
    # One round of one case may take this long before its host stops it as hung and goes on with the
    # next case; while a compiler runs under the worker (a first JIT build), build_timeout counts instead.
    case_timeout: float = Field(default=defaults.CASE_TIMEOUT_S, ge=1.0)
    build_timeout: float = Field(default=defaults.BUILD_TIMEOUT_S, ge=1.0)
    _kernels: Optional[dict[str, tuple[str, bytes]]] = PrivateAttr(default=None)

    def backend_names(self) -> list[str]:
        """Backends in spec order, globs expanded against the catalog."""
        names: list[str] = []
        for pattern in self.backends:
            if isinstance(pattern, UserBackend):
                found = [pattern.name]
            else:
                found = fnmatch.filter(CATALOG, pattern) if any(c in pattern for c in "*?[") else [pattern]
            names.extend(name for name in found if name not in names)
        return names

    def entry_backends(self, entry: ShapeEntry) -> list[str]:
        """The backends that run `entry`, in the sweep's order: every one of its kind (GEMM or MoE
        layer), or those its own `backends:` names. Raises ValueError for a name the sweep does not
        run or one of the other kind (load_sweep reports it naming the entry)."""
        names = self.backend_names()
        if entry.workload == "moe":
            fits = [b for b in names if b in MOE_CATALOG]
        else:
            fits = [b for b in names if b not in MOE_CATALOG]
        if entry.backends is None:
            return fits
        for name in entry.backends:
            known = name in names or name in CATALOG  # a kernel file runs GEMM shapes, as built-ins outside MOE_CATALOG
            if known and (name in MOE_CATALOG) != (entry.workload == "moe"):
                runs, entry_is = (
                    ("MoE layers", "a GEMM shape") if name in MOE_CATALOG else ("GEMM shapes", "an MoE layer")
                )
                raise ValueError(
                    f"backend {name!r} runs {runs} and this shape is {entry_is} "
                    f"(the sweep's backends for it: {', '.join(fits) or 'none'})"
                )
            if name not in names:
                if any(c in name for c in "*?["):
                    why = f"{name!r}: name each backend (globs belong in the sweep's 'backends')"
                elif name in CATALOG:
                    why = f"backend {name!r} is not in the sweep's 'backends' (a shape picks among them)"
                else:
                    why = f"unknown backend {name!r}"
                raise ValueError(f"{why}; the sweep's backends for it: {', '.join(fits) or 'none'}")
        return [b for b in fits if b in entry.backends]

    def user_kernels(self) -> dict[str, tuple[str, bytes]]:
        """User backend name -> (sha256, the file's bytes), read once (paths as load_sweep resolved
        them): the cases' hashes and the bundle's files are then the same bytes."""
        if self._kernels is None:
            self._kernels = {}
            for b in self.backends:
                if isinstance(b, UserBackend):
                    data = Path(b.file).read_bytes()
                    self._kernels[b.name] = (hashlib.sha256(data).hexdigest(), data)
        return self._kernels

    def cases(self) -> list[CaseSpec]:
        """Shape-major (every backend on a shape, then the next shape), deduplicated by case id."""
        seen: set[str] = set()
        cases = []
        kernels = {name: sha for name, (sha, _) in self.user_kernels().items()}
        for entry in self.shapes:
            backends = self.entry_backends(entry)
            if entry.workload == "moe":
                planned = [
                    CaseSpec(
                        workload="moe",
                        backend=backend,
                        m=tokens,
                        n=n,
                        k=k,
                        label=label,
                        moe=spec,
                        out_dtype=self.out_dtype,
                        seed=self.seed,
                        timing=self.timing,
                    )
                    for label, tokens, n, k, spec in entry.moe_layers(self.seed)
                    for backend in backends
                ]
            else:
                planned = [
                    CaseSpec(
                        backend=backend,
                        m=m,
                        n=n,
                        k=k,
                        label=label,
                        out_dtype=self.out_dtype,
                        seed=self.seed,
                        timing=self.timing,
                        kernel_sha256=kernels.get(backend),
                    )
                    for label, m, n, k in entry.shapes()
                    for backend in backends
                ]
            for case in planned:
                if case.case_id not in seen:
                    seen.add(case.case_id)
                    cases.append(case)
        return cases


def _beside(sweep_path: Path, name: str) -> Path:
    """A file a sweep names: as given when absolute, else relative to the sweep file (never to the
    folder the command was started in)."""
    file = Path(name).expanduser()
    return file if file.is_absolute() else Path(sweep_path).resolve().parent / file


def load_sweep(path: Path) -> Sweep:
    """Read and validate a sweep spec. Raises InputError naming the file and the field."""
    raw = read_yaml_mapping(Path(path), "sweep")
    refuse_non_finite(raw, Path(path))
    try:
        # Strict: a value is taken as written, never converted (true is not 1, "16" is not 16).
        sweep = Sweep.model_validate(raw, strict=True)
    except ValidationError as exc:
        raise InputError(describe_validation(Path(path), exc)) from None
    unknown, user = [], []
    for pattern in sweep.backends:
        if isinstance(pattern, UserBackend):
            user.append(pattern)
            continue
        is_glob = any(c in pattern for c in "*?[")
        if (is_glob and not fnmatch.filter(CATALOG, pattern)) or (not is_glob and pattern not in CATALOG):
            unknown.append(pattern)
    if unknown:
        raise InputError(
            f"{path}: field 'backends': unknown backend {', '.join(map(repr, unknown))} (known: {', '.join(CATALOG)})"
        )
    names = [b.name for b in user]
    for b in user:
        if b.name in CATALOG:
            raise InputError(f"{path}: backend {b.name!r}: a built-in backend has that name; give your kernel another")
        if names.count(b.name) > 1:
            raise InputError(f"{path}: backend {b.name!r} is defined twice")
        file = _beside(path, b.file)
        if not file.is_file():
            raise InputError(f"{path}: backend {b.name!r}: kernel file {file} does not exist")
        b.file = str(file)
    used: set[str] = set()
    for i, entry in enumerate(sweep.shapes):
        try:
            runs = sweep.entry_backends(entry)
        except ValueError as exc:
            raise InputError(f"{path}: field 'shapes.{i}.backends': {exc}") from None
        used.update(runs)
        if entry.workload == "moe" and not runs:
            raise InputError(
                f"{path}: shapes[{i}] is an MoE layer but no backend runs MoE layers "
                f"(add some of: {', '.join(MOE_CATALOG)})"
            )
        if entry.workload == "gemm" and not runs:
            raise InputError(f"{path}: shapes[{i}] is a GEMM shape but every backend is an MoE backend")
        layer = entry.moe_layer
        if layer is not None and layer.routing == "file":
            counts = _beside(path, layer.counts_file)
            try:
                layer._counts = read_counts_file(counts, layer.experts)
            except OSError as exc:
                raise InputError(
                    f"{path}: shapes[{i}].moe_layer.counts_file: cannot read {counts}: {exc.strerror or exc}"
                ) from None
            except ValueError as exc:
                raise InputError(f"{path}: shapes[{i}].moe_layer.counts_file: {exc}") from None
    # A backend named in the sweep that shapes of its kind all leave out of their own lists runs nothing:
    # a forgotten name, said before a run that would time less than the sweep reads. (A glob may expand
    # to backends no shape wants; a backend with no shape of its kind at all is left as it always was.)
    kinds = {entry.workload for entry in sweep.shapes}
    for b in sweep.backends:
        name = b.name if isinstance(b, UserBackend) else b
        if any(c in name for c in "*?[") or name in used:
            continue
        if ("moe" if name in MOE_CATALOG else "gemm") in kinds:
            raise InputError(
                f"{path}: field 'backends': {name!r} runs on no shape: every shape of its kind "
                f"names its own 'backends' without it"
            )
    return sweep
