#!/usr/bin/env python3
"""Fails when a source file includes a header of a layer it may not use (docs/architecture.md).

Every file under src/, python/src/ and tools/ belongs to one layer, and so does every project header it can
include: src/<layer>/..., the public etnp/*.h headers, and the headers flatc generates from each schema. A
layer may include its own headers and those of the layers listed for it in ALLOWED; anything else is an
edge the build must not have. The script also reads the DEPS of each etnp_layer() in CMakeLists.txt, so
the libraries link no layer that their sources may not include.

  check_layers.py [--root DIR]   check a source tree (default: the repository holding this script)
  check_layers.py --self-test    check that a tree with a forbidden include fails
"""
import argparse
import pathlib
import re
import sys
import tempfile

# layer -> the layers it may include, besides itself.
ALLOWED = {
    "core": set(),
    "format": {"core"},
    "compute": {"core"},
    "kernels": {"core", "compute"},
    "backends/xnnpack": {"core", "compute"},
    "runtime": {"core", "format", "compute", "kernels", "backends/xnnpack"},
    "llm": {"core", "format", "runtime"},
    "cli": {"core", "format", "runtime", "llm"},
    "python": {"core", "format", "runtime", "llm"},
    "tools": {"core", "format", "compute", "kernels", "backends/xnnpack", "runtime", "llm"},
}
# Layers above the runtime that use it only through its public API (include/etnp/), never runtime/*.h.
API_ONLY = {"cli", "python", "llm"}
# CMake library target -> layer.
TARGETS = {
    "etnp_core": "core", "etnp_format": "format", "etnp_compute": "compute", "etnp_kernels": "kernels",
    "etnp_backend_xnnpack": "backends/xnnpack", "etnp_runtime": "runtime", "etnp_llm": "llm",
}
# Public headers (include/etnp/): the runtime's API sits on top of the core types.
PUBLIC_RUNTIME = {"etnp/program.h", "etnp/etnp.h"}
# Public headers of the layers above the runtime.
PUBLIC_UPPER = {"etnp/tokenizer.h": "llm"}
# Headers flatc writes, by the layer that owns the schema.
GENERATED = {
    "program_generated.h": "format", "scalar_type_generated.h": "format", "flat_tensor_generated.h": "format",
    "flat_tensor_legacy_generated.h": "format", "etdump_generated.h": "format",
    "bundled_program_generated.h": "format", "xnnpack_graph_generated.h": "backends/xnnpack",
}
# Third-party headers only one layer (or one file) may use.
SYSTEM_OWNERS = {"xnnpack.h": {"backends/xnnpack"}, "pybind11/": {"python"}, "sleef.h": {"compute"},
                 "sys/sdt.h": {"src/runtime/probes.h"}, "pcre2.h": {"llm"}, "utf8proc.h": {"llm"},
                 "sentencepiece_processor.h": {"llm"}}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)


def layer_of_file(rel: str):
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return "backends/xnnpack" if parts[1] == "backends" else parts[1]
    if parts[0] == "python" and len(parts) > 1 and parts[1] == "src":
        return "python"
    if parts[0] == "tools":
        return "tools"
    return None


def layer_of_header(name: str):
    if name in GENERATED:
        return GENERATED[name]
    if name.startswith("etnp/"):
        return PUBLIC_UPPER.get(name, "runtime" if name in PUBLIC_RUNTIME else "core")
    if name.startswith("backends/"):
        return "backends/xnnpack"
    if name.startswith("tools/"):
        return "tools"
    head = name.split("/")[0]
    return head if head in ALLOWED else None


def check(root: pathlib.Path):
    problems = []
    for path in sorted(p for d in ("src", "python/src", "tools") for p in (root / d).rglob("*")
                       if p.suffix in (".h", ".cpp", ".inc")):
        rel = path.relative_to(root).as_posix()
        layer = layer_of_file(rel)
        if layer is None:
            problems.append(f"{rel}: not in any layer (put it under src/<layer>/, python/src/ or tools/)")
            continue
        text = path.read_text(errors="replace")
        for match in INCLUDE.finditer(text):
            kind, name = match.groups()
            line = text.count("\n", 0, match.start()) + 1
            if kind == "<":
                for prefix, owners in SYSTEM_OWNERS.items():
                    if name.startswith(prefix) and layer not in owners and rel not in owners and layer != "tools":
                        problems.append(f"{rel}:{line}: <{name}> belongs to {', '.join(sorted(owners))}, "
                                        f"not {layer}")
                continue
            target = layer_of_header(name)
            if target is None:
                if not (path.parent / name).exists():
                    problems.append(f'{rel}:{line}: "{name}" is in no layer')
                continue
            if layer in API_ONLY and name.startswith("runtime/"):
                problems.append(f'{rel}:{line}: {layer} includes "{name}", a runtime internal; {layer} uses the '
                                f"runtime through include/etnp/ only")
                continue
            if target != layer and target not in ALLOWED[layer]:
                problems.append(f'{rel}:{line}: {layer} includes "{name}" of {target}, which {layer} may not use')
    cmake = (root / "CMakeLists.txt").read_text()
    for match in re.finditer(r"etnp_layer\((\w+)([^)]*)\)", cmake):
        target, args = match.groups()
        layer = TARGETS.get(target)
        if layer is None:
            problems.append(f"CMakeLists.txt: library {target} is not a known layer")
            continue
        deps = re.search(r"DEPS\s+(.*)", args, re.S)
        for dep in (deps.group(1).split() if deps else []):
            if dep in TARGETS and TARGETS[dep] not in ALLOWED[layer]:
                problems.append(f"CMakeLists.txt: {target} links {dep}, a layer {layer} may not use")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "src/kernels").mkdir(parents=True)
        (root / "src/runtime").mkdir(parents=True)
        (root / "src/kernels/add.cpp").write_text('#include "kernels/add.h"\n#include "runtime/method.h"\n')
        (root / "src/kernels/add.h").write_text("#include <xnnpack.h>\n")
        (root / "src/runtime/method.cpp").write_text('#include "kernels/add.h"\n#include "etnp/program.h"\n'
                                                     "#include <sys/sdt.h>\n")
        (root / "src/runtime/probes.h").write_text("#include <sys/sdt.h>\n")
        (root / "python/src").mkdir(parents=True)
        (root / "python/src/module.cpp").write_text('#include "etnp/program.h"\n#include "runtime/method_impl.h"\n')
        (root / "CMakeLists.txt").write_text("etnp_layer(etnp_kernels SOURCES a.cpp DEPS etnp_runtime)\n")
        problems = check(root)
        expected = ['src/kernels/add.cpp:2: kernels includes "runtime/method.h"',
                    "src/kernels/add.h:1: <xnnpack.h> belongs to backends/xnnpack",
                    "src/runtime/method.cpp:3: <sys/sdt.h> belongs to src/runtime/probes.h",
                    'python/src/module.cpp:2: python includes "runtime/method_impl.h", a runtime internal',
                    "CMakeLists.txt: etnp_kernels links etnp_runtime"]
        missing = [e for e in expected if not any(p.startswith(e) for p in problems)]
        if missing or len(problems) != len(expected):
            print("self-test failed; found:", *problems, "expected:", *expected, sep="\n  ")
            return 1
    print("self-test: the forbidden edges were found")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[2])
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    problems = check(args.root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layering problem(s); the allowed edges are in docs/architecture.md")
        return 1
    print("layers: every include goes to the file's own layer or one it may use")
    return 0


if __name__ == "__main__":
    sys.exit(main())
