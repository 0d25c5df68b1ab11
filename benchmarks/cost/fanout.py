#!/usr/bin/env python3
"""Fan-out cost: fleetbench vs a bare ThreadPool + paramiko loop vs Ansible, on a loopback sshd fleet.

For each fleet size, interleaved and repeated, the same remote work on every host (the fleetbench
script of `sweeps/noop.yaml`: put script + params, run it, get results.jsonl):
  fleetbench   `python -m orchestrator.cli run sweeps/noop.yaml` (worker already synced: the steady
               state): every command pays its own imports; there is no resident process
  paramiko     benchmarks/cost/bare_paramiko.py: ThreadPool, one SSHClient per host, sftp put/put, exec, sftp get
  ansible      ansible-playbook: copy params, `script` the bench script, `fetch` results; forks = hosts
Reported per tool: median wall time, the slowest host-side worker (from the script's own exit line),
overhead = wall - slowest worker, and bytes moved per host (loopback bytes during the run / hosts).

The hosts look like fleet hosts, not like this dev box's root account: run as root, the benchmark
logs in as an unprivileged user (`--login-user`, created with a stock home if missing) and every tool
runs the same host venv (`--host-python`, default: a venv made from --base-python with the pinned
pydantic, the worker's one dependency for a no-op sweep). Root's ~/.bashrc here runs `pyenv init`:
~130 ms of CPU in every SSH exec, for every tool alike.

    python -m benchmarks.cost.fanout --sizes 8,32,64 --reps 3 [--ansible /path/to/ansible-playbook] --out FILE.md

On one machine the hosts' workers take CPU from the controller, and more than their share suggests:
each SSH session is its own scheduling group (setsid + the kernel's autogroup), as heavy as the whole
controller process, so at 64 busy hosts the controller gets ~1/65 of the CPU. On a machine with cores
to spare, `--controller-cpus 0,1 --host-cpus 2-15` pins every tool to two cores
and every host to the others: a 2-core controller next to a fleet with CPUs of its own.

Needs /usr/sbin/sshd (or FLEETBENCH_SSHD) and, for the Ansible column, ansible-core.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import pwd
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import ROOT
from benchmarks.harness.sshfleet import start_fleet

ELAPSED = re.compile(r'elapsed_s\\?"\s*:\s*([0-9.]+)')


def loopback_rx_bytes() -> int:
    for line in Path("/proc/net/dev").read_text().splitlines():
        if line.strip().startswith("lo:"):
            return int(line.split(":", 1)[1].split()[0])
    return 0


CONTROLLER_CPUS: frozenset[int] | None = None  # --controller-cpus: where every tool runs


def on_controller_cpus() -> None:
    if CONTROLLER_CPUS:
        os.sched_setaffinity(0, CONTROLLER_CPUS)


def parse_cpus(text: str) -> frozenset[int]:
    """'0,1' or '2-15' or '0,4-7', as taskset -c takes them."""
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


def fmt_cpus(cpus: frozenset[int]) -> str:
    return ",".join(map(str, sorted(cpus)))


def timed(cmd, **kw) -> tuple[float, int, subprocess.CompletedProcess]:
    rx0, t0 = loopback_rx_bytes(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=on_controller_cpus, **kw)
    return time.perf_counter() - t0, loopback_rx_bytes() - rx0, proc


def run_fleetbench(inv: Path, runs: Path):
    # orchestrator.cli is what the installed `fleetbench` command runs.
    wall, nbytes, proc = timed(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            "sweeps/noop.yaml",
            "-i",
            str(inv),
            "--runs-dir",
            str(runs),
            "--format",
            "json",
        ],
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"fleetbench failed: {proc.stderr[-2000:]}")
    run_dir = sorted(p for p in runs.iterdir() if p.is_dir())[-1]
    elapsed = [float(m) for log in run_dir.glob("hosts/*/attempt-1/log.txt") for m in ELAPSED.findall(log.read_text())]
    return wall, nbytes, max(elapsed)


def run_paramiko(spec: Path):
    wall, nbytes, proc = timed([sys.executable, str(ROOT / "benchmarks" / "cost" / "bare_paramiko.py"), str(spec)])
    if proc.returncode != 0:
        raise RuntimeError(f"bare paramiko failed: {proc.stderr[-2000:]}")
    return wall, nbytes, max(float(m) for m in ELAPSED.findall(proc.stdout))


def run_ansible(playbook_cmd: list[str], n: int):
    env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="minimal",
        ANSIBLE_HOST_KEY_CHECKING="True",
        ANSIBLE_PIPELINING="True",
        ANSIBLE_RETRY_FILES_ENABLED="False",
    )
    wall, nbytes, proc = timed([*playbook_cmd, "-f", str(n)], env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"ansible failed: {proc.stdout[-2000:]} {proc.stderr[-1000:]}")
    return wall, nbytes, max(float(m) for m in ELAPSED.findall(proc.stdout))


def ensure_login_user(name: str) -> str:
    if name == getpass.getuser():
        return name
    try:
        pwd.getpwnam(name)
    except KeyError:
        # '*' and not useradd's '!': with UsePAM no, sshd refuses key logins to locked accounts.
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "--password", "*", name], check=True)
    return name


def ensure_host_venv(path: Path, base_python: str) -> str:
    """A host venv like `fleetbench provision --profile minimal` makes: pydantic, pinned."""
    python = path / "bin" / "python"
    if not python.exists():
        subprocess.run([base_python, "-m", "venv", str(path)], check=True)
        wheelhouse = ROOT / ".cache" / "wheelhouse"
        source = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse.is_dir() else []
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                *source,
                "-c",
                str(ROOT / "requirements" / "host-constraints.txt"),
                "pydantic",
            ],
            check=True,
        )
    return str(python)


def prepare(fleet, n: int, work: Path, ansible_playbook: str | None, host_python: str = sys.executable):
    """Inventory for fleetbench, a spec for the paramiko loop, an inventory + playbook for Ansible."""
    hosts = fleet.hosts[:n]
    base = work / f"n{n}"
    base.mkdir(parents=True, exist_ok=True)
    inv = fleet.inventory(base / "hosts.yaml", names=[h.name for h in hosts], python=host_python)
    owner = pwd.getpwnam(fleet.user)
    runs = base / "runs"
    # One real run syncs the worker everywhere and renders the scripts all three tools then run.
    first_wall, first_bytes, _ = run_fleetbench(inv, runs)
    run_dir = sorted(p for p in runs.iterdir() if p.is_dir())[-1]
    params = run_dir / "hosts" / hosts[0].name / "attempt-1" / "params.json"
    targets = []
    for h in hosts:
        for tool in ("bare", "ansible"):
            (h.workdir / tool).mkdir(exist_ok=True)
            os.chown(h.workdir / tool, owner.pw_uid, owner.pw_gid)
        targets.append(
            {
                "name": h.name,
                "port": h.port,
                "user": fleet.user,
                "key": str(fleet.client_key),
                "known_hosts": str(fleet.known_hosts),
                "python": host_python,
                "script": str(run_dir / "scripts" / f"{h.name}.py"),
                "params": str(params),
                "remote_dir": str(h.workdir / "bare"),
                "results_dir": str(base / "bare-results"),
            }
        )
    spec = base / "paramiko.json"
    spec.write_text(json.dumps(targets))
    playbook_cmd = None
    if ansible_playbook:
        lines = ["[fleet]"]
        for h, t in zip(hosts, targets):
            lines.append(
                f"{h.name} ansible_host=127.0.0.1 ansible_port={h.port} ansible_user={fleet.user} "
                f"ansible_ssh_private_key_file={fleet.client_key} ansible_python_interpreter={host_python} "
                f"bench_script={t['script']} remote_dir={h.workdir / 'ansible'}"
            )
        lines += [
            "[all:vars]",
            f"ansible_ssh_common_args='-o UserKnownHostsFile={fleet.known_hosts} -o StrictHostKeyChecking=yes'",
        ]
        (base / "inventory.ini").write_text("\n".join(lines) + "\n")
        (base / "play.yml").write_text(f"""- hosts: fleet
  gather_facts: false
  tasks:
    - copy: {{src: "{params}", dest: "{{{{ remote_dir }}}}/params.json"}}
    - script: "{{{{ bench_script }}}} supervise --params {{{{ remote_dir }}}}/params.json --results {{{{ remote_dir }}}}/results.jsonl"
      args: {{executable: "{host_python}"}}
    - fetch: {{src: "{{{{ remote_dir }}}}/results.jsonl", dest: "{base}/ansible-results/{{{{ inventory_hostname }}}}/", flat: true}}
""")
        playbook_cmd = [ansible_playbook, "-i", str(base / "inventory.ini"), str(base / "play.yml")]
    return inv, runs, spec, playbook_cmd, first_wall, first_bytes


def table(rows: list[dict], header: str) -> list[str]:
    lines = [
        header,
        "overhead = wall - slowest host-side worker;",
        "bytes = loopback bytes received during the run / hosts (SSH framing included)",
        "",
        "| hosts | tool | wall s | slowest worker s | overhead s | KB/host | overhead vs paramiko "
        "| overhead: ansible / this | wall: ansible / this |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        same = {x["tool"]: x for x in rows if x["hosts"] == r["hosts"]}
        vs_p = ovh_a = wall_a = ""
        if r["overhead_s"] is not None and "paramiko" in same and same["paramiko"]["overhead_s"]:
            vs_p = f"{r['overhead_s'] / same['paramiko']['overhead_s']:.2f}×"
        if "ansible" in same and r["tool"] != "ansible":
            wall_a = f"{same['ansible']['wall_s'] / r['wall_s']:.1f}×"
            if r["overhead_s"]:
                ovh_a = f"{same['ansible']['overhead_s'] / r['overhead_s']:.1f}×"
        f = lambda v, p: "" if v is None else format(v, p)  # noqa: E731
        lines.append(
            f"| {r['hosts']} | {r['tool']} | {r['wall_s']:.2f} | {f(r['slowest_worker_s'], '.2f')} | "
            f"{f(r['overhead_s'], '.2f')} | {r['bytes_per_host'] / 1024:.1f} | {vs_p} | {ovh_a} | {wall_a} |"
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="8,32,64")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ansible", default=shutil.which("ansible-playbook"), help="ansible-playbook executable")
    ap.add_argument("--out", type=Path)
    root = os.geteuid() == 0
    ap.add_argument(
        "--login-user",
        default="fbhost" if root else getpass.getuser(),
        help="user the hosts log in as (default: fbhost when run as root, created if missing)",
    )
    ap.add_argument("--host-python", help="the hosts' interpreter (default: a venv under /tmp/fleetbench-fanout)")
    ap.add_argument(
        "--base-python",
        default="/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable,
        help="interpreter the default host venv is made from",
    )
    ap.add_argument(
        "--controller-cpus",
        type=parse_cpus,
        help="CPUs every tool runs on (e.g. 0,1); with --host-cpus: the controller's own machine",
    )
    ap.add_argument(
        "--host-cpus", type=parse_cpus, help="CPUs every host (sshd, sessions, workers) runs on (e.g. 2-15)"
    )
    args = ap.parse_args()
    global CONTROLLER_CPUS
    CONTROLLER_CPUS = args.controller_cpus
    if args.controller_cpus and args.host_cpus and args.controller_cpus & args.host_cpus:
        ap.error("--controller-cpus and --host-cpus overlap")
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path("/tmp/fleetbench-fanout") / str(int(time.time()))
    user = ensure_login_user(args.login_user)
    host_python = args.host_python or ensure_host_venv(Path("/tmp/fleetbench-fanout/host-venv"), args.base_python)
    print(f"hosts log in as {user}, run {host_python}", flush=True)
    # An installed fleetbench has its bytecode; a checkout under PYTHONDONTWRITEBYTECODE would compile
    # its modules on every cold start (~30 ms here) while the peers' libraries come precompiled.
    subprocess.run([sys.executable, "-m", "compileall", "-q", "orchestrator", "worker"], cwd=ROOT, check=True)
    fleet = start_fleet(work / "fleet", max(sizes), user=user, cpus=args.host_cpus)
    rows = []
    try:
        for n in sizes:
            inv, runs, spec, playbook, first_wall, first_bytes = prepare(fleet, n, work, args.ansible, host_python)
            tools = {"fleetbench": lambda: run_fleetbench(inv, runs), "paramiko": lambda: run_paramiko(spec)}
            if playbook:
                tools["ansible"] = lambda: run_ansible(playbook, n)
            results: dict[str, list] = {t: [] for t in tools}
            order = list(tools)
            for rep in range(args.reps):
                for t in order[rep % len(order) :] + order[: rep % len(order)]:  # rotate who goes first
                    results[t].append(tools[t]())
            for t, rs in results.items():
                wall = statistics.median(r[0] for r in rs)
                slowest = statistics.median(r[2] for r in rs)
                rows.append(
                    {
                        "hosts": n,
                        "tool": t,
                        "wall_s": wall,
                        "slowest_worker_s": slowest,
                        "overhead_s": statistics.median(r[0] - r[2] for r in rs),
                        "bytes_per_host": statistics.median(r[1] for r in rs) / n,
                        "reps": len(rs),
                    }
                )
            rows.append(
                {
                    "hosts": n,
                    "tool": "fleetbench (first run: worker upload)",
                    "wall_s": first_wall,
                    "slowest_worker_s": None,
                    "overhead_s": None,
                    "bytes_per_host": first_bytes / n,
                    "reps": 1,
                }
            )
            print(json.dumps(rows[-len(results) - 1 :]), flush=True)
    finally:
        fleet.stop()
    header = (
        f"fan-out, {os.cpu_count()} cores, reps {args.reps} (medians); hosts log in as {user} and run {host_python}"
        f"{f'; tools on CPUs {fmt_cpus(args.controller_cpus)}' if args.controller_cpus else ''}"
        f"{f', hosts on CPUs {fmt_cpus(args.host_cpus)}' if args.host_cpus else ''};"
    )
    lines = table(rows, header)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
