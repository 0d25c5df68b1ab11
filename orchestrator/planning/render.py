"""Render each host's bench script (the launcher) from Jinja into runs/<id>/scripts/<host>.py.

Templates only wire paths and the protocol's constants (StrictUndefined: a missing variable is an
error, never an empty string); parameters travel as JSON data (remote.write_params). The script is compile()d here before anything is
uploaded, and its sha256 is recorded: the bytes uploaded are the bytes stored.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import jinja2

from worker.contract.protocol import EXIT_NEEDS_SYNC, HELLO_PREFIX, PROTOCOL_FD_ENV

from ..config.resources import templates_dir
from ..errors import FleetbenchError
from ..execution.remote import RemoteLayout, RenderedScript, layout_for
from ..runs.atomicfile import write_atomic

# The script runs with the login directory as cwd, so `~/x` is simply `x` in its paths and arguments.
from ..transport import login_relative
from .bundle import WorkerBundle
from .plan import Plan

SCRIPT_TEMPLATE = "bench_script.py.j2"


def template_environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        # HTML templates escape every value (labels are user text); the Python script template uses
        # `tojson` for each value instead.
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default_for_string=False, default=False),
    )


def write_script(path: Path, source: str, host: str, layout: RemoteLayout) -> RenderedScript:
    """Write one host's rendered script; its sha256 is of the bytes written (no read-back)."""
    data = source.encode("utf-8")
    write_atomic(path, data)
    return RenderedScript(host=host, path=path, sha256=hashlib.sha256(data).hexdigest(), layout=layout)


def render_script(env: jinja2.Environment, layout: RemoteLayout, bundle_sha: str) -> str:
    """Source of one host's script; raises FleetbenchError naming the template line on failure."""
    try:
        source = env.get_template(SCRIPT_TEMPLATE).render(
            worker_archive=login_relative(layout.worker_archive),
            worker_dir=login_relative(layout.worker_dir),
            worker_sha256=bundle_sha,
            exit_needs_sync=EXIT_NEEDS_SYNC,
            hello_prefix=HELLO_PREFIX,
            protocol_fd_env=PROTOCOL_FD_ENV,
        )
    except jinja2.TemplateError as exc:
        line = getattr(exc, "lineno", None)
        raise FleetbenchError(f"template {SCRIPT_TEMPLATE}{f' line {line}' if line else ''}: {exc}") from None
    try:
        compile(source, SCRIPT_TEMPLATE, "exec")
    except SyntaxError as exc:
        raise FleetbenchError(f"rendered script does not compile: {exc.msg} at line {exc.lineno}") from None
    return source


def render_plan(plan: Plan, scripts_dir: Path, bundle: WorkerBundle) -> dict[str, RenderedScript]:
    """Write one script per host; returns them by host name."""
    env = template_environment()
    scripts_dir.mkdir(parents=True, exist_ok=True)
    rendered = {}
    sources: dict[RemoteLayout, str] = {}  # hosts with the same workdir get the same script: render it once
    for host in plan.hosts:
        layout = layout_for(host, plan.run_id, bundle.sha256)
        if layout not in sources:
            sources[layout] = render_script(env, layout, bundle.sha256)
        rendered[host.name] = write_script(scripts_dir / f"{host.name}.py", sources[layout], host.name, layout)
    return rendered
