"""`etnp bench --json --profile`: the per-operator times and, inside the delegate calls, the per-node times; and
the numeric flags of bench and run, checked."""
import json
import subprocess

import pytest


def bench(etnp, pte, *extra, iters=3, warmup=1):
    proc = subprocess.run([etnp, "bench", str(pte), "--iters", str(iters), "--warmup", str(warmup), "--json", *extra],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_profile_lists_the_delegate_and_its_nodes(etnp, fixtures):
    record = bench(etnp, fixtures / "nprt" / "add.pte", "--profile")
    calls = [p for p in record["profile"] if p["name"] == "DELEGATE_CALL XnnpackBackend"]
    assert len(calls) == 1 and calls[0]["calls_per_run"] == 1
    (node,) = record["delegate_profile"]
    assert node["name"].startswith("XnnpackBackend: XNNAdd (")
    assert node["calls_per_run"] == 1
    # A node's time is part of its call's.
    assert 0 <= node["ms_per_run"] <= calls[0]["ms_per_run"]


def test_profile_memory_does_not_grow_with_the_iterations(etnp, fixtures):
    # 513 operator calls a run: kept whole, 4000 runs' events were some 200 MB (peak RSS 211 MiB against 15 with
    # 100 runs); summed after each run, the two peaks are within a few MiB.
    pte = fixtures / "exported" / "lstm2_portable.pte"
    few, many = (bench(etnp, pte, "--profile", iters=n, warmup=0) for n in (100, 4000))
    assert sum(p["calls_per_run"] for p in many["profile"]) == sum(p["calls_per_run"] for p in few["profile"])
    assert many["peak_rss_mb"] - few["peak_rss_mb"] < 16, (few["peak_rss_mb"], many["peak_rss_mb"])


def test_without_profile_there_is_no_breakdown(etnp, fixtures):
    record = bench(etnp, fixtures / "nprt" / "add.pte")
    assert "profile" not in record and "delegate_profile" not in record
    assert record["load_time_mb"] >= 0 and record["median_ms"] > 0


@pytest.mark.parametrize("command, flags, message", [
    ("bench", ["--iters", "abc"], "--iters takes an integer, got 'abc'"),
    ("bench", ["--iters", "0"], "--iters must be in [1, "),
    ("bench", ["--warmup", "1.5"], "--warmup takes an integer, got '1.5'"),
    ("bench", ["--threads", "-2"], "--threads must be in [0, 1024], got -2"),
    ("bench", ["--shape", "0=-4"], "--shape takes INDEX=D0xD1x... with non-negative sizes, got '0=-4'"),
    ("bench", ["--shape", "x=4"], "--shape takes INDEX=D0xD1x... with INDEX an input number, got 'x=4'"),
    ("run", ["--top", "x"], "--top takes an integer, got 'x'"),
    ("run", ["--seed", "x"], "--seed takes an integer, got 'x'"),
    ("run", ["--seed", "-1"], "--seed must be >= 0, got -1"),
])
def test_numeric_flags_are_checked(etnp, tmp_path, command, flags, message):
    """A flag's value that is not a number in its range is an InvalidArgument naming the flag (exit 2)."""
    import programs

    if programs.flatc() is None:
        pytest.skip("flatc not found (needed to write the test program)")
    pte = programs.compile_program(programs.successor_lm_program(), tmp_path / "lm.pte")
    out = subprocess.run([etnp, command, str(pte)] + flags, capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: InvalidArgument: " + message), out.stderr
