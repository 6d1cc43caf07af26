"""Method inputs: accepted forms, every dtype, memory layouts, and the validation matrix."""

import array

import numpy as np
import pytest

import executorch_numpy_runtime as et
from executorch_numpy_runtime import ExecuTorchError, InvalidInputError

from programs import DTYPES

X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.full((2, 3), 0.5, dtype=np.float32)


@pytest.fixture(scope="module")
def arith(runtime, programs):
    return runtime.load_program(programs["arith"])


@pytest.fixture(scope="module")
def layouts(runtime, programs):
    return runtime.load_program(programs["layouts"])


@pytest.fixture(scope="module")
def dtypes(runtime, programs):
    return runtime.load_program(programs["dtypes"])


# --- Accepted forms -----------------------------------------------------------------------------------------------


def test_execute_and_call_agree(arith):
    add_mul = arith.load_method("add_mul")
    a = add_mul.execute([X, Y])
    b = add_mul([X, Y])
    c = add_mul((X, Y))
    for outs in (a, b, c):
        np.testing.assert_array_equal(outs[0], X + Y)
        np.testing.assert_array_equal(outs[1], X * Y)


class DLPackOnly:
    """An object that offers its data only through the DLPack protocol."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_dlpack_and_buffer_protocol_inputs(arith):
    add_mul = arith.load_method("add_mul")
    out = add_mul([DLPackOnly(X), memoryview(Y)])
    np.testing.assert_array_equal(out[0], X + Y)
    # A buffer keeps its format and shape (array.array is 1-d, so use the 1-d gather method).
    gather = arith.load_method("gather")
    out = gather([array.array("f", [10, 11, 12, 13]), np.array([3, 0])])
    np.testing.assert_array_equal(out[0], np.array([13, 10], np.float32))


def test_single_input_may_be_given_alone(layouts):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(layouts.load_method("identity_contig")(x)[0], x)


def test_python_scalars_for_non_tensor_inputs(arith):
    scalars = arith.load_method("scalars")
    out = scalars([3, 2.5, True])
    assert out == [3, 2.5, True]
    assert type(out[0]) is int and type(out[1]) is float and type(out[2]) is bool
    # numpy scalars and an int for a Double are accepted as well.
    assert scalars([np.int64(3), np.float32(2.5), np.bool_(True)]) == [3, 2.5, True]
    assert scalars([3, 2.5, True]) == scalars([3, np.float64(2.5), True])


def test_non_tensor_input_must_match_the_exported_value(arith):
    with pytest.raises(InvalidInputError, match="input 0") as info:
        arith.load_method("scalars")([4, 2.5, True])
    assert info.value.input_index == 0
    with pytest.raises(InvalidInputError, match="input 2"):
        arith.load_method("scalars")([3, 2.5, "yes"])


def test_dynamic_shapes_within_bounds(arith):
    dynamic = arith.load_method("dynamic")
    for rows in (4, 2, 1, 3):
        x = np.random.default_rng(rows).standard_normal((rows, 3)).astype(np.float32)
        out = dynamic([x])[0]
        assert out.shape == (rows, 3)
        np.testing.assert_array_equal(out, x + x)
    with pytest.raises(InvalidInputError, match="upper bound") as info:
        dynamic([np.zeros((5, 3), np.float32)])
    assert info.value.input_index == 0


# --- dtypes -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in DTYPES if n != "bfloat16"])
def test_every_dtype_round_trips(dtypes, name):
    rng = np.random.default_rng(7)
    if name == "bool":
        x = rng.integers(0, 2, (2, 3)).astype(bool)
    elif np.dtype(name).kind == "f":
        x = rng.standard_normal((2, 3)).astype(name)
    else:
        info = np.iinfo(name)
        x = rng.integers(info.min, info.max, (2, 3), dtype=name, endpoint=True)
    out = dtypes.load_method(f"id_{name}")([x])[0]
    assert out.dtype == np.dtype(name)
    np.testing.assert_array_equal(out, x)


def test_bfloat16(dtypes):
    method = dtypes.load_method("id_bfloat16")
    bits = np.array([[0x3F80, 0x4000, 0xC040], [0x0000, 0x7F80, 0x3E80]], dtype=np.uint16)  # 1, 2, -3, 0, inf, .25
    out = method([bits])[0]
    if et.BFLOAT16_DTYPE is None:
        # Without ml_dtypes bfloat16 comes back as its raw bits.
        assert out.dtype == np.uint16
        np.testing.assert_array_equal(out, bits)
    else:
        assert out.dtype == et.BFLOAT16_DTYPE
        np.testing.assert_array_equal(out.astype(np.float32), [[1, 2, -3], [0, np.inf, 0.25]])
        np.testing.assert_array_equal(method([out])[0].view(np.uint16), bits)


def test_uint16_stays_uint16_where_the_method_wants_uint16(dtypes):
    x = np.array([[1, 2, 3], [65535, 0, 7]], dtype=np.uint16)
    out = dtypes.load_method("id_uint16")([x])[0]
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(out, x)
    # ... and uint16 is not accepted as int16 or float16.
    with pytest.raises(InvalidInputError, match="uint16"):
        dtypes.load_method("id_int16")([x])


def test_non_native_byte_order_is_converted(dtypes):
    x = np.arange(6, dtype=">f4").reshape(2, 3)
    out = dtypes.load_method("id_float32")([x])[0]
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, x.astype(np.float32))


@pytest.mark.parametrize("alias", ["byte", "ubyte", "short", "ushort", "intc", "int_", "longlong", "half", "single",
                                   "double", "bool_"])
def test_numpy_c_type_aliases_are_their_sized_types(dtypes, alias):
    # numpy has distinct dtypes for C types of one size (int64 is C long on Linux, longlong another type number
    # of the same name); each is accepted as the sized type it holds, in either byte order.
    dtype = np.dtype(getattr(np, alias))
    x = np.arange(6).reshape(2, 3).astype(dtype)
    method = dtypes.load_method(f"id_{dtype.name}")
    for given in (x, x.astype(dtype.newbyteorder())):
        out = method([given])[0]
        assert out.dtype == np.dtype(dtype.name)
        np.testing.assert_array_equal(out, x)


def test_constant_outputs_and_types_numpy_cannot_hold(dtypes):
    out = dtypes.load_method("const_int64")()
    assert out[0].dtype == np.int64 and out[0].tolist() == [1, -2]
    with pytest.raises(et.ExecutionError, match="output 0: dtype qint8 has no numpy equivalent") as info:
        dtypes.load_method("const_qint8")()
    assert info.value.method == "const_qint8"


@pytest.mark.parametrize("bad", [np.complex64, np.object_, np.str_, np.float128 if hasattr(np, "float128") else np.clongdouble])
def test_unsupported_dtype_is_named(arith, bad):
    x = np.zeros((2, 3), dtype=bad)
    with pytest.raises(InvalidInputError) as info:
        arith.load_method("add_mul")([x, Y])
    assert "unsupported dtype" in str(info.value)
    assert str(x.dtype) in str(info.value)
    assert info.value.input_index == 0


# --- Validation matrix -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "inputs, index, words",
    [
        ([X], None, ["expected 2 inputs, got 1"]),
        ([X, Y, Y], None, ["expected 2 inputs, got 3"]),
        ([X.astype(np.float64), Y], 0, ["input 0", "float32", "float64"]),
        ([X, Y.astype(np.int64)], 1, ["input 1", "float32", "int64"]),
        ([X.reshape(6), Y], 0, ["input 0", "rank 1 instead of 2", "(6,)"]),
        ([X, np.zeros((2, 4), np.float32)], 1, ["input 1", "[2, 3]", "[2, 4]"]),
        ([X, np.zeros((3, 2), np.float32)], 1, ["input 1", "[2, 3]", "[3, 2]"]),
        ([X, 1.0], 1, ["input 1", "float", "numpy array"]),
        ([X, [[1.0, 2.0, 3.0]] * 2], 1, ["input 1", "list"]),
    ],
    ids=["too-few", "too-many", "dtype-0", "dtype-1", "rank", "shape", "transposed-shape", "scalar-for-tensor", "list"],
)
def test_input_validation(arith, inputs, index, words):
    with pytest.raises(InvalidInputError) as info:
        arith.load_method("add_mul")(inputs)
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, ExecuTorchError)
    assert err.kind == "InvalidArgument"
    assert err.method == "add_mul"
    assert err.input_index == index
    for w in words:
        assert w in str(err), (w, str(err))


def test_non_contiguous_inputs_are_copied(arith):
    add_mul = arith.load_method("add_mul")
    big = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = big[::2, ::2]  # strided slice
    y = np.broadcast_to(np.float32(2), (2, 3))  # zero strides
    assert not x.flags.c_contiguous
    out = add_mul([x, y])
    np.testing.assert_array_equal(out[0], x + 2)
    np.testing.assert_array_equal(out[1], x * 2)
    rev = X[::-1, ::-1]  # negative strides
    np.testing.assert_array_equal(add_mul([rev, Y])[0], rev + Y)


def test_dense_transposed_layout_is_rejected_for_a_contiguous_method(arith):
    xt = np.asfortranarray(X)  # same shape, column-major: a layout of its own
    with pytest.raises(InvalidInputError) as info:
        arith.load_method("add_mul")([xt, Y])
    msg = str(info.value)
    assert info.value.input_index == 0
    for w in ("input 0", "memory layout", "float32", "[2, 3]", "strides (12, 4)", "strides (4, 8)"):
        assert w in msg, (w, msg)


def test_channels_last_input(layouts):
    method = layouts.load_method("identity_cl")
    logical = np.random.default_rng(3).standard_normal((1, 3, 4, 4)).astype(np.float32)
    channels_last = np.ascontiguousarray(logical.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    assert channels_last.shape == (1, 3, 4, 4) and not channels_last.flags.c_contiguous
    out = method([channels_last])[0]
    np.testing.assert_array_equal(out, logical)
    # The output keeps the method's channels-last layout.
    assert out.strides == channels_last.strides
    # A C-contiguous array is a different layout: rejected with the expected and given strides.
    with pytest.raises(InvalidInputError) as info:
        method([logical])
    msg = str(info.value)
    for w in ("input 0", "dim order [0, 2, 3, 1]", "channels-last", "strides (192, 4, 48, 12)", "strides (192, 64, 16, 4)"):
        assert w in msg, (w, msg)
    # A strided view with no layout of its own is copied into channels-last.
    wide = np.zeros((1, 3, 4, 8), np.float32)
    wide[..., ::2] = logical
    np.testing.assert_array_equal(method([wide[..., ::2]])[0], logical)


def test_strides_of_size_one_dimensions_do_not_matter(layouts):
    # Only dimensions of size > 1 decide a layout: the batch dimension (size 1) may have any stride, zero included.
    logical = np.arange(48, dtype=np.float32).reshape(1, 3, 4, 4)
    cl = np.ascontiguousarray(logical.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    odd = np.lib.stride_tricks.as_strided(cl, shape=cl.shape, strides=(0,) + cl.strides[1:])
    np.testing.assert_array_equal(layouts.load_method("identity_cl")([odd])[0], logical)


def test_misaligned_inputs_are_copied(arith, layouts):
    # A float32 view one byte into a buffer: kernels must not see a misaligned pointer.
    x = np.frombuffer(bytes(1) + X.tobytes(), dtype=np.uint8)[1:].view(np.float32).reshape(2, 3)
    assert not x.flags.aligned
    np.testing.assert_array_equal(arith.load_method("add_mul")([x, Y])[0], X + Y)
    # passthrough binds its (unplanned) input and returns it: the view shows the memory the method was given.
    data = np.arange(24, dtype=np.float32)
    y = np.frombuffer(bytes(1) + data.tobytes(), dtype=np.uint8)[1:].view(np.float32).reshape(2, 3, 4)
    out = layouts.load_method("passthrough")([y], clone_outputs=False)[0]
    assert out.flags.aligned and not np.shares_memory(out, y)
    np.testing.assert_array_equal(out, data.reshape(2, 3, 4))
    # An aligned input is bound as is, and the view keeps that input alive.
    z = data.reshape(2, 3, 4).copy()
    out = layouts.load_method("passthrough")([z], clone_outputs=False)[0]
    assert np.shares_memory(out, z) and out.base is z


def test_readonly_inputs_are_fine(arith):
    x = X.copy()
    x.setflags(write=False)
    np.testing.assert_array_equal(arith.load_method("add_mul")([x, Y])[0], X + Y)


def test_error_messages_carry_the_method_name(arith):
    with pytest.raises(InvalidInputError, match="method 'add_mul'"):
        arith.load_method("add_mul")([X])


def test_an_input_the_method_writes_is_written_into_a_writable_array_only(runtime, programs):
    """executorch.runtime: an input that is not memory-planned is used in place, so the method's write of it
    lands in the array passed in; a read-only array is copied first and stays as it was."""
    method = runtime.load_program(programs["outputs"]).load_method("add_into_input")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones((2, 3), np.float32)
    out = method([x.copy(), y])[0]
    np.testing.assert_array_equal(out, x + y)
    writable = x.copy()
    np.testing.assert_array_equal(method([writable, y])[0], x + y)
    np.testing.assert_array_equal(writable, x + y)  # written in place
    read_only = x.copy()
    read_only.setflags(write=False)
    np.testing.assert_array_equal(method([read_only, y])[0], x + y)
    np.testing.assert_array_equal(read_only, x)  # never written
    frozen = memoryview(x.tobytes()).cast("f", (2, 3))  # bytes: memory nobody may write
    np.testing.assert_array_equal(method([frozen, y])[0], x + y)
