"""The shape of the code, checked: the controller's layers (each package imports only the ones below it)
and no import cycle among its packages; no command imports another; the worker's rooms, on floors the same
way; no import cycle among the project's modules; each command imports only what it uses; no process of
fleetbench outlives a command; the host contract lives in worker/contract/protocol.py and the controller
matches no message text; the outcome judgement as a table."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.runs.outcome import AttemptEnd, judge
from worker.contract import protocol

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("orchestrator", "worker")
FIXTURE_RUN = "runs-v2/20261203-082541-smoke-2f18"  # in tests/fixtures/runs-v2.tar.gz


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_lines(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, project module) for each import in `module`'s file (module level or inside functions)."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            found.extend((node.lineno, f"{target}.{a.name}") for a in node.names)  # `from . import x` may name a module
    return [(line, m) for line, m in found if m.split(".")[0] in PACKAGES]


def _imports(path: Path, module: str) -> set[str]:
    """Project modules that `module` imports anywhere in its file (module level or inside functions)."""
    return {m for _, m in _import_lines(path, module)}


def test_no_import_cycle_among_the_projects_modules():
    files = {_module_name(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}
    graph = {m: {i for i in _imports(p, m) if i in files and i != m} for m, p in files.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n) :] + [n]
                # A package importing its own submodule (to re-export) is not a cycle between modules.
                if not (len(cycle) == 3 and cycle[1].startswith(cycle[0] + ".")):
                    pytest.fail("import cycle: " + " -> ".join(cycle))
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


# -- the controller's layers --------------------------------------------------------------------------
# cli > commands > views | ops > execution > analysis | planning | launchers > runs | transport > config > leaves.
# Each package (or top-level module) of orchestrator/ and the others it may import; packages on one level
# import none of each other. Every one may import the leaves; among them, atomicfile raises errors'.
LEAVES = {"errors", "atomicfile", "remotepath", "orchestrator"}  # orchestrator: its __init__ (__version__)
MAY_IMPORT = {
    "cli": {"commands"},  # it assembles the commands; they reach the rest
    "commands": {"views", "ops", "execution", "analysis", "planning", "launchers", "runs", "transport", "config"},
    "views": {"execution", "analysis", "planning", "launchers", "runs", "transport", "config"},
    "ops": {"execution", "analysis", "planning", "launchers", "runs", "transport", "config"},
    "execution": {"analysis", "planning", "launchers", "runs", "transport", "config"},
    "analysis": {"runs", "transport", "config"},
    "planning": {"runs", "transport", "config"},
    "launchers": {"runs", "transport", "config"},
    "runs": {"config"},
    "transport": {"config"},
    "config": set(),
    "atomicfile": {"errors"},
    "errors": set(),
    "remotepath": set(),
    "orchestrator": set(),
}


def _unit(module: str) -> str:
    """The package of orchestrator/ (or its top-level module) that `module` belongs to."""
    parts = module.split(".")
    if len(parts) > 1 and (
        (REPO / "orchestrator" / parts[1]).is_dir() or (REPO / "orchestrator" / f"{parts[1]}.py").exists()
    ):
        return parts[1]
    return "orchestrator"  # the package's own __init__, or a name it defines (__version__)


def _controller_imports() -> list[tuple[str, str, str, str]]:
    """(importing unit, imported unit, where, module) for each import between units of orchestrator/."""
    found = {}
    for path in sorted((REPO / "orchestrator").rglob("*.py")):
        module = _module_name(path)
        for line, target in _import_lines(path, module):
            if target.split(".")[0] == "orchestrator" and _unit(target) != _unit(module):
                where = f"{path.relative_to(REPO)}:{line}"
                found.setdefault((where, _unit(target)), (_unit(module), _unit(target), where, target))
    return list(found.values())


def test_every_controller_package_has_its_place_in_the_layers():
    units = {_unit(_module_name(p)) for p in (REPO / "orchestrator").rglob("*.py")}
    assert units == set(MAY_IMPORT), "place each package in MAY_IMPORT: " + str(sorted(units ^ set(MAY_IMPORT)))


def test_each_controller_package_imports_only_the_layers_below_it():
    wrong = sorted(
        f"{where} imports {target} ({unit} may not import {imported})"
        for unit, imported, where, target in _controller_imports()
        if imported not in MAY_IMPORT[unit] | (set() if unit in LEAVES else LEAVES)
    )
    assert wrong == [], "imports against the layers:\n" + "\n".join(wrong)


# Within commands/: a command's module imports no other command; what several share lives in the shared
# modules below (or in a lower layer), and cli.py alone assembles the commands.
COMMAND_SHARED = {"common", "storedcases"}


def _command_imports(root: Path = REPO) -> list[str]:
    """`where imports what` for each import of one command's module by another module of commands/."""
    package = root / "orchestrator" / "commands"
    shared = {f"orchestrator.commands.{m}" for m in COMMAND_SHARED} | {"orchestrator.commands"}
    wrong = {}
    for path in sorted(package.glob("*.py")):
        module = f"orchestrator.commands.{path.stem}" if path.stem != "__init__" else "orchestrator.commands"
        for line, target in _import_lines(path, module):
            parts = target.split(".")
            if parts[:2] != ["orchestrator", "commands"] or len(parts) < 3:
                continue
            named = ".".join(parts[:3])
            if named not in shared and named != module and (package / f"{parts[2]}.py").exists():
                wrong.setdefault(f"orchestrator/commands/{path.name}:{line} imports {named}", None)
    return list(wrong)


def test_no_command_imports_another_command():
    wrong = _command_imports()
    assert wrong == [], "a command imports another (share it through common, storedcases or a lower layer):\n" + (
        "\n".join(wrong)
    )


def test_a_command_importing_another_is_caught_at_module_level_and_inside_a_function(tmp_path):
    package = tmp_path / "orchestrator" / "commands"
    package.mkdir(parents=True)
    for name in ("__init__", "common", "storedcases", "profile"):
        (package / f"{name}.py").write_text("")
    (package / "diff.py").write_text(
        "from .common import Streams\nfrom .storedcases import one_run\n"
        "def declare(p):\n    from .profile import declare_for_diff\n"
        "def run(args, io):\n    from orchestrator.commands import profile\n"
    )
    assert _command_imports(tmp_path) == [
        "orchestrator/commands/diff.py:4 imports orchestrator.commands.profile",
        "orchestrator/commands/diff.py:6 imports orchestrator.commands.profile",
    ]


def test_no_import_cycle_among_the_controllers_packages():
    edges: dict[str, dict[str, str]] = {}
    for unit, imported, where, target in _controller_imports():
        edges.setdefault(unit, {}).setdefault(imported, f"{where} imports {target}")
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(unit: str) -> None:
        state[unit] = 1
        stack.append(unit)
        for n in sorted(edges.get(unit, {})):
            if state.get(n) == 1:
                cycle = stack[stack.index(n) :] + [n]
                pytest.fail(
                    "package import cycle: "
                    + " -> ".join(cycle)
                    + "".join(f"\n  {edges[a][b]}" for a, b in zip(cycle, cycle[1:]))
                )
            elif n not in state:
                visit(n)
        stack.pop()
        state[unit] = 2

    for unit in sorted(edges):
        if unit not in state:
            visit(unit)


# -- the worker's rooms ---------------------------------------------------------------------------------
# __main__ > tools > sweep > measure > host > backends > check > contract: each room of worker/ (a
# sub-package, or a module beside them) and the rooms it may import, module-level and function-local
# alike; every one may import the package's own __init__ (`worker`: __version__).
WORKER_MAY_IMPORT = {
    "__main__": {"tools", "sweep", "measure", "host", "backends", "check", "contract"},  # `python -m worker`
    "tools": {"sweep", "measure", "host", "backends", "check", "contract"},  # profile, crosscheck
    "sweep": {"measure", "host", "backends", "check", "contract"},  # a job's cases, round by round
    "measure": {"host", "backends", "check", "contract"},  # timing, pairing, clocks in the stream, peaks
    "host": {"backends", "check", "contract"},  # facts, NVML, locks, clock lock, build env, caches
    "backends": {"check", "contract"},  # one module per library, the user's files
    "check": {"contract"},  # the oracle, integrity, physics
    "contract": set(),  # the one door (its own test below: stdlib and pydantic only)
    "worker": set(),
}


def _worker_room(module: str) -> str:
    """The room of worker/ (sub-package or top-level module) that `module` belongs to."""
    parts = module.split(".")
    if len(parts) > 1 and ((REPO / "worker" / parts[1]).is_dir() or (REPO / "worker" / f"{parts[1]}.py").exists()):
        return parts[1]
    return "worker"  # the package's own __init__, or a name it defines (__version__)


def _worker_imports() -> list[tuple[str, str, str]]:
    """(importing room, imported room, where and what) for each import between rooms of worker/."""
    found = []
    for path in sorted((REPO / "worker").rglob("*.py")):
        module = _module_name(path)
        for line, target in _import_lines(path, module):
            if target.split(".")[0] == "worker" and _worker_room(target) != _worker_room(module):
                found.append((_worker_room(module), _worker_room(target), f"{path.relative_to(REPO)}:{line} {target}"))
    return found


def test_every_worker_room_has_its_place_in_the_floors():
    rooms = {_worker_room(_module_name(p)) for p in (REPO / "worker").rglob("*.py")}
    assert rooms == set(WORKER_MAY_IMPORT), "place each room in WORKER_MAY_IMPORT: " + str(
        sorted(rooms ^ set(WORKER_MAY_IMPORT))
    )


def test_each_worker_room_imports_only_the_floors_below_it():
    wrong = sorted(
        f"{where} ({room} may not import {imported})"
        for room, imported, where in _worker_imports()
        if imported not in WORKER_MAY_IMPORT[room] | {"worker"}
    )
    assert wrong == [], "imports against the worker's floors:\n" + "\n".join(wrong)


def test_no_module_rebinds_its_own_state():
    """No module-level mutable state (STYLE.md): a `global` statement is how a module rebinds state of its
    own between calls (the worker's timing once kept its capture stream, priming and last phases so; a
    process's Timer holds them now). None in the controller or the worker."""
    found = sorted(
        f"{p.relative_to(REPO)}:{node.lineno} global {', '.join(node.names)}"
        for pkg in PACKAGES
        for p in (REPO / pkg).rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.Global)
    )
    assert found == []


def _modules_after(argv: list[str], tmp_path: Path) -> tuple[int, set[str]]:
    code = (
        "import json, sys\nfrom orchestrator.cli import main\n"
        f"rc = main({argv!r})\n"
        "print(json.dumps([rc, sorted({m.split('.')[0] for m in sys.modules})]), file=sys.stderr)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    rc, modules = json.loads(proc.stderr.strip().splitlines()[-1])
    return rc, set(modules)


SSH_STACK = {"paramiko", "fabric", "invoke"}


@pytest.mark.parametrize(
    "argv, rich_allowed",
    [
        (["show", FIXTURE_RUN, "--format", "json"], False),
        (["show", FIXTURE_RUN, "--format", "csv"], False),
        (["show", FIXTURE_RUN], True),
        (["runs", "--runs-dir", "runs-v2", "--format", "json"], False),
        (["diff", FIXTURE_RUN, FIXTURE_RUN, "--format", "json"], False),
        (["diff", FIXTURE_RUN, FIXTURE_RUN], True),
        (["hosts", "-i", str(REPO / "hosts.yaml"), "--format", "json"], False),
    ],
)
def test_commands_that_read_stored_runs_never_import_the_ssh_stack(argv, rich_allowed, stored_runs):
    rc, modules = _modules_after(argv, stored_runs)
    assert rc == 0
    assert not modules & SSH_STACK, f"{argv[0]} imported {sorted(modules & SSH_STACK)}"
    assert rich_allowed or "rich" not in modules, f"{argv} imported rich without drawing a table"
    assert "torch" not in modules


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{pid}: {cmdline[:200]}")
    return found


def test_no_process_of_fleetbench_remains_after_a_command_returns(tmp_path):
    """A sweep on the local host, then a read-only command: when each returns, nothing of ours runs."""
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "hosts.yaml").write_text(
        "hosts: [{name: local, transport: local, python: %s}]\n" % json.dumps(sys.executable)
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), HOME=str(home))
    for argv in (
        ["run", str(REPO / "sweeps" / "noop.yaml"), "--runs-dir", "runs"],
        ["runs", "--runs-dir", "runs"],
        ["show", "latest", "--runs-dir", "runs"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert _processes_mentioning(str(tmp_path)) == [], argv


def test_the_controller_matches_no_message_text_of_python_or_the_launcher():
    texts = ("can't open file", "is not on this host", '"@@fleetbench', "'@@fleetbench", "No such file or directory")
    for path in (REPO / "orchestrator").rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        for text in texts:
            assert text not in source, f"{path.relative_to(REPO)} matches {text!r}: use worker/contract/protocol.py"


def test_the_launcher_takes_its_constants_from_the_protocol():
    template = (REPO / "templates" / "bench_script.py.j2").read_text()
    assert "hello_prefix" in template and "exit_needs_sync" in template
    assert "@@fleetbench" not in template and "= 5" not in template


# -- the outcome judgement, as a table ------------------------------------------------------------------
JUDGEMENTS = [
    # (what was observed, outcome, words the error must hold)
    (AttemptEnd(total=4, done=4), "ok", ""),
    (AttemptEnd(total=4, done=4, exit_code=3), "ok", ""),  # every case has a record: the host did its work
    (AttemptEnd(total=4, done=2, cancelled=True), "interrupted", "interrupted; 2 of 4"),
    (AttemptEnd(total=4, done=4, cancelled=True), "ok", ""),
    (AttemptEnd(total=4, done=0, started=False, stderr_tail="OSError: boom"), "failed", "OSError: boom"),
    (AttemptEnd(total=4, done=1, started=False), "partial", "could not be started"),
    (AttemptEnd(total=4, done=1, timed_out=True, exit_code=-1, timeout_s=30), "timeout", "30 s limit; 3 of 4"),
    (AttemptEnd(total=4, done=0, exit_code=-1), "unreachable", "connection lost"),
    (AttemptEnd(total=4, done=3, exit_code=-1), "partial", "connection lost during the run; 1 of 4"),
    (
        AttemptEnd(total=4, done=0, exit_code=127, hello_seen=False, python="/v/bin/python"),
        "failed",
        "remote interpreter not found: /v/bin/python",
    ),
    (
        AttemptEnd(total=4, done=0, exit_code=126, hello_seen=False, python="/v/bin/python"),
        "failed",
        "not executable: /v/bin/python",
    ),
    (AttemptEnd(total=4, done=0, exit_code=127, hello_seen=True, stderr_tail="x"), "failed", "x; 4 of 4"),
    (
        AttemptEnd(total=4, done=0, exit_code=protocol.EXIT_GPU_BUSY, stderr_tail="GPU 0 is locked by run r1"),
        "failed",
        "GPU 0 is locked by run r1",
    ),
    (AttemptEnd(total=4, done=0, exit_code=1, fetched=None), "failed", "results could not be fetched"),
    (
        AttemptEnd(total=4, done=2, exit_code=protocol.EXIT_INCOMPLETE, stderr_tail="giving up"),
        "partial",
        "giving up; 2 of 4",
    ),
    (AttemptEnd(total=4, done=0, exit_code=1), "failed", "exit status 1; 4 of 4"),
]


@pytest.mark.parametrize("end, outcome, words", JUDGEMENTS)
def test_judge(end, outcome, words):
    got, error = judge(end)
    assert got == outcome and words in error and (error == "") == (outcome == "ok")


# -- the protocol ---------------------------------------------------------------------------------------
def test_stdout_lines_decode_into_their_kinds():
    assert protocol.decode_stdout(protocol.RECORD_PREFIX + '{"a":1}') == ("record", '{"a":1}')
    assert protocol.decode_stdout("half a line" + protocol.RECORD_PREFIX + "{}") == ("record", "{}")
    assert protocol.decode_stdout(protocol.PROGRESS_PREFIX + '{"done":1}') == ("progress", {"done": 1})
    assert protocol.decode_stdout(protocol.PROGRESS_PREFIX + "not json") == (
        "log",
        protocol.PROGRESS_PREFIX + "not json",
    )
    assert protocol.decode_stdout(protocol.HELLO_PREFIX + "abc") == ("hello", "abc")
    assert protocol.decode_stdout("Building gemm module") == ("log", "Building gemm module")


def test_line_decoder_joins_chunks_split_anywhere_even_inside_a_character():
    lines = []
    decoder = protocol.LineDecoder("stdout", lambda stream, line: lines.append((stream, line)))
    data = "µs first\r\nsecond line\nthird".encode()
    for i in range(len(data)):  # one byte at a time: every split point, inside the 2-byte µ too
        decoder.feed(data[i : i + 1])
    decoder.close()
    assert lines == [("stdout", "µs first"), ("stdout", "second line"), ("stdout", "third")]


@pytest.mark.parametrize(
    "code, hello, meaning",
    [
        (0, True, protocol.LAUNCH_OK),
        (2, False, protocol.LAUNCH_NEEDS_SYNC),
        (2, True, protocol.LAUNCH_OTHER),
        (5, True, protocol.LAUNCH_NEEDS_SYNC),
        (5, False, protocol.LAUNCH_NEEDS_SYNC),
        (127, False, protocol.LAUNCH_NO_INTERPRETER),
        (126, False, protocol.LAUNCH_NOT_EXECUTABLE),
        (4, True, protocol.LAUNCH_GPU_BUSY),
        (3, True, protocol.LAUNCH_INCOMPLETE),
        (-1, False, protocol.LAUNCH_OTHER),
    ],
)
def test_exit_statuses_mean_one_thing(code, hello, meaning):
    assert protocol.classify_exit(code, hello) == meaning


def test_a_worker_usage_error_does_not_read_as_a_missing_script():
    from worker.__main__ import main as worker_main

    assert worker_main(["no-such-command"]) == protocol.EXIT_USAGE != protocol.EXIT_PYTHON_CANNOT_OPEN


def test_history_reads_the_index_without_the_ssh_stack_torch_or_plots(tmp_path, stored_runs):
    import shutil

    runs = tmp_path / "runs"
    shutil.copytree(stored_runs / "runs-v3", runs)  # the index is written beside the runs: never into fixtures
    rc, modules = _modules_after(["history", "--runs-dir", str(runs), "--format", "json", "--steps"], tmp_path)
    assert rc == 0
    assert not modules & (SSH_STACK | {"torch", "matplotlib", "rich", "scipy"}), sorted(modules)


def test_only_the_slurm_launcher_and_the_inventorys_slurm_section_name_slurm():
    """Where commands run and how a job starts are two axes: no `if slurm` anywhere else."""
    allowed = {
        "orchestrator/launchers/slurm.py",
        "orchestrator/launchers/__init__.py",
        "orchestrator/config/inventory.py",
    }
    named = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "orchestrator").rglob("*.py")
        if "slurm" in p.read_text(encoding="utf-8").lower() and str(p.relative_to(REPO)) not in allowed
    )
    assert named == []


def test_every_multi_host_command_fans_out_through_the_one_pool():
    pools = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "orchestrator").rglob("*.py")
        if "ThreadPoolExecutor(" in p.read_text(encoding="utf-8")
    )
    # fanout.py is the pool; a host's own GPU slots, inside that host's pipeline, go through it too.
    assert pools == ["orchestrator/execution/fanout.py"]


def test_one_attempt_runner_and_one_reader_of_the_protocols_lines():
    """Sweeps and a stored run's cases (profile, crosscheck) run their worker through attempt.Attempt;
    only the demultiplexer decodes what the worker prints (hostcheck reads its probe's hello alone)."""
    readers = sorted(
        p.name for p in (REPO / "orchestrator").rglob("*.py") if "decode_stdout(" in p.read_text(encoding="utf-8")
    )
    assert readers == ["demux.py", "hostcheck.py"]
    runners = sorted(
        p.name for p in (REPO / "orchestrator").rglob("*.py") if "Attempt(" in p.read_text(encoding="utf-8")
    )
    assert runners == ["execute.py", "storedcases.py"]


def test_the_demultiplexer_routes_each_line_where_it_belongs():
    import io

    from orchestrator.execution.demux import StreamDemux
    from orchestrator.launchers import LaunchWatch

    log, results, events, news = io.StringIO(), io.StringIO(), [], []
    demux = StreamDemux(log, results, LaunchWatch(), events.append, news.append)
    demux.on_line("stdout", "@@fleetbench-launcher abc")
    demux.on_line("stdout", '@@fleetbench-record {"kind":"case"}')
    demux.on_line("stdout", '@@fleetbench-progress {"event":"start"}')
    demux.on_line("stderr", '@@fleetbench-record {"forged":true}')  # stderr is log, whatever it says
    demux.on_line("stderr", "Traceback: boom")
    assert demux.hello and results.getvalue() == '{"kind":"case"}\n' and events == [{"event": "start"}]
    assert "stderr: @@fleetbench-record" in log.getvalue() and list(demux.stderr_tail)[-1] == "Traceback: boom"
    assert news == []


def test_the_controller_reaches_the_worker_through_its_one_door_which_needs_only_stdlib_and_pydantic():
    """The controller imports of the worker only worker/contract/, and worker/contract/ imports only the
    standard library, pydantic and itself: checked in the source (every import, function-local ones too)
    and by importing it with torch and numpy made unimportable."""
    doors = {
        f"{p.relative_to(REPO)}: {m}"
        for p in sorted((REPO / "orchestrator").rglob("*.py"))
        for m in _imports(p, _module_name(p))
        if m.split(".")[0] == "worker" and not (m + ".").startswith("worker.contract.")
    }
    assert doors == set(), "the controller imports the worker past worker/contract/"
    allowed = set(sys.stdlib_module_names) | {"__future__", "pydantic"}
    contract = sorted((REPO / "worker" / "contract").rglob("*.py"))
    assert contract, "worker/contract/ is missing"
    outside = set()
    for path in contract:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                outside.update(f"{path.name}: {a.name}" for a in node.names if a.name.split(".")[0] not in allowed)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module.split(".")[0] not in allowed:
                if not (node.module + ".").startswith("worker.contract."):
                    outside.add(f"{path.name}: {node.module}")
            elif isinstance(node, ast.ImportFrom) and node.level > 1:
                outside.add(f"{path.name}: {'.' * node.level}{node.module or ''}")  # above the contract
    assert outside == set()
    modules = ["worker.contract." + p.stem for p in contract if p.stem != "__init__"]
    code = (
        "import importlib, json, sys\n"
        "class Blocked:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'numpy'):\n"
        "            raise ImportError(f'{name} is blocked')\n"
        "sys.meta_path.insert(0, Blocked())\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('worker', 'torch', 'numpy'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert [m for m in loaded if not (m + ".").startswith("worker.contract.") and m != "worker"] == []
