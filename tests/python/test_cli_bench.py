"""`etnp bench --json --profile`: the per-operator times and, inside the delegate calls, the per-node times."""
import json
import subprocess


def bench(etnp, pte, *extra):
    proc = subprocess.run([etnp, "bench", str(pte), "--iters", "3", "--warmup", "1", "--json", *extra],
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


def test_without_profile_there_is_no_breakdown(etnp, fixtures):
    record = bench(etnp, fixtures / "nprt" / "add.pte")
    assert "profile" not in record and "delegate_profile" not in record
    assert record["load_time_mb"] >= 0 and record["median_ms"] > 0
