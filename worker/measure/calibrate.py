"""Speed of light: this GPU's own peaks, measured on it at the start of a sweep.

A datasheet says what a GPU of that model should do; a calibration says what this one does today
(its clocks, power limit, cooling, driver). Per operand family that the sweep's cases use and that runs
here, one large square GEMM through the worker's own backend for that family, and a device-to-device
copy for memory bandwidth. Each is timed with CUDA events over batches of calls after a warm-up; the
best batch is the peak (a peak is what the hardware can reach, not what it usually does).

The numbers are cached per host, GPU (its UUID), driver and torch version in
`~/.cache/fleetbench/calibration.json` (beside FlashInfer's cache when FLASHINFER_WORKSPACE_BASE is
set), so a sweep pays the ~1 s once; `calibration: fresh` in a sweep measures again, `off` skips it.
Failures are data: a family that cannot be measured is listed with its reason, and its cases get no
speed of light rather than one from the datasheet.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Callable, Optional

from ..contract.protocol import now_iso
from ..contract.schema import Calibration
from ..host.hostcache import cache_file, read_json, write_json

# The worker's own backend per family, in order of preference: the first that runs here is timed.
CALIBRATION_BACKENDS = {
    "bf16": ("torch-bf16",),
    "fp8": ("torch-fp8", "flashinfer-fp8-cublas"),
    "fp4": ("flashinfer-fp4-cutlass", "sgl-fp4-cutlass", "flashinfer-fp4-cudnn"),
}
GEMM_SIZE = 8192  # M = N = K: large enough to be math-bound on every GPU we target
COPY_BYTES = 1 << 30
DIED = "a worker process died while measuring this on this GPU; not measured again (calibration: fresh tries once more)"
WARMUP_CALLS = 3
BATCHES = 5
CALLS_PER_BATCH = 10
# A peak this far above the datasheet's is no peak of this GPU (a datasheet's dense figure is already at
# its top clock): a cached one is measured again, a measured one is refused, and the roof stays the
# datasheet's. Code under test can write the cache; it cannot raise the roof its own records are held to.
ABOVE_DATASHEET = 0.05


def cache_path(env: Optional[dict] = None) -> Path:
    return cache_file("calibration.json", env)


def cache_key(gpu_uuid: str, driver: Optional[str], torch_version: str) -> str:
    return f"{socket.gethostname()}|{gpu_uuid}|driver {driver or '?'}|torch {torch_version}"


def calibrate(
    device,
    families: set[str],
    mode: str,
    *,
    key: Optional[str] = None,
    measure: Optional[Callable[[str], tuple[float, str]]] = None,
    datasheet: Optional[dict[str, float]] = None,
    cache: Optional[Path] = None,
    on_measure: Optional[Callable[[list[str]], None]] = None,
) -> Optional[Calibration]:
    """The calibration for this GPU covering `families` (and the copy bandwidth), or None (CPU, `off`).

    mode: cached (use the host's entry, measuring only what it lacks) | fresh (measure all again).
    `measure(what)` -> (value, method) times one item ("copy" or a family) and raises when it cannot;
    the default runs it on this GPU. key/datasheet/cache default to this GPU's; tests pass their own.
    `on_measure(items)` is told what is about to be measured (families, "copy"), and only when something
    is: what it is not told was read from the cache. `cached` is True when no value was measured now.
    A family none of whose backends runs on this GPU's compute capability (FP4 below 10.0) is a problem
    without being measured, so it is never announced nor retried."""
    if mode == "off" or device.device != "cuda":
        return None
    never_here = {f: why for f in sorted(families) if (why := _unsupported_here(device, f))}
    families = set(families) - set(never_here)
    if key is None or datasheet is None:
        import torch

        from ..contract.metrics import peaks_for
        from ..host.env import _driver_version

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        key = key or cache_key(str(getattr(props, "uuid", "") or props.name), _driver_version(), torch.__version__)
        datasheet = datasheet if datasheet is not None else peaks_for(props.name)
    measure = measure or (lambda what: _measure_on_gpu(device, what))
    path = cache or cache_path()
    doc = read_json(path)
    entry = doc.get(key) if mode == "cached" else None
    try:
        found = Calibration.model_validate({**entry, "cached": True}) if isinstance(entry, dict) else None
    except ValueError:
        found = None  # an entry of another version or a torn write: measure again
    if found is not None:
        beyond = {w for w, v in [*found.tflops.items(), ("copy", found.tb_s)] if v and _beyond(w, v, datasheet)}
        if beyond:  # measured again below
            tflops = {f: v for f, v in found.tflops.items() if f not in beyond}
            found = found.model_copy(update={"tflops": tflops, "tb_s": None if "copy" in beyond else found.tb_s})
    wanted = sorted(families | {"copy"})
    # What failed before is tried again (a library installed since may run it now), except what killed
    # a worker: that stays a problem until `calibration: fresh`.
    known = set()
    if found is not None:
        known = set(found.tflops) | ({"copy"} if found.tb_s else set())
        known |= {w for w, why in found.problems.items() if why.startswith(DIED)}
    missing = [w for w in wanted if w not in known]
    if found is not None and not missing:
        return found.model_copy(
            update={"cached": True, "datasheet": datasheet, "problems": {**found.problems, **never_here}}
        )
    cal = found or Calibration(key=key, measured_at=now_iso(), cached=False)
    tflops, method = dict(cal.tflops), dict(cal.method)
    problems = {w: why for w, why in cal.problems.items() if w not in missing}
    problems.update(never_here)
    tb_s = cal.tb_s
    measured_now = False
    # A measurement that killed its process (a segfault in a GPU library) must not kill every restarted
    # worker in turn: each is marked in the cache while it runs, and a mark left behind is not retried.
    died_key = f"{key}|in flight"
    died = doc.get(died_key) if isinstance(doc.get(died_key), str) and mode == "cached" else None
    if on_measure is not None and [w for w in missing if w != died]:
        on_measure([w for w in missing if w != died])
    for what in missing:
        if what == died:
            problems[what] = DIED
            continue
        doc[died_key] = what
        write_json(path, doc)
        try:
            value, how = measure(what)
        except Exception as exc:  # a family that cannot be timed here is data, not a failed sweep
            problems[what] = f"{type(exc).__name__}: {exc}"[:300]
            continue
        measured_now = True
        why = _beyond(what, value, datasheet)
        if why:
            problems[what] = why
            continue
        method[what] = how
        if what == "copy":
            tb_s = value
        else:
            tflops[what] = value
    cal = cal.model_copy(
        update={
            "tflops": tflops,
            "tb_s": tb_s,
            "method": method,
            "problems": problems,
            "cached": not measured_now,
            "datasheet": datasheet,
            "measured_at": now_iso() if measured_now else cal.measured_at,
        }
    )
    doc[key] = cal.model_dump(mode="json", exclude={"cached", "datasheet"})
    doc.pop(died_key, None)
    write_json(path, doc)
    return cal


def _beyond(what: str, value: float, datasheet: Optional[dict[str, float]]) -> Optional[str]:
    """Why a peak of `what` ("copy" or a family) is not to be believed: beyond its datasheet's by more
    than ABOVE_DATASHEET; None where it is not, or where there is no datasheet to hold it to."""
    sheet = (datasheet or {}).get("tb_s" if what == "copy" else what)
    if not sheet or value <= sheet * (1 + ABOVE_DATASHEET):
        return None
    unit = "TB/s" if what == "copy" else "TFLOPS"
    return f"measured {value:.4g} {unit}, above the datasheet's {sheet:.4g}: no peak this GPU can reach"


def _unsupported_here(device, family: str) -> Optional[str]:
    """Why no backend of `family` can run on this GPU's compute capability, or None (also when unknown).
    Pure: the catalog's rules, no GPU work, so a family that can never run here is not tried each sweep."""
    from ..contract.catalog import CATALOG, support_problem

    cc = getattr(device, "compute_capability", None)
    names = CALIBRATION_BACKENDS.get(family, ())
    if cc is None or not names:
        return None
    reasons = [support_problem(CATALOG[n], GEMM_SIZE, GEMM_SIZE, GEMM_SIZE, cc) for n in names]
    if not all(reasons):
        return None
    return (
        "no backend for this family runs on this GPU (" + "; ".join(f"{n}: {r}" for n, r in zip(names, reasons)) + ")"
    )


def _measure_on_gpu(device, what: str) -> tuple[float, str]:
    import importlib

    import torch

    from ..backends import availability_problem
    from ..contract.catalog import CATALOG, support_problem

    if what == "copy":
        src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        seconds = _best_call_seconds(lambda: dst.copy_(src))
        return 2 * COPY_BYTES / seconds / 1e12, f"device-to-device copy of {COPY_BYTES >> 20} MiB (read + write)"
    reasons = []
    for name in CALIBRATION_BACKENDS.get(what, ()):
        spec = CATALOG[name]
        problem = support_problem(
            spec, GEMM_SIZE, GEMM_SIZE, GEMM_SIZE, device.compute_capability
        ) or availability_problem(spec)
        if problem:
            reasons.append(f"{name}: {problem}")
            continue
        gen = torch.Generator(device="cuda")
        gen.manual_seed(0)
        a = torch.randn((GEMM_SIZE, GEMM_SIZE), generator=gen, device="cuda").to(torch.bfloat16)
        b = torch.randn((GEMM_SIZE, GEMM_SIZE), generator=gen, device="cuda").to(torch.bfloat16)
        fn = importlib.import_module(f"worker.backends.{spec.module}").prepare(spec, [(a, b)], torch.bfloat16)
        seconds = _best_call_seconds(lambda: fn(0))
        s = GEMM_SIZE
        return 2.0 * s * s * s / seconds / 1e12, f"{name} {s}x{s}x{s}"
    raise RuntimeError("no backend for this family runs here (" + "; ".join(reasons) + ")")


def _best_call_seconds(call: Callable[[], object]) -> float:
    """Seconds per call of the fastest of BATCHES batches of CALLS_PER_BATCH back-to-back calls."""
    import torch

    for _ in range(WARMUP_CALLS):
        call()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(BATCHES):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(CALLS_PER_BATCH):
            call()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / CALLS_PER_BATCH)
    return best
