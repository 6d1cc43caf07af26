"""The Python exception classes follow the C++ list of error kinds (ETNP_ERROR_KINDS in etnp/error.h)."""

import pytest

import executorch_numpy_runtime as et
from executorch_numpy_runtime import _C
from executorch_numpy_runtime.errors import ERROR_CLASSES, ExecuTorchError


def test_every_error_kind_has_a_class_and_no_class_lacks_a_kind():
    kinds = _C._error_kinds()
    assert len(kinds) == len(set(kinds)) and "InvalidArgument" in kinds
    assert set(ERROR_CLASSES) == set(kinds) | set(_C._binding_error_keys())
    assert set(_C._binding_error_keys()) == {"MethodNotFound", "IndexOutOfRange", "InvalidType"}


@pytest.mark.parametrize("kind", _C._error_kinds())
def test_each_error_kind_raises_its_class(kind):
    with pytest.raises(ExecuTorchError) as info:
        _C._raise_error_of_kind(kind, "detail of the " + kind)
    err = info.value
    assert type(err) is ERROR_CLASSES[kind]
    assert err.kind == kind and err.detail == "detail of the " + kind and str(err) == "detail of the " + kind


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="no error kind 'NoSuchKind'"):
        _C._raise_error_of_kind("NoSuchKind", "x")


def test_a_table_missing_a_kind_is_rejected():
    partial = {k: v for k, v in ERROR_CLASSES.items() if k != "ExecutionError"}
    try:
        with pytest.raises(KeyError, match="ExecutionError"):
            _C._set_error_classes(partial)
    finally:
        _C._set_error_classes(ERROR_CLASSES)
    with pytest.raises(et.ExecutionError):  # the full table is back in place
        _C._raise_error_of_kind("ExecutionError", "again")
