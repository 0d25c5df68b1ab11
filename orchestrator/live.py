"""The live progress view: per host slot, state, cases done / total and the case in flight.

On a terminal it is a rich Live table; elsewhere (CI logs, pipes) it prints one line per state change.
"""
from __future__ import annotations

import threading
from typing import Optional

from rich.console import Console
from rich.live import Live
from rich.table import Table

from .execute import JobEvent

_FINAL = {"ok", "partial", "failed", "timeout", "unreachable", "auth-failed", "interrupted"}
_STYLE = {"ok": "green", "partial": "yellow", "failed": "red", "timeout": "red", "unreachable": "red",
          "auth-failed": "red", "interrupted": "yellow"}


class LiveView:
    def __init__(self, console: Console, slots: list[str], title: str):
        self.console = console
        self.title = title
        self.state: dict[str, JobEvent] = {s: JobEvent(s, "waiting") for s in slots}
        self._lock = threading.Lock()
        self._live: Optional[Live] = None
        self._last_printed: dict[str, str] = {}

    def __enter__(self) -> "LiveView":
        if self.console.is_terminal:
            # The table is built when rich refreshes (4 times a second), not on every event: rendering
            # 64 rows costs ~14 ms of CPU, which the host threads would wait for (the GIL) 8 times a
            # second, and 64 hosts send hundreds of events.
            self._live = Live(console=self.console, get_renderable=self._table, refresh_per_second=4,
                              transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)  # a last refresh: the final states

    def update(self, event: JobEvent) -> None:
        with self._lock:
            self.state[event.slot] = event
            if self._live is None and self._last_printed.get(event.slot) != event.state and (
                    event.state in _FINAL or event.state in ("running", "waiting for GPU lock")):
                # Only printed states count: running -> syncing -> running prints "running" once.
                self._last_printed[event.slot] = event.state
                detail = event.message or (event.current if event.state != "running" else "")
                msg = f" — {detail}" if detail else ""
                self.console.print(f"{event.slot}: {event.state} ({event.done}/{event.total}){msg}",
                                   markup=False, highlight=False)

    def _table(self) -> Table:
        table = Table(title=self.title, header_style="bold")
        for col in ("host", "state", "cases", "current / error"):
            table.add_column(col, overflow="fold")
        with self._lock:
            events = list(self.state.items())
        for slot, ev in events:
            style = _STYLE.get(ev.state)
            state = f"[{style}]{ev.state}[/]" if style else ev.state
            table.add_row(slot, state, f"{ev.done}/{ev.total}" if ev.total else "", ev.message or ev.current)
        return table
