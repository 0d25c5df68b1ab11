"""GPU health through NVML: clocks, temperature, power and throttle reasons around a measurement.

A timing taken while the GPU throttled (thermal, power brake, hardware slowdown) or while its SM clock
fell is marked tainted: the number is kept, the reader is warned.
"""

from __future__ import annotations

from typing import Any, Optional

from ..contract.schema import Health, HealthSnapshot

# Reasons that mean the chip was slowed by something other than the workload asking for less.
_BAD_REASONS = {"hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"}
_REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
CLOCK_DROP_TAINT = 0.10


FI_POWER_INSTANT = 186  # NVML_FI_DEV_POWER_INSTANT (nvml.h): the field nvidia-smi's power.draw.instant reads


class NvmlProbe:
    """NVML handle for the GPU torch is using; every reading tolerates a missing library or field."""

    def __init__(self, handle: Any, nvml: Any):
        self._handle = handle
        self._nvml = nvml

    @classmethod
    def for_current_device(cls) -> Optional["NvmlProbe"]:
        try:
            import pynvml as nvml  # nvidia-ml-py
            import torch

            nvml.nvmlInit()
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            # CUDA_VISIBLE_DEVICES renumbers devices; the PCI address does not lie.
            bus_id = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
            return cls(nvml.nvmlDeviceGetHandleByPciBusId(bus_id), nvml)
        except Exception:
            return None

    def _read(self, fn_name: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, fn_name)(self._handle, *args)
        except Exception:
            return None

    def sm_clock_mhz(self) -> Optional[int]:
        return self._read("nvmlDeviceGetClockInfo", self._nvml.NVML_CLOCK_SM)

    def power_instant_w(self) -> Optional[float]:
        """The board's instantaneous power (NVML_FI_DEV_POWER_INSTANT); nvmlDeviceGetPowerUsage averages
        over about a second on recent GPUs, too slow to see a case's first second over the limit."""
        found = self._read("nvmlDeviceGetFieldValues", [FI_POWER_INSTANT])
        if not found or getattr(found[0], "nvmlReturn", 1) != 0:
            return None
        return found[0].value.uiVal / 1000.0

    def power_limit_w(self) -> Optional[float]:
        """The power limit the GPU enforces now (NVML), in watts."""
        limit = self._read("nvmlDeviceGetEnforcedPowerLimit")
        return None if limit is None else limit / 1000.0

    def throttle_reasons(self) -> list[str]:
        """NVML's current clock-event (throttle) reasons, by name."""
        reasons = self._read("nvmlDeviceGetCurrentClocksEventReasons")
        if reasons is None:
            reasons = self._read("nvmlDeviceGetCurrentClocksThrottleReasons")
        return decode_reasons(reasons or 0)

    def snapshot(self) -> HealthSnapshot:
        nv = self._nvml
        power = self._read("nvmlDeviceGetPowerUsage")
        return HealthSnapshot(
            sm_clock_mhz=self.sm_clock_mhz(),
            mem_clock_mhz=self._read("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_MEM),
            temperature_c=self._read("nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU),
            power_w=None if power is None else power / 1000.0,
            power_instant_w=self.power_instant_w(),
            throttle_reasons=self.throttle_reasons(),
        )


def cpu_counters() -> tuple[Optional[float], Optional[int], Optional[int]]:
    """(1-minute load average per CPU, stolen jiffies, all jiffies) of this host; None where unknown."""
    import os

    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        load = None
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return load, (fields[7] if len(fields) > 7 else 0), sum(fields)
    except (OSError, ValueError):
        return load, None, None


# host_reference_us's tries: a round timed on the GPU takes fewer (its docstring says why).
CPU_ROUND_TRIES = 10
GPU_ROUND_TRIES = 3


def host_reference_us(tries: int = CPU_ROUND_TRIES) -> float:
    """How fast this host's CPU runs right now: a fixed pure-Python loop, best of `tries`, in microseconds.
    A shared or throttled CPU changes it between runs (and within one) without any load or steal
    showing; a CPU-timed case moves with it. A round timed on the GPU takes fewer tries: nothing it
    times waits on the CPU, and each try is GPU idle time on the sweep's wall."""
    import time

    best = float("inf")
    for _ in range(tries):
        t = time.perf_counter()
        x = 0
        for i in range(5000):
            x += i * i
        best = min(best, time.perf_counter() - t)
    return best * 1e6


def round_environment(
    before_cpu,
    after_cpu,
    before: Optional[HealthSnapshot],
    after: Optional[HealthSnapshot],
    host_ref_us: Optional[float] = None,
) -> dict:
    """RoundStats' environment fields from readings taken around one round."""
    env: dict = {
        "load_per_core": None if after_cpu[0] is None else round(after_cpu[0], 3),
        "host_ref_us": None if host_ref_us is None else round(host_ref_us, 2),
    }
    if None not in (before_cpu[1], before_cpu[2], after_cpu[1], after_cpu[2]) and after_cpu[2] > before_cpu[2]:
        env["steal_pct"] = round(100.0 * (after_cpu[1] - before_cpu[1]) / (after_cpu[2] - before_cpu[2]), 3)
    if after is not None:
        env["sm_clock_mhz"] = after.sm_clock_mhz
        env["temperature_c"] = after.temperature_c
        env["power_w"] = after.power_instant_w
        seen = set(after.throttle_reasons) | set(before.throttle_reasons if before else [])
        env["throttle_reasons"] = sorted(seen & _BAD_REASONS)
    return env


def decode_reasons(bits: int) -> list[str]:
    return [name for bit, name in _REASON_BITS.items() if bits & bit]


def assess(before: HealthSnapshot, after: HealthSnapshot) -> Health:
    """Taint when the SM clock fell by more than 10% during the samples for no reason of the case's own, or
    a slowdown reason (thermal, hardware slowdown, power brake) appeared. A heavy case holds the GPU at its
    power limit, and there the power controller moves the clock by 10-20% within a few hundred ms
    (benchmarks/gpu_state/settle_trace.py): a fall that ends under the power cap is the case's own sustained state,
    and tainting it made the tainted set change between identical sweeps."""
    reasons = []
    if before.sm_clock_mhz and after.sm_clock_mhz is not None:
        drop = 1 - after.sm_clock_mhz / before.sm_clock_mhz
        if drop > CLOCK_DROP_TAINT and "sw_power_cap" not in after.throttle_reasons:
            reasons.append(
                f"SM clock fell {before.sm_clock_mhz} -> {after.sm_clock_mhz} MHz ({drop:.0%}) without the power cap"
            )
    new_bad = sorted(set(after.throttle_reasons) & _BAD_REASONS - set(before.throttle_reasons))
    if new_bad:
        reasons.append("throttling began: " + ", ".join(new_bad))
    return Health(before=before, after=after, tainted=bool(reasons), taint_reason="; ".join(reasons))


class ClockSampler:
    """The SM clock, read every `interval_s` from a background thread while a timer runs: what clock the
    GPU held during that timer's samples, where a before/after reading would miss a dip or a recovery.
    The thread holds the GIL only for one NVML call per reading. `median_mhz` is None without NVML."""

    def __init__(self, probe: Optional[NvmlProbe], interval_s: float = 0.002):
        self._probe, self._interval = probe, interval_s
        self._readings: list[int] = []
        self._stop = None
        self._thread = None

    def __enter__(self) -> "ClockSampler":
        if self._probe is None:
            return self
        import threading

        self._stop = threading.Event()

        def sample() -> None:
            while not self._stop.is_set():
                mhz = self._probe.sm_clock_mhz()
                if mhz:
                    self._readings.append(int(mhz))
                self._stop.wait(self._interval)

        self._thread = threading.Thread(target=sample, name="fleetbench-clock", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> bool:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        return False

    @property
    def median_mhz(self) -> Optional[float]:
        if not self._readings:
            return None
        ordered = sorted(self._readings)
        return float(ordered[len(ordered) // 2])

    @property
    def readings(self) -> int:
        return len(self._readings)
