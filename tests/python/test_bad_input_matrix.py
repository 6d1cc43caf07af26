"""The bad-input matrix of issue 18 (item 6), Python side: every bad input is refused with its exact class (and
``kind``) and a message naming the method and the input, or accepted (copied where needed) with a result checked
against numpy. tests/cpp/bad_input_matrix_test.cpp is the C++ side, with its own map.

cell                                   test (this file unless named)
wrong dtype                            test_inputs.py::test_input_validation[dtype-0, dtype-1],
                                       ::test_unsupported_dtype_is_named, ::test_uint16_stays_uint16_...
wrong rank                             test_inputs.py::test_input_validation[rank]; test_shape_cells[*rank*]
wrong shape                            test_inputs.py::test_input_validation[shape, transposed-shape]
dim beyond its dynamic bound           test_inputs.py::test_dynamic_shapes_within_bounds; test_shape_cells[bound-*]
non-contiguous (strided) views         test_inputs.py::test_non_contiguous_inputs_are_copied; test_views[strided*]
negative strides (a[::-1])             test_views[reversed-*]
a.T, Fortran order                     test_inputs.py::test_dense_transposed_layout_is_rejected_...;
                                       test_views[transposed]; test_views[fortran]
read-only arrays (np.frombuffer(bytes))  test_inputs.py::test_readonly_inputs_are_fine,
                                       ::test_an_input_the_method_writes_is_written_into_a_writable_array_only;
                                       test_read_only_buffers
misaligned buffers                     test_inputs.py::test_misaligned_inputs_are_copied;
                                       test_misaligned_inputs_of_every_element_size
copies of an input the method writes   test_an_input_the_method_writes_gets_its_copy_back
0-d arrays                             test_zero_d; test_shape_cells[0-d-*]
empty tensors (a dim of 0)             test_empty; test_shape_cells[empty-*]
bfloat16 without ml_dtypes             test_bfloat16_without_ml_dtypes (a subprocess that blocks ml_dtypes);
                                       test_inputs.py::test_bfloat16
bfloat16 with ml_dtypes                test_bfloat16_with_ml_dtypes (skipped where ml_dtypes is missing)
a scalar for a tensor                  test_inputs.py::test_input_validation[scalar-for-tensor, list];
                                       test_scalar_for_a_tensor
a tensor for a scalar                  test_tensor_for_a_scalar
None, objects of the wrong type        test_none_and_wrong_types; test_inputs.py::test_non_tensor_input_must_...;
                                       test_argument_errors.py::test_inputs_that_are_not_a_sequence
too many / too few inputs              test_inputs.py::test_input_validation[too-few, too-many]; test_input_counts;
                                       test_argument_errors.py::test_one_array_for_several_inputs_says_how_...
a buffer resized during the call       test_an_input_buffer_is_locked_during_the_call;
                                       test_api.py::test_buffer_is_kept_alive_not_copied (the program's bytearray);
                                       test_program_bytearray_stays_locked_while_another_thread_calls
an object whose __array__ changes      test_none_and_wrong_types[__array__] (__array__ is not an accepted form)
.ptd missing                           test_ptd_missing; test_errors.py::test_program_load_error_for_a_missing_...
.ptd wrong                             test_ptd_wrong; test_argument_errors.py::test_data_path_given_the_ptd_...
.ptd duplicated                        test_ptd_duplicated
.ptd truncated                         test_ptd_truncated_at_every_length
.ptd corrupt                           test_ptd_with_each_byte_corrupted
"""

import array
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from conftest import fixture_path
import executorch_numpy_runtime as et
from executorch_numpy_runtime import InvalidInputError, ProgramLoadError

RNG = np.random.default_rng(18)
X = RNG.standard_normal((2, 3)).astype(np.float32)
Y = RNG.standard_normal((2, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def arith(runtime, programs):
    return runtime.load_program(programs["arith"])


@pytest.fixture(scope="module")
def edges(runtime, programs):
    return runtime.load_program(programs["edges"])


@pytest.fixture(scope="module")
def dtypes(runtime, programs):
    return runtime.load_program(programs["dtypes"])


def refused(call, method, index, *words, cls=InvalidInputError):
    """`call()` raises exactly `cls` for input `index` of `method`, its message holding `words`."""
    with pytest.raises(cls) as info:
        call()
    err = info.value
    assert type(err) is cls, type(err)
    assert err.kind == "InvalidArgument"
    assert err.method == method and f"method '{method}'" in str(err)
    assert err.input_index == index
    if index is not None:
        assert f"input {index}:" in str(err), str(err)
    for w in words:
        assert w in str(err), (w, str(err))
    return err


def misaligned(values):
    """A copy of `values` one byte into a writable uint8 buffer: not aligned for any element size above 1."""
    raw = np.frombuffer(bytearray(values.nbytes + 1), np.uint8)[1:]
    out = raw.view(values.dtype).reshape(values.shape)
    out[...] = values
    assert not out.flags.aligned and out.flags.writeable
    return out


# --- Shapes ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, given, words",
    [
        ("dynamic", np.zeros((5, 3), np.float32), ["dimension 0 is 5, above its upper bound 4"]),
        ("dynamic", np.zeros((2, 4), np.float32), ["dimension 1 is 4, above its upper bound 3", "bound [4, 3]"]),
        ("dynamic", np.zeros(12, np.float32), ["shape up to [4, 3]", "rank 1 instead of 2"]),
        ("dynamic", np.zeros((0, 3), np.float64), ["float64", "dtype float64 instead of float32"]),
        ("zero_d", np.zeros(1, np.float32), ["shape []", "rank 1 instead of 0"]),
        ("add_mul", np.float32(1), ["shape ()", "rank 0 instead of 2"]),
        ("add_mul", np.zeros((0, 3), np.float32), ["expected shape [2, 3], got [0, 3]"]),
        ("empty", np.zeros((1, 3), np.float32), ["expected shape [0, 3], got [1, 3]"]),
        ("empty", np.zeros((0, 3, 1), np.float32), ["rank 3 instead of 2"]),
    ],
    ids=["bound-dim0", "bound-dim1", "bound-rank", "empty-wrong-dtype", "0-d-rank-1", "0-d-for-rank-2",
         "empty-for-static", "static-empty-given-rows", "empty-rank"],
)
def test_shape_cells(arith, edges, method, given, words):
    program = edges if method in ("zero_d", "empty") else arith
    m = program.load_method(method)
    inputs = [given, Y] if method == "add_mul" else [given]
    refused(lambda: m(inputs), method, 0, *words)


def test_zero_d(edges):
    zero_d = edges.load_method("zero_d")
    for given in (np.float32(2.5), np.array(2.5, np.float32), np.array([2.5], np.float32).reshape(())):
        out = zero_d([given])[0]
        assert out.shape == () and out.dtype == np.float32 and out == 5.0
    # A Python float is a scalar, not a tensor: the method wants a float32 tensor.
    refused(lambda: zero_d([2.5]), "zero_d", 0, "float32 tensor of shape []", "got float")
    refused(lambda: zero_d([np.float64(2.5)]), "zero_d", 0, "dtype float64 instead of float32")


def test_empty(arith, edges):
    empty = edges.load_method("empty")
    for given in (np.zeros((0, 3), np.float32), np.zeros((3, 0), np.float32).T, np.zeros((0, 6), np.float32)[:, ::2]):
        out = empty([given])[0]
        assert out.shape == (0, 3) and out.dtype == np.float32
    dynamic = arith.load_method("dynamic")
    assert dynamic([np.zeros((0, 3), np.float32)])[0].shape == (0, 3)
    x = RNG.standard_normal((3, 3)).astype(np.float32)
    np.testing.assert_array_equal(dynamic([x])[0], x + x)  # and back to rows


# --- Memory layout, read-only and misaligned memory --------------------------------------------------------------


BIG = RNG.standard_normal((4, 6)).astype(np.float32)
VIEWS = {
    "strided": (BIG[::2, ::2], True),
    "strided-rows": (BIG[::2, :3], True),
    "reversed-rows": (BIG[:2, :3][::-1], True),
    "reversed-cols": (BIG[:2, :3][:, ::-1], True),
    "reversed-both": (BIG[1::2, ::-2], True),
    "broadcast": (np.broadcast_to(BIG[0, :3], (2, 3)), True),
    "transposed": (BIG[:3, :2].copy().T, False),  # dense, column-major: a layout of its own
    "fortran": (np.asfortranarray(BIG[:2, :3]), False),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_views(arith, name):
    view, accepted = VIEWS[name]
    assert view.shape == (2, 3) and not view.flags.c_contiguous
    add_mul = arith.load_method("add_mul")
    if accepted:
        out = add_mul([Y, view])
        np.testing.assert_array_equal(out[0], Y + view)
        np.testing.assert_array_equal(out[1], Y * view)
    else:
        refused(lambda: add_mul([Y, view]), "add_mul", 1, "memory layout not accepted", "strides (12, 4)",
                f"strides {view.strides}", "numpy.ascontiguousarray")


def test_reversed_view_of_an_input_bound_in_place(runtime, programs):
    # passthrough binds its unplanned input as is; a reversed view has no layout of its own and is copied.
    passthrough = runtime.load_program(programs["layouts"]).load_method("passthrough")
    data = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    view = data[::-1, :, ::-1]
    out = passthrough([view], clone_outputs=False)[0]
    assert not np.shares_memory(out, data)
    np.testing.assert_array_equal(out, view)


def test_read_only_buffers(arith, runtime, programs):
    frozen = np.frombuffer(X.tobytes(), np.float32).reshape(2, 3)
    assert not frozen.flags.writeable
    out = arith.load_method("add_mul")([frozen, Y])
    np.testing.assert_array_equal(out[0], X + Y)
    np.testing.assert_array_equal(out[1], X * Y)
    # An unplanned input is bound in place when the method only reads it.
    layouts = runtime.load_program(programs["layouts"])
    data = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    ro = np.frombuffer(data.tobytes(), np.float32).reshape(2, 3, 4)
    out = layouts.load_method("passthrough")([ro], clone_outputs=False)[0]
    assert np.shares_memory(out, ro)
    np.testing.assert_array_equal(out, data)
    # A method that writes its input gets a copy of a read-only one; the bytes stay as they were.
    add_into_input = runtime.load_program(programs["outputs"]).load_method("add_into_input")
    source = X.tobytes()
    np.testing.assert_array_equal(add_into_input([np.frombuffer(source, np.float32).reshape(2, 3), Y])[0], X + Y)
    assert source == X.tobytes()


@pytest.mark.parametrize("name", ["float64", "int64", "int32", "float16", "uint16", "int16", "bfloat16"])
def test_misaligned_inputs_of_every_element_size(dtypes, name):
    if name == "bfloat16":
        values = np.array([[0x3F80, 0x4000, 0xC040], [0, 0x7F80, 0x3E80]], np.uint16)  # raw bits
    elif np.dtype(name).kind == "f":
        values = RNG.standard_normal((2, 3)).astype(name)
    else:
        values = RNG.integers(-100 if np.dtype(name).kind == "i" else 0, 100, (2, 3)).astype(name)
    out = dtypes.load_method(f"id_{name}")([misaligned(values)])[0]
    if name == "bfloat16" and et.BFLOAT16_DTYPE is not None:
        out = out.view(np.uint16)
    np.testing.assert_array_equal(out, values)


def test_an_input_the_method_writes_gets_its_copy_back(runtime, programs):
    """add_into_input writes x += y into its unplanned input x, in place. An array that has to be copied first
    (misaligned, strided, non-native byte order) still receives the write, after the call."""
    add_into_input = runtime.load_program(programs["outputs"]).load_method("add_into_input")
    big = np.zeros((4, 6), np.float32)
    strided = big[::2, ::2]
    strided[...] = X
    swapped = X.astype(">f4")
    for name, given in (("misaligned", misaligned(X)), ("strided", strided), ("big-endian", swapped)):
        out = add_into_input([given, Y])[0]
        np.testing.assert_array_equal(out, X + Y, err_msg=name)
        np.testing.assert_array_equal(given, X + Y, err_msg=name)
    np.testing.assert_array_equal(big[1::2], 0)  # the rows between the strided ones are untouched
    np.testing.assert_array_equal(big[::2, 1::2], 0)
    aligned = X.copy()
    add_into_input([aligned, Y])
    np.testing.assert_array_equal(aligned, X + Y)  # in place, as before


# --- bfloat16 --------------------------------------------------------------------------------------------------

BITS = np.array([[0x3F80, 0x4000, 0xC040], [0x0000, 0x7F80, 0x3E80]], dtype=np.uint16)  # 1, 2, -3, 0, inf, 0.25
FLOATS = np.array([[1, 2, -3], [0, np.inf, 0.25]], np.float32)


def test_bfloat16_without_ml_dtypes(programs):
    script = r"""
import sys
sys.modules["ml_dtypes"] = None  # import ml_dtypes now raises ImportError
import numpy as np
import executorch_numpy_runtime as et
assert et.BFLOAT16_DTYPE is None and et.runtime_info()["bfloat16"] == "uint16-passthrough"
program = et.Runtime.get().load_program(sys.argv[1])
bits = np.array([[0x3F80, 0x4000, 0xC040], [0x0000, 0x7F80, 0x3E80]], dtype=np.uint16)
out = program.load_method("id_bfloat16")([bits])[0]
assert out.dtype == np.uint16 and (out == bits).all(), out
out = program.load_method("id_bfloat16")([bits[:, ::-1]])[0]  # copied, still bits
assert (out == bits[:, ::-1]).all(), out
for method, given, words in (
    ("id_bfloat16", bits.astype(np.float32), ["input 0:", "bfloat16 tensor", "dtype float32 instead of bfloat16"]),
    ("id_bfloat16", bits.view(np.float16), ["input 0:", "dtype float16 instead of bfloat16"]),
    ("id_bfloat16", bits.view(np.int16), ["input 0:", "dtype int16 instead of bfloat16"]),
    ("id_float16", bits, ["input 0:", "dtype uint16 instead of float16"]),
):
    try:
        program.load_method(method)([given])
        raise SystemExit(f"{method} accepted {given.dtype}")
    except et.InvalidInputError as e:
        assert type(e) is et.InvalidInputError and e.input_index == 0 and e.method == method, e
        for w in words:
            assert w in str(e), (w, str(e))
print("ok")
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run([sys.executable, "-c", script, str(programs["dtypes"])], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "ok"


def test_bfloat16_with_ml_dtypes(dtypes):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed: bfloat16 is uint16 bits here")
    assert et.BFLOAT16_DTYPE == np.dtype(ml_dtypes.bfloat16)
    method = dtypes.load_method("id_bfloat16")
    given = FLOATS.astype(ml_dtypes.bfloat16)
    out = method([given])[0]
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.astype(np.float32), FLOATS)
    np.testing.assert_array_equal(method([BITS])[0].astype(np.float32), FLOATS)  # raw bits are still taken
    np.testing.assert_array_equal(method([given[::-1]])[0].astype(np.float32), FLOATS[::-1])
    np.testing.assert_array_equal(method([misaligned(given)])[0].astype(np.float32), FLOATS)
    refused(lambda: method([FLOATS]), "id_bfloat16", 0, "dtype float32 instead of bfloat16")
    refused(lambda: dtypes.load_method("id_float16")([given]), "id_float16", 0, "dtype bfloat16 instead of float16")
    refused(lambda: dtypes.load_method("id_uint16")([given]), "id_uint16", 0, "dtype bfloat16 instead of uint16")


# --- Kinds of value --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("given, words", [
    (1, ["got int"]), (True, ["got bool"]), ("x", ["got str"]), (2.5, ["got float"]),
], ids=["int", "bool", "str", "float"])
def test_scalar_for_a_tensor(arith, given, words):
    refused(lambda: arith.load_method("add_mul")([X, given]), "add_mul", 1, "float32 tensor of shape [2, 3]", *words)


@pytest.mark.parametrize("index, given, words", [
    (0, np.array([3]), ["expected an Int, got Tensor"]),
    (0, np.array([[3]]), ["expected an Int, got Tensor"]),
    (1, np.array([2.5]), ["expected a Double, got Tensor"]),
    (2, np.array([True]), ["expected a Bool, got Tensor"]),
], ids=["1-d-for-int", "2-d-for-int", "1-d-for-double", "1-d-for-bool"])
def test_tensor_for_a_scalar(arith, index, given, words):
    scalars = arith.load_method("scalars")
    inputs = [3, 2.5, True]
    inputs[index] = given
    refused(lambda: scalars(inputs), "scalars", index, *words)
    # A 0-d array is a scalar (documented).
    assert scalars([np.array(3), np.array(2.5), np.array(True)]) == [3, 2.5, True]


class ArrayOnly:
    """Offers its data only through __array__, which changes on every call: not an accepted input form."""

    def __init__(self):
        self.calls = 0

    def __array__(self, dtype=None):
        self.calls += 1
        return np.full((2, 3), self.calls, np.float32)


@pytest.mark.parametrize("given, words", [
    (None, ["got NoneType"]),
    (object(), ["got object"]),
    ({"x": X}, ["got dict"]),
    ({1, 2}, ["got set"]),
    (ArrayOnly(), ["got ArrayOnly"]),
    (b"\x00" * 24, ["got uint8 array of shape (24,)", "dtype uint8 instead of float32"]),
], ids=["None", "object", "dict", "set", "__array__", "bytes"])
def test_none_and_wrong_types(arith, given, words):
    refused(lambda: arith.load_method("add_mul")([given, Y]), "add_mul", 0, "float32 tensor of shape [2, 3]", *words)
    if isinstance(given, ArrayOnly):
        assert given.calls == 0


@pytest.mark.parametrize("index, given, words", [
    (0, None, ["expected an Int, got None"]),
    (0, object(), ["expected Int, got a Python object"]),
    (1, None, ["expected a Double, got None"]),
    (1, "2.5", ["expected a Double, got String"]),
    (2, 1, ["expected a Bool, got Int"]),
    (0, True, ["expected an Int, got Bool"]),
], ids=["None-for-int", "object-for-int", "None-for-double", "str-for-double", "int-for-bool", "bool-for-int"])
def test_wrong_scalar_kinds(arith, index, given, words):
    inputs = [3, 2.5, True]
    inputs[index] = given
    refused(lambda: arith.load_method("scalars")(inputs), "scalars", index, *words)


def test_input_counts(arith, edges):
    add_mul = arith.load_method("add_mul")
    for call in (lambda: add_mul(), lambda: add_mul(None), lambda: add_mul([]), lambda: add_mul(())):
        refused(call, "add_mul", None, "expected 2 inputs, got 0")
    refused(lambda: add_mul([X, Y, Y, Y]), "add_mul", None, "expected 2 inputs, got 4")
    zero_d = edges.load_method("zero_d")
    refused(lambda: zero_d([np.float32(1), np.float32(1)]), "zero_d", None, "expected 1 input, got 2")
    refused(lambda: arith.load_method("scalars")([3, 2.5]), "scalars", None, "expected 3 inputs, got 2")


# --- Buffers that change size ----------------------------------------------------------------------------------


class ResizesOthers:
    """An input (given through DLPack) that, while the inputs are converted, tries to resize the buffers of the
    inputs converted before it, and records what happened."""

    def __init__(self, value, victims):
        self.value, self.victims, self.errors = value, victims, []

    def __dlpack__(self, stream=None):
        for victim in self.victims:
            try:
                victim.extend(victim[:4])
                self.errors.append(None)
            except BufferError as e:
                self.errors.append(e)
        return self.value.__dlpack__()

    def __dlpack_device__(self):
        return self.value.__dlpack_device__()


def test_an_input_buffer_is_locked_during_the_call(arith):
    # gather(x f32[4], idx i64[2]): x is an array.array, which nothing but the runtime holds an export of.
    gather = arith.load_method("gather")
    x = array.array("f", [10, 11, 12, 13])
    idx = ResizesOthers(np.array([3, 0]), [x])
    np.testing.assert_array_equal(gather([x, idx])[0], [13, 10])
    assert len(idx.errors) == 1 and isinstance(idx.errors[0], BufferError), idx.errors
    assert len(x) == 4
    x.append(14)  # released after the call
    assert len(x) == 5


def test_program_bytearray_stays_locked_while_another_thread_calls(runtime, programs):
    data = bytearray(programs["arith"].read_bytes())
    add_mul = runtime.load_program(data).load_method("add_mul")
    stop, outcomes = threading.Event(), []

    def resize():
        while not stop.is_set():
            try:
                data.extend(b"\0" * 64)
                outcomes.append("resized")
            except BufferError:
                outcomes.append("locked")

    thread = threading.Thread(target=resize)
    thread.start()
    try:
        for _ in range(200):
            out = add_mul([X, Y])
            np.testing.assert_array_equal(out[0], X + Y)
            np.testing.assert_array_equal(out[1], X * Y)
    finally:
        stop.set()
        thread.join()
    assert outcomes and set(outcomes) == {"locked"}


# --- .ptd files ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def linear(fixtures):
    """upstream/linear.pte, forward(f32[3, 3]), with linear.weight and linear.bias in upstream/linear.ptd."""
    return fixture_path(fixtures, "upstream/linear.pte"), fixture_path(fixtures, "upstream/linear.ptd")


LX = RNG.standard_normal((3, 3)).astype(np.float32)


def load_error(runtime, pte, data_path):
    """The ProgramLoadError of loading `pte` with `data_path` and its forward method, or None when it runs."""
    try:
        runtime.load_program(pte, data_path=data_path).load_method("forward")([LX])
    except ProgramLoadError as e:
        assert type(e) is ProgramLoadError and e.kind == "ProgramLoadError"
        return e
    return None


def test_ptd_missing(runtime, linear):
    pte, _ = linear
    program = runtime.load_program(pte)  # the program loads; its method needs the data
    with pytest.raises(ProgramLoadError) as info:
        program.load_method("forward")
    err = info.value
    assert type(err) is ProgramLoadError and err.method == "forward"
    for w in ("method 'forward'", "'linear.weight'", "no external data (.ptd) was provided"):
        assert w in str(err), (w, str(err))


def test_ptd_wrong(runtime, linear, fixtures):
    pte, ptd = linear
    other = fixture_path(fixtures, "exported/mobilenet_v2_xnnpack_fp32_ptd.ptd")
    err = load_error(runtime, pte, other)
    for w in ("method 'forward'", "'linear.weight' is not in the external data", str(other)):
        assert w in str(err), (w, str(err))
    program_file = fixture_path(fixtures, "upstream/add.pte")
    err = load_error(runtime, pte, program_file)
    assert f"external data file '{program_file}': this is a .pte program, not .ptd" in str(err), str(err)
    # The right one runs: y = x @ W.T + b.
    assert load_error(runtime, pte, ptd) is None


def test_ptd_duplicated(runtime, linear, tmp_path):
    pte, ptd = linear
    err = load_error(runtime, pte, [ptd, ptd])
    assert f"data key 'linear.weight' is defined twice: in '{ptd}' and in '{ptd}'" in str(err), str(err)
    copy = tmp_path / "copy.ptd"
    copy.write_bytes(ptd.read_bytes())
    err = load_error(runtime, pte, [ptd, copy])
    assert f"is defined twice: in '{ptd}' and in '{copy}'" in str(err), str(err)


def test_ptd_truncated_at_every_length(runtime, linear, tmp_path):
    pte, ptd = linear
    data = ptd.read_bytes()
    cut = tmp_path / "cut.ptd"
    for n in range(len(data)):
        cut.write_bytes(data[:n])
        err = load_error(runtime, pte, cut)
        assert err is not None, f"a .ptd cut to {n} of {len(data)} bytes was accepted"
        assert f"external data file '{cut}'" in str(err), (n, str(err))


def test_ptd_with_each_byte_corrupted(runtime, linear, tmp_path):
    """Each byte inverted in turn: a ProgramLoadError naming the file or the key, or a run (bytes of the weights
    only change the result: a .ptd has no checksum). Nothing else, and most cases are refused."""
    pte, ptd = linear
    data = ptd.read_bytes()
    bad = tmp_path / "bad.ptd"
    refusals = 0
    for pos in range(len(data)):
        damaged = bytearray(data)
        damaged[pos] ^= 0xFF
        bad.write_bytes(bytes(damaged))
        err = load_error(runtime, pte, bad)
        if err is not None:
            refusals += 1
            assert str(bad) in str(err) or "'linear." in str(err), (pos, str(err))
    assert refusals > len(data) // 2, refusals
