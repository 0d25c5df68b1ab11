"""Running the worker on a host (orchestrator/execution/remote.py): whether the host lacks its files, read from
the protocol's exit statuses alone, and running first, uploading only when it does."""

from __future__ import annotations

from worker.contract import protocol


def test_the_host_lacks_files_only_by_the_protocol_exit_statuses():
    from orchestrator.execution.remote import lacks_files
    from orchestrator.transport import CommandResult

    # Python could not open the content-addressed script: status 2 before the launcher's hello.
    assert lacks_files(CommandResult(2), hello_seen=False)
    # After the hello the launcher runs: a 2 is not ours (the worker's usage errors are EXIT_USAGE).
    assert not lacks_files(CommandResult(2), hello_seen=True)
    assert lacks_files(CommandResult(protocol.EXIT_NEEDS_SYNC), hello_seen=True)  # the launcher lacks its worker
    assert lacks_files(CommandResult(protocol.EXIT_NEEDS_SYNC), hello_seen=False)  # a format-1 launcher: no hello
    assert not lacks_files(CommandResult(1), hello_seen=False)
    assert not lacks_files(CommandResult(-1, timed_out=True), hello_seen=False)
    assert not lacks_files(None, hello_seen=False)


def test_run_first_syncs_and_runs_again_only_when_the_host_lacks_something():
    from orchestrator.execution.remote import run_first
    from orchestrator.transport import CommandResult

    def scenario(results, lacks):
        calls, queue = [], list(results)

        def launch():
            calls.append("run")
            return queue.pop(0)

        return run_first(launch, lacks, lambda: calls.append("sync")), calls

    ok, missing = CommandResult(0), CommandResult(5)
    assert scenario([ok], lambda r: r.exit_code == 5) == (ok, ["run"])  # the steady state: one exec
    assert scenario([missing, ok], lambda r: r.exit_code == 5) == (ok, ["run", "sync", "run"])
    # Still lacking after the upload: reported as it is, never a loop.
    assert scenario([missing, missing], lambda r: r.exit_code == 5) == (missing, ["run", "sync", "run"])
    assert scenario([None], lambda r: True) == (None, ["run"])  # not launched (cancelled): nothing to sync
