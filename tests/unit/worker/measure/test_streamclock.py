"""The SM clock read in the stream (worker/measure/streamclock.py): the stamp kernel's arithmetic."""

from __future__ import annotations

import pytest

from worker.measure import streamclock


def test_the_stamp_arithmetic_is_cycles_over_nanoseconds_per_sm_from_its_earliest_block():
    first = [(0, 1_000, 5_000), (0, 1_400, 9_999), (1, 1_000, 7_000)]
    second = [(0, 2_001_000, 3_005_000), (1, 2_001_000, 3_207_000), (2, 5, 5)]  # SM 2 only in one stamp
    mhz = sorted(streamclock.frequencies_mhz(first, second))
    assert mhz == pytest.approx([1500.0, 1600.0])
    assert streamclock.window_mhz(first, second) == pytest.approx(1550.0)
    assert streamclock.window_mhz(first, []) is None


def test_a_stamp_writes_its_own_slot_on_the_windows_stream(monkeypatch):
    """Each stamp launches on the stream current at reset() (or the one it is given) and writes the slot of
    its index: the next slot of a buffer, and past SLOTS the first of a new buffer."""
    import ctypes

    import torch

    from worker.measure import streamclock

    launches = []

    class Driver:
        def launch(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            pointer = ctypes.cast(params[0], ctypes.POINTER(ctypes.c_uint64)).contents.value
            launches.append((stream.value, pointer))
            return 0

    zeros, zeros_like = torch.zeros, torch.zeros_like
    monkeypatch.setattr(torch, "zeros", lambda *a, device=None, **k: zeros(*a, **k))
    monkeypatch.setattr(torch, "zeros_like", lambda t, **k: zeros_like(t, **k))
    current = type("Stream", (), {"cuda_stream": 1234})()
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: current)
    clock = streamclock.StreamClock(Driver(), ctypes.c_void_p(), blocks=4)
    slot_bytes = 4 * streamclock.FIELDS * 8
    clock.reset()
    current.cuda_stream = 99  # the window keeps the stream it began on
    for _ in range(streamclock.SLOTS + 1):
        clock.stamp()
    clock.stamp(type("Stream", (), {"cuda_stream": 7})())
    assert {s for s, _ in launches[:-1]} == {1234} and launches[-1][0] == 7
    first, second = (b.data_ptr() for b in clock._buffers)
    assert [p for _, p in launches[:3]] == [first, first + slot_bytes, first + 2 * slot_bytes]
    assert launches[streamclock.SLOTS][1] == second and launches[-1][1] == second + slot_bytes
