"""Kernels that cheat cannot win (issue 31): each CPU trick of tests/kernels/cheats.py is caught with the
check that caught it named in its row, its diff and its table, and the honest backends of the same
sweep (built-in and user kernels, one that converts its input in prepare and says what it reads) are
never flagged. The CUDA tricks (side stream, capture, L2 persistence): tests/test_integrity_gpu.py."""

from __future__ import annotations

import pytest
import torch
from cli_output import cli_json
from conftest import REPO, kernel_sweep

from orchestrator.cli import main
from worker.check import integrity

CHEATS = (REPO / "tests" / "kernels" / "cheats.py").read_text()
HONEST = """import torch
FAMILY = "bf16"
def prepare(a, b, out_dtype):
    bt = b.t()
    out = torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype, device=a.device)
    return lambda: torch.mm(a, bt, out=out)   # the same output buffer every call, filled anew
"""
# Converts A in prepare (as a quantizing kernel would) and says what its call reads: never flagged.
CONVERTS_AND_SAYS = """import torch
FAMILY = "bf16"
def prepare(a, b, out_dtype):
    a2, bt = a.clone(), b.t()
    run = lambda: torch.mm(a2, bt)
    run.reads = [a2]
    return run
"""
# The same without saying it: its result cannot follow a change of `a`, and the reason says what to do.
CONVERTS_SILENTLY = CONVERTS_AND_SAYS.replace("    run.reads = [a2]\n", "")

# cheat -> (the check named in the row, words of its reason)
CPU_CHEATS = {
    "ahead": ("cached", "its call returned a result it did not compute"),
    "by-pointer": ("cached", "its call returned a result it did not compute"),
    "by-version": ("cached", "its result did not follow its inputs"),  # issue 41: keyed on torch's version counter
    "copy": ("cached", "its result did not follow its inputs"),
    "warm-cache": ("cached", "its result did not follow its inputs"),
    "later-rounds": ("cached", "round 2 of 2: integrity (cached): its result did not follow its inputs"),
    "writes-inputs": ("wrote-inputs", "it wrote into its inputs"),
    "lazy": ("lazy", "its call returned a _Lazy, not a plain tensor"),
}
HONEST_BACKENDS = ("torch-bf16", "reference-nvfp4", "honest", "converts-and-says")


def cheat_source(cheat: str) -> str:
    return CHEATS.replace('CHEAT = "ahead"', f'CHEAT = "{cheat}"')


@pytest.fixture(scope="module")
def cheat_run(tmp_path_factory):
    """One sweep of every CPU cheat beside the honest backends (one worker process): (its rows by
    backend, the run folder)."""
    import io
    from contextlib import redirect_stdout

    tmp = tmp_path_factory.mktemp("cheats")
    kernels = {f"cheat-{c}": cheat_source(c) for c in CPU_CHEATS}
    kernels.update({"honest": HONEST, "converts-and-says": CONVERTS_AND_SAYS, "converts-silently": CONVERTS_SILENTLY})
    sweep = kernel_sweep(tmp, kernels, builtins=("torch-bf16", "reference-nvfp4"))
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["run", str(sweep), "--runs-dir", str(tmp / "runs"), "--format", "json"])
    assert code == 1  # failed cases
    rows = {r["backend"]: r for r in cli_json(out.getvalue())}
    run_dir = next(p for p in (tmp / "runs").iterdir() if p.is_dir())
    return rows, run_dir


@pytest.mark.parametrize("cheat", list(CPU_CHEATS))
def test_a_cheating_kernel_is_caught_with_the_check_that_caught_it_and_its_numbers_dropped(cheat_run, cheat):
    rows, _ = cheat_run
    check, words = CPU_CHEATS[cheat]
    row = rows[f"cheat-{cheat}"]
    assert row["status"] == "failed" and row["verdict"] == "fail", row
    assert row["integrity"] == check and f"integrity ({check})" in row["reason"] and words in row["reason"], row
    assert row["median_us"] in (None, "")  # a result it did not compute is never a number


@pytest.mark.parametrize("backend", HONEST_BACKENDS)
def test_honest_kernels_are_never_flagged(cheat_run, backend):
    rows, _ = cheat_run
    row = rows[backend]
    assert row["status"] == "ok" and row["verdict"] == "pass" and row["integrity"] == "pass", row
    assert row["median_us"] > 0


def test_a_kernel_that_converts_its_input_without_saying_so_is_told_how(cheat_run):
    """Its result cannot follow a change of `a` it never reads again: flagged, and the reason names the
    way in (worker/backends/userkernel.py: `reads`)."""
    rows, _ = cheat_run
    row = rows["converts-silently"]
    assert row["integrity"] == "cached" and "names what its call reads as `reads`" in row["reason"], row


def test_diff_and_the_table_name_the_failed_check(cheat_run, capsys):
    _, run_dir = cheat_run
    assert main(["diff", str(run_dir), str(run_dir), "--format", "json"]) == 0
    cases = {c["backend"]: c for c in cli_json(capsys.readouterr().out)["cases"]}
    assert cases["cheat-copy"]["verdict"] == "NOT-OK"
    assert cases["cheat-copy"]["note"] == "A failed (integrity: cached), B failed (integrity: cached)"
    assert cases["cheat-lazy"]["note"] == "A failed (integrity: lazy), B failed (integrity: lazy)"
    main(["show", str(run_dir), "--format", "md"])
    table = capsys.readouterr().out
    line = next(x for x in table.splitlines() if "cheat-writes-inputs" in x)
    assert "fail (wrote-inputs)" in line and "integrity (wrote-inputs)" in line


def test_sign_flips_are_exact_and_undo_themselves_in_every_operand_format():
    """bf16 negated, e4m3 by its sign bit, packed e2m1 by both sign bits of each byte: the product with a
    flipped A is the exact negation, and a second flip restores every bit."""
    from worker.backends.fp8 import quantize_e4m3
    from worker.check import nvfp4

    gen = torch.Generator().manual_seed(5)
    a = torch.randn((16, 64), generator=gen).to(torch.bfloat16)
    b = torch.randn((32, 64), generator=gen).to(torch.bfloat16)
    a8, _ = quantize_e4m3(a)
    qa = nvfp4.quantize(a)
    lut = nvfp4.e2m1_lut(a.device)
    for t, value in (
        (a.clone(), lambda t: t.float()),
        (a8, lambda t: t.float()),
        (qa.packed, lambda t: nvfp4.dequantize(qa, lut)),
    ):
        kept = t.clone()
        before = value(t) @ b.float().T
        integrity.flip_sign(t)
        assert torch.equal(value(t) @ b.float().T, -before)
        integrity.flip_sign(t)
        assert integrity.bitwise_equal(t, kept)


def test_sign_flips_leave_torchs_version_counter_where_it_was():
    """The flips are raw writes into the same storage: a kernel caching on `(a.data_ptr(), a._version)`
    (tests/kernels/cheats.py by-version) sees no change, in every operand format, views included."""
    from worker.backends.fp8 import quantize_e4m3
    from worker.check import nvfp4

    gen = torch.Generator().manual_seed(7)
    a = torch.randn((16, 64), generator=gen).to(torch.bfloat16)
    a8, _ = quantize_e4m3(a)
    packed = nvfp4.quantize(a).packed
    for t in (a, a[4:12], a8, packed, a.float()):
        kept, version = t.clone(), t._version
        integrity.flip_sign(t)
        assert t._version == version and not integrity.bitwise_equal(t, kept)
        integrity.flip_sign(t)
        assert t._version == version and integrity.bitwise_equal(t, kept)


def test_every_builtin_backend_that_runs_here_says_what_its_call_reads():
    """The sign-flip check needs it; a backend without `reads` would skip that check unseen."""
    from worker.backends import availability_problem
    from worker.contract.catalog import CATALOG, support_problem
    from worker.contract.schema import CaseSpec, MoeSpec
    from worker.sweep.runner import CaseRunner

    runner = CaseRunner("cpu")
    checked = []
    for name, spec in CATALOG.items():
        if name == "noop" or support_problem(spec, 16, 64, 128, None) or availability_problem(spec):
            continue
        moe_layer = MoeSpec(experts=4, top_k=2, routing="uniform", counts=[8, 0, 16, 8])
        extra = {"workload": "moe", "moe": moe_layer} if spec.workload == "moe" else {}
        case = CaseSpec(backend=name, m=16, n=64, k=128, **extra)
        fn, sets, _ = runner._prepare(case, spec)
        assert integrity.reads_of(fn, 0), name
        checked.append(name)
    assert {"torch-bf16", "reference-nvfp4", "moe-reference"} <= set(checked)


def _guard(judge=lambda out, j: None, l2=None):
    def fn(i):
        return torch.mm(a, b.t(), out=out)

    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn((8, 16), generator=gen), torch.randn((4, 16), generator=gen)
    out = torch.empty((8, 4))
    fn.reads = [[a]]
    guard = integrity.RoundGuard(fn, lambda r: r, lambda: None, 0.01, judge, l2)
    guard.watched(0)  # as the timer's capture would: the last call's output is what each sample writes
    return guard, out


def test_one_timed_sample_must_write_the_result_in_the_timers_stream_order():
    """timed_once's check, with the GPU's orderings played by hand: a sample that writes the output passes;
    one that leaves it as it was is `untimed`; one whose output only lands when the device is synchronized
    (work on a stream the timer does not wait for) is `side-stream`; a wrong output is `untimed` with the
    judge's words."""
    guard, out = _guard()
    guard.timed_once(lambda: (guard.watched(0), 0)[1])  # honest: the sample computes the output

    guard, out = _guard()
    with pytest.raises(integrity.IntegrityFailure) as caught:
        guard.timed_once(lambda: 0)  # the sample does nothing: the output keeps its poison
    assert [f.check for f in caught.value.findings] == ["untimed"]

    guard, out = _guard()
    guard.synchronize = lambda: guard.watched(0)  # the work lands only once the whole device is waited for
    with pytest.raises(integrity.IntegrityFailure) as caught:
        guard.timed_once(lambda: 0)
    assert [f.check for f in caught.value.findings] == ["side-stream"]

    guard, out = _guard(judge=lambda o, j: f"wrong on set {j}")
    with pytest.raises(integrity.IntegrityFailure) as caught:
        guard.timed_once(lambda: (guard.watched(0), 0)[1])
    assert caught.value.findings[0].check == "untimed" and "wrong on set 0" in caught.value.findings[0].text


def test_a_capture_that_fails_on_an_unjoined_fork_names_the_side_stream_and_nothing_else():
    guard, _ = _guard()
    with pytest.raises(integrity.IntegrityFailure) as caught:
        guard.capture_failed(
            RuntimeError(
                "CUDA error: capture sequence contains a fork that was not joined to the "
                "primary stream\nSearch for `cudaErrorStreamCaptureUnjoined'"
            )
        )
    assert caught.value.findings[0].check == "side-stream"
    guard.capture_failed(RuntimeError("CUDA error: out of memory"))  # any other failure is the timing's own


class FakeDriver:
    """libcuda's L2 persistence calls, on a dict: what a kernel set, and what the checks reset."""

    def __init__(self):
        self.limit, self.window, self.resets = 0, 0, 0

    def cuCtxGetLimit(self, size, which):
        size._obj.value = self.limit
        return 0

    def cuCtxSetLimit(self, which, size):
        self.limit = size.value
        return 0

    def cuCtxResetPersistingL2Cache(self):
        self.resets += 1
        return 0

    def cuStreamGetAttribute(self, stream, which, value):
        import ctypes

        ctypes.c_size_t.from_buffer(value, 8).value = self.window
        return 0

    def cuStreamSetAttribute(self, stream, which, value):
        import ctypes

        self.window = ctypes.c_size_t.from_buffer(value, 8).value
        return 0


def test_l2_persistence_is_reset_before_each_timing_and_a_kernel_that_sets_it_is_named(monkeypatch):
    driver = FakeDriver()
    l2 = integrity.L2Persistence(driver)
    monkeypatch.setattr(integrity.L2Persistence, "_stream", lambda self: 0)
    guard, _ = _guard(l2=l2)
    guard.before_timing()  # nothing set: nothing named, persisting lines reset
    assert driver.resets == 1 and l2.findings() == []
    driver.limit, driver.window = 8 << 20, 1 << 14  # what tests/kernels/cheats.py "l2-persist" does
    with pytest.raises(integrity.IntegrityFailure) as caught:
        guard.before_timing()
    assert [f.check for f in caught.value.findings] == ["l2-persistence", "l2-persistence"]
    assert "8388608 bytes of L2" in caught.value.findings[0].text
    assert driver.limit == 0 and driver.window == 0  # and no later case inherits it


def test_a_later_rounds_timed_sample_is_vouched_for_by_the_flip_and_named_when_it_differs():
    """Without a judge (later rounds), a timed sample whose output is wrong is caught by the timed sample
    on negated inputs, and named `untimed`, not `cached`; when the timed sample follows, an eager call
    after the timing that differs from it is named `untimed` too."""
    guard, out = _guard(judge=None)
    guard.timed_once(lambda: (guard.watched(0), 0)[1])
    guard.after_timing()  # an honest sample: one flipped call vouches for it

    guard, out = _guard(judge=None)
    with pytest.raises(integrity.IntegrityFailure) as caught:
        guard.timed_once(lambda: (out.fill_(1.0), 0)[1])  # the sample writes something, but not the product
    assert [f.check for f in caught.value.findings] == ["untimed"]

    guard, out = _guard(judge=None)
    guard.timed_once(lambda: (guard.watched(0), 0)[1])
    guard.timed = (0, -guard.timed[1])  # the timed sample's output, wrong in a way the flip follows
    with pytest.raises(integrity.IntegrityFailure) as caught:
        guard.after_timing()
    assert [f.check for f in caught.value.findings] == ["untimed"]


def test_a_timed_sample_that_only_copies_a_cached_result_is_named_untimed():
    """Issue 41: a timed graph holding none of the kernels an eager call runs, only a copy of a result
    computed before (tests/kernels/cheats.py graph-copy, on the GPU: tests/test_integrity_gpu.py). Its
    poisoned sample is right, and its eager calls follow every flip; the timed sample on negated
    inputs, written raw between replays, still copies the old result."""
    guard, out = _guard()
    cached = guard.watched.fn(0).clone()
    a = guard.watched.fn.reads[0][0]
    version = a._version
    with pytest.raises(integrity.IntegrityFailure) as caught:
        guard.timed_once(lambda: (out.copy_(cached), 0)[1])  # the "graph": one copy into the output
    finding = caught.value.findings[0]
    assert [f.check for f in caught.value.findings] == ["untimed"]
    assert "what is timed does not follow its inputs" in finding.text and "copies of a cached result" in finding.text
    assert a._version == version and torch.equal(out, cached)  # flipped back; torch's counter never moved

    guard, out = _guard()
    guard.timed_once(lambda: (guard.watched(0), 0)[1])  # the honest sample recomputes: it follows
    assert guard.timed[0] == 0 and torch.equal(guard.timed[1], guard.watched.fn(0))


def test_the_timed_flip_covers_every_input_set_the_graph_rotates_through():
    """A graph rotates through every input set: A is negated in all of them, each once, and restored."""
    gen = torch.Generator().manual_seed(11)
    sets = [(torch.randn((8, 16), generator=gen), torch.randn((4, 16), generator=gen)) for _ in range(3)]
    outs = [torch.empty((8, 4)) for _ in sets]

    def fn(i):
        return torch.mm(sets[i][0], sets[i][1].t(), out=outs[i])

    fn.reads = [[a, a] for a, _ in sets]  # the same buffer twice is flipped once
    kept = [a.clone() for a, _ in sets]
    guard = integrity.RoundGuard(fn, lambda r: r, lambda: None, 0.01)
    for i in range(3):
        guard.watched(i)

    def replay():  # the whole rotation, as a graph replays it; the last call's set is what it returns
        for i in range(3):
            guard.watched(i)
        return 2

    guard.timed_once(replay)
    assert all(torch.equal(a, k) for (a, _), k in zip(sets, kept))


def test_a_kept_graph_that_followed_negated_inputs_once_is_not_sampled_on_them_again():
    """The one more timed sample on negated inputs runs when a round times a graph it built; a later round
    replaying the kept graph (the same nodes) skips it: the graph was vouched for when it was built."""
    guard, out = _guard()
    samples = []

    def sample():
        samples.append(1)
        guard.watched.fn(0)
        return 0

    guard.timed_once(sample)
    assert len(samples) == 2  # the checked sample, then the one on negated inputs
    later = integrity.RoundGuard(guard.watched.fn, lambda r: r, lambda: None, 0.01, None, None, watched=guard.watched)
    samples.clear()
    later.timed_once(sample)
    assert len(samples) == 1 and later.graph_vouched
