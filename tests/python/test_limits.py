"""Resource limits (docs/security.md): Runtime.load_program(limits=...) and `etnp --limit NAME=N`. Each bound
refuses a program beyond it with its error class and a message naming the bound and the sizes, lets through
one at it, and a bad limit is refused, never ignored."""

import os
import pickle

import numpy as np
import pytest

from cli_util import error_line, etnp_run
from executorch_numpy_runtime import (
    ExecutionError,
    InvalidInputError,
    InvalidTypeError,
    ProgramLoadError,
    default_limits,
)

NAMES = ["max_method_bytes", "max_tensor_bytes", "max_instructions_per_execute", "max_methods", "max_values",
         "max_instructions"]


def test_default_limits():
    limits = default_limits()
    assert list(limits) == NAMES
    assert limits["max_method_bytes"] == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    assert limits["max_instructions_per_execute"] == 10_000_000
    assert [limits[n] for n in NAMES[3:]] == [0, 0, 0] and limits["max_tensor_bytes"] == 0
    limits["max_methods"] = 5  # a copy: the defaults do not change
    assert default_limits()["max_methods"] == 0


def test_tensor_bytes(runtime, programs):
    with pytest.raises(ProgramLoadError, match="value 0 is a tensor of 16 bytes, more than the limit "
                                               "max_tensor_bytes = 15"):
        runtime.load_program(programs["add"], limits={"max_tensor_bytes": 15}).load_method("forward")
    method = runtime.load_program(programs["add"], limits={"max_tensor_bytes": 16}).load_method("forward")
    x = np.ones((2, 2), np.float32)
    np.testing.assert_array_equal(method.execute([x, x])[0], 2 * x)


def test_method_bytes(runtime, programs):
    with pytest.raises(ProgramLoadError, match="its memory plan needs 48 bytes, and the method holds 0 already: "
                                               "more than the limit max_method_bytes = 47"):
        runtime.load_program(programs["add"], limits={"max_method_bytes": 47}).load_method("forward")
    runtime.load_program(programs["add"], limits={"max_method_bytes": 48}).load_method("forward")


def test_counts(runtime, programs):
    with pytest.raises(ProgramLoadError, match="method 'forward' declares values: 4, more than the limit "
                                               "max_values = 3"):
        runtime.load_program(programs["add"], limits={"max_values": 3})
    with pytest.raises(ProgramLoadError, match="declares instructions: 2, more than the limit max_instructions = 1"):
        runtime.load_program(programs["loop"], limits={"max_instructions": 1})
    methods = len(runtime.load_program(programs["dtypes"]).method_names)
    with pytest.raises(ProgramLoadError, match=f"the program declares methods: {methods}, more than the limit "
                                               f"max_methods = {methods - 1}"):
        runtime.load_program(programs["dtypes"], limits={"max_methods": methods - 1})
    runtime.load_program(programs["dtypes"], limits={"max_methods": methods, "max_values": 4, "max_instructions": 2})


def test_an_endless_loop_stops_and_the_method_stays_usable(runtime, programs):
    method = runtime.load_program(programs["loop"], limits={"max_instructions_per_execute": 500}).load_method("forward")
    x = np.array([1, -2], np.float32)
    for _ in range(2):
        with pytest.raises(ExecutionError, match=r"method 'forward', instruction 1: the execute ran 500 instructions, "
                                                 r"the limit max_instructions_per_execute, and had not finished"):
            method.execute([x])


@pytest.mark.parametrize("limits, error, message", [
    ({"max_bytes": 1}, InvalidInputError, "there is no limit 'max_bytes'; the limits are max_method_bytes, "),
    ({"max_values": 1.5}, InvalidTypeError, r"limits\['max_values'\] must be an int, got float"),
    ({"max_values": True}, InvalidTypeError, r"limits\['max_values'\] must be an int, got bool"),
    ({"max_values": -1}, InvalidInputError, r"limits\['max_values'\] must be in \[0, 2\*\*64\)"),
    ({"max_values": 1 << 64}, InvalidInputError, r"limits\['max_values'\] must be in \[0, 2\*\*64\)"),
    ([("max_values", 1)], InvalidTypeError, "limits must map limit names to ints, got list"),
])
def test_bad_limits_are_refused(runtime, programs, limits, error, message):
    with pytest.raises(error, match=message):
        runtime.load_program(programs["add"], limits=limits)


def test_a_pickled_program_keeps_its_limits(runtime, programs):
    program = runtime.load_program(programs["loop"], limits={"max_instructions_per_execute": 300})
    again = pickle.loads(pickle.dumps(program))
    with pytest.raises(ExecutionError, match="the execute ran 300 instructions"):
        again.load_method("forward").execute([np.ones(2, np.float32)])


# --- the CLI: --limit NAME=N on every command that loads a program ---------------------------------------------

def test_cli_limit_refuses_and_names_the_bound(etnp, programs, tmp_path):
    np.save(tmp_path / "x.npy", np.ones((2, 2), np.float32))
    np.save(tmp_path / "y.npy", np.full((2, 2), 2, np.float32))
    check = ["check", "--input", tmp_path / "x.npy", "--input", tmp_path / "x.npy", "--expect", tmp_path / "y.npy"]
    assert etnp_run(etnp, *check[:1], programs["add"], *check[1:]).returncode == 0
    for command in (["run", "--fill", "ones"], ["bench", "--iters", "1", "--warmup", "0"], check):
        out = etnp_run(etnp, command[0], programs["add"], "--limit", "max_tensor_bytes=15", *command[1:])
        assert "ProgramLoadError" in error_line(out, 1) and "more than the limit max_tensor_bytes = 15" in out.stderr
    out = etnp_run(etnp, "inspect", programs["add"], "--limit", "max_values=3")
    assert "method 'forward' declares values: 4, more than the limit max_values = 3" in error_line(out, 1)
    assert etnp_run(etnp, "run", programs["add"], "--limit", "max_tensor_bytes=16", "--fill", "ones").returncode == 0


def test_cli_limit_suffixes_and_loops(etnp, programs):
    out = etnp_run(etnp, "run", programs["loop"], "--fill", "ones", "--limit", "max_instructions_per_execute=1K")
    assert "the execute ran 1024 instructions" in error_line(out, 1)
    out = etnp_run(etnp, "run", programs["add"], "--fill", "ones", "--limit", "max_method_bytes=1K")
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("spec, message", [
    ("max_bytes=1", "--limit takes NAME=N with NAME one of max_method_bytes, max_tensor_bytes, "
                    "max_instructions_per_execute, max_methods, max_values, max_instructions, got 'max_bytes=1'"),
    ("max_values", "--limit takes NAME=N with NAME one of"),
    ("max_values=-1", "--limit max_values takes a count >= 0 (bytes may end in K, M, G or T; 0: no limit), got '-1'"),
    ("max_values=1X", "got '1X'"),
    ("max_values=16777216T", "got '16777216T'"),
])
def test_cli_bad_limits_are_usage_errors(etnp, programs, spec, message):
    assert message in error_line(etnp_run(etnp, "run", programs["add"], "--fill", "ones", "--limit", spec), 2)
