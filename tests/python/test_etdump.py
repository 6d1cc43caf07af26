"""Profiling: enable_etdump=True records per-instruction / per-delegate events that
Program.write_etdump_result_to_file writes as an ETDump (read back with parse_etdump), plus the debug buffer."""

import numpy as np
import pytest

from executorch_numpy_runtime import InvalidInputError, parse_etdump

X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.full((2, 3), 0.5, dtype=np.float32)


def by_name(events):
    out = {}
    for e in events:
        out.setdefault(e["name"], []).append(e)
    return out


def test_etdump_records_loads_and_executes(runtime, programs, tmp_path):
    program = runtime.load_program(programs["arith"], enable_etdump=True, debug_buffer_size=1 << 16)
    assert program.has_etdump()
    add_mul = program.load_method("add_mul")
    out1 = add_mul([X, Y])
    out2 = add_mul([X, 2 * Y])
    program.load_method("scalars")([3, 2.5, True])
    etdump_path, debug_path = tmp_path / "run.etdp", tmp_path / "run.bin"
    program.write_etdump_result_to_file(str(etdump_path), str(debug_path))

    blocks = parse_etdump(etdump_path)
    assert [b["name"] for b in blocks] == ["Default", "Execute", "Execute", "Default", "Execute"]
    for block in (blocks[0], blocks[3]):
        init, load = block["profile_events"]  # as the official runtime records a method load
        assert init["name"] == "Method::init" and load["name"] == "Program::load_method"
        assert load["end_time"] >= load["start_time"] and init["end_time"] <= load["end_time"]

    debug = debug_path.read_bytes()
    for block, outputs in ((blocks[1], out1), (blocks[2], out2)):
        events = by_name(block["profile_events"])
        assert [e["instruction_id"] for e in events["OPERATOR_CALL"]] == [0, 1]
        assert [e["instruction_id"] for e in events["native_call_add.out"]] == [0]
        assert [e["instruction_id"] for e in events["native_call_mul.out"]] == [1]
        (whole,) = events["Method::execute"]
        for e in events["OPERATOR_CALL"]:
            assert e["chain_index"] == 0
            assert whole["start_time"] <= e["start_time"] <= e["end_time"] <= whole["end_time"]
        assert events["OPERATOR_CALL"][0]["end_time"] <= events["OPERATOR_CALL"][1]["start_time"]
        # The outputs were logged into the debug buffer.
        assert [d["name"] for d in block["debug_events"]] == ["output_0", "output_1"]
        for d, expected in zip(block["debug_events"], outputs):
            assert d["is_output"] and d["kind"] == "Tensor"
            (t,) = d["tensors"]
            assert t["dtype"] == "float32" and t["sizes"] == [2, 3] and t["strides"] == [3, 1]
            assert t["offset"] >= 0 and t["offset"] % 64 == 0
            logged = np.frombuffer(debug, np.float32, count=6, offset=t["offset"]).reshape(2, 3)
            np.testing.assert_array_equal(logged, expected)
    scalars = blocks[4]["debug_events"]
    assert [(d["kind"], d["int_value"], d["double_value"], d["bool_value"]) for d in scalars] == [
        ("Int", 3, 0.0, False), ("Double", 0, 2.5, False), ("Bool", 0, 0.0, True)]

    # Writing hands over what was recorded: the next file has only the calls made since.
    add_mul([X, Y])
    program.write_etdump_result_to_file(str(etdump_path))
    assert [b["name"] for b in parse_etdump(etdump_path.read_bytes())] == ["Execute"]


def test_debug_buffer_that_is_too_small_marks_tensors_unwritten(runtime, programs, tmp_path):
    program = runtime.load_program(programs["arith"], enable_etdump=True, debug_buffer_size=40)
    program.load_method("add_mul")([X, Y])
    program.write_etdump_result_to_file(str(tmp_path / "a.etdp"), str(tmp_path / "a.bin"))
    (execute,) = [b for b in parse_etdump(tmp_path / "a.etdp") if b["name"] == "Execute"]
    offsets = [d["tensors"][0]["offset"] for d in execute["debug_events"]]
    assert offsets == [0, -1]  # 24 bytes fit, the second output (at offset 64) does not
    assert len((tmp_path / "a.bin").read_bytes()) == 24


def test_without_debug_buffer_no_values_are_logged(runtime, programs, tmp_path):
    program = runtime.load_program(programs["arith"], enable_etdump=True)
    program.load_method("add_mul")([X, Y])
    program.write_etdump_result_to_file(str(tmp_path / "b.etdp"), str(tmp_path / "b.bin"))
    execute = [b for b in parse_etdump(tmp_path / "b.etdp") if b["name"] == "Execute"]
    assert execute[0]["debug_events"] == []
    assert (tmp_path / "b.bin").read_bytes() == b""


def test_failed_calls_leave_no_events_behind(runtime, programs, tmp_path):
    from executorch_numpy_runtime import ExecutionError

    program = runtime.load_program(programs["arith"], enable_etdump=True)
    gather = program.load_method("gather")
    with pytest.raises(ExecutionError):
        gather([np.arange(4, dtype=np.float32), np.array([0, 8])])
    gather([np.arange(4, dtype=np.float32), np.array([0, 1])])
    program.write_etdump_result_to_file(str(tmp_path / "c.etdp"))
    execute = [b for b in parse_etdump(tmp_path / "c.etdp") if b["name"] == "Execute"]
    assert len(execute) == 1
    assert [e["instruction_id"] for e in execute[0]["profile_events"] if e["name"] == "OPERATOR_CALL"] == [0]


def test_delegate_calls_are_recorded(runtime, fixtures, tmp_path):
    program = runtime.load_program(fixtures / "nprt" / "add.pte", enable_etdump=True)
    out = program.load_method("forward")([np.ones(3, np.float32), np.ones(3, np.float32)])
    np.testing.assert_array_equal(out[0], [2, 2, 2])
    program.write_etdump_result_to_file(str(tmp_path / "d.etdp"))
    (execute,) = [b for b in parse_etdump(tmp_path / "d.etdp") if b["name"] == "Execute"]
    events = execute["profile_events"]
    names = [e["name"] for e in events]
    assert "DELEGATE_CALL" in names and names[-1] == "Method::execute"
    # The delegate's node follows its call, inside the call's time, identified by its debug handle.
    call = names.index("DELEGATE_CALL")
    node = events[call + 1]
    assert node["name"].startswith("XNNAdd (")
    assert node["instruction_id"] == events[call]["instruction_id"]
    assert events[call]["start_time"] <= node["start_time"] <= node["end_time"] <= events[call]["end_time"]
    assert node["delegate_debug_id_int"] >= 0


def test_without_etdump_writing_fails(runtime, programs, tmp_path):
    program = runtime.load_program(programs["arith"])
    assert not program.has_etdump()
    with pytest.raises(InvalidInputError, match="enable_etdump=True"):
        program.write_etdump_result_to_file(str(tmp_path / "x.etdp"))


def test_unwritable_path_is_an_os_error(runtime, programs, tmp_path):
    program = runtime.load_program(programs["arith"], enable_etdump=True)
    with pytest.raises(OSError):
        program.write_etdump_result_to_file(str(tmp_path / "no" / "such" / "dir.etdp"))
