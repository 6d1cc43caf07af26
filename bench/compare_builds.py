#!/usr/bin/python3
"""Two etnp builds side by side: is a change faster, slower or the same? (A refactor must be the same.)

    git worktree add /tmp/etnp-base <commit> && ETNP_BUILD_DIR=/tmp/etnp-base/build \\
        /tmp/etnp-base/scripts/build.sh -DETNP_BUILD_TESTS=OFF -DETNP_BUILD_PYTHON=OFF
    /usr/bin/python3 bench/compare_builds.py --base /tmp/etnp-base/build/etnp --new build/etnp \\
        [--rounds 5] [--threads 1 --threads 2] [--only SUBSTRING]...

Rows are the programs of ../shared/fixtures/benchmarks.json with their stored inputs (id:case). Each round times every
row with both builds (`etnp bench --json`), in alternating order (base first in even rounds, new first in odd
ones), so that drift and a neighbour's load hit both alike. Per row and thread count it prints both medians
of the round medians, their ratio new / base, and the spread of the per-round ratios; a ratio whose whole
spread lies above 1 + --noise is flagged as a slowdown. Reported, never asserted.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_benchmarks import etnp_bench  # noqa: E402  (the one way this project times `etnp bench`)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rows(fixtures):
    with open(os.path.join(fixtures, "benchmarks.json")) as f:
        entries = json.load(f)["entries"]
    for e in entries:
        inputs = [os.path.join(fixtures, e["inputs"].replace("<i>", str(i))) for i in range(len(e["input_shapes"]))]
        case = os.path.basename(os.path.dirname(e["inputs"]))  # forward, forward__b8, ...
        yield {"id": f'{e["id"]}:{case}', "pte": os.path.join(fixtures, e["file"]), "method": e["method"], "inputs": inputs,
               "data": [os.path.join(fixtures, d) for d in e.get("data_files", [])]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the etnp executable before the change")
    parser.add_argument("--new", required=True, help="the etnp executable after the change")
    parser.add_argument("--fixtures", default=os.path.join(os.path.dirname(ROOT), "shared", "fixtures"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, action="append")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--noise", type=float, default=0.05, help="ratio margin read as noise (default 5%%)")
    args = parser.parse_args()
    threads = args.threads or [1, 2]
    table = [r for r in rows(args.fixtures) if not args.only or any(s in r["id"] for s in args.only)]
    if not table:
        sys.exit("no rows: check --fixtures and --only")
    medians = {}  # (row id, threads, build) -> [round medians]
    errors = {}
    for r in range(args.rounds):
        for row in table:
            for t in threads:
                order = ("base", "new") if r % 2 == 0 else ("new", "base")
                for build in order:
                    exe = args.base if build == "base" else args.new
                    rec = etnp_bench(exe, row["pte"], t, args.warmup, args.iters, row["inputs"], row["data"],
                                     row["method"])
                    if "error" in rec:
                        errors[(row["id"], t, build)] = rec["error"]
                    else:
                        medians.setdefault((row["id"], t, build), []).append(rec["median_ms"])
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"| program | threads | base ms | new ms | new / base | per-round ratios | verdict |")
    print(f"|---|---|---|---|---|---|---|")
    slower = 0
    for row in table:
        for t in threads:
            base = medians.get((row["id"], t, "base"))
            new = medians.get((row["id"], t, "new"))
            if not base or not new:
                err = errors.get((row["id"], t, "new")) or errors.get((row["id"], t, "base"))
                print(f"| {row['id']} | {t} | | | | | error: {err} |")
                continue
            ratios = [n / b for n, b in zip(new, base)]
            b, n = statistics.median(base), statistics.median(new)
            verdict = "same"
            if min(ratios) > 1 + args.noise:
                verdict, slower = "SLOWER", slower + 1
            elif max(ratios) < 1 - args.noise:
                verdict = "faster"
            print(f"| {row['id']} | {t} | {b:.3f} | {n:.3f} | {n / b:.3f} | {min(ratios):.2f}-{max(ratios):.2f} "
                  f"| {verdict} |")
    print(f"\n{slower} row(s) slower beyond noise in every round", file=sys.stderr)


if __name__ == "__main__":
    main()
