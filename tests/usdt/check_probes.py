#!/usr/bin/env python3
"""Checks the USDT probes (docs/tracing.md) in built files: their .note.stapsdt ELF notes, read with readelf.

Every file must carry each probe of provider "etnp" below, with its argument count and a semaphore (so that
an untraced probe skips its arguments), and no etnp probe that this list (and docs/tracing.md) lacks.

  check_probes.py FILE...             check the probes of each file (a static library, executable, .so)
  check_probes.py --usdt OFF FILE...  the build has ETNP_USDT off: check that no etnp probe is built in, then
                                      exit 77 (CTest's skip code), as the probes themselves went unchecked
  check_probes.py --self-test         check that notes with a missing or wrong probe fail
"""
import argparse
import re
import subprocess
import sys

# probe name -> argument count; the arguments are described in docs/tracing.md.
PROBES = {
    "program_load_begin": 1,  # source name
    "program_load_end": 3,    # source name, bytes, methods
    "method_load_begin": 1,   # method
    "method_load_end": 1,     # method
    "execute_begin": 1,       # method
    "execute_end": 2,         # method, error kind ("" when the run returned)
    "delegate_begin": 3,      # backend id, delegate index, method
    "delegate_end": 3,        # backend id, delegate index, method
}
SKIP = 77

NOTE = re.compile(r"Provider:\s*(\S+)\s+Name:\s*(\S+)\s+Location:\s*(\S+),\s*Base:\s*(\S+),\s*Semaphore:\s*(\S+)"
                  r"(?:\s+Arguments:[ \t]*([^\n]*))?")


def notes(readelf_output: str):
    """(provider, name, semaphore address, argument count) of every stapsdt note."""
    found = []
    for m in NOTE.finditer(readelf_output):
        provider, name, _, _, semaphore, args = m.groups()
        found.append((provider, name, int(semaphore, 16), len((args or "").split())))
    return found


def problems_of(label: str, found):
    problems = []
    etnp = [n for n in found if n[0] == "etnp"]
    for name, nargs in PROBES.items():
        sites = [n for n in etnp if n[1] == name]
        if not sites:
            problems.append(f"{label}: no probe etnp:{name}")
            continue
        for _, _, semaphore, count in sites:
            if count != nargs:
                problems.append(f"{label}: etnp:{name} has {count} arguments, expected {nargs}")
            if semaphore == 0:
                problems.append(f"{label}: etnp:{name} has no semaphore (its arguments are prepared untraced)")
    for name in sorted({n[1] for n in etnp} - PROBES.keys()):
        problems.append(f"{label}: probe etnp:{name} is not in this test's list (nor, then, in docs/tracing.md)")
    return problems


def readelf(*args):
    out = subprocess.run(["readelf", "--wide", *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"readelf {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def read_notes(path: str):
    found = notes(readelf("-n", path))
    if "REL (Relocatable file)" not in readelf("-h", path):
        return found
    # Objects (a static library's members) have no addresses yet: a note names its semaphore by relocation,
    # and the library must define that symbol.
    referenced = set()
    for section in readelf("-r", path).split("Relocation section ")[1:]:
        if section.startswith("'.rela.note.stapsdt'"):
            referenced.update(re.findall(r"\b(\w+_semaphore)\b", section))
    defined = {m.group(1) for m in re.finditer(r"^\s*\d+:.*\s(?!UND)\S+\s+(\w+_semaphore)$",
                                                readelf("-s", path), re.M)}
    have = referenced & defined
    return [(p, n, int(f"{p}_{n}_semaphore" in have), c) for p, n, _, c in found]


def self_test():
    good = "".join(
        f"  stapsdt  0x00000040  NT_STAPSDT (SystemTap probe descriptors)\n    Provider: etnp\n    Name: {name}\n"
        f"    Location: 0x0000000000001234, Base: 0x0000000000000000, Semaphore: 0x0000000000000010\n"
        f"    Arguments: {' '.join(['8@%rax'] * n)}\n"
        for name, n in PROBES.items())
    if problems_of("good", notes(good)):
        print("self-test failed: complete notes were rejected:", *problems_of("good", notes(good)), sep="\n  ")
        return 1
    bad = good.replace("Name: method_load_end", "Name: method_loaded")           # renamed
    bad = bad.replace("Name: execute_end\n    Location: 0x0000000000001234, Base: 0x0000000000000000, "
                      "Semaphore: 0x0000000000000010\n    Arguments: 8@%rax 8@%rax",
                      "Name: execute_end\n    Location: 0x0000000000001234, Base: 0x0000000000000000, "
                      "Semaphore: 0x0000000000000000\n    Arguments: 8@%rax")  # one argument, no semaphore
    found = problems_of("bad", notes(bad))
    expected = ["bad: no probe etnp:method_load_end", "bad: etnp:execute_end has 1 arguments, expected 2",
                "bad: etnp:execute_end has no semaphore", "bad: probe etnp:method_loaded is not in"]
    missing = [e for e in expected if not any(p.startswith(e) for p in found)]
    if missing or len(found) != len(expected):
        print("self-test failed; found:", *found, "expected:", *expected, sep="\n  ")
        return 1
    print("self-test: the missing, renamed and malformed probes were found")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--usdt", choices=["ON", "OFF"], default="ON", help="the build's ETNP_USDT")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.files:
        parser.error("no files to check")
    problems = []
    for path in args.files:
        found = read_notes(path)
        if args.usdt == "OFF":
            problems += [f"{path}: probe etnp:{n[1]} is built in although ETNP_USDT is off" for n in found
                         if n[0] == "etnp"]
        else:
            problems += problems_of(path, found)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} USDT probe problem(s); the probes are listed in docs/tracing.md")
        return 1
    if args.usdt == "OFF":
        print("skipped: this build has ETNP_USDT off (-DETNP_USDT=OFF, or no <sys/sdt.h>: systemtap-sdt-dev), so it has no "
              "probes to check (and has none built in)")
        return SKIP
    print(f"usdt: {len(PROBES)} etnp probes with their arguments and semaphores in", *args.files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
