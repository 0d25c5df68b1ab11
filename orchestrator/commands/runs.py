"""`fleetbench runs`: list stored runs."""

from __future__ import annotations

from pathlib import Path

from ..errors import EXIT_OK, FleetbenchError
from .common import Streams, opt_format, opt_runs_dir

HELP = "list stored runs"


def declare(p):
    opt_runs_dir(p)
    opt_format(p)


def run(args, io: Streams) -> int:
    from ..analysis.merge import merged_rows
    from ..runs.store import RunStore, existing_runs_dir, links_notes, list_run_dirs, run_dirs_without_manifest
    from ..views.output import write
    from ..views.tables import runs_document

    def counted(values) -> dict[str, int]:
        counts: dict[str, int] = {}
        for v in values:
            counts[v] = counts.get(v, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (kv[0] != "ok", kv[0])))

    def said(counts: dict[str, int]) -> str:
        return ", ".join(f"{n} {k}" for k, n in counts.items())

    runs_dir = existing_runs_dir(Path(args.runs_dir))
    entries = []
    for run_dir in sorted(list_run_dirs(runs_dir) + run_dirs_without_manifest(runs_dir)):
        store = RunStore(run_dir)
        try:
            manifest = store.manifest()
            # A run is its cases: a host can end ok while every case it ran failed.
            cases = {} if manifest.dry_run else counted(r.status for r in merged_rows(store))
            hosts = counted(o.outcome for o in store.latest_outcomes().values())
        except FleetbenchError as exc:
            entries.append(
                {"run_id": run_dir.name, "sweep": "?", "hosts": 0, "cases": 0, "summary": f"unreadable: {exc}"}
            )
            continue
        if manifest.dry_run:
            summary = "rendered only (dry run)"
        else:
            summary = f"cases: {said(cases)}; hosts: {said(hosts)}" if hosts else "not started"
        entries.append(
            {
                "run_id": store.run_id,
                "sweep": manifest.sweep_name,
                "hosts": len(manifest.hosts),
                "cases": sum(len(j.case_ids) for j in manifest.jobs),
                "summary": summary,
                "case_statuses": cases,
                "host_outcomes": hosts,
            }
        )
    io.write(write(runs_document(entries), args.format, io.width()))
    for note in links_notes(runs_dir):
        io.problem(f"note: {note}")
    return EXIT_OK
