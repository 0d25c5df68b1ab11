"""benchmarks/gpu_state/kernel_choice.py: a replay's kernel events become per-call times and launches, in
the order first seen (the GPU part runs on the device: device_check.sh kernel-choice)."""

from benchmarks.gpu_state.kernel_choice import per_call, shape, short


def test_one_replays_kernels_are_summed_per_call_in_the_order_first_seen():
    # A graph of 4 calls, each a split-K GEMM and its reduction.
    events = [("gemm_splitk", 10.0), ("reduce", 1.0)] * 4
    assert per_call(events, 4) == [("gemm_splitk", 10.0, 1), ("reduce", 1.0, 1)]
    # Two kernels of one call, one launched twice per call.
    assert per_call([("a", 2.0), ("b", 1.0), ("b", 1.0)] * 2, 2) == [("a", 2.0, 1), ("b", 2.0, 2)]
    assert per_call([], 8) == []


def test_names_and_shapes():
    assert short("x" * 10, width=20) == "x" * 10
    cut = short("sm90_xmma_gemm_bf16bf16_" + "t" * 100, width=30)
    assert len(cut) == 30 and cut.endswith("…") and cut.startswith("sm90_xmma")
    assert shape("256x2048x6144") == (256, 2048, 6144)
