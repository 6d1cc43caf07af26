"""`etnp run` inputs from .npz archives and directories of .npy files, `--batch DIR --output-dir OUT` (one input set
per subfolder or .npz, outputs in OUT/<set>/), and the progress bar of run --batch and bench: on stderr only when
it is a terminal, never with --no-progress."""
import os
import pty
import select
import subprocess

import numpy as np
import pytest

import programs as P
from cli_util import etnp_run, error_line


@pytest.fixture(scope="module")
def add_pte(tmp_path_factory):
    if P.flatc() is None:
        pytest.skip("flatc not found: it compiles the test programs")
    return P.compile_program(P.add_program(), tmp_path_factory.mktemp("cli_batch") / "add.pte")


A = np.arange(4, dtype=np.float32).reshape(2, 2)
B = np.full((2, 2), 10, np.float32)


def test_an_npz_gives_its_arrays_in_order(etnp, add_pte, tmp_path):
    np.savez(tmp_path / "in.npz", A, B)
    out = etnp_run(etnp, "run", add_pte, "--input", tmp_path / "in.npz", "--output-dir", tmp_path / "out")
    assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "output_0.npy"), A + B)


def test_npz_arr_names_in_number_order(etnp, add_pte, tmp_path):
    # Stored as arr_1, arr_0: the numbers decide the order, not the archive.
    np.savez(tmp_path / "named.npz", **{"arr_1": B, "arr_0": A})
    out = etnp_run(etnp, "run", add_pte, "--input", tmp_path / "named.npz", "--print", "all")
    assert out.returncode == 0, out.stderr
    assert "[10, 11, 12, 13]" in out.stdout


def test_npz_other_names_keep_the_archive_order(etnp, add_pte, tmp_path):
    np.savez(tmp_path / "kw.npz", y=B, x=A * 0)  # y first: y is input 0
    out = etnp_run(etnp, "run", add_pte, "--input", tmp_path / "kw.npz", "--output-dir", tmp_path / "o")
    assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "output_0.npy"), B)


def test_an_npz_and_a_npy_mix(etnp, add_pte, tmp_path):
    np.savez(tmp_path / "one.npz", A)
    np.save(tmp_path / "b.npy", B)
    out = etnp_run(etnp, "run", add_pte, "--input", tmp_path / "one.npz", "--input", tmp_path / "b.npy",
                   "--output-dir", tmp_path / "o")
    assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "output_0.npy"), A + B)


def test_a_compressed_npz_says_to_use_savez(etnp, add_pte, tmp_path):
    np.savez_compressed(tmp_path / "c.npz", A, B)
    line = error_line(etnp_run(etnp, "run", add_pte, "--input", tmp_path / "c.npz"), 2)
    assert line == ("error: InvalidArgument: '%s' is not a usable .npz archive: entry 'arr_0.npy' is compressed "
                    "(numpy.savez_compressed); etnp reads uncompressed archives: write it with numpy.savez"
                    % (tmp_path / "c.npz"))


def test_a_file_that_is_not_an_npz(etnp, add_pte, tmp_path):
    (tmp_path / "x.npz").write_text("hello")
    line = error_line(etnp_run(etnp, "run", add_pte, "--input", tmp_path / "x.npz"), 2)
    assert line.startswith("error: InvalidArgument: '%s' is not a usable .npz archive: " % (tmp_path / "x.npz"))


def test_too_many_arrays_is_the_usual_count_error(etnp, add_pte, tmp_path):
    np.savez(tmp_path / "three.npz", A, B, A)
    line = error_line(etnp_run(etnp, "run", add_pte, "--input", tmp_path / "three.npz"), 2)
    assert line == "error: InvalidArgument: method 'forward' takes 2 inputs, 3 were given"


def test_a_directory_gives_its_npy_files_sorted_by_name(etnp, add_pte, tmp_path):
    d = tmp_path / "inputs"
    d.mkdir()
    np.save(d / "input_10.npy", B)  # after input_2: digits compare as numbers
    np.save(d / "input_2.npy", A)
    (d / "notes.txt").write_text("ignored")
    out = etnp_run(etnp, "run", add_pte, "--input", d, "--output-dir", tmp_path / "o")
    assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "output_0.npy"), A + B)
    empty = tmp_path / "empty"
    empty.mkdir()
    line = error_line(etnp_run(etnp, "run", add_pte, "--input", empty), 2)
    assert line == "error: InvalidArgument: --input '%s' is a directory without .npy files" % empty


@pytest.fixture()
def batch_dir(tmp_path):
    d = tmp_path / "batch"
    (d / "s1").mkdir(parents=True)
    np.save(d / "s1" / "a.npy", A)
    np.save(d / "s1" / "b.npy", B)
    np.savez(d / "s10.npz", B, B)
    np.savez(d / "s2.npz", A, A)
    (d / "README").write_text("not an input set")
    return d


def test_batch_writes_one_folder_per_set(etnp, add_pte, batch_dir, tmp_path):
    out_dir = tmp_path / "out"
    out = etnp_run(etnp, "run", add_pte, "--batch", batch_dir, "--output-dir", out_dir)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in out_dir.iterdir()) == ["s1", "s10", "s2"]
    np.testing.assert_array_equal(np.load(out_dir / "s1" / "output_0.npy"), A + B)
    np.testing.assert_array_equal(np.load(out_dir / "s2" / "output_0.npy"), A + A)
    np.testing.assert_array_equal(np.load(out_dir / "s10" / "output_0.npy"), B + B)
    assert [line.split(":")[0] for line in out.stdout.splitlines()] == ["s1", "s2", "s10"]  # natural order
    assert out.stderr == ""  # no progress bar: stderr is a pipe


def test_batch_print_lines_name_their_set(etnp, add_pte, batch_dir):
    out = etnp_run(etnp, "run", add_pte, "--batch", batch_dir, "--top", "1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("s1: output 0: float32[2, 2] ")
    assert lines[1] == "s1: top-1 of output 0 (index: value): 3: 13"


def test_batch_errors(etnp, add_pte, batch_dir, tmp_path):
    np.save(tmp_path / "x.npy", A)
    line = error_line(etnp_run(etnp, "run", add_pte, "--batch", batch_dir, "--input", tmp_path / "x.npy"), 2)
    assert line == "error: InvalidArgument: --batch gives every input set; --input cannot be used with it"
    line = error_line(etnp_run(etnp, "run", add_pte, "--batch", tmp_path / "x.npy"), 2)
    assert line == "error: InvalidArgument: --batch takes a directory, and '%s' is not one" % (tmp_path / "x.npy")
    empty = tmp_path / "empty"
    empty.mkdir()
    line = error_line(etnp_run(etnp, "run", add_pte, "--batch", empty), 2)
    assert line == ("error: InvalidArgument: --batch '%s' holds no input sets (subfolders of .npy files or .npz "
                    "archives)" % empty)
    (batch_dir / "s2").mkdir()
    np.save(batch_dir / "s2" / "a.npy", A)
    line = error_line(etnp_run(etnp, "run", add_pte, "--batch", batch_dir), 2)
    assert line.endswith("holds both 's2' and 's2.npz': their outputs would share one folder")


def run_on_a_terminal(args):
    """Runs with stderr on a pseudo-terminal (stdout piped): returns (returncode, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    stdout = proc.stdout.read()
    proc.wait(timeout=60)
    os.close(master)
    return proc.returncode, stdout.decode(), seen.decode(errors="replace")


def test_batch_progress_on_a_terminal_only(etnp, add_pte, batch_dir, tmp_path):
    code, stdout, terminal = run_on_a_terminal([etnp, "run", add_pte, "--batch", batch_dir, "--print", "none",
                                                "--output-dir", tmp_path / "o1"])
    assert code == 0, terminal
    assert "3/3" in terminal and "[" + "#" * 40 + "]" in terminal
    code, stdout, terminal = run_on_a_terminal([etnp, "run", add_pte, "--batch", batch_dir, "--print", "none",
                                                "--no-progress", "--output-dir", tmp_path / "o2"])
    assert code == 0 and "3/3" not in terminal and "#" not in terminal


def test_bench_progress_on_a_terminal_only(etnp, add_pte):
    args = [etnp, "bench", add_pte, "--iters", "20", "--warmup", "0"]
    code, stdout, terminal = run_on_a_terminal(args)
    assert code == 0 and "20/20" in terminal, terminal
    code, stdout, terminal = run_on_a_terminal(args + ["--no-progress"])
    assert code == 0 and "20/20" not in terminal
    piped = etnp_run(etnp, *args[1:])
    assert piped.returncode == 0 and piped.stderr == ""
