"""bench/arm64_instruction_counts.py reads the right loop and counts it right: its parser and its counts, on
disassembly text written here by hand (objdump's format), so that the test needs no cross toolchain."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import arm64_instruction_counts as counts  # noqa: E402

# A GEMM-like function: an outer loop around an inner loop of 2 loads (3 registers) and 4 FMLAs by element, then
# a scalar remainder loop with one FMLA on s registers; objdump -d --no-show-raw-insn -C prints it so.
DISASSEMBLY = """
0000000000000000 <etnp::compute::neon::kernel<false, 4>(unsigned long, float const*)>:
   0:\tmov\tx2, #0x0
   4:\tld1\t{v0.4s, v1.4s}, [x1], #32
   8:\tldr\tq2, [x3], #16
   c:\tfmla\tv16.4s, v0.4s, v2.s[0]
  10:\tfmla\tv17.4s, v1.4s, v2.s[1]
  14:\tfmla\tv18.4s, v0.4s, v2.s[2]
  18:\tfmla\tv19.4s, v1.4s, v2.s[3]
  1c:\tsubs\tx0, x0, #0x1
  20:\tb.ne\t4 <etnp::compute::neon::kernel<false, 4>(unsigned long, float const*)+0x4>  // b.any
  24:\tldr\ts3, [x4], #4
  28:\tfmla\ts20, s3, v2.s[0]
  2c:\tcbnz\tx5, 24 <etnp::compute::neon::kernel<false, 4>(unsigned long, float const*)+0x24>
  30:\tst1\t{v16.4s}, [x6]
  34:\tadd\tx2, x2, #0x1
  38:\tb.lt\t4 <etnp::compute::neon::kernel<false, 4>(unsigned long, float const*)+0x4>  // b.tstop
  3c:\tret

0000000000000040 <xnn_qs8_gemm_ukernel_1x16c4__aarch64_neondot@@Base>:
  40:\tldp\tq0, q1, [x3], #32
  44:\tsdot\tv16.4s, v0.16b, v4.4b[0]
  48:\tsmmla\tv17.4s, v1.16b, v5.16b
  4c:\tsmull\tv2.8h, v0.8b, v1.8b
  50:\tsmlal2\tv2.8h, v0.16b, v1.16b
  54:\tsadalp\tv18.4s, v2.8h
  58:\tsubs\tx0, x0, #0x4
  5c:\tb.hi\t40 <xnn_qs8_gemm_ukernel_1x16c4__aarch64_neondot@@Base>  // b.pmore
  60:\tret
"""


def test_functions_are_parsed_with_their_instructions():
    functions = counts.parse_functions(DISASSEMBLY)
    assert set(functions) == {"etnp::compute::neon::kernel<false, 4>(unsigned long, float const*)",
                              "xnn_qs8_gemm_ukernel_1x16c4__aarch64_neondot"}  # the symbol version is dropped
    kernel = functions["etnp::compute::neon::kernel<false, 4>(unsigned long, float const*)"]
    assert len(kernel) == 16 and kernel[3].mnemonic == "fmla" and kernel[3].addr == 0xC


def test_the_innermost_loop_doing_the_most_multiply_accumulates_is_chosen():
    kernel = counts.parse_functions(DISASSEMBLY)["etnp::compute::neon::kernel<false, 4>(unsigned long, float const*)"]
    loop = counts.main_loop(kernel)
    # 0x4..0x20, not the outer 0x4..0x38 (it holds the inner one) nor the remainder 0x24..0x2c (fewer MACs).
    assert (loop.insns, loop.macs, loop.mac_insns) == (8, 16, 4)
    assert (loop.loads, loop.stores, loop.vector, loop.other) == (3, 0, 4, 2)
    assert loop.insns_per_mac == pytest.approx(0.5)
    # A76: max(8 / 4 decoded, 4 vector / 2 pipes, 3 loads / 2) = 2 cycles: 8 MACs a cycle, FMLA's ceiling.
    assert loop.a76_cycles == pytest.approx(2.0)
    assert loop.a76_macs_per_cycle == pytest.approx(8.0)


def test_integer_multiply_accumulates_are_counted_by_their_products():
    loop = counts.main_loop(counts.parse_functions(DISASSEMBLY)["xnn_qs8_gemm_ukernel_1x16c4__aarch64_neondot"])
    # SDOT .4s 16, SMMLA 32, SMULL .8h 8, SMLAL2 .8h 8; SADALP folds the products in and multiplies nothing.
    assert loop.macs == 16 + 32 + 8 + 8
    assert loop.mac_insns == 4 and loop.loads == 2  # LDP of two q registers
    assert (loop.v0_only, loop.v1_only, loop.vector) == (2, 1, 5)
    # Vector pipes: max(V0-only 2, V1-only 1, 5 / 2) = 2.5 cycles; decode 8 / 4 = 2.
    assert loop.a76_cycles == pytest.approx(2.5)


def test_a_function_without_a_multiply_accumulating_loop_has_none():
    text = """
0000000000000000 <copy>:
   0:\tldr\tq0, [x1], #16
   4:\tstr\tq0, [x2], #16
   8:\tsubs\tx0, x0, #0x1
   c:\tb.ne\t0 <copy>
  10:\tret
"""
    assert counts.main_loop(counts.parse_functions(text)["copy"]) is None


@pytest.mark.parametrize("insn, macs", [
    ("fmla v0.4s, v1.4s, v2.4s", 4), ("fmla v0.2d, v1.2d, v2.2d", 2), ("fmla v0.8h, v1.8h, v2.h[1]", 8),
    ("udot v0.2s, v1.8b, v2.8b", 8), ("usdot v0.4s, v1.16b, v2.16b", 16), ("mla v0.16b, v1.16b, v2.16b", 16),
    ("umull2 v0.4s, v1.8h, v2.8h", 4), ("fadd v0.4s, v1.4s, v2.4s", 0), ("madd x0, x1, x2, x3", 0),
])
def test_multiply_accumulates_per_instruction(insn, macs):
    mnemonic, operands = insn.split(" ", 1)
    assert counts.macs_of(counts.Insn(0, mnemonic, operands)) == macs
