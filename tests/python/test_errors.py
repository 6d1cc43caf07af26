"""Each error class is raised in its own case, with its context as attributes and in the message."""

import numpy as np
import pytest

import executorch_numpy_runtime as et
from executorch_numpy_runtime import (
    BackendNotAvailable,
    ExecutionError,
    ExecuTorchError,
    InvalidInputError,
    MethodNotFoundError,
    OperatorNotFound,
    ProgramLoadError,
)

ALL_CLASSES = [ProgramLoadError, BackendNotAvailable, OperatorNotFound, ExecutionError, InvalidInputError,
               MethodNotFoundError]


def only(err, cls):
    """`err` is a `cls` and of no other error class than its bases."""
    assert type(err) is cls and isinstance(err, ExecuTorchError)
    for other in ALL_CLASSES:
        if not issubclass(cls, other):
            assert not isinstance(err, other), f"{type(err).__name__} is also a {other.__name__}"


def test_hierarchy():
    for cls in ALL_CLASSES:
        assert issubclass(cls, ExecuTorchError)
    # executorch-numpy-runtime raises ExecutionError for shape/dtype mismatches and ProgramLoadError for a missing
    # method; executorch.runtime documents ValueError for rejected bindings.
    assert issubclass(InvalidInputError, ExecutionError) and issubclass(InvalidInputError, ValueError)
    assert issubclass(MethodNotFoundError, ProgramLoadError) and issubclass(MethodNotFoundError, KeyError)
    assert issubclass(et.IndexOutOfRangeError, InvalidInputError) and issubclass(et.IndexOutOfRangeError, IndexError)
    assert issubclass(et.InvalidTypeError, InvalidInputError) and issubclass(et.InvalidTypeError, TypeError)
    assert not issubclass(ExecutionError, ValueError)


def test_program_load_error_for_garbage(runtime):
    with pytest.raises(ProgramLoadError) as info:
        runtime.load_program(b"this is not a program at all, just some text bytes")
    only(info.value, ProgramLoadError)
    assert info.value.kind == "ProgramLoadError"
    assert "not an ExecuTorch program" in str(info.value)


def test_program_load_error_for_a_missing_file(runtime, tmp_path):
    missing = tmp_path / "missing.pte"
    with pytest.raises(ProgramLoadError, match="missing.pte"):
        runtime.load_program(missing)


def test_program_load_error_for_a_missing_data_file(runtime, programs, tmp_path):
    with pytest.raises(ProgramLoadError, match="nothere.ptd"):
        runtime.load_program(programs["arith"], data_path=tmp_path / "nothere.ptd")


def test_operator_not_found(runtime, programs):
    program = runtime.load_program(programs["missing_operator"])  # loading the program succeeds
    with pytest.raises(OperatorNotFound) as info:
        program.load_method("forward")
    err = info.value
    only(err, OperatorNotFound)
    assert err.kind == "OperatorNotFound"
    assert err.method == "forward"
    assert err.operator == "etnp_test_missing::frobnicate.out" or "etnp_test_missing::frobnicate.out" in str(err)
    assert "method 'forward'" in str(err)


def test_backend_not_available(runtime, programs):
    program = runtime.load_program(programs["missing_backend"])
    with pytest.raises(BackendNotAvailable) as info:
        program.load_method("forward")
    err = info.value
    only(err, BackendNotAvailable)
    assert err.backend == "EtnpTestMissingBackend"
    assert err.method == "forward"
    assert "EtnpTestMissingBackend" in str(err) and "XnnpackBackend" in str(err)  # names what is available


def test_execution_error(runtime, programs):
    gather = runtime.load_program(programs["arith"]).load_method("gather")
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(gather([x, np.array([3, 1])])[0], [3.0, 1.0])
    with pytest.raises(ExecutionError) as info:
        gather([x, np.array([1, 7])])
    err = info.value
    only(err, ExecutionError)
    assert err.kind == "ExecutionError"
    assert err.method == "gather"
    assert err.instruction == 0
    assert err.operator == "aten::index_select.out"
    assert err.input_index is None
    for w in ("method 'gather'", "instruction 0", "aten::index_select.out", "7"):
        assert w in str(err)
    # The method still works after a failed call.
    np.testing.assert_array_equal(gather([x, np.array([0, 2])])[0], [0.0, 2.0])


def test_invalid_input_error(runtime, programs):
    add_mul = runtime.load_program(programs["arith"]).load_method("add_mul")
    with pytest.raises(InvalidInputError) as info:
        add_mul([np.zeros((2, 3), np.float32), np.zeros((2, 3), np.int32)])
    err = info.value
    only(err, InvalidInputError)
    assert err.kind == "InvalidArgument"
    assert err.input_index == 1 and "input 1" in str(err)
    assert err.method == "add_mul" and "method 'add_mul'" in str(err)
    assert err.instruction is None and err.operator is None and err.backend is None


def test_method_not_found(runtime, programs):
    with pytest.raises(MethodNotFoundError) as info:
        runtime.load_program(programs["arith"]).load_method("backward")
    only(info.value, MethodNotFoundError)
    assert str(info.value).startswith("no method named 'backward'")


def test_parse_etdump_rejects_garbage():
    with pytest.raises(InvalidInputError):
        et.parse_etdump(b"\x00" * 64)


def _bad_calls(runtime, programs):
    program = runtime.load_program(programs["arith"])
    add_mul = program.load_method("add_mul")
    meta = add_mul.metadata
    registry = runtime.backend_registry
    return {
        "load_program(int)": lambda: runtime.load_program(123),
        "load_program(verification=str)": lambda: runtime.load_program(programs["arith"], verification="Minimal"),
        "load_program(debug_buffer_size=-1)": lambda: runtime.load_program(programs["arith"], debug_buffer_size=-1),
        "load_program(data_path=int)": lambda: runtime.load_program(programs["arith"], data_path=7),
        "load_program(backend_options=list)": lambda: runtime.load_program(programs["arith"], backend_options=[1]),
        "load_method(int)": lambda: program.load_method(0),
        "metadata(None)": lambda: program.metadata(None),
        "input_tensor_meta(99)": lambda: meta.input_tensor_meta(99),
        "output_tensor_meta(-1)": lambda: meta.output_tensor_meta(-1),
        "attribute_tensor_meta(0)": lambda: meta.attribute_tensor_meta(0),
        "input_tag('0')": lambda: meta.input_tag("0"),
        "memory_planned_buffer_size(5)": lambda: meta.memory_planned_buffer_size(5),
        "execute(wrong count)": lambda: add_mul.execute([X]),
        "execute(object)": lambda: add_mul.execute([object(), object()]),
        "set_output(list)": lambda: add_mul.set_output([0.0] * 6, 1),
        "set_output(index str)": lambda: add_mul.set_output(np.zeros((2, 3), np.float32), "1"),
        "get_option(str)": lambda: registry.get_option("XnnpackBackend", "num_threads"),
        "set_option(bad value)": lambda: registry.set_option("XnnpackBackend", {"num_threads": "many"}),
        "is_available(int)": lambda: registry.is_available(1),
        "write_etdump without etdump": lambda: program.write_etdump_result_to_file("x.etdp"),
        "parse_etdump(garbage)": lambda: et.parse_etdump(b"garbage"),
    }


X = np.zeros((2, 3), np.float32)


def test_every_bad_argument_raises_an_executorch_error(runtime, programs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, call in _bad_calls(runtime, programs).items():
        with pytest.raises(ExecuTorchError) as info:
            call()
        assert str(info.value), name
    assert not list(tmp_path.iterdir())  # nothing written by the refused calls
