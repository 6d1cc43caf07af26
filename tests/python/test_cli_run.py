"""`etnp run` and `etnp bench` inputs and outputs: every output written as a .npy numpy reads without pickle
(strings as 0-d unicode arrays), --output-dir made with its parents, --shape and --fill on both commands,
integer inputs that index a table filled inside it, and the messages for a mistaken input or file."""

import numpy as np
import pytest

import programs as P
from cli_util import etnp_run, error_line


@pytest.fixture(scope="module")
def pte_dir(tmp_path_factory):
    if P.flatc() is None:
        pytest.skip("flatc not found: it compiles the test programs")
    return tmp_path_factory.mktemp("cli_run")


def string_value(s):
    return {"val_type": "String", "val": {"string_val": s}}


@pytest.fixture(scope="module")
def values_pte(pte_dir):
    """text() -> a String; none() -> None; scalars(): Int, Double, Bool constants."""
    return P.compile_program(P.program([
        P.plan("text", [string_value("h\u00e9llo \u2713")], [], [0]),
        P.plan("empty_text", [string_value("")], [], [0]),
        P.plan("none", [{"val_type": "Null", "val": {}}], [], [0]),
        P.plan("scalars", [P.int_value(7), P.double_value(2.5), P.bool_value(True)], [], [0, 1, 2]),
    ]), pte_dir / "values.pte")


@pytest.fixture(scope="module")
def index_pte(pte_dir):
    """gather(x f32[4], idx i64[2]) = x[idx]; gather_view(x, idx i64[2, 1]): idx viewed as [2] first;
    gather_shifted(x, idx i64[2]) = x[idx + idx], an index computed from the input; add_ints(a i64[3]) = a + a."""
    gather = P.plan("gather", [P.tensor("float32", [4], offset=0), P.int_value(0), P.tensor("int64", [2], offset=16),
                               P.tensor("float32", [2], offset=32)],
                    [0, 2], [3], [P.kernel(0, [0, 1, 2, 3, 3])], ["aten::index_select.out"], arena_bytes=48)
    view = P.plan("gather_view",
                  [P.tensor("float32", [4], offset=0), P.int_value(0), P.tensor("int64", [2, 1], offset=16),
                   P.tensor("float32", [2], offset=32), {"val_type": "IntList", "val": {"items": [6]}},
                   P.tensor("int64", [2], offset=48), P.int_value(2)],
                  [0, 2], [3], [P.kernel(0, [2, 4, 5, 5]), P.kernel(1, [0, 1, 5, 3, 3])],
                  ["aten::view_copy.out", "aten::index_select.out"], arena_bytes=64)
    shifted = P.plan("gather_shifted",
                     [P.tensor("float32", [4], offset=0), P.int_value(0), P.tensor("int64", [2], offset=16),
                      P.tensor("float32", [2], offset=32), P.int_value(1), P.tensor("int64", [2], offset=48)],
                     [0, 2], [3], [P.kernel(0, [2, 2, 4, 5, 5]), P.kernel(1, [0, 1, 5, 3, 3])],
                     ["aten::add.out", "aten::index_select.out"], arena_bytes=64)
    add_ints = P.plan("add_ints", [P.tensor("int64", [3], offset=0), P.int_value(1), P.tensor("int64", [3], offset=32)],
                      [0], [2], [P.kernel(0, [0, 0, 1, 2, 2])], ["aten::add.out"], arena_bytes=64)
    return P.compile_program(P.program([gather, view, shifted, add_ints]), pte_dir / "index.pte")


@pytest.fixture(scope="module")
def arith_pte(pte_dir):
    return P.compile_program(P.arith_program(), pte_dir / "arith.pte")


@pytest.fixture(scope="module")
def add_pte(pte_dir):
    return P.compile_program(P.add_program(), pte_dir / "add.pte")


# --- outputs ---------------------------------------------------------------------------------------------------


def test_a_string_output_is_a_unicode_npy(etnp, values_pte, tmp_path):
    for method, text in (("text", "h\u00e9llo \u2713"), ("empty_text", "")):
        out = etnp_run(etnp, "run", values_pte, "--method", method, "--output-dir", tmp_path / method)
        assert out.returncode == 0, out.stderr
        array = np.load(tmp_path / method / "output_0.npy", allow_pickle=False)
        assert array.shape == () and array.dtype.kind == "U" and str(array) == text


def test_scalar_outputs_are_0d_arrays_and_none_is_said(etnp, values_pte, tmp_path):
    out = etnp_run(etnp, "run", values_pte, "--method", "scalars", "--output-dir", tmp_path)
    assert out.returncode == 0, out.stderr
    loaded = [np.load(tmp_path / f"output_{i}.npy", allow_pickle=False) for i in range(3)]
    assert [a.shape for a in loaded] == [(), (), ()]
    assert loaded[0].dtype == np.int64 and loaded[0] == 7
    assert loaded[1].dtype == np.float64 and loaded[1] == 2.5
    assert loaded[2].dtype == np.bool_ and loaded[2]
    none = etnp_run(etnp, "run", values_pte, "--method", "none", "--output-dir", tmp_path / "none")
    assert none.returncode == 0 and "note: output 0 is None: no " in none.stderr
    assert not (tmp_path / "none" / "output_0.npy").exists()


def test_output_dir_is_made_with_its_parents(etnp, add_pte, tmp_path):
    target = tmp_path / "a" / "b" / "c"
    out = etnp_run(etnp, "run", add_pte, "--fill", "ones", "--output-dir", target)
    assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(np.load(target / "output_0.npy"), np.full((2, 2), 2, np.float32))


def test_output_dir_under_a_file_says_why(etnp, add_pte, tmp_path):
    (tmp_path / "plain").write_text("not a folder")
    out = etnp_run(etnp, "run", add_pte, "--fill", "ones", "--output-dir", "plain/out", cwd=tmp_path)
    line = error_line(out, 2)
    assert line == "error: InvalidArgument: --output-dir 'plain' exists and is not a directory"
    assert out.stdout == ""  # checked before the run


# --- inputs ----------------------------------------------------------------------------------------------------


def test_a_literal_for_a_tensor_input_says_it_is_a_tensor(etnp, add_pte):
    line = error_line(etnp_run(etnp, "run", add_pte, "--input", "2.0", "--fill", "ones"), 2)
    assert line == ("error: InvalidArgument: input 0 of method 'forward' is a tensor (float32[2, 2]): --input takes a "
                    ".npy file for it, and '2.0' is not a file")


def test_a_path_for_a_scalar_input_says_it_takes_a_literal(etnp, arith_pte):
    line = error_line(etnp_run(etnp, "run", arith_pte, "--method", "scalars", "--input", "three"), 2)
    assert line == ("error: InvalidArgument: input 0 of method 'scalars' is an Int: --input takes a literal for it "
                    "(3, 2.5, true or false), got 'three'")


def test_an_object_npy_is_named_without_its_header(etnp, add_pte, tmp_path):
    path = tmp_path / "objects.npy"
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    line = error_line(etnp_run(etnp, "run", add_pte, "--input", path, "--fill", "ones"), 2)
    assert line.startswith("error: InvalidArgument: '%s' is not a usable .npy file: unsupported dtype '|O': object "
                           "arrays (pickled Python objects) are not supported" % path)
    assert "fortran_order" not in line


def test_run_takes_shape_like_bench(etnp, arith_pte, tmp_path):
    out = etnp_run(etnp, "run", arith_pte, "--method", "dynamic", "--fill", "ones", "--shape", "0=2x3",
                   "--output-dir", tmp_path)
    assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "output_0.npy"), np.full((2, 3), 2, np.float32))
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 3), np.float32))
    line = error_line(etnp_run(etnp, "run", arith_pte, "--method", "dynamic", "--input", x, "--shape", "0=2x3"), 2)
    assert line.startswith("error: InvalidArgument: --shape names input 0 of method 'dynamic', which --input gives")


def test_shape_for_a_scalar_input_is_refused(etnp, arith_pte):
    line = error_line(etnp_run(etnp, "run", arith_pte, "--method", "scalars", "--fill", "ones", "--shape", "1=2"), 2)
    assert line == "error: InvalidArgument: --shape names input 1 of method 'scalars', which is a Double, not a tensor"


@pytest.mark.parametrize("fill", ["zeros", "ones", "random"])
def test_bench_takes_fill_like_run(etnp, arith_pte, fill):
    out = etnp_run(etnp, "bench", arith_pte, "--method", "dynamic", "--fill", fill, "--shape", "0=1x3",
                   "--iters", "1", "--warmup", "0")
    assert out.returncode == 0, out.stderr


def test_integer_inputs_that_index_stay_in_range(etnp, index_pte, tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.array([10, 20, 30, 40], np.float32))
    for method in ("gather", "gather_view"):
        seen = set()
        for seed in range(6):
            out_dir = tmp_path / f"{method}{seed}"
            out = etnp_run(etnp, "run", index_pte, "--method", method, "--input", x, "--fill", "random",
                           "--seed", seed, "--output-dir", out_dir)
            assert out.returncode == 0, out.stderr
            seen.update(np.load(out_dir / "output_0.npy").tolist())
        assert seen <= {10, 20, 30, 40} and len(seen) > 1, seen  # random, inside the table
        bench = etnp_run(etnp, "bench", index_pte, "--method", method, "--iters", "2", "--warmup", "0")
        assert bench.returncode == 0, bench.stderr


def test_an_index_computed_from_an_input_gets_zeros(etnp, index_pte, tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.array([10, 20, 30, 40], np.float32))
    out = etnp_run(etnp, "run", index_pte, "--method", "gather_shifted", "--input", x, "--fill", "random",
                   "--output-dir", tmp_path)
    assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "output_0.npy"), [10, 10])


def test_plain_integer_inputs_stay_random(etnp, index_pte, tmp_path):
    out = etnp_run(etnp, "run", index_pte, "--method", "add_ints", "--fill", "random", "--output-dir", tmp_path)
    assert out.returncode == 0, out.stderr
    values = np.load(tmp_path / "output_0.npy")
    assert np.all(np.abs(values) <= 200) and np.all(values % 2 == 0) and np.any(values != 0)


def test_inspect_verbose_says_how_integer_inputs_are_filled(etnp, index_pte):
    out = etnp_run(etnp, "inspect", index_pte, "--verbose")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "    input 1: int64[2]; an index below 4: --fill random draws from [0, 4)\n" in text
    assert "    input 1: int64[2, 1]; an index below 4: --fill random draws from [0, 4)\n" in text
    assert "    input 1: int64[2]; use not determined: --fill random gives zeros\n" in text
    assert "    input 0: int64[3]; --fill random draws from [-100, 100]\n" in text


def test_a_token_model_benches_out_of_the_box(etnp, pte_dir):
    lm = P.compile_program(P.successor_lm_program(), pte_dir / "lm.pte")
    out = etnp_run(etnp, "bench", lm, "--iters", "2", "--warmup", "0")
    assert out.returncode == 0, out.stderr


def test_the_tiny_llama_fixtures_bench_out_of_the_box(etnp, fixtures):
    for name in ("tiny_llama_kv_portable", "tiny_llama_kv_xnnpack_fp32"):
        out = etnp_run(etnp, "bench", fixtures / "exported" / f"{name}.pte", "--iters", "1", "--warmup", "0")
        assert out.returncode == 0, (name, out.stderr)


@pytest.mark.parametrize("command", ["inspect", "run", "bench"])
def test_a_ptd_given_as_the_program_gets_a_hint(etnp, fixtures, command):
    ptd = fixtures / "upstream" / "linear.ptd"
    line = error_line(etnp_run(etnp, command, ptd), 1)
    assert line.startswith("error: ProgramLoadError: ")
    assert line.endswith("'%s' is a .ptd data file: pass it with --data, after the .pte program that uses it" % ptd)
