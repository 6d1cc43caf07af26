"""Small .pte programs written for the Python tests, as FlatBuffers JSON compiled with flatc against the project's
own schema (src/format/schema/program.fbs). They cover what the public fixtures do not: channels-last inputs,
every dtype, outputs that are not memory-planned, non-tensor inputs and outputs, and each error class.
"""

import json
import pathlib
import shutil
import subprocess
from typing import Dict, List, Optional, Sequence

REPO = pathlib.Path(__file__).resolve().parents[2]
SCHEMA_DIR = REPO / "src" / "format" / "schema"

# numpy dtype name -> (schema enum name, element size)
DTYPES = {
    "float32": ("FLOAT", 4),
    "float64": ("DOUBLE", 8),
    "float16": ("HALF", 2),
    "bfloat16": ("BFLOAT16", 2),
    "int64": ("LONG", 8),
    "int32": ("INT", 4),
    "int16": ("SHORT", 2),
    "int8": ("CHAR", 1),
    "uint8": ("BYTE", 1),
    "bool": ("BOOL", 1),
    "uint16": ("UINT16", 2),
}


def flatc() -> Optional[str]:
    return shutil.which("flatc")


def tensor(dtype: str, sizes: Sequence[int], dim_order: Optional[Sequence[int]] = None,
           offset: Optional[int] = None, dynamism: str = "STATIC", constant: int = 0) -> Dict:
    t = {
        "scalar_type": DTYPES[dtype][0] if dtype in DTYPES else dtype,
        "sizes": list(sizes),
        "dim_order": list(dim_order) if dim_order is not None else list(range(len(sizes))),
        "shape_dynamism": dynamism,
    }
    if offset is not None:  # memory-planned in arena 1 at `offset`
        t["allocation_info"] = {"memory_id": 1, "memory_offset_low": offset}
    if constant:  # data in Program.constant_buffer[constant]
        t["data_buffer_idx"] = constant
    return {"val_type": "Tensor", "val": t}


def int_value(v: int) -> Dict:
    return {"val_type": "Int", "val": {"int_val": v}}


def double_value(v: float) -> Dict:
    return {"val_type": "Double", "val": {"double_val": v}}


def bool_value(v: bool) -> Dict:
    return {"val_type": "Bool", "val": {"bool_val": v}}


def kernel(op_index: int, args: Sequence[int]) -> Dict:
    return {"instr_args_type": "KernelCall", "instr_args": {"op_index": op_index, "args": list(args)}}


def delegate_call(index: int, args: Sequence[int]) -> Dict:
    return {"instr_args_type": "DelegateCall", "instr_args": {"delegate_index": index, "args": list(args)}}


def operator(name: str) -> Dict:
    ns_name, _, overload = name.partition(".")
    return {"name": ns_name, "overload": overload}


def plan(name: str, values: List[Dict], inputs: Sequence[int], outputs: Sequence[int],
         instructions: Sequence[Dict] = (), operators: Sequence[str] = (), arena_bytes: int = 0,
         delegates: Sequence[Dict] = ()) -> Dict:
    return {
        "name": name,
        "values": values,
        "inputs": list(inputs),
        "outputs": list(outputs),
        "chains": [{"inputs": list(inputs), "outputs": list(outputs), "instructions": list(instructions)}],
        "operators": [operator(o) for o in operators],
        "delegates": list(delegates),
        "non_const_buffer_sizes": [0, arena_bytes] if arena_bytes else [0],
    }


def program(plans: List[Dict], delegate_data: Sequence[Sequence[int]] = (),
            constants: Sequence[Sequence[int]] = ()) -> Dict:
    return {
        "version": 0,
        "execution_plan": plans,
        # The legacy constant layout: entry 0 is the reserved empty buffer.
        "constant_buffer": [{"storage": list(c)} for c in ([[]] + list(constants))] if constants else [],
        "backend_delegate_data": [{"data": list(d)} for d in delegate_data],
        "segments": [],
    }


def compile_program(spec: Dict, path: pathlib.Path) -> pathlib.Path:
    """Writes `spec` as a .pte at `path` (flatc JSON -> binary)."""
    json_path = path.with_suffix(".json")
    json_path.write_text(json.dumps(spec, indent=1))
    subprocess.run(
        [flatc(), "-b", "-o", str(path.parent), "-I", str(SCHEMA_DIR), str(SCHEMA_DIR / "program.fbs"), str(json_path)],
        check=True, capture_output=True,
    )
    # flatc names its output after the JSON file, with the schema's file extension (".pte") or ".bin".
    for produced in (json_path.with_suffix(".pte"), json_path.with_suffix(".bin")):
        if produced.exists() and produced != path:
            produced.rename(path)
    json_path.unlink()
    return path


# --- The programs ---------------------------------------------------------------------------------------------


def layouts_program() -> Dict:
    """identity_cl: returns its f32[1,3,4,4] channels-last input; identity_contig: returns its f32[2,3,4] input;
    passthrough: returns its f32[2,3,4] input, which is not memory-planned (the caller's buffer is bound)."""
    return program([
        plan("identity_cl", [tensor("float32", [1, 3, 4, 4], [0, 2, 3, 1], offset=0)], [0], [0], arena_bytes=192),
        plan("identity_contig", [tensor("float32", [2, 3, 4], offset=0)], [0], [0], arena_bytes=96),
        plan("passthrough", [tensor("float32", [2, 3, 4])], [0], [0]),
    ])


def dtypes_program() -> Dict:
    """id_<dtype>: returns its [2, 3] input, one method per dtype. const_int64: returns the constant int64 [1, -2]
    (not memory-planned but a constant); const_qint8: returns a quantized qint8[2] constant, which numpy cannot
    hold."""
    return program(
        [plan(f"id_{name}", [tensor(name, [2, 3], offset=0)], [0], [0], arena_bytes=64) for name in DTYPES]
        + [plan("const_int64", [tensor("int64", [2], constant=1)], [], [0]),
           plan("const_qint8", [tensor("QINT8", [2], constant=2)], [], [0])],
        constants=[[1, 0, 0, 0, 0, 0, 0, 0, 0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], [5, 0xFB]],
    )


def arith_program() -> Dict:
    """
    add_mul(x, y): (x + y planned, x * y NOT memory-planned), f32[2, 3].
    gather(x f32[4], idx i64[2]): index_select(x, 0, idx) -> an ExecutionError for an index out of range.
    scalars(3, 2.5, True): returns its three non-tensor inputs.
    dynamic(x f32[<=4, 3]): x + x, bounded dynamic shape.
    """
    add_mul = plan(
        "add_mul",
        [tensor("float32", [2, 3], offset=0), tensor("float32", [2, 3], offset=32), int_value(1),
         tensor("float32", [2, 3], offset=64), tensor("float32", [2, 3])],
        [0, 1], [3, 4],
        [kernel(0, [0, 1, 2, 3, 3]), kernel(1, [0, 1, 4, 4])],
        ["aten::add.out", "aten::mul.out"], arena_bytes=96,
    )
    gather = plan(
        "gather",
        [tensor("float32", [4], offset=0), int_value(0), tensor("int64", [2], offset=16), tensor("float32", [2], offset=32)],
        [0, 2], [3],
        [kernel(0, [0, 1, 2, 3, 3])],
        ["aten::index_select.out"], arena_bytes=48,
    )
    scalars = plan("scalars", [int_value(3), double_value(2.5), bool_value(True)], [0, 1, 2], [0, 1, 2])
    dynamic = plan(
        "dynamic",
        [tensor("float32", [4, 3], offset=0, dynamism="DYNAMIC_BOUND"), int_value(1),
         tensor("float32", [4, 3], offset=48, dynamism="DYNAMIC_BOUND")],
        [0], [2],
        [kernel(0, [0, 0, 1, 2, 2])],
        ["aten::add.out"], arena_bytes=96,
    )
    return program([add_mul, gather, scalars, dynamic])


def outputs_program() -> Dict:
    """Outputs that are not memory-planned, for Method.set_output:
    both(x, y): (x + y, x * y), f32[2, 3], neither output planned.
    twice(x, y): (x + y, x + y), one unplanned value returned at two output indices.
    channels_last(x f32[1, 2, 2, 2]): x + x into an unplanned channels-last output.
    add_into_input(x f32[2, 3] unplanned, y f32[2, 3]): x += y in place (an input the method writes), returns x.
    """
    both = plan(
        "both",
        [tensor("float32", [2, 3], offset=0), tensor("float32", [2, 3], offset=32), int_value(1),
         tensor("float32", [2, 3]), tensor("float32", [2, 3])],
        [0, 1], [3, 4],
        [kernel(0, [0, 1, 2, 3, 3]), kernel(1, [0, 1, 4, 4])],
        ["aten::add.out", "aten::mul.out"], arena_bytes=64,
    )
    twice = plan(
        "twice",
        [tensor("float32", [2, 3], offset=0), tensor("float32", [2, 3], offset=32), int_value(1),
         tensor("float32", [2, 3])],
        [0, 1], [3, 3],
        [kernel(0, [0, 1, 2, 3, 3])],
        ["aten::add.out"], arena_bytes=64,
    )
    channels_last = plan(
        "channels_last",
        [tensor("float32", [1, 2, 2, 2], dim_order=[0, 2, 3, 1], offset=0), int_value(1),
         tensor("float32", [1, 2, 2, 2], dim_order=[0, 2, 3, 1])],
        [0], [2],
        [kernel(0, [0, 0, 1, 2, 2])],
        ["aten::add.out"], arena_bytes=32,
    )
    add_into_input = plan(
        "add_into_input",
        [tensor("float32", [2, 3]), tensor("float32", [2, 3], offset=0), int_value(1)],
        [0, 1], [0],
        [kernel(0, [0, 1, 2, 0, 0])],
        ["aten::add.out"], arena_bytes=32,
    )
    return program([both, twice, channels_last, add_into_input])


def edges_program() -> Dict:
    """Shapes at the edges, for the bad-input matrix: zero_d(x f32[]) -> x + x; empty(x f32[0, 3]) -> x + x."""
    def doubling(name: str, sizes: Sequence[int]) -> Dict:
        return plan(
            name,
            [tensor("float32", sizes, offset=0), int_value(1), tensor("float32", sizes, offset=16)],
            [0], [2],
            [kernel(0, [0, 0, 1, 2, 2])],
            ["aten::add.out"], arena_bytes=32,
        )

    return program([doubling("zero_d", []), doubling("empty", [0, 3])])


def missing_operator_program() -> Dict:
    return program([
        plan("forward", [tensor("float32", [2], offset=0), tensor("float32", [2], offset=16)], [0], [1],
             [kernel(0, [0, 1, 1])], ["etnp_test_missing::frobnicate.out"], arena_bytes=32),
    ])


def missing_backend_program() -> Dict:
    delegate = {"id": "EtnpTestMissingBackend", "processed": {"location": "INLINE", "index": 0}, "compile_specs": []}
    return program(
        [plan("forward", [tensor("float32", [2], offset=0), tensor("float32", [2], offset=16)], [0], [1],
              [delegate_call(0, [0, 1])], arena_bytes=32, delegates=[delegate])],
        delegate_data=[[1, 2, 3, 4]],
    )


def add_program() -> Dict:
    """forward(x f32[2, 2], y f32[2, 2]) -> x + y: the model.pte of the examples in docs/python.md."""
    return program([
        plan("forward",
             [tensor("float32", [2, 2], offset=0), tensor("float32", [2, 2], offset=16), int_value(1),
              tensor("float32", [2, 2], offset=32)],
             [0, 1], [3], [kernel(0, [0, 1, 2, 3, 3])], ["aten::add.out"], arena_bytes=48),
    ])


def loop_program() -> Dict:
    """forward(x f32[2]) -> |x|, then a jump to itself on a constant false: it never ends without the runtime's
    instruction budget (ResourceLimits.max_instructions_per_execute)."""
    jump_to_self = {"instr_args_type": "JumpFalseCall",
                    "instr_args": {"cond_value_index": 2, "destination_instruction": 1}}
    return program([
        plan("forward",
             [tensor("float32", [2], offset=0), tensor("float32", [2], offset=16), bool_value(False)],
             [0], [1], [kernel(0, [0, 1, 1]), jump_to_self], ["aten::abs.out"], arena_bytes=32),
    ])


ALL = {
    "add": add_program,
    "loop": loop_program,
    "layouts": layouts_program,
    "dtypes": dtypes_program,
    "arith": arith_program,
    "outputs": outputs_program,
    "edges": edges_program,
    "missing_operator": missing_operator_program,
    "missing_backend": missing_backend_program,
}


def build_all(directory: pathlib.Path) -> Dict[str, pathlib.Path]:
    return {name: compile_program(make(), directory / f"{name}.pte") for name, make in ALL.items()}


def successor_lm_program(vocab: int = 16, max_seq: int = 32, bos: int = 1, eos: int = 15) -> Dict:
    """A language-model program in the shape of ExecuTorch's LLM export, whose next token is known:
    forward(tokens i64[1, <=max_seq-1], start_pos i64[1]) -> logits f32[1, vocab] of the last token, read from a
    table whose row t peaks at t + 1 (the last row at itself), logits[t][j] = -|j - (t + 1)|. Greedy decoding
    after token t therefore yields t + 1, t + 2, ... up to `eos`. The metadata methods say max_seq_len, BOS,
    EOS, the vocabulary size and that there is a KV cache (the start position is taken and unused)."""
    import struct

    table = []
    for t in range(vocab):
        successor = min(t + 1, vocab - 1)
        table.extend(-float(abs(j - successor)) for j in range(vocab))
    weight = list(struct.pack("<%df" % len(table), *table))
    bound = max_seq - 1
    values = [
        tensor("int64", [1, bound], dynamism="DYNAMIC_BOUND"),              # 0 tokens (caller's memory)
        tensor("int64", [1]),                                                # 1 start position
        tensor("float32", [vocab, vocab], constant=1),                       # 2 the table
        int_value(-1), bool_value(False),                                    # 3 padding_idx, 4 flags
        tensor("float32", [1, bound, vocab], offset=0, dynamism="DYNAMIC_BOUND"),  # 5 every token's logits
        int_value(1), int_value(-1),                                         # 6 dim, 7 index: the last token
        tensor("float32", [1, vocab], offset=bound * vocab * 4),             # 8 logits
    ]
    forward = plan("forward", values, [0, 1], [8],
                   [kernel(0, [2, 0, 3, 4, 4, 5, 5]), kernel(1, [5, 6, 7, 8, 8])],
                   ["aten::embedding.out", "aten::select_copy.int_out"], arena_bytes=(bound + 1) * vocab * 4)
    constants = [plan("get_max_seq_len", [int_value(max_seq)], [], [0]),
                 plan("get_bos_id", [int_value(bos)], [], [0]),
                 plan("get_eos_ids", [int_value(eos)], [], [0]),
                 plan("get_vocab_size", [int_value(vocab)], [], [0]),
                 plan("use_kv_cache", [bool_value(True)], [], [0])]
    return program([forward] + constants, constants=[weight])
