"""What a stored run needs to run again on its hosts: its own worker archive and scripts, checked against
the manifest, and each host checked to be the machine the run ran on. Used by rerun (launch) and by the
stored-case commands (storedcases: profile, crosscheck).
"""

from __future__ import annotations

import hashlib

from ..config.inventory import Host, Inventory
from ..errors import InputError
from ..planning.bundle import WorkerBundle
from ..planning.layout import RenderedScript, layout_for
from ..planning.render import render_script, template_environment
from ..runs.formats import MANIFEST_VERSION
from ..runs.manifest import Manifest
from ..runs.store import RunStore


def stored_bundle(store: RunStore, manifest: Manifest) -> WorkerBundle:
    path = store.dir / "worker.tar.gz"
    try:
        data = store.read_bytes(path)
    except OSError as exc:
        raise InputError(f"{path}: the run's worker archive cannot be read: {exc.strerror or exc}") from None
    bundle = WorkerBundle(
        data=data, sha256=hashlib.sha256(data).hexdigest(), files=0, params_format=manifest.written_as
    )
    if bundle.sha256 != manifest.worker_sha256:
        raise InputError(f"{path}: worker archive does not match the manifest's sha256")
    return bundle


def stored_script(store: RunStore, manifest: Manifest, host: Host, bundle: WorkerBundle) -> RenderedScript:
    """The run's own script for `host`, checked against the manifest and against the host's workdir."""
    stored = manifest.scripts[host.name]
    path = store.dir / stored.path
    try:
        data = store.read_bytes(path)
    except (OSError, ValueError):  # ValueError: a path that leads out of the run folder
        data = None
    if data is None or hashlib.sha256(data).hexdigest() != stored.sha256:
        raise InputError(f"{path}: the run's script is missing or was modified")
    layout = layout_for(host, store.run_id, bundle.sha256)
    if manifest.written_as == MANIFEST_VERSION:
        # Today's template renders the same bytes for an unchanged workdir; an older run's template
        # differs anyway, so there only the stored layout is checked.
        current = hashlib.sha256(render_script(template_environment(), layout, bundle.sha256).encode()).hexdigest()
        if current != stored.sha256:
            raise InputError(
                f"host '{host.name}': its workdir changed since run {store.run_id}; "
                "the stored script no longer fits it (start a new run)"
            )
    else:
        stored_host = manifest.stored_host(host.name) or {}
        if stored_host.get("workdir") not in (None, host.workdir):
            raise InputError(
                f"host '{host.name}': its workdir changed since run {store.run_id} "
                f"({stored_host.get('workdir')} -> {host.workdir}); start a new run"
            )
    return RenderedScript(host=host.name, path=path, sha256=stored.sha256, layout=layout)


def check_same_host(store: RunStore, manifest: Manifest, host: Host, inventory_path: str) -> None:
    """A rerun completes a run on its own hosts: refuse an inventory whose host of that name is another machine."""
    stored = manifest.stored_host(host.name)
    difference = host.differs_from(stored) if stored else None
    if difference:
        raise InputError(
            f"host '{host.name}' in {inventory_path} is not the host run {store.run_id} ran on: "
            f"{difference} (start a new run)"
        )


def run_host(
    store: RunStore,
    manifest: Manifest,
    inventory: Inventory,
    name: str,
    bundle: WorkerBundle,
    scripts: dict[str, RenderedScript],
) -> tuple[Host, bool]:
    """The run's host `name` as the inventory names it, checked to be the machine the run ran on, its
    stored script added to `scripts` the first time: (the host, whether this call added it). InputError
    when the inventory lacks the host or it is another machine now."""
    host = next((h for h in inventory.hosts if h.name == name), None)
    if host is None:
        raise InputError(f"host '{name}' of run {store.run_id} is not in {inventory.path}")
    if host.name in scripts:
        return host, False
    check_same_host(store, manifest, host, inventory.path)
    scripts[host.name] = stored_script(store, manifest, host, bundle)
    return host, True
