"""etnp and the official runtime in one process: the dev venv's Python, with torch and executorch imported and
executorch_numpy_runtime built for that interpreter (scripts/build-python.sh) against its numpy 2.

What this adds to test_live_exports.py, which compares with outputs the official runtime recorded in a child
process: both runtimes loaded side by side (their XNNPACK builds and thread pools must not interfere), the
official outputs computed here and now, and the package working with the venv's numpy and Python. Runs only
under a Python that has torch and executorch (test.sh runs it in the venv); skipped elsewhere.
"""
import os
import pathlib

import numpy as np
import pytest

from test_live_exports import QUANTIZED_FORMS, assert_close, calls_of, load_arrays, tolerance

torch = pytest.importorskip("torch", reason="needs the dev venv's Python (torch and executorch)")
official_runtime = pytest.importorskip("executorch.runtime", reason="needs the official executorch package")
# The operator libraries of the LLM exports (custom SDPA, KV-cache updates, quantized embeddings).
pytest.importorskip("executorch.extension.llm.custom_ops.custom_ops")
pytest.importorskip("executorch.kernels.quantized")


def test_numpy_2_and_torch_loaded_alongside():
    import executorch_numpy_runtime as et

    assert int(np.__version__.split(".")[0]) >= 2, np.__version__
    assert "torch" in __import__("sys").modules
    info = et.runtime_info()
    assert "XnnpackBackend" in str(info)


def test_same_inputs_same_outputs_in_one_process(live, runtime):
    if "export_error" in live or live["official"]["status"] != "ok" or live["file"].endswith(".bpte"):
        pytest.skip("compared in one process only where the official runtime runs the .pte (test_live_exports "
                    "covers the rest)")
    folder = pathlib.Path(live["dir"])
    data = [str(folder / name) for name in live["data_files"]]
    theirs_program = official_runtime.Runtime.get().load_program(folder / live["file"],
                                                                 data_path=data[0] if data else None)
    ours_program = runtime.load_program(str(folder / live["file"]), data_path=data or None)
    for case in live["cases"]:
        stateful = "calls" in case
        if stateful:  # fresh programs: the KV cache lives in the program's mutable buffers
            theirs_program = official_runtime.Runtime.get().load_program(folder / live["file"])
            ours_program = runtime.load_program(str(folder / live["file"]))
        theirs = theirs_program.load_method(case["method"])
        ours = ours_program.load_method(case["method"])
        for k, (call_dir, names, _) in enumerate(calls_of(live, case)):
            inputs = load_arrays(call_dir, names)
            expected = [np.asarray(t.numpy() if hasattr(t, "numpy") else t)
                        for t in theirs.execute([torch.from_numpy(x) for x in inputs])]
            actual = ours.execute(inputs)
            atol, rtol = tolerance(live["form"], expected)
            assert_close(actual, expected, atol, rtol, "%s, call %d (in-process official)" % (case["dir"], k))
        if live["form"] not in QUANTIZED_FORMS and not stateful:
            # What the child recorded is what this process computes: the official runtime is repeatable.
            recorded = load_arrays(folder / case["dir"], ["official_%d.npy" % i for i in range(len(expected))])
            for got, want in zip(expected, recorded):
                np.testing.assert_array_equal(got, want)


def _tensor_meta(info):
    return tuple(info.sizes()), int(info.dtype()), bool(info.is_memory_planned()), int(info.nbytes())


def test_method_metadata_equals_the_official(live, runtime):
    """Program.metadata(name) without loading, as executorch.runtime's MethodMeta reports it: counts, and the
    TensorInfo of every tensor input, output and attribute (named tensor)."""
    if "export_error" in live or live["official"]["status"] != "ok" or live["file"].endswith(".bpte"):
        pytest.skip("compared where the official runtime loads the .pte")
    folder = pathlib.Path(live["dir"])
    data = [str(folder / name) for name in live["data_files"]]
    theirs_program = official_runtime.Runtime.get().load_program(folder / live["file"],
                                                                 data_path=data[0] if data else None)
    ours_program = runtime.load_program(str(folder / live["file"]), data_path=data or None)
    assert ours_program.method_names == theirs_program.method_names
    for name in sorted(theirs_program.method_names):
        theirs, ours = theirs_program.metadata(name), ours_program.metadata(name)
        assert ours.name() == theirs.name() == name
        assert (ours.num_inputs(), ours.num_outputs(), ours.num_attributes()) == \
            (theirs.num_inputs(), theirs.num_outputs(), theirs.num_attributes()), name
        for i in range(theirs.num_attributes()):
            assert _tensor_meta(ours.attribute_tensor_meta(i)) == _tensor_meta(theirs.attribute_tensor_meta(i)), (name, i)
        for count, ours_meta, theirs_meta, tag in (
                (theirs.num_inputs(), ours.input_tensor_meta, theirs.input_tensor_meta, ours.input_tag),
                (theirs.num_outputs(), ours.output_tensor_meta, theirs.output_tensor_meta, ours.output_tag)):
            for i in range(count):
                if tag(i) == "Tensor":
                    assert _tensor_meta(ours_meta(i)) == _tensor_meta(theirs_meta(i)), (name, i)


ETDUMP_PROGRAMS = ("mlp", "smallcnn_two_methods")


def _instruction_calls(blocks):
    """{(event name, instruction id)} of the OPERATOR_CALL and DELEGATE_CALL events of the Execute run blocks.
    (The events inside a delegate call are not compared: the official XNNPACK delegate names them by XNNPACK
    operator, "Fully Connected (NC, F32) GEMM #1", in delegate_debug_id_str; etnp's by node kind with the node's
    debug handle in delegate_debug_id_int.)"""
    return {(e["name"], e["instruction_id"]) for b in blocks if b["name"] == "Execute" for e in b["profile_events"]
            if e["name"] in ("OPERATOR_CALL", "DELEGATE_CALL")}


@pytest.mark.parametrize("form", ["portable", "xnnpack"])
@pytest.mark.parametrize("model", ETDUMP_PROGRAMS)
def test_etdump_read_both_ways(model, form, runtime, tmp_path):
    """ETDump on: etnp's ETDump parses with the official devtools' reader, the official runtime's parses with
    etnp's parse_etdump, and both record calls of the same kernel and delegate instructions."""
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc
    from executorch_numpy_runtime import parse_etdump

    from live_env import live_records

    record = next((r for r in live_records() if r["model"] == model and r["form"] == form), None)
    if record is None or "export_error" in record or record["official"]["status"] != "ok":
        pytest.skip("no runnable %s-%s export" % (model, form))
    folder = pathlib.Path(record["dir"])
    case = next(c for c in record["cases"] if c["method"] == "forward")
    inputs = load_arrays(folder / case["dir"], case["inputs"])

    ours = runtime.load_program(str(folder / record["file"]), enable_etdump=True)
    ours.load_method("forward").execute(inputs)
    ours.write_etdump_result_to_file(str(tmp_path / "etnp.etdp"))
    theirs = official_runtime.Runtime.get().load_program(folder / record["file"], enable_etdump=True)
    theirs.load_method("forward").execute([torch.from_numpy(x) for x in inputs])
    theirs.write_etdump_result_to_file(str(tmp_path / "official.etdp"), str(tmp_path / "official_debug.bin"))

    decoded = deserialize_from_etdump_flatcc((tmp_path / "etnp.etdp").read_bytes())
    assert decoded.run_data, "the official reader found no run data in etnp's ETDump"
    official_names = {e.profile_event.name for run in decoded.run_data for e in run.events
                      if e.profile_event is not None}
    assert "Method::execute" in official_names, sorted(official_names)

    ours_blocks = parse_etdump(tmp_path / "etnp.etdp")
    theirs_blocks = parse_etdump(tmp_path / "official.etdp")
    def load_events(blocks):
        return [e["name"] for b in blocks if b["name"] == "Default" for e in b["profile_events"]]

    assert load_events(ours_blocks) == load_events(theirs_blocks) == ["Method::init", "Program::load_method"]
    assert _instruction_calls(theirs_blocks), "the official ETDump recorded no kernel or delegate call"
    assert _instruction_calls(ours_blocks) == _instruction_calls(theirs_blocks)


# Delegate graphs with operators that Debian's XNNPACK runs and whose NaN handling is older than the official
# runtime's XNNPACK: there a NaN can leave no NaN in the outputs. Which ones depends on the library the build
# uses (`etnp version` names it): the 2022 release's max pooling and softmax, the 2024 release's transposed
# convolution (on the 2022 one it runs on the delegate's own GEMM). Strict: a fix makes the test pass, and then
# this list must shrink. (For the default engine choice: ETNP_XNNPACK_ENGINE=own runs the delegate's own softmax,
# and the small CNNs then keep NaN.)
NAN_KNOWN_DIFFERENT = {
    "create/setup": {
        ("resnet18", "xnnpack"): "max pooling or add",
        ("smallcnn_dynbatch", "xnnpack"): "max pooling, softmax",
        ("smallcnn_two_methods", "xnnpack"): "max pooling, softmax",
    },
    "create/reshape/setup": {
        ("upsampler", "xnnpack"): "transposed convolution",
    },
}


def xnnpack_api():
    from executorch_numpy_runtime import _C

    library = _C._backend_library("XnnpackBackend")
    api = next((api for api in ("create/reshape/setup", "create/setup") if api in library), None)
    assert api is not None, "XnnpackBackend names no XNNPACK operator API: %r" % library
    return api


def test_nan_input_gives_nan_where_the_official_does(live, runtime, request):
    """One NaN in the first float input: the outputs are NaN exactly where the official runtime's are (fused
    clamps, relu6 and the GEMM and depthwise kernels keep NaN, as XNNPACK and aten do), and equal elsewhere."""
    known = NAN_KNOWN_DIFFERENT[xnnpack_api()].get((live["model"], live["form"]))
    if known and os.environ.get("ETNP_XNNPACK_ENGINE", "measured") == "measured":  # the default engine choice
        request.applymarker(pytest.mark.xfail(strict=True, reason="Debian XNNPACK's NaN handling: " + known))
    if ("export_error" in live or live["official"]["status"] != "ok" or live["file"].endswith(".bpte")
            or live["form"] in QUANTIZED_FORMS):
        pytest.skip("float programs the official runtime runs (a quantized form maps NaN to a zero point)")
    case = live["cases"][0]
    if "calls" in case:
        pytest.skip("stateful programs: covered by the recorded calls")
    folder = pathlib.Path(live["dir"])
    data = [str(folder / name) for name in live["data_files"]]
    (call_dir, names, _), = calls_of(live, case)[:1]
    inputs = [x.copy() for x in load_arrays(call_dir, names)]
    floats = [x for x in inputs if x.dtype == np.float32 and x.size > 0]
    if not floats:
        pytest.skip("no float input")
    floats[0].flat[0] = np.nan
    theirs = official_runtime.Runtime.get().load_program(folder / live["file"], data_path=data[0] if data else None)
    ours = runtime.load_program(str(folder / live["file"]), data_path=data or None)
    expected = [np.asarray(t.numpy() if hasattr(t, "numpy") else t)
                for t in theirs.load_method(case["method"]).execute([torch.from_numpy(x) for x in inputs])]
    actual = ours.load_method(case["method"]).execute(inputs)
    for i, (got, want) in enumerate(zip(actual, expected)):
        if want.dtype.kind != "f":
            continue
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want),
                                      err_msg="%s output %d: NaN where" % (case["dir"], i))
        atol, rtol = tolerance(live["form"], [want])
        finite = ~np.isnan(want)
        assert_close([got[finite]], [want[finite]], atol, rtol, "%s output %d, outside the NaN" % (case["dir"], i))
