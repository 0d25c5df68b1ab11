"""The live progress view: per host slot, state, cases done / total and the case in flight.

On a terminal it is a rich Live table with an overall bar under it (cases done over the fleet, and an
ETA from the rate so far); elsewhere (CI logs, pipes) it prints one line per state change,
and while a host runs, a line with its progress and the case in flight at most every PLAIN_EVERY_S
seconds; it never imports rich there.
"""

from __future__ import annotations

import threading
import time
from typing import IO, Callable, Optional

from ..execution.execute import JobEvent
from ..runs.outcome import OUTCOMES

PLAIN_EVERY_S = 10.0
BAR_WIDTH = 30
_STYLE = {
    "ok": "green",
    "partial": "yellow",
    "failed": "red",
    "timeout": "red",
    "stalled": "red",
    "unreachable": "red",
    "auth-failed": "red",
    "interrupted": "yellow",
}


class LiveView:
    def __init__(
        self,
        stream: IO[str],
        slots: list[str],
        title: str,
        *,
        terminal: Optional[bool] = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.stream = stream
        self.clock = clock
        self._last_line_at: dict[str, float] = {}
        self.terminal = stream.isatty() if terminal is None else terminal
        self.title = title
        self.state: dict[str, JobEvent] = {s: JobEvent(s, "waiting") for s in slots}
        self._lock = threading.Lock()
        self._live = None
        self._last_printed: dict[str, str] = {}
        self._first_case_at: Optional[float] = None  # when the first host began running cases

    def __enter__(self) -> "LiveView":
        if self.terminal:
            from rich.console import Console
            from rich.live import Live

            # The table is built when rich refreshes, not on every event: a fleet sends events far more
            # often than a person can read them, and the host threads would wait for each rendering.
            console = Console(file=self.stream, force_terminal=True)
            self._live = Live(console=console, get_renderable=self._table, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)  # a last refresh: the final states

    def update(self, event: JobEvent) -> None:
        with self._lock:
            self.state[event.slot] = event
            now = self.clock()
            if self._first_case_at is None and event.state == "running":
                self._first_case_at = now
            if self._live is not None:
                return
            changed = self._last_printed.get(event.slot) != event.state and (
                event.state in OUTCOMES or event.state in ("running", "queued", "waiting for the host's lock")
            )
            # Off a terminal a long run must not look dead: its progress, at most every PLAIN_EVERY_S.
            due = (
                event.state == "running"
                and event.current
                and now - self._last_line_at.get(event.slot, now) >= PLAIN_EVERY_S
            )
            if changed or due:
                # Only printed states count: running -> syncing -> running prints "running" once.
                self._last_printed[event.slot] = event.state
                self._last_line_at[event.slot] = now
                detail = event.message or (event.current if event.state != "running" or due else "")
                msg = f" — {detail}" if detail else ""
                self.stream.write(f"{event.slot}: {event.state} ({event.done}/{event.total}){msg}\n")
                self.stream.flush()

    def _table(self):
        from rich.markup import escape
        from rich.table import Table

        table = Table(title=self.title, header_style="bold")
        for col in ("host", "state", "cases", "current / error"):
            table.add_column(col, overflow="fold")
        with self._lock:
            events = list(self.state.items())
            started = self._first_case_at
        table.caption = overall_line([ev for _, ev in events], started, self.clock())
        table.caption_justify = "left"
        for slot, ev in events:
            style = _STYLE.get(ev.state)
            state = f"[{style}]{ev.state}[/]" if style else ev.state
            table.add_row(
                escape(slot), state, f"{ev.done}/{ev.total}" if ev.total else "", escape(ev.message or ev.current)
            )
        return table


def overall_line(events: list[JobEvent], started: Optional[float], now: float) -> str:
    """`[#####-----] 37/120 cases (31%), 2 of 8 hosts finished, ETA 2m10s`: the ETA is the rate so far
    (cases done since the first host began) applied to what is left; none before a case is done."""
    total = sum(ev.total for ev in events)
    done = sum(min(ev.done, ev.total) for ev in events)
    if not total:
        return "waiting for the hosts to start"
    filled = round(BAR_WIDTH * done / total)
    finished = sum(ev.state in OUTCOMES for ev in events)
    line = (
        f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {done}/{total} cases ({100 * done / total:.0f}%), "
        f"{finished} of {len(events)} hosts finished"
    )
    if done >= total or finished == len(events):
        return line
    if started is not None and done > 0 and now > started:
        return line + f", ETA {format_duration((total - done) * (now - started) / done)}"
    return line + ", ETA when the first case is done"


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
