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
