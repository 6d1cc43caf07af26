#!/usr/bin/env python3
"""Traces the USDT probes (docs/tracing.md) with bpftrace while etnp runs, and checks what they report.

  trace_probes.py --cli build/etnp --program add.pte --tests build/tests/etnp_tests

The CLI runs `add.pte` (one XNNPACK delegate call in method "forward"): every probe must fire once, in order,
with the program's path, size and method count, the method name and the delegate's backend and index. The
test binary runs a test whose method fails while running: execute_end must then name the error kind. A probe
fires only where a tracer raised its semaphore, so this also shows the semaphores work.

Tracing needs bpftrace and the right to load BPF programs (root, or CAP_BPF and CAP_PERFMON): without them
the script exits 77, CTest's skip code, and says why.
"""
import argparse
import os
import shutil
import subprocess
import sys

SKIP = 77
PREFIX = "etnp-probe"
# probe -> bpftrace printf format and arguments (the same list as check_probes.py and docs/tracing.md).
FORMATS = {
    "program_load_begin": ("%s", "str(arg0)"),
    "program_load_end": ("%s %d %d", "str(arg0), arg1, arg2"),
    "method_load_begin": ("%s", "str(arg0)"),
    "method_load_end": ("%s", "str(arg0)"),
    "execute_begin": ("%s", "str(arg0)"),
    "execute_end": ("%s '%s'", "str(arg0), str(arg1)"),
    "delegate_begin": ("%s %d %s", "str(arg0), arg1, str(arg2)"),
    "delegate_end": ("%s %d %s", "str(arg0), arg1, str(arg2)"),
}
FAILING_TEST = "WriterRoundTrip.UseAfterFreeInTheSameRunFails"  # tests/cpp/writer_test.cpp: two failing runs


class CannotTrace(Exception):
    pass


def trace(binary: str, command: list):
    """The probes `command` fired in `binary`, in time order, as 'name args' strings."""
    script = "".join(
        f'usdt:{binary}:etnp:{name} {{ printf("{PREFIX} %llu {name} {fmt}\\n", nsecs, {args}); }}\n'
        for name, (fmt, args) in FORMATS.items())
    env = dict(os.environ, BPFTRACE_STRLEN="128")
    out = subprocess.run(["bpftrace", "-e", script, "-c", " ".join(command)], capture_output=True, text=True,
                         env=env, timeout=120)
    events = sorted((int(line.split()[1]), line.split(None, 2)[2])
                    for line in out.stdout.splitlines() if line.startswith(PREFIX + " "))
    if out.returncode != 0 and not events:
        raise CannotTrace(f"bpftrace could not trace {binary} (exit {out.returncode}): "
                          f"{(out.stderr or out.stdout).strip()[-400:]}")
    return [e for _, e in events]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True)
    parser.add_argument("--program", required=True, help="a program whose method forward makes one delegate call")
    parser.add_argument("--tests", required=True, help="the etnp_tests binary")
    args = parser.parse_args()
    if shutil.which("bpftrace") is None:
        print("skipped: bpftrace is not installed (Debian: apt-get install bpftrace), so nothing traces the probes")
        return SKIP
    cli, program = os.path.abspath(args.cli), os.path.abspath(args.program)
    problems = []
    try:
        events = trace(cli, [cli, "run", program, "--fill", "ones", "--print", "none"])
        size = os.path.getsize(program)
        shown = program[:127]  # bpftrace's strings hold BPFTRACE_STRLEN - 1 characters
        expected = [f"program_load_begin {shown}", f"program_load_end {shown} {size} 1",
                    "method_load_begin forward", "method_load_end forward", "execute_begin forward",
                    "delegate_begin XnnpackBackend 0 forward", "delegate_end XnnpackBackend 0 forward",
                    "execute_end forward ''"]
        if events != expected:
            problems.append("etnp run fired:\n    " + "\n    ".join(events) + "\n  expected:\n    " +
                            "\n    ".join(expected))
        tests = os.path.abspath(args.tests)
        events = trace(tests, [tests, f"--gtest_filter={FAILING_TEST}"])
        ends = [e for e in events if e.startswith("execute_end ")]
        if ends != ["execute_end forward 'ExecutionError'"] * 2:
            problems.append(f"{FAILING_TEST} fired execute_end {ends}, expected two with 'ExecutionError'")
    except CannotTrace as e:
        print(f"skipped: {e}")
        return SKIP
    for p in problems:
        print(p)
    if problems:
        return 1
    print("usdt trace: every probe fired in order with the expected arguments, and execute_end named the error")
    return 0


if __name__ == "__main__":
    sys.exit(main())
