#!/usr/bin/env python3
"""The peer a user would write instead of fleetbench: a thread pool, one paramiko SSHClient per host,
put script + params over SFTP, exec, read stdout, get results. Host keys verified (RejectPolicy).

    python -m benchmarks.cost.bare_paramiko SPEC.json     # spec written by benchmarks/cost/fanout.py
Prints each host's stdout.
"""

from __future__ import annotations

import json
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import paramiko


def one(t: dict) -> str:
    client = paramiko.SSHClient()
    client.load_host_keys(t["known_hosts"])
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        "127.0.0.1",
        port=t["port"],
        username=t["user"],
        key_filename=t["key"],
        look_for_keys=False,
        allow_agent=False,
        timeout=10,
    )
    try:
        sftp = client.open_sftp()
        script, params = f"{t['remote_dir']}/bench.py", f"{t['remote_dir']}/params.json"
        results = f"{t['remote_dir']}/results.jsonl"
        sftp.put(t["script"], script)
        sftp.put(t["params"], params)
        cmd = " ".join(
            shlex.quote(a) for a in [t["python"], script, "supervise", "--params", params, "--results", results]
        )
        _, stdout, _ = client.exec_command(cmd)
        out = stdout.read().decode()
        stdout.channel.recv_exit_status()
        local = Path(t["results_dir"]) / t["name"]
        local.mkdir(parents=True, exist_ok=True)
        sftp.get(results, str(local / "results.jsonl"))
        return out
    finally:
        client.close()


def main() -> int:
    targets = json.loads(Path(sys.argv[1]).read_text())
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        for out in pool.map(one, targets):
            sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
