"""Arguments of the wrong type or out of range raise the package's own short errors (issue 17): never pybind11's
"incompatible function arguments" TypeError, which prints every argument's repr (a whole .ptd), and never a
message cut at a NUL byte or holding raw control bytes."""

import collections
import os
import pathlib

import numpy as np
import pytest

from conftest import fixture_path
import executorch_numpy_runtime as et
from executorch_numpy_runtime import IndexOutOfRangeError, InvalidInputError, InvalidTypeError, Runtime

HUGE = b"\x00PTD" * (2 << 20)  # 8 MiB, NUL bytes included: what a .ptd's contents look like
MAX_MESSAGE = 400


@pytest.fixture(scope="module")
def add_program(fixtures):
    """nprt/add.pte: forward(f32[3], f32[3]) -> f32[3]."""
    return Runtime.get().load_program(fixture_path(fixtures, "nprt/add.pte"))


@pytest.fixture(scope="module")
def forward(add_program):
    return add_program.load_method("forward")


def short(err, *fragments):
    message = err.value.args[0] if type(err.value) is KeyError else str(err.value)  # KeyError's str() is a repr
    assert len(message) < MAX_MESSAGE, message[:MAX_MESSAGE]
    assert "incompatible function arguments" not in message
    for fragment in fragments:
        assert fragment in message, message
    assert message.isprintable(), repr(message)
    return message


# --- load_program ---------------------------------------------------------------------------------------------


def test_data_path_given_the_ptd_contents(fixtures):
    pte = fixture_path(fixtures, "exported/mobilenet_v2_xnnpack_fp32_ptd.pte")
    contents = fixture_path(fixtures, "exported/mobilenet_v2_xnnpack_fp32_ptd.ptd").read_bytes()
    for data_path, name in ((contents, "data_path"), ([contents], "data_path[0]")):
        with pytest.raises(InvalidTypeError) as err:  # a TypeError
            Runtime.get().load_program(pte, data_path=data_path)
        message = short(err, name, "must be a path (str or os.PathLike)", f"bytes of {len(contents)} bytes")
        assert isinstance(err.value, TypeError)
        assert message.startswith(name)


def test_load_program_argument_types(add_program, fixtures):
    pte = fixture_path(fixtures, "nprt/add.pte")
    runtime = Runtime.get()
    cases = [
        (dict(data_path=HUGE), InvalidTypeError, ["data_path", "bytes of 8388608 bytes"]),
        (dict(data_path=[str(pte), 3]), InvalidTypeError, ["data_path[1] must be a path", "got int"]),
        (dict(data_path={"a": 1}), InvalidTypeError, ["data_path must be a path", "got dict"]),
        (dict(data_path="a\x00b.ptd"), InvalidInputError, ["data_path", "contains a NUL character"]),
        (dict(verification=HUGE), InvalidTypeError, ["verification must be a Verification, got bytes"]),
        (dict(debug_buffer_size=HUGE), InvalidTypeError, ["debug_buffer_size must be an int, got bytes"]),
        (dict(backend_options=HUGE), InvalidTypeError, ["backend_options", "got bytes"]),
        (dict(backend_options={"XnnpackBackend": HUGE}), InvalidInputError, ["XnnpackBackend", "got bytes"]),
        (dict(backend_options={"XnnpackBackend": {HUGE: 1}}), InvalidInputError, ["option names are str, got bytes"]),
        (dict(backend_options={"XnnpackBackend": {"num_threads": HUGE}}), InvalidInputError,
         ["'num_threads' must be a bool, int or str, got bytes"]),
        (dict(backend_options={"XnnpackBackend": {"num_threads": 10 ** 5000}}), InvalidInputError,
         ["does not fit in int64"]),
    ]
    for kwargs, cls, fragments in cases:
        with pytest.raises(cls) as err:
            runtime.load_program(pte, **kwargs)
        short(err, *fragments)
    for data, fragments in ((12, ["data must be a path", "got int"]), ([HUGE], ["got list"]),
                            ("a\x00b.pte", ["contains a NUL character"])):
        with pytest.raises(InvalidInputError) as err:
            runtime.load_program(data)
        short(err, *fragments)


def test_paths_in_any_form_still_load(fixtures, tmp_path):
    pte = fixture_path(fixtures, "upstream/linear.pte")
    ptd = fixture_path(fixtures, "upstream/linear.ptd")
    for data_path in (str(ptd), ptd, os.fsencode(ptd), [ptd]):
        assert Runtime.get().load_program(pte, data_path=data_path).method_names  # bytes data is a program's bytes


# --- Program, Method, MethodMeta ------------------------------------------------------------------------------


def test_program_and_method_argument_types(add_program, forward, tmp_path):
    x = np.ones(3, np.float32)
    checks = [
        (lambda: add_program.load_method(HUGE), InvalidTypeError, ["method name must be a str, got bytes"]),
        (lambda: add_program.metadata(HUGE), InvalidTypeError, ["method name must be a str, got bytes"]),
        (lambda: add_program.load_method("x" * 10 ** 6), et.MethodNotFoundError, ["no method named 'xxx", "'forward'"]),
        (lambda: add_program.write_etdump_result_to_file(HUGE), InvalidTypeError,
         ["etdump_path must be a path (str or os.PathLike), got bytes"]),
        (lambda: add_program.write_etdump_result_to_file(tmp_path / "a", 5), InvalidTypeError,
         ["debug_buffer_path must be a path", "got int"]),
        (lambda: forward.execute([x, x], clone_outputs=HUGE), InvalidTypeError, ["clone_outputs must be a bool, got bytes"]),
        (lambda: forward([x, x], [HUGE]), InvalidTypeError, ["clone_outputs must be a bool, got list"]),
        (lambda: forward.execute([HUGE, x]), InvalidInputError, ["input 0", "uint8 array of shape (8388608,)"]),
        (lambda: forward.set_output(x, HUGE), InvalidTypeError, ["output index must be an int, got bytes"]),
        (lambda: forward.set_output(HUGE, 0), InvalidInputError, ["output 0"]),
        (lambda: forward.metadata.uses_backend(HUGE), InvalidTypeError, ["backend_name must be a str, got bytes"]),
        (lambda: forward.metadata[HUGE], KeyError, ["MethodMeta has no key b'\\x00PTD", "'num_inputs'"]),
        (lambda: forward.metadata["x" * 10 ** 6], KeyError, ["MethodMeta has no key 'xxx"]),
    ]
    for call, cls, fragments in checks:
        with pytest.raises(cls) as err:
            call()
        short(err, *fragments)
    with pytest.raises(InvalidTypeError) as err:
        et.ExecuTorchResult.from_host(HUGE, HUGE)
    short(err, "device_index must be an int, got bytes")
    assert forward.metadata.get(HUGE) is None and forward.metadata.get(3, "d") == "d"
    assert forward.execute(inputs=[x, x], clone_outputs=np.False_)[0].flags.writeable is False
    assert forward.execute(clone_outputs=False, inputs=(x, x))[0].flags.writeable is False
    assert forward(inputs=[x, x])[0].flags.writeable
    assert forward.execute([x, x], clone_outputs=1)[0].flags.writeable


def test_wrong_argument_counts_and_unknown_keywords(add_program, forward):
    x = np.ones(3, np.float32)
    checks = [
        (lambda: forward.execute([x, x], True, HUGE),
         "Method.execute(inputs=(), clone_outputs=True) was called with 3 positional arguments (list, bool, bytes)"),
        (lambda: forward(inputs=[x, x], clone=False),
         "Method.__call__(inputs=(), clone_outputs=True) was called with no positional argument and keyword "
         "arguments 'inputs', 'clone'"),
        (lambda: forward([x, x], inputs=[x, x]),  # given twice
         "Method.__call__(inputs=(), clone_outputs=True) was called with 1 positional argument (list) and keyword "
         "argument 'inputs'"),
        (lambda: forward.execute([x, x], False, clone_outputs=True),
         "Method.execute(inputs=(), clone_outputs=True) was called with 2 positional arguments (list, bool) and "
         "keyword argument 'clone_outputs'"),
        (lambda: type(forward).__new__(type(forward)).execute([x, x]),  # never initialized
         "the Method object is not initialized"),
        (lambda: add_program.load_method(),
         "Program.load_method(name) was called with no positional argument"),
        (lambda: add_program.load_method("forward", name="forward"),
         "Program.load_method(name) was called with 1 positional argument (str) and keyword argument 'name'"),
        (lambda: forward.metadata.input_tensor_meta(0, HUGE),
         "MethodMeta.input_tensor_meta(index) was called with 2 positional arguments (int, bytes)"),
        (lambda: forward.metadata.input_tensor_meta(0).sizes(HUGE),
         "TensorInfo.sizes() was called with 1 positional argument (bytes)"),
    ]
    for call, expected in checks:
        with pytest.raises(InvalidTypeError) as err:  # a TypeError
            call()
        assert short(err) == expected


def test_every_public_method_refuses_a_wrong_argument_count_briefly(add_program, forward):
    """A sweep: each public method of the extension's classes, called with far too many arguments."""
    instances = [add_program, forward, forward.metadata, forward.metadata.input_tensor_meta(0)]
    for instance in instances:
        cls = type(instance)
        for name, member in vars(cls).items():
            if (name.startswith("_") and name != "__call__") or isinstance(member, property) or not callable(member):
                continue
            with pytest.raises(InvalidTypeError) as err:
                getattr(instance, name)(*([HUGE] * 9))
            assert short(err).startswith(f"{cls.__name__}.{name}("), name
            assert "9 positional arguments (bytes, bytes" in str(err.value)
        doc = cls.__dict__["__call__" if "__call__" in vars(cls) else "__repr__"].__doc__ or ""
        assert "Overloaded function" not in doc, doc


def test_docstrings_keep_the_real_signature(add_program, forward):
    assert forward.execute.__doc__.startswith("execute(self") and "inputs: object = ()" in forward.execute.__doc__
    assert "Runs the method on `inputs`" in forward.execute.__doc__
    assert "Overloaded function" not in forward.execute.__doc__
    assert add_program.load_method.__doc__.startswith("load_method(self")


def test_registry_argument_types():
    registry = Runtime.get().backend_registry
    checks = [
        (lambda: registry.is_available(HUGE), InvalidTypeError, ["backend_name must be a str, got bytes"]),
        (lambda: registry.set_option(HUGE, {}), InvalidTypeError, ["backend_name must be a str, got bytes"]),
        (lambda: registry.get_option("XnnpackBackend", HUGE), InvalidInputError, ["got bytes"]),
        (lambda: registry.set_option("XnnpackBackend", [HUGE]), InvalidInputError, ["got list"]),
        (lambda: registry.set_option("XnnpackBackend", {HUGE: 1}), InvalidInputError, ["option names are str"]),
    ]
    for call, cls, fragments in checks:
        with pytest.raises(cls) as err:
            call()
        short(err, *fragments)


@pytest.mark.parametrize("accessor,what", [
    ("input_tensor_meta", "input"), ("output_tensor_meta", "output"), ("input_tag", "input"),
    ("output_tag", "output"), ("attribute_tensor_meta", "attribute"),
    ("memory_planned_buffer_size", "planned buffer"),
])
def test_index_accessors_raise_index_error_with_the_valid_range(forward, accessor, what):
    meta = forward.metadata
    count = {"input": meta.num_inputs(), "output": meta.num_outputs(), "attribute": meta.num_attributes(),
             "planned buffer": meta.num_memory_planned_buffers()}[what]
    valid = ("it has none" if count == 0 else "the only valid index is 0" if count == 1
             else f"valid indices are 0 to {count - 1}")
    for index in (-1, count, 10 ** 40):
        with pytest.raises(IndexOutOfRangeError) as err:  # an IndexError
            getattr(meta, accessor)(index)
        assert isinstance(err.value, IndexError)
        short(err, f"there is no {what} ", f"({valid})")
    with pytest.raises(InvalidTypeError) as err:
        getattr(meta, accessor)("x" * 10 ** 6)
    assert short(err) == f"{what} index must be an int, got str"
    if count:
        assert repr(getattr(meta, accessor)(np.int64(0))) == repr(getattr(meta, accessor)(0))


def test_set_output_index_out_of_range(forward):
    with pytest.raises(IndexOutOfRangeError) as err:
        forward.set_output(np.zeros(3, np.float32), -1)
    assert short(err) == "method 'forward' has 1 output, there is no output -1 (the only valid index is 0)"


# --- inputs ---------------------------------------------------------------------------------------------------


def test_inputs_that_are_not_a_sequence(forward):
    x = np.ones(3, np.float32)
    for inputs, name in (({"a": x, "b": x}, "dict"), ((v for v in (x, x)), "generator"), (iter([x, x]), "list_iterator"),
                         ({1, 2}, "set"), ({"a": x}.values(), "dict_values")):
        with pytest.raises(InvalidTypeError) as err:  # a TypeError
            forward.execute(inputs)
        assert short(err) == ("method 'forward': inputs must be a sequence (list or tuple) of 2 input values (arrays "
                              f"or Python scalars), got {name}")
        assert err.value.method == "forward"


def test_inputs_in_other_sequences(forward):
    x = np.arange(3, dtype=np.float32)
    for inputs in ([x, x], (x, x), collections.deque([x, x])):
        np.testing.assert_array_equal(forward.execute(inputs)[0], 2 * x)


def test_one_array_for_several_inputs_says_how_to_pass_them(forward):
    with pytest.raises(InvalidInputError) as err:
        forward.execute(np.ones(3, np.float32))
    assert short(err) == ("method 'forward': expected 2 inputs, got 1 (a single ndarray was given: pass a list or "
                          "tuple with one value per input)")


# --- messages -------------------------------------------------------------------------------------------------


def test_parse_etdump_of_other_bytes_is_complete_and_printable(fixtures, tmp_path):
    for data in (b"\x00" * 32, b"abcdefgh\x00\x01AB" + b"\xff" * 20):
        with pytest.raises(InvalidInputError) as err:
            et.parse_etdump(data)
        message = short(err, "invalid ETDump", "expected 'ED00'")
        assert "\\x00" in message
        assert err.value.detail == message
    path = tmp_path / "zeros.etdp"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(InvalidInputError) as err:
        et.parse_etdump(path)
    assert short(err) == "invalid ETDump: identifier at bytes 8..12 is '\\x00\\x00\\x00\\x00', expected 'ED00'"
    for data in (5, [1] * 100, None):
        with pytest.raises(InvalidTypeError) as err:
            et.parse_etdump(data)
        short(err, "parse_etdump: data must be a path", f"got {type(data).__name__}")
    with pytest.raises(InvalidInputError):
        et.parse_etdump(bytearray(b"\x00" * 32))  # bytes-like objects are still read


def test_runtime_messages_are_escaped_and_cut():
    with pytest.raises(et.ExecutionError) as err:
        et._C._raise_error_of_kind("ExecutionError", "a\x00b\x1bc\tdé\n" + "x" * 100000)
    message = str(err.value)
    assert message.startswith("a\\x00b\\x1bc\tdé\n")
    assert len(message) < 2100 and message.endswith("more bytes)")


def test_tokenizer_argument_types(tmp_path):
    import base64

    path = tmp_path / "tokenizer.model"
    path.write_text("".join("%s %d\n" % (base64.b64encode(bytes([b])).decode(), b) for b in range(256)))
    tok = et.Tokenizer(path)
    checks = [
        (lambda: et.Tokenizer(HUGE), ["path must be a path (str or os.PathLike), got bytes"]),
        (lambda: et.Tokenizer(3), ["path must be a path (str or os.PathLike), got int"]),
        (lambda: tok.decode(HUGE), ["ids must be a list of ints, got bytes"]),
        (lambda: tok.decode([1, "x" * 10 ** 6]), ["ids must be a list of ints, got str at index 1"]),
        (lambda: tok.decode([1], skip_special_tokens=HUGE), ["skip_special_tokens must be a bool, got bytes"]),
        (lambda: tok.encode("a", bos=HUGE), ["bos must be a bool, got bytes"]),
        (lambda: tok.token_to_piece(HUGE), ["id must be an int, got bytes"]),
        (lambda: tok.is_special(1.5), ["id must be an int, got float"]),
        (lambda: et.StreamDecoder(HUGE), ["tokenizer must be a Tokenizer, got bytes"]),
        (lambda: tok.stream_decoder().step(HUGE), ["id must be an int, got bytes"]),
    ]
    for call, fragments in checks:
        with pytest.raises(InvalidTypeError) as err:
            call()
        short(err, *fragments)
    assert tok.decode(np.array([97, 98])) == "ab" and tok.decode((97,)) == "a"


def test_llm_argument_types(tmp_path):
    import programs

    if programs.flatc() is None:
        pytest.skip("flatc not found (needed to write the test program)")
    path = programs.compile_program(programs.successor_lm_program(16, 32, 1, 15), tmp_path / "lm.pte")
    llm = et.LLM(path)
    checks = [
        (lambda: llm.generate([5], max_new_tokens=10 ** 30), InvalidInputError, ["max_new_tokens must be < 2**63"]),
        (lambda: llm.generate([5], seed=10 ** 5000), InvalidInputError, ["seed must be >= 0 and < 2**64, got <int of"]),
        (lambda: llm.generate([10 ** 30]), InvalidInputError, ["token id 1000000000000000000000000000000 does not fit"]),
        (lambda: llm.generate(HUGE), InvalidTypeError, ["prompt must be a str or a sequence of token ids, got bytes"]),
        (lambda: llm.generate([5], temperature=HUGE), InvalidTypeError, ["temperature must be a number, got bytes"]),
        (lambda: list(llm.stream([5], max_new_tokens=HUGE)), InvalidTypeError, ["max_new_tokens must be an int"]),
        (lambda: et.LLM(path, data_path=HUGE), InvalidTypeError, ["data_path must be a path", "bytes of 8388608"]),
        (lambda: et.LLM(path, method=HUGE), InvalidTypeError, ["method must be a str, got bytes"]),
        (lambda: et.LLM(path, tokenizer=HUGE), InvalidTypeError, ["tokenizer must be a path, a Tokenizer or None"]),
    ]
    for call, cls, fragments in checks:
        with pytest.raises(cls) as err:
            call()
        short(err, *fragments)
