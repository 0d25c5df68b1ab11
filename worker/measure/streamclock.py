"""The SM clock a timed window really ran at, read in the timer's stream (nvbench's method).

NVML's `clocks.sm` is a reading of the clock domain at the moment of the query; under the power cap it
reads 10-25% above what a kernel in the stream ran at (benchmarks/RESULTS.md, issue 40), so time x NVML
clock is no steadier than time. Instead a tiny kernel (`stamp`) runs in the same stream as the timed
replays, before and after them: one warp per block on every SM reads `%smid`, `%globaltimer` (ns, the
same on every SM) and `%clock64` (that SM's own cycle counter). Between two stamps each SM's frequency is
its cycles over the nanoseconds, and the window's clock is the median over the SMs.

The kernel is PTX, loaded through the driver API (libcuda, already loaded by torch) with ctypes: no
compiler on the host, and nothing to build per GPU architecture (the driver compiles PTX for its own).
Anything that fails to load makes `StreamClock.open()` return None with the reason in `problem`, and the
round keeps NVML's reading alone.
"""

from __future__ import annotations

import ctypes
import statistics
from typing import Optional

KERNEL = "fleetbench_stamp"
# One warp per block, BLOCKS_PER_SM blocks per SM: every SM runs at least one block of every stamp (a
# stamp is a few microseconds; each SM's earliest block is the one kept).
BLOCKS_PER_SM = 2
FIELDS = 3  # smid, globaltimer ns, clock64
SLOTS = 512  # stamps one buffer holds; a window longer than that reuses nothing: it opens another

PTX = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry fleetbench_stamp(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;

    mov.u32 %r1, %tid.x;
    setp.ne.s32 %p1, %r1, 0;
    @%p1 bra $L_done;
    mov.u64 %rd1, %globaltimer;
    mov.u64 %rd2, %clock64;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %smid;
    ld.param.u64 %rd3, [out];
    cvta.to.global.u64 %rd4, %rd3;
    mul.wide.u32 %rd5, %r2, 24;
    add.s64 %rd6, %rd4, %rd5;
    cvt.u64.u32 %rd7, %r3;
    st.global.u64 [%rd6], %rd7;
    st.global.u64 [%rd6+8], %rd1;
    st.global.u64 [%rd6+16], %rd2;
$L_done:
    ret;
}
"""


def frequencies_mhz(first: list[tuple[int, int, int]], second: list[tuple[int, int, int]]) -> list[float]:
    """Per SM seen in both stamps, its clock in MHz between them: (cycles) / (ns) * 1000. Each stamp is a
    list of (smid, globaltimer ns, clock64) per block; an SM's earliest block in each stamp is its reading.
    Pure, so the arithmetic is tested without a GPU."""

    def earliest(rows):
        out: dict[int, tuple[int, int]] = {}
        for sm, ns, cycles in rows:
            if sm not in out or ns < out[sm][0]:
                out[sm] = (ns, cycles)
        return out

    a, b = earliest(first), earliest(second)
    mhz = []
    for sm in a.keys() & b.keys():
        dt = b[sm][0] - a[sm][0]
        dc = b[sm][1] - a[sm][1]
        if dt > 0 and dc > 0:
            mhz.append(dc / dt * 1e3)
    return mhz


def window_mhz(first, second) -> Optional[float]:
    """The window's SM clock: the median over SMs of `frequencies_mhz` (None: no SM in both stamps)."""
    mhz = frequencies_mhz(first, second)
    return statistics.median(mhz) if mhz else None


class _Driver:
    """The few driver-API entry points the stamp needs, typed."""

    def __init__(self):
        lib = ctypes.CDLL("libcuda.so.1")
        self.load = lib.cuModuleLoadData
        self.load.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
        self.get_function = lib.cuModuleGetFunction
        self.get_function.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]
        self.launch = lib.cuLaunchKernel
        self.launch.argtypes = (
            [ctypes.c_void_p]
            + [ctypes.c_uint] * 7
            + [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        )
        for f in (self.load, self.get_function, self.launch):
            f.restype = ctypes.c_int


class StreamClock:
    """Stamps enqueued in a stream, read after it synchronizes: `stamp()` returns a stamp's index,
    `mhz(i, j)` the SM clock between stamps i and j (after the stream has passed both)."""

    problem: str = ""  # why the last open() returned None
    window_mhz: Optional[float] = None  # the last timing's samples window (worker/measure/timing.py), MHz

    def __init__(self, driver: _Driver, function: ctypes.c_void_p, blocks: int):
        import torch

        self._driver, self._function, self._blocks = driver, function, blocks
        self._buffers = [torch.zeros((SLOTS, blocks, FIELDS), dtype=torch.int64, device="cuda")]
        self._pointers = [self._buffers[0].data_ptr()]  # each buffer's first slot; a slot is blocks x FIELDS int64
        self._used = 0
        self._host: dict[int, list] = {}
        # The window's stream handle, taken at reset(): a stamp runs between two timed batches, while the
        # GPU waits on the CPU, so it asks torch for nothing it already knows.
        self._stream_handle: Optional[int] = None

    @classmethod
    def open(cls) -> Optional["StreamClock"]:
        """A StreamClock for the current CUDA device, or None (then `StreamClock.problem` says why)."""
        try:
            import torch

            torch.cuda.init()
            torch.zeros(1, device="cuda")  # the runtime makes its primary context current on this thread
            driver = _Driver()
            module, function = ctypes.c_void_p(), ctypes.c_void_p()
            status = driver.load(ctypes.byref(module), PTX.encode())
            if status == 0:
                status = driver.get_function(ctypes.byref(function), module, KERNEL.encode())
            if status != 0:
                cls.problem = f"the stamp kernel did not load (CUresult {status})"
                return None
            sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
            clock = cls(driver, function, BLOCKS_PER_SM * sms)
            i = clock.stamp()
            j = clock.stamp()
            torch.cuda.synchronize()
            clock.rows(i), clock.rows(j)
            return clock
        except Exception as exc:  # no driver library, no GPU, a driver without these symbols
            cls.problem = f"{type(exc).__name__}: {exc}"
            return None

    def stamp(self, stream=None) -> int:
        """Enqueue a stamp on `stream` (default: the stream current at reset(), else the current one); its
        index."""
        import torch

        slot = self._used % SLOTS
        if self._used and slot == 0:
            self._buffers.append(torch.zeros_like(self._buffers[0]))
            self._pointers.append(self._buffers[-1].data_ptr())
        if stream is not None:
            handle = stream.cuda_stream
        elif self._stream_handle is not None:
            handle = self._stream_handle
        else:
            handle = torch.cuda.current_stream().cuda_stream
        pointer = ctypes.c_uint64(self._pointers[self._used // SLOTS] + slot * self._blocks * FIELDS * 8)
        params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(pointer), ctypes.c_void_p))
        status = self._driver.launch(
            self._function, self._blocks, 1, 1, 32, 1, 1, 0, ctypes.c_void_p(handle), params, None
        )
        if status != 0:
            raise RuntimeError(f"the stamp kernel did not launch (CUresult {status})")
        self._used += 1
        return self._used - 1

    def rows(self, index: int) -> list:
        """Stamp `index` as (smid, ns, cycles) per block; the stream must have passed it."""
        if index not in self._host:
            tensor = self._buffers[index // SLOTS][index % SLOTS]
            self._host[index] = [tuple(r) for r in tensor.cpu().tolist()]
        return self._host[index]

    def mhz(self, i: int, j: int) -> Optional[float]:
        """The SM clock between stamps i and j, in MHz (median over SMs)."""
        return window_mhz(self.rows(i), self.rows(j))

    def reset(self) -> None:
        """Forget the stamps taken (their buffers are reused from the first slot), and begin a window on the
        current stream: stamps without a stream go there until the next reset."""
        import torch

        del self._buffers[1:]
        del self._pointers[1:]
        self._used = 0
        self._host.clear()
        self.window_mhz = None
        self._stream_handle = torch.cuda.current_stream().cuda_stream
