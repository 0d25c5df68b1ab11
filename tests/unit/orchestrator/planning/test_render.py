"""Rendering a host's script (orchestrator/planning/render.py): the golden file, a hostile workdir as data,
one rendering per workdir."""

from __future__ import annotations

from support.files import GOLDEN, REPO, write

from orchestrator.config.inventory import load_inventory
from orchestrator.config.sweep import Sweep
from orchestrator.planning.bundle import build_worker_bundle
from orchestrator.planning.layout import layout_for
from orchestrator.planning.plan import build_plan
from orchestrator.planning.render import render_script, template_environment


def test_rendered_script_matches_golden_file_and_compiles():
    layout = layout_for(
        load_inventory(REPO / "hosts.yaml").hosts[0].model_copy(update={"workdir": "~/fb"}),
        "20261202-000000-golden-0000",
        "ab" * 32,
    )
    source = render_script(template_environment(), layout, "ab" * 32)
    golden = GOLDEN / "bench_script.py"
    assert source == golden.read_text(encoding="utf-8"), "template changed: update tests/golden/bench_script.py"
    compile(source, "bench", "exec")


def test_hostile_workdir_is_data_in_the_script():
    host = load_inventory(REPO / "hosts.yaml").hosts[0].model_copy(update={"workdir": '/w/it\'s "x"\n$(id)'})
    source = render_script(template_environment(), layout_for(host, "r", "cd" * 32), "cd" * 32)
    namespace: dict = {}
    exec(compile(source.replace('if __name__ == "__main__":', "if False:"), "s", "exec"), namespace)
    assert namespace["WORKER_DIR"] == '/w/it\'s "x"\n$(id)/worker/' + "cd" * 8


def test_hosts_sharing_a_workdir_share_one_rendering(tmp_path, monkeypatch):
    import orchestrator.planning.render as render_mod

    inv = load_inventory(
        write(
            tmp_path / "hosts.yaml",
            """
defaults: {workdir: ~/fb}
hosts:
  - {name: a, hostname: h1}
  - {name: b, hostname: h2}
  - {name: c, hostname: h3, workdir: /data/fb}
""",
        )
    )
    sweep = Sweep(name="x", backends=["noop"], shapes=[{"m": 1, "n": 16, "k": 16}])
    calls = []
    real = render_mod.render_script
    monkeypatch.setattr(render_mod, "render_script", lambda *a: calls.append(a[1].workdir) or real(*a))
    scripts = render_mod.render_plan(
        build_plan(list(inv.hosts), sweep, "r", "all"), tmp_path / "s", build_worker_bundle()
    )
    assert sorted(calls) == ["/data/fb", "~/fb"]
    assert scripts["a"].sha256 == scripts["b"].sha256 != scripts["c"].sha256
    assert scripts["a"].remote == scripts["b"].remote and scripts["a"].path != scripts["b"].path
