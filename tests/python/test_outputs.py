"""Method outputs: owned copies by default, read-only views with clone_outputs=False, and set_output."""

import gc

import numpy as np
import pytest

from executorch_numpy_runtime import InvalidInputError

X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.full((2, 3), 0.5, dtype=np.float32)


@pytest.fixture()
def arith(runtime, programs):
    return runtime.load_program(programs["arith"])  # a fresh program: set_output binds are per method


def test_outputs_survive_later_calls(arith):
    add_mul = arith.load_method("add_mul")
    first = add_mul([X, Y])
    second = add_mul([X * 10, Y])
    np.testing.assert_array_equal(first[0], X + Y)
    np.testing.assert_array_equal(first[1], X * Y)
    np.testing.assert_array_equal(second[0], X * 10 + Y)
    assert first[0].flags.writeable and first[0].flags.c_contiguous
    first[0][0, 0] = 123.0  # the copy is the caller's
    np.testing.assert_array_equal(add_mul([X, Y])[0], X + Y)


def test_outputs_outlive_program_and_method(runtime, programs):
    program = runtime.load_program(programs["arith"])
    out = program.load_method("add_mul")([X, Y])
    del program
    gc.collect()
    np.testing.assert_array_equal(out[0], X + Y)


def test_views_without_clone_are_read_only_and_change_with_the_next_call(arith):
    add_mul = arith.load_method("add_mul")
    view = add_mul([X, Y], clone_outputs=False)[0]
    assert not view.flags.writeable
    with pytest.raises(ValueError):
        view[0, 0] = 1.0
    np.testing.assert_array_equal(view, X + Y)
    add_mul([X, 2 * Y])
    # Documented: a view shows the method's memory, which the next call of the method overwrote.
    np.testing.assert_array_equal(view, X + 2 * Y)


def test_views_keep_the_method_alive(runtime, programs):
    view = runtime.load_program(programs["arith"]).load_method("add_mul").execute([X, Y], clone_outputs=False)[0]
    gc.collect()
    np.testing.assert_array_equal(view, X + Y)


def test_non_tensor_outputs_are_python_scalars(arith):
    assert arith.load_method("scalars").execute([3, 2.5, True], clone_outputs=False) == [3, 2.5, True]


def test_set_output_writes_into_the_callers_array(arith):
    add_mul = arith.load_method("add_mul")
    buffer = np.zeros((2, 3), np.float32)
    add_mul.set_output(buffer, 1)
    out = add_mul([X, Y])
    np.testing.assert_array_equal(buffer, X * Y)
    assert out[1] is buffer  # the bound array itself, not a copy (clone_outputs concerns the others)
    assert not np.shares_memory(out[0], buffer) and out[0].flags.writeable
    view = add_mul([X, 3 * Y], clone_outputs=False)[1]
    assert view is buffer
    np.testing.assert_array_equal(buffer, X * 3 * Y)
    # Rebinding releases the old array and uses the new one.
    other = np.zeros((2, 3), np.float32)
    add_mul.set_output(other, 1)
    add_mul([X, Y])
    np.testing.assert_array_equal(other, X * Y)
    np.testing.assert_array_equal(buffer, X * 3 * Y)
    np.testing.assert_array_equal(view, X * 3 * Y)  # the old array is the caller's again


def test_set_output_takes_a_larger_array_and_returns_a_view_at_the_written_shape(arith):
    add_mul = arith.load_method("add_mul")
    flat = np.full(8, -1.0, np.float32)  # 32 bytes for a 24-byte output
    add_mul.set_output(flat, 1)
    out = add_mul([X, Y])[1]
    assert out.shape == (2, 3) and np.shares_memory(out, flat) and out.flags.writeable
    np.testing.assert_array_equal(out, X * Y)
    np.testing.assert_array_equal(flat[6:], [-1.0, -1.0])  # past the output: untouched


def test_set_output_accepts_writable_buffers(arith):
    add_mul = arith.load_method("add_mul")
    raw = bytearray(24)
    add_mul.set_output(memoryview(raw).cast("f"), 1)
    add_mul([X, Y])
    np.testing.assert_array_equal(np.frombuffer(raw, np.float32).reshape(2, 3), X * Y)


def test_set_output_refuses_memory_shared_with_another_output_or_an_input(runtime, programs):
    both = runtime.load_program(programs["outputs"]).load_method("both")
    memory = np.zeros(12, np.float32)
    both.set_output(memory[:6], 0)
    with pytest.raises(InvalidInputError, match="output 1: the array shares memory with the one bound to output 0"):
        both.set_output(memory[4:10], 1)
    both.set_output(memory[6:], 1)  # next to it: fine
    out = both([X, Y])
    np.testing.assert_array_equal(memory, np.concatenate([(X + Y).ravel(), (X * Y).ravel()]))
    assert np.shares_memory(out[0], memory) and np.shares_memory(out[1], memory)
    x = memory[:6].reshape(2, 3)
    with pytest.raises(InvalidInputError, match="output 0 is bound .* memory that an input array shares"):
        both([x, Y])
    np.testing.assert_array_equal(both([x.copy(), Y])[0], X + Y + Y)


def test_set_output_refuses_an_output_returned_twice_and_a_channels_last_output(runtime, programs):
    program = runtime.load_program(programs["outputs"])
    with pytest.raises(InvalidInputError, match="output 0 is the same tensor as output 1") as info:
        program.load_method("twice").set_output(np.zeros((2, 3), np.float32), 0)
    assert isinstance(info.value, ValueError)
    with pytest.raises(InvalidInputError, match=r"output 0 is laid out in dim order \(0, 2, 3, 1\), not contiguously"):
        program.load_method("channels_last").set_output(np.zeros((1, 2, 2, 2), np.float32), 0)


@pytest.mark.parametrize(
    "array, index, words",
    [
        (np.zeros((2, 3), np.float32), 0, "memory-planned"),
        (np.zeros((2, 3), np.float64), 1, "wrong dtype"),
        (np.zeros((2, 2), np.float32), 1, r"24 bytes\), the array is .* \(16 bytes, too small\)"),
        (np.zeros((3, 2), np.float32).T, 1, "C-contiguous"),
        (np.zeros((2, 6), np.float32)[:, ::2], 1, "C-contiguous"),
        (np.zeros(25, np.uint8)[1:].view(np.float32), 1, "aligned"),
    ],
    ids=["planned", "dtype", "too-small", "transposed", "strided", "misaligned"],
)
def test_set_output_rules(arith, array, index, words):
    with pytest.raises(InvalidInputError, match=words) as info:
        arith.load_method("add_mul").set_output(array, index)
    assert isinstance(info.value, ValueError) and info.value.method == "add_mul"


def test_set_output_rejects_aliased_outputs(runtime, programs):
    # passthrough returns its (unplanned) input: the output is the caller's input memory, not redirectable.
    layouts = runtime.load_program(programs["layouts"])
    buffer = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="aliased"):
        layouts.load_method("passthrough").set_output(buffer, 0)
    # identity_contig returns its planned input: memory-planned.
    with pytest.raises(ValueError, match="memory-planned"):
        layouts.load_method("identity_contig").set_output(buffer, 0)


def test_set_output_rejects_constant_outputs(runtime, programs):
    method = runtime.load_program(programs["dtypes"]).load_method("const_int64")
    with pytest.raises(ValueError, match="is a constant of the program"):
        method.set_output(np.zeros(2, np.int64), 0)


def test_set_output_rejects_non_tensors_bad_indices_and_read_only_arrays(arith):
    with pytest.raises(ValueError, match="not a tensor"):
        arith.load_method("scalars").set_output(np.zeros(1, np.int64), 0)
    with pytest.raises(IndexError, match="has 2 outputs, there is no output 2"):
        arith.load_method("add_mul").set_output(np.zeros((2, 3), np.float32), 2)
    with pytest.raises(IndexError, match="there is no output -1"):
        arith.load_method("add_mul").set_output(np.zeros((2, 3), np.float32), -1)
    with pytest.raises(TypeError, match="output index must be an int, got str"):
        arith.load_method("add_mul").set_output(np.zeros((2, 3), np.float32), "1")
    ro = np.zeros((2, 3), np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        arith.load_method("add_mul").set_output(ro, 1)
    with pytest.raises(ValueError, match="a numpy array, a DLPack tensor or a writable buffer, not a list"):
        arith.load_method("add_mul").set_output([0.0] * 6, 1)
