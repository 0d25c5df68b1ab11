"""A diff's row notes in words: each finding of analysis/diff.py's compare_records (a NOTE_* code and its
facts) from a table, joined into the row's `note` as stored and shown. Pure: data in, text out."""

from __future__ import annotations

from dataclasses import replace

from ..analysis import diff as analysis
from .tables import plus_minus

# note code -> its words
NOTE_WORDS = {
    analysis.NOTE_ONLY_IN: "only in {side}",
    analysis.NOTE_NOT_RUN: "A {a}, B {b}",
    analysis.NOTE_NOT_OK: "A {a_status}, B {b_status}",
    analysis.NOTE_NOT_A_TIME: "a time of 0 µs or less on a side: not a measurement",
    analysis.NOTE_SAME_MEASUREMENT: "the same measurement on both sides",
    analysis.NOTE_SINGLE_SAMPLE: "a single sample: no interval",
    analysis.NOTE_TOO_NOISY: "too noisy to judge (A {a_ci}, B {b_ci})",
    analysis.NOTE_TAINTED_SIDES: "tainted on {sides}",
    analysis.NOTE_ENVIRONMENT: "{moved_text}: the machine, not only the kernel, may explain it",
    analysis.NOTE_NOISY: "noisy (A {a_ci}, B {b_ci})",
    analysis.NOTE_TAINTED: "TAINTED on {side}: {reason_text}",
    analysis.NOTE_INCOMPLETE: "incomplete on {side}: {rounds} rounds timed before it stopped",
    analysis.NOTE_ONE_ROUND: "one round: the interval knows only the noise within a run",
    analysis.NOTE_METHODS_DIFFER: "timing methods differ",
    analysis.NOTE_CLOCK_SPLIT: "B/A {ratio:.3f} = clock {clock_ratio:.3f} ({clock_b_mhz:.0f} vs {clock_a_mhz:.0f} MHz) "
    "× work {work:.3f} [{work_low:.3f}–{work_high:.3f}]{judged}",
    analysis.NOTE_ANCHORED: "against {anchor} timed beside it {ratio:.3f} [{low:.3f}–{high:.3f}]{judged_text}",
}
# environment code -> its words (NOTE_ENVIRONMENT)
ENVIRONMENT_WORDS = {
    analysis.ENV_SM_CLOCK: "SM clock A {a_mhz:.0f} MHz, B {b_mhz:.0f} MHz",
    analysis.ENV_THROTTLED: "GPU throttled ({reasons_text})",
    analysis.ENV_GPU_PROCESSES: "{processes} other processes on the GPU",
    analysis.ENV_HOST_REF: "the host's reference loop A {a_us:.0f} µs, B {b_us:.0f} µs",
    analysis.ENV_CPU_LOAD: "CPU load per core A {a:.2f}, B {b:.2f}",
    analysis.ENV_CPU_STEAL: "CPU steal {pct:.1f}%",
    analysis.ENV_BUSY_CPU: "a busy CPU (load per core up to {load:.2f})",
}
TAINT_UNKNOWN = "GPU throttled during timing"  # a tainted record that gave no reason
JUDGED_ON_WORK = "; judged on the work: the time moved with the clock, time × clock held still"
CLOCK_BOUND = "; clock-bound (time × clock holds still)"
JUDGED_ON_ANCHOR = "; judged on it: the GPU state moved both"
ANCHOR_DISAGREES = "; judges nothing: outside the case's own interval (the two answer the GPU state differently)"
ANCHOR_MOVED_WITH = "; judges nothing: the anchor itself moved {moved_with:.3f} the same way (the GPU state moved both)"


def _status_text(status: str, integrity: list[str]) -> str:
    """A record's status, with the integrity checks its kernel failed when that is why."""
    return f"{status} (integrity: {'+'.join(integrity)})" if integrity else status


def environment_text(moved) -> str:
    """How the environment moved (analysis.diff.environment_moved's Finding) in words."""
    f = moved.facts
    words = dict(f)
    if moved.code == analysis.ENV_THROTTLED:
        words["reasons_text"] = ", ".join(f["reasons"])
    return ENVIRONMENT_WORDS[moved.code].format(**words)


def note_text(finding) -> str:
    """One finding of a case's row (a NOTE_* code and its facts) in words."""
    f, code = finding.facts, finding.code
    words = dict(f)
    if code == analysis.NOTE_NOT_OK:
        words.update(a_status=_status_text(f["a"], f["a_integrity"]), b_status=_status_text(f["b"], f["b_integrity"]))
    if code in (analysis.NOTE_TOO_NOISY, analysis.NOTE_NOISY):
        words.update(a_ci=plus_minus(f["a_rel_ci"]), b_ci=plus_minus(f["b_rel_ci"]))
    if code == analysis.NOTE_ENVIRONMENT:
        words["moved_text"] = environment_text(f["moved"])
    if code == analysis.NOTE_TAINTED:
        words["reason_text"] = f["reason"] or TAINT_UNKNOWN
    if code == analysis.NOTE_CLOCK_SPLIT:
        words["judged"] = JUDGED_ON_WORK if f["judged_on"] == "work" else CLOCK_BOUND if f["clock_bound"] else ""
    if code == analysis.NOTE_ANCHORED:
        if f["judged"]:
            words["judged_text"] = JUDGED_ON_ANCHOR
        elif f["agrees"]:
            words["judged_text"] = ""
        elif f["moved_with"]:
            words["judged_text"] = ANCHOR_MOVED_WITH.format(moved_with=f["moved_with"])
        else:
            words["judged_text"] = ANCHOR_DISAGREES
    return NOTE_WORDS[code].format(**words)


def worded(case):
    """A CaseDiff (analysis.diff.compare_records) with its findings in words in `note`, as stored and shown."""
    return replace(case, note="; ".join(note_text(f) for f in case.findings))


def worded_comparison(cmp):
    """A Comparison (analysis.diff.compare_sides) with every case's note in words."""
    return replace(cmp, cases=[worded(c) for c in cmp.cases])


def compare_records(key: str, ra, rb, threshold: float, same_run: bool = False, priors=(None, None), anchored=None):
    """One case's row (analysis.diff.compare_records), its note in words."""
    return worded(analysis.compare_records(key, ra, rb, threshold, same_run, priors, anchored))


def compare_sides(a, b, threshold: float, anchor=None, anchor_process_sd=None):
    """Two sides compared case by case (analysis.diff.compare_sides), each case's note in words."""
    return worded_comparison(analysis.compare_sides(a, b, threshold, anchor, anchor_process_sd))
