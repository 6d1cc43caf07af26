"""ExecuTorchResult, the tensor outputs of executorch.runtime without PyTorch (seed 000): what the package returns
when imported with EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT=executorch (test_seed_examples.py checks the switch; here
the extension's switch is flipped in-process)."""

import numpy as np
import pytest

import executorch_numpy_runtime as et
from executorch_numpy_runtime import _C

X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.full((2, 3), 0.5, dtype=np.float32)


@pytest.fixture(autouse=True)
def result_outputs():
    _C._set_result_outputs(True)
    yield
    _C._set_result_outputs(False)


@pytest.fixture
def add_mul(runtime, programs):
    return runtime.load_program(programs["arith"]).load_method("add_mul")


def test_result_describes_its_tensor(add_mul):
    out = add_mul.execute([X, Y])[0]
    assert isinstance(out, et.ExecuTorchResult)
    assert out.shape == (2, 3) and out.strides == (12, 4) and out.nbytes == 24
    assert out.dtype == "float32" and out.device == "cpu"
    assert repr(out) == "ExecuTorchResult(shape=(2, 3), dtype=float32, device=cpu)"


def test_buffer_protocol_is_a_view(add_mul):
    out = add_mul.execute([X, Y])[0]
    a, b = np.asarray(out), np.asarray(out)
    assert np.shares_memory(a, b)  # both views of the result's memory, no copy
    np.testing.assert_array_equal(a, X + Y)
    view = memoryview(out)
    assert view.shape == (2, 3) and view.format == "f" and not view.readonly


def test_results_of_clone_outputs_false_are_read_only_views(add_mul):
    out = add_mul.execute([X, Y], clone_outputs=False)[0]
    assert memoryview(out).readonly
    with pytest.raises(ValueError):
        np.asarray(out)[0, 0] = 1.0
    add_mul.execute([X, 2 * Y])
    np.testing.assert_array_equal(np.asarray(out), X + 2 * Y)  # the method's memory, overwritten by the next call
    kept = out.to_host()
    add_mul.execute([X, 3 * Y])
    np.testing.assert_array_equal(np.asarray(kept), X + 2 * Y)  # to_host copied it
    assert not memoryview(kept).readonly


def test_dlpack_export(add_mul):
    out = add_mul.execute([X, Y])[0]
    assert out.__dlpack_device__() == (1, 0)  # kDLCPU, device 0
    imported = np.from_dlpack(out)
    assert np.shares_memory(imported, np.asarray(out))
    np.testing.assert_array_equal(imported, X + Y)
    view = add_mul.execute([X, Y], clone_outputs=False)[0]
    np.testing.assert_array_equal(np.from_dlpack(view), X + Y)  # DLPack exports the method's memory too


def test_results_are_inputs(add_mul):
    s, p = add_mul.execute([X, Y])
    again = add_mul.execute([s, p])[0]
    np.testing.assert_array_equal(np.asarray(again), (X + Y) + (X * Y))


def test_from_host_is_refused_without_cuda():
    with pytest.raises(et.BackendNotAvailable, match="CUDA"):
        et.ExecuTorchResult.from_host(np.ones(3, np.float32))


def test_bfloat16_results_read_as_bits_through_the_buffer(runtime, programs):
    method = runtime.load_program(programs["dtypes"]).load_method("id_bfloat16")
    bits = np.array([[0x3F80, 0x4000, 0xC040], [0, 0x8000, 0x7F80]], np.uint16)  # 1, 2, -3, 0, -0, inf
    given = bits.view(et.BFLOAT16_DTYPE) if et.BFLOAT16_DTYPE is not None else bits
    out = method.execute([given])[0]
    assert out.dtype == "bfloat16" and out.nbytes == 12
    read = np.asarray(out)
    assert read.dtype == np.uint16  # the buffer protocol has no bfloat16: numpy reads the raw bits
    np.testing.assert_array_equal(read, bits)
    if et.BFLOAT16_DTYPE is not None:  # ml_dtypes installed: the bits view as real bfloat16
        np.testing.assert_array_equal(np.asarray(out).view(et.BFLOAT16_DTYPE).astype(np.float32),
                                      bits.view(et.BFLOAT16_DTYPE).astype(np.float32))


def test_non_tensor_outputs_stay_python_values(runtime, programs):
    scalars = runtime.load_program(programs["arith"]).load_method("scalars")
    assert scalars.execute([3, 2.5, True]) == [3, 2.5, True]
