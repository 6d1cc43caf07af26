#!/usr/bin/env python3
"""Instruction counts per multiply-accumulate of etnp's aarch64 micro-kernels, beside XNNPACK's for the same
jobs, from the disassembly of the cross build (scripts/cross-arm64.sh --build-only) and of the sysroot's
libXNNPACK; written as the section "## aarch64 micro-kernels (instruction counts)" of bench/RESULTS.md.

No Arm machine is at hand to time the NEON kernels (qemu's timings mean nothing), so this reads the code instead:
for each kernel, the innermost loop that does multiply-accumulates (a backward branch's range), its instructions
by kind, the multiply-accumulates one pass does, and a first-order throughput bound for a Cortex-A76 (Raspberry
Pi 5) from those counts.

    /usr/bin/python3 bench/arm64_instruction_counts.py [--build build-arm64] [--sysroot DIR] [--output bench/RESULTS.md]
"""

import argparse
import dataclasses
import datetime
import pathlib
import re
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import llm_bench  # noqa: E402  (read/replace a section of RESULTS.md)

SECTION = "## aarch64 micro-kernels (instruction counts)"
OBJDUMP = "aarch64-linux-gnu-objdump"

# Multiply-accumulates (multiplies, for the widening multiplies that a pairwise add folds in later) per
# instruction, by mnemonic and the destination's arrangement. A dot product's lane sums 4 products; a matrix
# multiply-accumulate (SMMLA) makes a 2x2 int32 tile from 2x8 by 8x2 bytes, 32 products.
_LANES = {"16b": 16, "8b": 8, "8h": 8, "4h": 4, "4s": 4, "2s": 2, "2d": 2, "1d": 1}
_MAC_PER_LANE = {
    **dict.fromkeys(["fmla", "fmls", "mla", "mls", "mul", "smlal", "smlal2", "umlal", "umlal2", "smlsl",
                     "smlsl2", "smull", "smull2", "umull", "umull2", "fmlal", "fmlal2"], 1),
    **dict.fromkeys(["sdot", "udot", "usdot", "sudot"], 4),
    "bfdot": 2,
}
_MAC_PER_INSN = {"smmla": 32, "ummla": 32, "usmmla": 32, "bfmmla": 16}

# The Cortex-A76 model (Arm's Cortex-A76 Software Optimization Guide): a 4-wide decoder; two 128-bit ASIMD/FP
# pipes, V0 and V1, each taking one FMLA, SDOT or other vector instruction per cycle, except the integer
# multiplies (MUL, MLA, SMULL, SMLAL: V0 only) and the pairwise add-accumulates (SADALP, UADALP: V1 only); two
# load pipes. A loop pass takes at least the largest of these counts over the units' widths. Latencies, the
# caches and the memory are left out: a lower bound on cycles, which unrolled kernels with enough independent
# accumulators come near.
_V0_ONLY = {"mul", "mla", "mls", "smull", "smull2", "umull", "umull2", "smlal", "smlal2", "umlal", "umlal2",
            "smlsl", "smlsl2"}
_V1_ONLY = {"sadalp", "uadalp"}
_SIMD_REG = re.compile(r"^(v\d+|[qdshb]\d+)(\.|$)")


@dataclasses.dataclass
class Insn:
    addr: int
    mnemonic: str
    operands: str


@dataclasses.dataclass
class LoopCount:
    """One pass of a loop: its instructions by kind and the multiply-accumulates it does."""
    insns: int
    macs: int
    mac_insns: int
    loads: int  # 128-bit (or narrower) load operations: registers loaded, prefetches
    stores: int
    vector: int  # ASIMD/FP instructions other than loads and stores, the multiply-accumulates included
    v0_only: int
    v1_only: int
    other: int  # integer, address and branch instructions

    @property
    def insns_per_mac(self) -> float:
        return self.insns / self.macs

    @property
    def a76_cycles(self) -> float:
        """The pass's cycles on a Cortex-A76, at least (the model above)."""
        # The shared vector instructions fill whichever pipe the pinned ones leave idle.
        pipes = max(self.v0_only, self.v1_only, self.vector / 2)
        return max(self.insns / 4, pipes, self.loads / 2)

    @property
    def a76_macs_per_cycle(self) -> float:
        return self.macs / self.a76_cycles


def macs_of(insn: Insn) -> int:
    m = insn.mnemonic
    if m in _MAC_PER_INSN:
        return _MAC_PER_INSN[m]
    if m not in _MAC_PER_LANE:
        return 0
    dest = insn.operands.split(",")[0].strip()
    if "." in dest:
        return _MAC_PER_LANE[m] * _LANES.get(dest.split(".")[1], 0)
    return 1 if _SIMD_REG.match(dest) else 0  # scalar FMLA/MADD-like forms on s/d registers


def _load_ops(insn: Insn) -> int:
    m = insn.mnemonic
    if m.startswith("prfm"):
        return 1
    if not m.startswith("ld"):
        return 0
    braces = re.match(r"\{([^}]*)\}", insn.operands.strip())
    if braces:  # ld1 {v0.16b, v1.16b}, [x0]: one operation per register
        regs = braces.group(1)
        if "-" in regs:  # ld1 {v0.16b-v3.16b}
            lo, hi = (int(r.strip().split(".")[0][1:]) for r in regs.split("-"))
            return (hi - lo) % 32 + 1
        return len(regs.split(","))
    return 2 if m in ("ldp", "ldnp") else 1


def count(body: list) -> LoopCount:
    c = dict(insns=len(body), macs=0, mac_insns=0, loads=0, stores=0, vector=0, v0_only=0, v1_only=0, other=0)
    for insn in body:
        macs = macs_of(insn)
        c["macs"] += macs
        c["mac_insns"] += macs > 0
        loads = _load_ops(insn)
        if loads:
            c["loads"] += loads
        elif insn.mnemonic.startswith("st"):
            c["stores"] += 1
        elif _SIMD_REG.match(insn.operands.split(",")[0].strip()) or macs:
            c["vector"] += 1
            c["v0_only"] += insn.mnemonic in _V0_ONLY
            c["v1_only"] += insn.mnemonic in _V1_ONLY
        else:
            c["other"] += 1
    return LoopCount(**c)


_HEADER = re.compile(r"^([0-9a-f]+) <(.+)>:$")
_INSN = re.compile(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$")
_TARGET = re.compile(r"\b([0-9a-f]+) <")  # a branch's target: "b.ne 4 <f(int)+0x4>" (names may hold "<>")
_BRANCHES = ("b.", "cbz", "cbnz", "tbz", "tbnz", "b")


def parse_functions(disassembly: str) -> dict:
    """{function name: [Insn]} from `objdump -d --no-show-raw-insn` text."""
    functions, current = {}, None
    for line in disassembly.splitlines():
        header = _HEADER.match(line)
        if header:  # a shared library's symbols carry their version: xnn_...@@Base
            current = functions.setdefault(header.group(2).split("@@")[0], [])
            continue
        insn = _INSN.match(line)
        if insn and current is not None and insn.group(2) != "...":
            current.append(Insn(int(insn.group(1), 16), insn.group(2).lower(), insn.group(3).split("//")[0]))
    return functions


def main_loop(insns: list):
    """The innermost loop (a backward branch's range) that multiply-accumulates, the one with the most
    multiply-accumulates per pass where there are several (an unrolled body before its remainder loop);
    None where no loop multiply-accumulates."""
    index = {insn.addr: i for i, insn in enumerate(insns)}
    loops = []
    for i, insn in enumerate(insns):
        if not (insn.mnemonic.startswith("b.") or insn.mnemonic in _BRANCHES[1:]):
            continue
        target = _TARGET.search(insn.operands)
        if target is None:
            continue
        start = index.get(int(target.group(1), 16))
        if start is not None and start <= i:
            body = insns[start:i + 1]
            if any(macs_of(x) for x in body):
                loops.append((start, i))
    inner = [(s, e) for s, e in loops if not any((s2, e2) != (s, e) and s <= s2 and e2 <= e for s2, e2 in loops)]
    if not inner:
        return None
    return max((count(insns[s:e + 1]) for s, e in inner), key=lambda c: c.macs)


def disassemble(path: pathlib.Path) -> dict:
    out = subprocess.run([OBJDUMP, "-d", "-C", "--no-show-raw-insn", str(path)], capture_output=True, text=True,
                         check=True).stdout
    functions = parse_functions(out)
    if path.suffix != ".a":
        # A stripped shared library keeps only its exported symbols: the disassembler runs on from one into the
        # hidden functions after it. The dynamic symbol table's sizes bound each.
        nm = subprocess.run(["aarch64-linux-gnu-nm", "-D", "-S", "--defined-only", str(path)], capture_output=True,
                            text=True, check=True).stdout
        for fields in (line.split() for line in nm.splitlines()):
            if len(fields) == 4 and fields[3].split("@")[0] in functions:
                insns = functions[fields[3].split("@")[0]]
                end = int(fields[0], 16) + int(fields[1], 16)
                functions[fields[3].split("@")[0]] = [i for i in insns if i.addr < end]
    return functions


# The pairs compared: etnp's kernel (a pattern of its demangled name) against XNNPACK's micro-kernels for the same
# job (patterns of their names; those this build of the library exports are listed). MR x NR is the tile.
PAIRS = [
    ("fp32 GEMM", r"etnp::compute::.*kernel_neon<",
     [r"^xnn_f32_gemm_minmax_ukernel_\d+x\d+__aarch64_neonfma"]),
    ("fp32 depthwise convolution", r"etnp::(compute|kernels)::.*depthwise.*_neon",
     [r"^xnn_f32_dwconv_minmax_ukernel_.*(neon|aarch64)"]),
    ("int8 GEMM (the delegate's qd8 fully-connected tile)", r"etnp::xnn::.*qd8_tile_simd<",
     [r"^xnn_qc8_gemm_minmax_fp32_ukernel_\d+x\d+c\d+__aarch64_neondot",
      r"^xnn_qc8_gemm_minmax_fp32_ukernel_\d+x\d+c\d+__aarch64_neon_mlal$",
      r"^xnn_qs8_qc8w_gemm_minmax_fp32_ukernel_\d+x\d+c\d+__(aarch64_)?neondot",
      r"^xnn_qd8_f32_qc8w_gemm_minmax_ukernel_\d+x\d+c\d+__(aarch64_)?neondot"]),
    ("int8 depthwise convolution", r"etnp::xnn::.*depthwise_qs8_row_neon",
     [r"^xnn_qs8_dwconv_minmax_fp32_ukernel_.*(neon|aarch64)", r"^xnn_qc8_dwconv_minmax_fp32_ukernel_.*(neon|aarch64)"]),
    ("4-bit GEMM (qd8 x qb4w/qc4w)", r"etnp::compute::.*(neon|dotprod|i8mm)::tile_",
     [r"^xnn_qd8_f32_qc4w_gemm_minmax_ukernel_.*(neon|aarch64)",
      r"^xnn_qd8_f32_qb4w_gemm_minmax_ukernel_.*(neon|aarch64)"]),
]


MAX_ROWS = 6  # etnp's rows per kind: its widest tiles


def row(name: str, c: LoopCount) -> str:
    return (f"| {name} | {c.insns} | {c.macs} | {c.mac_insns} | {c.loads} | {c.vector - c.mac_insns} | {c.other} | "
            f"{c.insns_per_mac:.3f} | {c.a76_cycles:.1f} | {c.a76_macs_per_cycle:.1f} |")


def short(name: str, width: int = 110) -> str:
    name = name.replace("(anonymous namespace)::", "")
    return name if len(name) <= width else name[:width - 1] + "…"


def report(build: pathlib.Path, sysroot: pathlib.Path) -> str:
    ours = {}
    for lib in sorted(build.glob("libetnp_*.a")):
        ours.update(disassemble(lib))
    xnn_lib = next(iter(sorted((sysroot / "usr/lib/aarch64-linux-gnu").glob("libXNNPACK.so*"), reverse=True)), None)
    theirs = disassemble(xnn_lib) if xnn_lib else {}
    stamp = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}"
    lines = [
        f"{SECTION}\n",
        f"Generated by `bench/arm64_instruction_counts.py` on {stamp} UTC from `{build}` (the cross build, `scripts/cross-arm64.sh --build-only`) and "
        f"`{xnn_lib.name if xnn_lib else 'no libXNNPACK'}` of the arm64 sysroot (Debian's XNNPACK). No Arm machine "
        "was at hand: these are counts read from the code, not timings.\n",
        "For each kernel, the innermost loop that multiply-accumulates (a backward branch's range; where there are "
        "several, the one doing the most per pass). *MACs*: multiply-accumulates per pass (FMLA .4s = 4, SDOT .4s "
        "= 16, SMLAL .8h = 8, SMMLA = 32). *loads*: 128-bit load operations. *other vector*: ASIMD work that is "
        "not a multiply-accumulate (unpacking, widening, shuffles). *other*: integer, address and branch "
        "instructions. *A76 cycles*: a lower bound for one pass on a Cortex-A76 (Raspberry Pi 5) from the counts: "
        "4 instructions decoded per cycle, two 128-bit vector pipes (integer multiplies on V0 only, pairwise "
        "add-accumulates on V1 only), two loads per cycle; latencies and memory left out. *A76 MACs/cycle*: the "
        "ceiling that follows: 8 for fp32 FMLA, 32 for SDOT, 64 for SMMLA at two per cycle.\n",
    ]
    header = ["| kernel | insns | MACs | MAC insns | loads | other vector | other | insns / MAC | A76 cycles | "
              "A76 MACs/cycle |", "|---|---|---|---|---|---|---|---|---|---|"]
    for label, our_pattern, their_patterns in PAIRS:
        mine = sorted((n, c) for n, insns in ours.items() if re.search(our_pattern, n)
                      for c in [main_loop(insns)] if c is not None)
        # Template instances share loops (direct and indirect rows, bf16 and fp32 scales): one row per loop,
        # the widest tiles (most MACs a pass) first, at most MAX_ROWS.
        unique = {}
        for n, c in sorted(mine, key=lambda nc: (-nc[1].macs, nc[1].insns, nc[0])):
            unique.setdefault(dataclasses.astuple(c), (n, c))
        mine = list(unique.values())[:MAX_ROWS]
        xnn = sorted((n, c) for n, insns in theirs.items() if any(re.search(p, n) for p in their_patterns)
                     for c in [main_loop(insns)] if c is not None)
        lines.append(f"### {label}\n")
        if not mine and not xnn:
            lines.append("No kernel of this kind in either build.\n")
            continue
        lines += header
        lines += [row(f"etnp `{short(n)}`", c) for n, c in mine] or ["| etnp: no NEON kernel | | | | | | | | | |"]
        lines += [row(f"XNNPACK `{n}`", c) for n, c in xnn] or ["| XNNPACK: none exported | | | | | | | | | |"]
        lines.append("")
        lines.append(verdict(mine, xnn))
    return "\n".join(lines)


def verdict(mine: list, xnn: list) -> str:
    """What etnp's inner loop needs to reach XNNPACK's best bound, per multiply-accumulate."""
    if not xnn:
        return "XNNPACK exports no kernel of this kind to compare with.\n"
    best_name, best = max(xnn, key=lambda nc: nc[1].a76_macs_per_cycle)
    rate = best.a76_macs_per_cycle
    need = (f"To match XNNPACK's best bound ({rate:.1f} MACs/cycle, `{best_name}`) on a Cortex-A76, a loop may "
            f"spend at most {4 / rate:.3f} instructions, {2 / rate:.3f} vector instructions and {2 / rate:.3f} "
            "loads per multiply-accumulate")
    if not mine:
        return need + ".\n"
    ours_name, ours = max(mine, key=lambda nc: nc[1].a76_macs_per_cycle)
    ratio = ours.a76_macs_per_cycle / rate
    return (need + f"; etnp's best, `{short(ours_name, 80)}`, spends {ours.insns_per_mac:.3f}, "
            f"{ours.vector / ours.macs:.3f} and {ours.loads / ours.macs:.3f}: {ours.a76_macs_per_cycle:.1f} "
            f"MACs/cycle, {ratio:.2f} of XNNPACK's bound.\n")



def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build-arm64", help="the aarch64 build folder (default build-arm64)")
    parser.add_argument("--sysroot", default=str(pathlib.Path.home() / ".cache/etnp/arm64-sysroot"),
                        help="the arm64 sysroot holding libXNNPACK (default ~/.cache/etnp/arm64-sysroot)")
    parser.add_argument("--output", default=None, help="write the section into this RESULTS.md")
    args = parser.parse_args()
    build = pathlib.Path(args.build)
    if not any(build.glob("libetnp_*.a")):
        print(f"{build}: no libetnp_*.a (run scripts/cross-arm64.sh --build-only first)", file=sys.stderr)
        return 2
    section = report(build, pathlib.Path(args.sysroot))
    print(section)
    if args.output:
        llm_bench.replace_section(pathlib.Path(args.output), section, SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
