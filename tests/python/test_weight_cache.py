"""XnnpackBackend's weight_cache_enabled, set the way executorch.runtime documents it, shares packed weights:
measured by the bytes the process-wide cache holds (runtime_info()["packed_weight_cache"]), not by the flag."""

import gc

import numpy as np
import pytest

import executorch_numpy_runtime as et

MODEL = "exported/mobilenet_v2_xnnpack_fp32.pte"  # XNNPACK-delegated, its GEMMs and convolutions packed by etnp


def cache():
    return et.runtime_info()["packed_weight_cache"]


@pytest.fixture
def weight_cache_option(runtime):
    registry = runtime.backend_registry
    before = registry.get_option("XnnpackBackend", {"weight_cache_enabled": False})
    yield registry
    registry.set_option("XnnpackBackend", before)


def test_weight_cache_shares_packed_weights_between_programs(runtime, fixtures, weight_cache_option):
    path = fixtures / MODEL
    assert weight_cache_option.get_option("XnnpackBackend", {"weight_cache_enabled": False}) == {
        "weight_cache_enabled": True}  # on by default
    empty = cache()
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    weight_cache_option.set_option("XnnpackBackend", {"weight_cache_enabled": False})
    alone = runtime.load_program(path).load_method("forward")([x])[0]
    assert cache() == empty  # off: nothing is shared
    switched_on_at_load = runtime.load_program(path, backend_options={"XnnpackBackend": {"weight_cache_enabled": True}})
    switched_on_at_load.load_method("forward")
    assert cache()["bytes"] - empty["bytes"] > 8 << 20  # the load option wins over the global one
    del switched_on_at_load
    gc.collect()
    assert cache() == empty

    weight_cache_option.set_option("XnnpackBackend", {"weight_cache_enabled": True})
    first = runtime.load_program(path)
    first_out = first.load_method("forward")([x])[0]
    one_copy = cache()
    assert one_copy["bytes"] - empty["bytes"] > 8 << 20 and one_copy["entries"] > empty["entries"]
    second = runtime.load_program(path)
    second_out = second.load_method("forward")([x])[0]
    assert cache() == one_copy  # the second program's packed weights are the first's
    np.testing.assert_array_equal(first_out, alone)  # the same bits as without the cache
    np.testing.assert_array_equal(second_out, alone)

    del first
    gc.collect()
    assert cache() == one_copy  # still used by the second program
    del second
    gc.collect()
    assert cache() == empty  # gone with the last user


def test_weight_cache_option_is_checked(weight_cache_option):
    with pytest.raises(et.InvalidInputError, match="weight_cache_enabled"):
        weight_cache_option.set_option("XnnpackBackend", {"weight_cache_enabled": 1})
    with pytest.raises(et.InvalidInputError, match="'weight_cache_enabled' is bool, not int"):
        weight_cache_option.get_option("XnnpackBackend", {"weight_cache_enabled": 0})
