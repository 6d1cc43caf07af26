"""bench/run_benchmarks.py's efficiency section (7) and the machine limits it divides by: etnp_bench_machine_peak
measures them, efficiency_section turns torch's FLOP count and a median into GFLOP/s and a share of the peak, and a
rewrite of RESULTS.md keeps the sections other scripts wrote."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import run_benchmarks  # noqa: E402

PEAK = {"threads": 2, "fma_gflops_1": 100.0, "fma_gflops_all": 200.0, "avx2_fma_gflops_1": 100.0,
        "avx512_fma_gflops_1": 0.0, "memcpy_gbs_1": 20.0}


def test_machine_peak_measures_this_machine():
    tool = pathlib.Path(os.environ.get("ETNP_BUILD_DIR", REPO / "build")) / "bench" / "etnp_bench_machine_peak"
    if not tool.exists():
        pytest.skip("%s not built (ETNP_BUILD_BENCH)" % tool)
    out = json.loads(subprocess.run([str(tool), "--threads", "1"], capture_output=True, text=True, check=True,
                                    timeout=120).stdout)
    assert out["threads"] == 1
    # A core of any x86-64 CPU with AVX2 and FMA does at least 8 fused multiply-adds a cycle at 1 GHz.
    assert out["avx2_fma_gflops_1"] > 16
    assert out["fma_gflops_1"] == max(out["avx2_fma_gflops_1"], out["avx512_fma_gflops_1"])
    assert out["memcpy_gbs_1"] > 1
    bad = subprocess.run([str(tool), "--frobnicate"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "usage" in bad.stderr


def test_efficiency_rows_divide_the_count_by_the_median():
    rows = [{"id": "live/a__xnnpack", "case": "forward__0", "float": True, "torch_key": "a"},
            {"id": "live/a__xnnpack_int8", "case": "forward__0", "float": False, "torch_key": "a"},
            {"id": "live/b__portable", "case": "forward__0", "float": True, "torch_key": "b"}]
    cells = {(0, "etnp_cli", 1): {"median_ms": 2.0, "min_ms": 1.9}, (0, "official", 1): {"median_ms": 4.0},
             (0, "etnp_cli", 2): {"median_ms": 1.0}, (0, "official", 2): {"error": "refused"},
             (1, "etnp_cli", 1): {"median_ms": 1.0}}
    flops = {"a": {"flops": 100_000_000}, "b": {"error": "no module"}}
    md = run_benchmarks.efficiency_section(rows, cells, PEAK, flops)
    table = [line for line in md if line.startswith("| live/")]
    # 100 MFLOP in 2 ms: 50 GFLOP/s, half the one-core peak; the official 25 (25%); 2 threads against all cores.
    assert table[0] == "| live/a__xnnpack | forward__0 | 100.0 | 1 | 2.00 | 50.0 | 50% | 4.00 | 25.0 | 25% |"
    assert table[1] == "| live/a__xnnpack | forward__0 | 100.0 | 2 | 1.00 | 100.0 | 50% | — | — | — |"
    assert len(table) == 2  # the int8 form and the row without a count have none
    assert "No measurement" in run_benchmarks.efficiency_section(rows, cells, None, flops)[1]


def test_a_rewrite_keeps_the_sections_other_scripts_wrote():
    old = "\n".join(["# etnp benchmark results", "## Reproduce", "## 1. Same machine", "## 7. Efficiency: old",
                     "## Language models", "### fp32", "## Load time and memory", "## Notes"])
    md = ["## 1. Same machine\n", "## 7. Efficiency: new\n"]
    assert run_benchmarks.carried_headings(old, md) == ["## Language models", "## Load time and memory"]
