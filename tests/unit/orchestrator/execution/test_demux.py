"""The demultiplexer of a worker's output (orchestrator/execution/demux.py): each line where it belongs."""

from __future__ import annotations


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
