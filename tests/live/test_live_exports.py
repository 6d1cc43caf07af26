"""Every program of the live-export zoo (tests/live/zoo.py), run by etnp on the inputs the official runtime ran,
against the official runtime's outputs.

Tolerances come from the data, as ../shared/fixtures/README.md derives them for its exports: float outputs of a
float program `atol = 1e-5 * max|golden|` (at least 1e-6) and `rtol = 1e-4` (any two runtimes sum convolutions
and matrix products in different orders); quantized programs `atol = 1e-2 * max|golden|`, about one step of an
8-bit output (a clean-room requantization may round a step differently), and three steps for the quantized
language models, whose int8 steps compound over their layers (see tolerance()); integers and booleans exactly.
Where the official runtime fails on a program, etnp must either give the PyTorch eager result (within the same
tolerance, three times looser for quantized forms, whose eager reference only emulates the quantization) or
raise one of its precise errors.
"""
import pathlib
import warnings

import numpy as np

QUANTIZED_LLM_FORMS = ("llm_8da4w_g32", "llm_8da4w_g128", "llm_8da4w_qkv", "optimum_8da4w")
QUANTIZED_FORMS = ("xnnpack_int8", "xnnpack_qd8", "xnnpack_8da4w") + QUANTIZED_LLM_FORMS


def tolerance(form, goldens):
    scale = max((float(np.max(np.abs(g))) for g in goldens if g.dtype.kind == "f" and g.size), default=0.0)
    if form in QUANTIZED_LLM_FORMS:
        # Each of a decoder's linears quantizes its input on the fly (qd8), so a last-bit difference in a float
        # op before one (a norm, an activation, the attention's sum order) can move an activation by a whole
        # int8 step, which the layers after carry to the logits. Measured: most calls bit for bit equal, the
        # others up to 2.3% of max|logits| (Gemma-style 8da4w), each call on its own (the cache carries none).
        return 3e-2 * scale, 0.0
    if form in QUANTIZED_FORMS:
        return 1e-2 * scale, 0.0
    return max(1e-6, 1e-5 * scale), 1e-4


def assert_close(actual, expected, atol, rtol, where):
    assert len(actual) == len(expected), "%s: %d outputs, expected %d" % (where, len(actual), len(expected))
    for i, (a, e) in enumerate(zip(actual, expected)):
        a = np.asarray(a)
        assert a.dtype == e.dtype, "%s, output %d: dtype %s, expected %s" % (where, i, a.dtype, e.dtype)
        assert a.shape == e.shape, "%s, output %d: shape %s, expected %s" % (where, i, a.shape, e.shape)
        if e.dtype.kind in "biu":
            np.testing.assert_array_equal(a, e, err_msg="%s, output %d" % (where, i))
        else:
            np.testing.assert_allclose(a, e, atol=atol, rtol=rtol, equal_nan=True,
                                       err_msg="%s, output %d" % (where, i))


def load_arrays(folder, names):
    return [np.load(folder / n, allow_pickle=False) for n in names]


def calls_of(record, case):
    """The calls of a case as (folder, input names, output prefix count): one for a plain case, several in
    order for a stateful one."""
    folder = pathlib.Path(record["dir"]) / case["dir"]
    if "calls" in case:
        return [(folder / c["dir"], c["inputs"], output_count(c)) for c in case["calls"]]
    return [(folder, case["inputs"], output_count(case))]


def output_count(call):
    """Outputs of a call: as many as its eager reference has, or as it states (the LLM exports have none)."""
    return call["outputs"] if "outputs" in call else len(call["torch"])


def reference(folder, count, official_ok):
    if not official_ok and not (folder / "torch_0.npy").is_file():
        raise AssertionError("%s: the official runtime failed and this export has no eager reference" % folder)
    prefix = "official" if official_ok else "torch"
    return load_arrays(folder, ["%s_%d.npy" % (prefix, i) for i in range(count)])


def test_live_export_matches_official_runtime(live, runtime):
    from executorch_numpy_runtime import ExecuTorchError

    assert "export_error" not in live, "the official exporter failed on this zoo entry: %s\n%s" % (
        live.get("export_error"), "\n".join(live.get("traceback", [])))
    folder = pathlib.Path(live["dir"])
    official = live["official"]
    official_ok = official["status"] == "ok"
    data = [str(folder / name) for name in live["data_files"]] or None

    def load():
        return runtime.load_program(str(folder / live["file"]), data_path=data)

    try:
        shared = load()
        for case in live["cases"]:
            # A stateful case (mutable buffers) starts from a freshly loaded program; the others share one.
            method = (load() if "calls" in case else shared).load_method(case["method"])
            for k, (call_dir, inputs, count) in enumerate(calls_of(live, case)):
                expected = reference(call_dir, count, official_ok)
                floats = [e for e in expected if e.dtype.kind == "f" and e.size > 1]
                assert not floats or any(np.ptp(e) > 0 for e in floats), (
                    "%s: every float output of the reference is constant: the zoo entry checks nothing" % case["dir"])
                atol, rtol = tolerance(live["form"], expected)
                if not official_ok and live["form"] in QUANTIZED_FORMS:
                    atol *= 3
                actual = method.execute(load_arrays(call_dir, inputs))
                assert_close(actual, expected, atol, rtol, "%s, call %d" % (case["dir"], k))
    except ExecuTorchError as e:
        if official_ok:
            raise
        # Both refuse the program: etnp's refusal must say what is wrong.
        assert str(e).strip(), "etnp raised %s without a message" % type(e).__name__
        warnings.warn("%s-%s: official runtime %s (%s); etnp: %s: %s" % (
            live["model"], live["form"], official["status"], official.get("detail"), type(e).__name__, e))
        return
    if not official_ok:
        warnings.warn("%s-%s: official runtime %s (%s); etnp matches PyTorch eager" % (
            live["model"], live["form"], official["status"], official.get("detail")))
