"""`etnp` usage: `CMD --help` for every command, a bare `etnp` or an unknown command (exit 2), and every flag
value checked: a bad value is "error: InvalidArgument: ..." naming the flag and the value, with exit 2."""

import pathlib

import pytest

from cli_util import etnp_run

COMMANDS = ["inspect", "run", "check", "bench", "generate", "completion", "version"]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_has_help(etnp, command, flag):
    out = etnp_run(etnp, command, flag)
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.startswith("usage: etnp " + command), out.stdout
    # The help of a command that takes a file works with other arguments present too.
    if command != "version":
        again = etnp_run(etnp, command, "no-such-file.pte", "--iters", "abc", flag)
        assert again.returncode == 0 and again.stdout == out.stdout


def test_help_command_names_a_command(etnp):
    assert etnp_run(etnp, "help", "bench").stdout == etnp_run(etnp, "bench", "--help").stdout
    for flag in ("--help", "-h", "help"):
        out = etnp_run(etnp, flag)
        assert out.returncode == 0 and out.stdout.startswith("usage: etnp <command>")
        for command in COMMANDS:
            assert "\n  %s " % command in out.stdout


def test_help_as_a_flag_value_is_a_value(etnp, tmp_path):
    out = etnp_run(etnp, "generate", tmp_path / "lm.pte", "--prompt", "-h")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("error: InvalidArgument: generate needs --tokenizer FILE")


def test_bare_etnp_prints_the_usage_to_stderr(etnp):
    out = etnp_run(etnp)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("usage: etnp <command>")


def test_an_unknown_command(etnp):
    out = etnp_run(etnp, "frobnicate", "x.pte")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("error: InvalidArgument: unknown command 'frobnicate' (commands: inspect, run, check, "
                                 "bench, generate, completion, version; try: etnp --help)")


def test_an_unknown_option(etnp):
    out = etnp_run(etnp, "inspect", "x.pte", "--frob")
    assert out.returncode == 2 and out.stderr.startswith("error: InvalidArgument: unknown option '--frob'")


def test_version_takes_no_arguments(etnp):
    out = etnp_run(etnp, "version", "extra")
    assert out.returncode == 2 and out.stderr.startswith("error: InvalidArgument: version takes no arguments")


LONG = "9" * 200 + "z"


@pytest.mark.parametrize("command, flags, message", [
    ("bench", ["--iters", "abc"], "--iters takes an integer, got 'abc'"),
    ("bench", ["--threads", "-1"], "--threads must be in [0, 1024], got -1"),
    ("bench", ["--fill", "twos"], "--fill takes ones, zeros or random, got 'twos'"),
    ("bench", ["--seed", "1e3"], "--seed takes an integer, got '1e3'"),
    ("bench", ["--shape", "x=4"], "--shape takes INDEX=D0xD1x... with INDEX an input number, got 'x=4'"),
    ("bench", ["--shape", "0=-4"], "--shape takes INDEX=D0xD1x... with non-negative sizes, got '0=-4'"),
    ("bench", ["--shape", "0=2xx3"], "--shape takes INDEX=D0xD1x... with non-negative sizes, got '0=2xx3'"),
    ("bench", ["--shape", "7=2"], "--shape names input 7; the method has 2 inputs"),
    ("bench", ["--shape", "04"], "--shape takes INDEX=D0xD1x..., got '04'"),
    ("run", ["--top", "x"], "--top takes an integer, got 'x'"),
    ("run", ["--seed", "x"], "--seed takes an integer, got 'x'"),
    ("run", ["--fill", "1"], "--fill takes ones, zeros or random, got '1'"),
    ("run", ["--print", "some"], "--print takes none, summary or all, got 'some'"),
    ("run", ["--shape", "x=4", "--fill", "ones"], "--shape takes INDEX=D0xD1x... with INDEX an input number"),
    ("run", ["--shape", "0=-4", "--fill", "ones"], "--shape takes INDEX=D0xD1x... with non-negative sizes"),
    ("run", ["--iters", "3"], "unknown option '--iters'"),
    ("generate", ["--max-new-tokens", "x"], "--max-new-tokens takes an integer, got 'x'"),
    ("generate", ["--temperature", "x"], "--temperature takes a number, got 'x'"),
    ("generate", ["--temperature", "nan"], "--temperature takes a number, got 'nan'"),
    ("generate", ["--top-p", "2"], "--top-p must be in [0, 1], got 2"),
    ("generate", ["--threads", "-1"], "--threads must be in [0, 1024], got -1"),
    ("bench", ["--iters", LONG], "--iters takes an integer, got '" + "9" * 60 + "...'"),
])
def test_flag_values_are_checked(etnp, tmp_path, command, flags, message):
    import programs

    if programs.flatc() is None:
        pytest.skip("flatc not found (needed to write the test program)")
    pte = programs.compile_program(programs.successor_lm_program(), tmp_path / "lm.pte")
    out = etnp_run(etnp, command, pte, *flags)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: InvalidArgument: " + message), out.stderr
    assert len(out.stderr.splitlines()) == 1
    for library_word in ("stoi", "stoll", "stod", "vector", "basic_string", "std::"):
        assert library_word not in out.stderr


@pytest.mark.parametrize("flags, message", [
    (["--seed", "x"], "--seed takes a non-negative integer"),
    (["--seed", "-1"], "--seed takes a non-negative integer"),
    (["--num-classes", "abc"], "--num-classes takes a positive integer"),
    (["--num-classes", "0"], "--num-classes takes a positive integer"),
    (["--num-classes", "99999999999"], "--num-classes takes a positive integer"),
])
def test_demo_flag_values_are_checked(etnp, tmp_path, flags, message):
    """etnp_demo (beside etnp in the build folder) says which value is wrong, with exit 2, writing nothing."""
    demo = pathlib.Path(etnp).with_name("etnp_demo")
    if not demo.is_file():
        pytest.skip(f"etnp_demo not built beside {etnp}")
    out = etnp_run(str(demo), "--output-dir", tmp_path / "out", *flags)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.splitlines()[0] == f"etnp_demo: {message}", out.stderr
    assert not (tmp_path / "out").exists()
