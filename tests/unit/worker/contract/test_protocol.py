"""The host/controller contract (worker/contract/protocol.py): what each stdout line is, lines split anywhere,
what each exit status means, and a case named from its raw params as the schema names it."""

from __future__ import annotations

import pytest

from worker.contract import protocol
from worker.contract.schema import CaseSpec


def test_the_supervisor_names_a_case_of_its_params_file_as_the_schema_does():
    from worker.contract.protocol import case_id_of_raw
    from worker.contract.schema import MoeSpec

    cases = [
        CaseSpec(backend="torch-bf16", m=16, n=2048, k=6144),
        CaseSpec(backend="mm", m=64, n=768, k=6144, label="x", seed=3, out_dtype="float16", kernel_sha256="a" * 64),
        CaseSpec(
            workload="moe",
            backend="moe-loop-bf16",
            m=24,
            n=64,
            k=128,
            moe=MoeSpec(experts=4, top_k=2, routing="zipf", skew=1.2, counts=[10, 0, 20, 18]),
        ),
    ]
    for case in cases:
        assert case_id_of_raw(case.model_dump(mode="json")) == case.case_id


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
