"""The GPU's health around a case (worker/host/health.py): a clock drop or new throttling taints it."""

from __future__ import annotations

from worker.host.health import assess, decode_reasons


def test_health_taints_on_clock_drop_or_new_throttling():
    from worker.contract.schema import HealthSnapshot

    before = HealthSnapshot(sm_clock_mhz=1980, throttle_reasons=["sw_power_cap"])
    assert not assess(before, HealthSnapshot(sm_clock_mhz=1950, throttle_reasons=["sw_power_cap"])).tainted
    dropped = assess(before, HealthSnapshot(sm_clock_mhz=1500))
    assert dropped.tainted and "1980 -> 1500" in dropped.taint_reason
    hot = assess(before, HealthSnapshot(sm_clock_mhz=1980, throttle_reasons=decode_reasons(0x20 | 0x4)))
    assert hot.tainted and "sw_thermal" in hot.taint_reason
    # Under the power cap the controller moves the clock on its own: the case's sustained state, no taint.
    assert not assess(before, HealthSnapshot(sm_clock_mhz=1470, throttle_reasons=["sw_power_cap"])).tainted


class FakeNvml:
    """pynvml's calls NvmlProbe makes, answering as an H100 under a heavy GEMM's first second does: 746 W
    instantaneous, 540 W averaged, a 700 W limit (NVML speaks milliwatts)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 0

    class _Value:
        def __init__(self, mw):
            self.uiVal = mw

    class _Field:
        def __init__(self, ret, mw):
            self.nvmlReturn, self.value = ret, FakeNvml._Value(mw)

    def __init__(self, field_ret=0):
        self.field_ret = field_ret
        self.asked = []

    def nvmlDeviceGetFieldValues(self, handle, ids):
        self.asked.append(list(ids))
        return [self._Field(self.field_ret, 746_400)]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 700_000

    def nvmlDeviceGetPowerUsage(self, handle):
        return 540_000

    def nvmlDeviceGetClockInfo(self, handle, which):
        return 1980

    def nvmlDeviceGetTemperature(self, handle, which):
        return 61

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return 0x4


def test_the_probe_reads_the_instantaneous_power_and_the_enforced_limit_and_a_round_keeps_it():
    from worker.host.health import FI_POWER_INSTANT, NvmlProbe, round_environment

    nv = FakeNvml()
    probe = NvmlProbe("handle", nv)
    snap = probe.snapshot()
    assert snap.power_instant_w == 746.4 and snap.power_w == 540.0 and probe.power_limit_w() == 700.0
    assert nv.asked == [[FI_POWER_INSTANT]] and FI_POWER_INSTANT == 186  # nvml.h NVML_FI_DEV_POWER_INSTANT
    env = round_environment((0.1, 0, 100), (0.1, 0, 200), snap, snap)
    assert env["power_w"] == 746.4 and env["sm_clock_mhz"] == 1980
    # a driver without the field: nothing is made up
    assert NvmlProbe("handle", FakeNvml(field_ret=13)).snapshot().power_instant_w is None
