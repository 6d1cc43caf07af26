"""`etnp check`: a bundled program's test cases, or a .pte run on --input and compared with --expect, one line per
output, a summary line, exit 0 when all match, 1 when one differs, 2 for a bad command line."""
import json
import subprocess

import numpy as np
import pytest

import programs as P
from cli_util import etnp_run


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    if P.flatc() is None:
        pytest.skip("flatc not found: it compiles the test programs")
    return tmp_path_factory.mktemp("cli_check")


@pytest.fixture(scope="module")
def add_pte(work):
    return P.compile_program(P.add_program(), work / "add.pte")


def bundled_tensor(array):
    array = np.ascontiguousarray(array)
    return {"val_type": "Tensor", "val": {"scalar_type": P.DTYPES[str(array.dtype)][0], "sizes": list(array.shape),
                                          "data": list(array.tobytes()), "dim_order": list(range(array.ndim))}}


def write_bundle(pte, suites, path):
    """A .bpte of `pte` with `suites`: {method: [(inputs, expected_outputs), ...]} (numpy arrays)."""
    spec = {"version": 2, "program": list(pte.read_bytes()), "method_test_suites": [
        {"method_name": method, "test_cases": [
            {"inputs": [bundled_tensor(a) for a in inputs], "expected_outputs": [bundled_tensor(a) for a in outputs]}
            for inputs, outputs in cases]}
        for method, cases in suites.items()]}
    json_path = path.with_suffix(".json")
    json_path.write_text(json.dumps(spec))
    subprocess.run([P.flatc(), "-b", "-o", str(path.parent), "-I", str(P.SCHEMA_DIR),
                    str(P.SCHEMA_DIR / "bundled_program.fbs"), str(json_path)], check=True, capture_output=True)
    produced = json_path.with_suffix(".bpte")
    if produced != path:
        produced.rename(path)
    return path


ONES = np.ones((2, 2), np.float32)


@pytest.fixture(scope="module")
def add_bpte(work, add_pte):
    near = np.full((2, 2), 2, np.float32)
    near[1, 1] = 2.0001
    return write_bundle(add_pte, {"forward": [((ONES, ONES), (ONES * 2,)), ((ONES, ONES * 3), (ONES * 4,)),
                                              ((ONES, ONES), (near,))]}, work / "add.bpte")


def test_the_upstream_bundled_program_passes(etnp, fixtures):
    out = etnp_run(etnp, "check", fixtures / "upstream" / "bundled_program.bpte")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[:10] == ["forward case %d output 0: ok (int32[2, 2], exact)" % i for i in range(10)]
    assert lines[10] == "check: 10 of 10 outputs ok (10 cases)"
    assert out.stderr == ""


def test_a_differing_case_fails_with_where_and_how_much(etnp, add_bpte):
    out = etnp_run(etnp, "check", add_bpte)
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "forward case 0 output 0: ok (float32[2, 2], exact)"
    assert lines[1] == "forward case 1 output 0: ok (float32[2, 2], exact)"
    assert lines[2].startswith("forward case 2 output 0: FAIL: 1 of 4 elements differ (float32[2, 2]): max abs diff ")
    assert " at [1, 1] (got 2, expected 2.0001), max rel diff " in lines[2]
    assert lines[2].endswith("; atol 1e-08, rtol 1e-05")
    assert lines[3] == "check: FAILED: 1 of 3 outputs differ (3 cases)"


def test_tolerances_decide(etnp, add_bpte):
    out = etnp_run(etnp, "check", add_bpte, "--atol", "1e-3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[2].startswith("forward case 2 output 0: ok (float32[2, 2], max abs diff 9.98974e-05, max rel diff 4.99462e-05)")
    assert etnp_run(etnp, "check", add_bpte, "--rtol", "1e-4").returncode == 0
    assert etnp_run(etnp, "check", add_bpte, "--rtol", "1e-6").returncode == 1


def test_bundled_method_selection(etnp, add_bpte):
    assert etnp_run(etnp, "check", add_bpte, "--method", "forward").returncode == 1
    out = etnp_run(etnp, "check", add_bpte, "--method", "other")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == ("error: InvalidArgument: '%s' has no test cases for method 'other' (it has some for: "
                          "forward)\n" % add_bpte)


def test_a_bundled_program_takes_no_input_or_expect(etnp, add_bpte, tmp_path):
    np.save(tmp_path / "x.npy", ONES)
    for flag in ("--input", "--expect"):
        out = etnp_run(etnp, "check", add_bpte, flag, tmp_path / "x.npy")
        assert out.returncode == 2
        assert out.stderr.startswith("error: InvalidArgument: '%s' is a bundled program: its test cases bring their "
                                     "inputs and expected outputs" % add_bpte)


def test_a_pte_against_expected_npy(etnp, add_pte, tmp_path):
    a, b = np.arange(4, dtype=np.float32).reshape(2, 2), np.full((2, 2), 0.5, np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    np.save(tmp_path / "good.npy", a + b)
    out = etnp_run(etnp, "check", add_pte, "--input", tmp_path / "a.npy", "--input", tmp_path / "b.npy",
                   "--expect", tmp_path / "good.npy")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout == "forward output 0: ok (float32[2, 2], exact)\ncheck: 1 of 1 outputs ok (1 case)\n"

    bad = a + b
    bad[0, 1] += 0.25
    np.save(tmp_path / "bad.npy", bad)
    out = etnp_run(etnp, "check", add_pte, "--input", tmp_path / "a.npy", "--input", tmp_path / "b.npy",
                   "--expect", tmp_path / "bad.npy")
    assert out.returncode == 1
    assert out.stdout.splitlines()[0] == ("forward output 0: FAIL: 1 of 4 elements differ (float32[2, 2]): max abs "
                                          "diff 0.25 at [0, 1] (got 1.5, expected 1.75), max rel diff 0.142857 at "
                                          "[0, 1]; atol 1e-08, rtol 1e-05")
    assert out.stdout.splitlines()[1] == "check: FAILED: 1 of 1 outputs differ (1 case)"


def test_inputs_and_expectations_from_npz(etnp, add_pte, tmp_path):
    a, b = np.ones((2, 2), np.float32), np.full((2, 2), 2, np.float32)
    np.savez(tmp_path / "inputs.npz", a, b)
    np.savez(tmp_path / "expected.npz", a + b)
    out = etnp_run(etnp, "check", add_pte, "--input", tmp_path / "inputs.npz", "--expect", tmp_path / "expected.npz")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("expected, message", [
    (np.ones((2, 2), np.float64), "FAIL: dtype float32, expected float64"),
    (np.ones((4,), np.float32), "FAIL: shape [2, 2], expected [4]"),
])
def test_dtype_and_shape_must_match(etnp, add_pte, tmp_path, expected, message):
    np.save(tmp_path / "x.npy", ONES)
    np.save(tmp_path / "e.npy", expected)
    out = etnp_run(etnp, "check", add_pte, "--input", tmp_path / "x.npy", "--input", tmp_path / "x.npy",
                   "--expect", tmp_path / "e.npy")
    assert out.returncode == 1
    assert out.stdout.splitlines()[0] == "forward output 0: " + message


def test_bad_command_lines(etnp, add_pte, tmp_path):
    np.save(tmp_path / "x.npy", ONES)
    cases = [
        ([add_pte, "--input", tmp_path / "x.npy"], "check of a .pte needs --expect OUT.npy (one per output, in order)"),
        ([add_pte, "--expect", tmp_path / "x.npy", "--expect", tmp_path / "x.npy"],
         "method 'forward' returns 1 outputs, --expect gives 2"),
        ([add_pte, "--expect", tmp_path / "x.npy", "--atol", "-1"], "--atol must be in [0, inf], got -1"),
        ([add_pte, "--expect", tmp_path / "x.npy", "--rtol", "x"], "--rtol takes a number, got 'x'"),
        ([], "check takes one .pte or .bpte file"),
    ]
    for args, message in cases:
        out = etnp_run(etnp, "check", *args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert out.stderr == "error: InvalidArgument: " + message + "\n", out.stderr


def test_a_run_error_is_a_failed_case(etnp, work, tmp_path):
    arith = P.compile_program(P.arith_program(), work / "arith.pte")
    np.save(tmp_path / "x.npy", np.ones(4, np.float32))
    np.save(tmp_path / "idx.npy", np.array([0, 9], np.int64))
    np.save(tmp_path / "e.npy", np.ones(2, np.float32))
    out = etnp_run(etnp, "check", arith, "--method", "gather", "--input", tmp_path / "x.npy", "--input",
                   tmp_path / "idx.npy", "--expect", tmp_path / "e.npy")
    assert out.returncode == 1
    assert out.stdout.splitlines()[0].startswith("gather: FAIL: ExecutionError: ")
    assert out.stdout.splitlines()[1] == "check: FAILED: 1 of 1 outputs differ (1 case)"
