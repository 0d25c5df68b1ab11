"""`fleetbench prune`: remove old runs, here and on their hosts, never one that a command is running.

Which runs: all but the newest `keep` (dry runs of `render` counted apart), and/or those created before a date. A run's folders on its hosts
(<workdir>/runs/<id>, results and logs of every attempt) are removed first; the local run folder goes
only when every host of the run was cleaned (or with `local_only`), so nothing is left that a later
prune could no longer find. A run in progress holds its lock (store.RunStore.hold) and is skipped.
A symbolic link in the runs folder is never a run: nothing is removed through one (the caller lists them:
store.links_notes).
"""

from __future__ import annotations

import datetime as _dt
import shutil
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..config.inventory import Inventory
from ..errors import InputError
from ..execution.fanout import Running, fan_out
from ..execution.remote import CLEANUP_LIMIT_S, bounded
from ..planning.layout import layout_for
from ..runs.runfiles import LinkInRun
from ..runs.store import RunStore, existing_runs_dir, list_run_dirs
from ..transport import TransportError, make_transport


@dataclass
class PruneResult:
    run_id: str
    removed: bool  # the local run folder is gone (or would be, in a dry run)
    dry_run: bool = False  # the run was a dry run of `render` (counted apart from runs that ran)
    hosts_cleaned: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def parse_date(text: str) -> _dt.datetime:
    """`2026-11-30` or an ISO date-time; InputError otherwise."""
    try:
        when = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise InputError(
            f"--older-than {text!r}: not a date: give a date like 2026-11-30 or a date-time like "
            "2026-11-30T12:00 (UTC unless it names its offset)"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)


def select_runs(stores: list[RunStore], keep: Optional[int], older_than: Optional[_dt.datetime]) -> list[RunStore]:
    """The runs to prune, oldest first: beyond the newest `keep`, and (when given) created before the date.
    Dry runs of `render` are counted apart: `keep` runs that ran stay, and `keep` dry runs beside them."""
    if keep is None and older_than is None:
        raise InputError("prune: say which runs go: --keep N (the newest N stay) and/or --older-than DATE")
    chosen = list(stores)
    if keep is not None:
        dry = [s for s in stores if is_dry_run(s)]
        ran = [s for s in stores if s not in dry]
        beyond = {s.run_id for group in (ran, dry) for s in group[: max(0, len(group) - keep)]}
        chosen = [s for s in stores if s.run_id in beyond]
    if older_than is not None:
        created = {s.run_id: _created(s) for s in chosen}
        chosen = [s for s in chosen if created[s.run_id] is not None and created[s.run_id] < older_than]
    return chosen


def is_dry_run(store: RunStore) -> bool:
    try:
        return store.manifest().dry_run
    except InputError:
        return False  # an unreadable run counts as one that ran: it is never pruned for a dry run


def _created(store: RunStore) -> Optional[_dt.datetime]:
    try:
        return parse_date(store.manifest().created_at or "")
    except Exception:
        return None


def prune_runs(
    runs_dir,
    inventory_of: Callable[[RunStore], Inventory],
    *,
    keep: Optional[int],
    older_than: Optional[_dt.datetime],
    dry_run: bool = False,
    local_only: bool = False,
    accept_new: bool = False,
    parallel: int = 64,
) -> list[PruneResult]:
    """Prune the selected runs; `inventory_of(run)` gives the hosts to clean (raises InputError when
    it cannot: that run is then kept, with the reason), at most `parallel` at once."""
    stores = [RunStore(p) for p in list_run_dirs(existing_runs_dir(runs_dir))]
    results = []
    for store in select_runs(stores, keep, older_than):
        result = PruneResult(store.run_id, removed=False, dry_run=is_dry_run(store))
        results.append(result)
        if store.dir.is_symlink() or not store.dir.is_dir():  # replaced, or removed by another prune, since listed
            result.problems.append("no longer a run folder here (replaced or removed meanwhile): left alone")
            continue
        try:
            _prune_one(
                store,
                result,
                inventory_of,
                dry_run=dry_run,
                local_only=local_only,
                accept_new=accept_new,
                parallel=parallel,
            )
        except FileNotFoundError:  # another command removed it while this one held it
            result.problems.append("removed meanwhile by another command")
        except LinkInRun as exc:  # its lock file is a link: never opened through (runs/runfiles.py)
            result.problems.append(f"{exc}: kept")
    return results


def _prune_one(
    store: RunStore,
    result: PruneResult,
    inventory_of: Callable[[RunStore], Inventory],
    *,
    dry_run: bool,
    local_only: bool,
    accept_new: bool,
    parallel: int,
) -> None:
    with store.hold(wait=False) as held:
        if not held:
            result.problems.append("in progress (a command holds it): kept")
            return
        if not local_only and not result.dry_run:  # a dry run put nothing on its hosts
            try:
                _clean_hosts(store, inventory_of(store), result, dry_run, accept_new, parallel)
            except InputError as exc:
                result.problems.append(f"{exc}: kept (or --local-only)")
        if result.problems and not local_only:
            return
        result.removed = True
        if not dry_run:
            shutil.rmtree(store.dir)


def _clean_hosts(
    store: RunStore, inventory: Inventory, result: PruneResult, dry_run: bool, accept_new: bool, parallel: int
) -> None:
    manifest = store.manifest()
    by_name = {h.name: h for h in inventory.hosts}
    hosts = []
    for stored in manifest.hosts:
        host = by_name.get(stored["name"])
        difference = host.differs_from(stored) if host is not None else None
        if host is None:
            result.problems.append(f"host '{stored['name']}' is not in the inventory: kept (or --local-only)")
        elif difference:
            result.problems.append(f"host '{host.name}' of the inventory is another machine ({difference}): kept")
        else:
            hosts.append(host)

    def clean(host) -> Optional[str]:
        remote_run = layout_for(host, store.run_id, manifest.worker_sha256).run_dir
        if dry_run:
            return None
        transport = make_transport(host, accept_new=accept_new)
        running.add(host.name, transport.close)  # Ctrl-C closes the connection: its command stops
        try:
            transport.connect()
            quiet = lambda stream, line: None  # noqa: E731
            done = bounded(
                lambda: transport.run(["rm", "-rf", "--", remote_run], env={}, timeout=60, on_line=quiet),
                60 + CLEANUP_LIMIT_S,
            )
            if done is None or done.exit_code != 0:
                return f"host '{host.name}': could not remove {remote_run}: kept"
            return None
        except TransportError as exc:
            return f"host '{host.name}': {exc}: kept"
        finally:
            running.remove(host.name)
            transport.close()

    running = Running()
    for host_result in fan_out(hosts, clean, parallel=parallel, on_interrupt=running.stop_all):
        problem = (
            host_result.value if host_result.ok else f"host '{host_result.name}': {host_result.describe_error()}: kept"
        )
        if problem:
            result.problems.append(problem)
        else:
            result.hosts_cleaned.append(host_result.name)
