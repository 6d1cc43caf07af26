"""The installed C++ package (docs/cpp.md): `cmake --install` of the build in $ETNP_BUILD_DIR (default build/)
into a temporary prefix, then programs built out of tree against it: examples/cmake_package with
find_package(etnp CONFIG REQUIRED), run on public fixtures; the C++ example of README.md and the example of
docs/cpp.md, compiled and linked; the same example through pkg-config. Skipped when the build is absent."""

import os
import pathlib
import re
import shutil
import subprocess

import pytest

from conftest import REPO, fixtures_dir

EXAMPLE = REPO / "examples" / "cmake_package"
LAYERS = ["core", "format", "compute", "kernels", "runtime", "llm"]


def build_dir():
    return pathlib.Path(os.environ.get("ETNP_BUILD_DIR", REPO / "build")).resolve()


def cache_value(name):
    match = re.search(rf"^{name}:[A-Z]+=(.*)$", (build_dir() / "CMakeCache.txt").read_text(), flags=re.M)
    return match.group(1) if match else None


def run(args, **kwargs):
    """Runs a command; on failure the assertion shows its output."""
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, args))} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def configure(source, binary, prefix, check=True):
    args = [shutil.which("cmake"), "-S", str(source), "-B", str(binary), "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_PREFIX_PATH={prefix}"]
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    if check:
        return run(args)
    return subprocess.run(args, capture_output=True, text=True)


def build(binary):
    run([shutil.which("cmake"), "--build", str(binary), "--parallel", str(os.cpu_count() or 2)])


@pytest.fixture(scope="module")
def with_xnnpack():
    return cache_value("ETNP_WITH_XNNPACK") == "ON"


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """The build installed into a fresh prefix (the build must be complete: build.sh builds every target)."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake not found")
    if not (build_dir() / "CMakeCache.txt").is_file() or not (build_dir() / "etnp").is_file():
        pytest.skip(f"etnp not built in {build_dir()} (set ETNP_BUILD_DIR)")
    prefix = tmp_path_factory.mktemp("prefix")
    run([shutil.which("cmake"), "--install", str(build_dir()), "--prefix", str(prefix)])
    return prefix


@pytest.fixture(scope="module")
def libdir(prefix):
    configs = list(prefix.glob("lib*/**/cmake/etnp/etnpConfig.cmake"))  # lib, lib64 or lib/<triplet>
    assert len(configs) == 1, f"cmake --install {build_dir()} installed no etnpConfig.cmake: rebuild it (build.sh)"
    return configs[0].parents[2]


def test_install_holds_the_headers_libraries_package_and_cli_only(prefix, libdir, with_xnnpack):
    headers = sorted(p.name for p in (REPO / "include" / "etnp").glob("*.h"))
    assert sorted(p.name for p in (prefix / "include" / "etnp").iterdir()) == headers
    layers = LAYERS + (["backend_xnnpack"] if with_xnnpack else [])
    assert sorted(p.name for p in libdir.glob("*.a")) == sorted(f"libetnp_{name}.a" for name in layers)
    assert sorted(p.name for p in (prefix / "bin").iterdir()) == ["etnp"]
    package = sorted(p.name for p in (libdir / "cmake" / "etnp").iterdir())
    for name in ("etnpConfig.cmake", "etnpConfigVersion.cmake", "etnpDependencies.cmake", "etnpTargets.cmake"):
        assert name in package
    assert (libdir / "pkgconfig" / "etnp.pc").is_file()
    version = re.search(r"project\(etnp VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)
    assert version in run([str(prefix / "bin" / "etnp"), "version"]).stdout


@pytest.fixture(scope="module")
def example(prefix, tmp_path_factory):
    """examples/cmake_package configured and built out of tree against the installed package."""
    binary = tmp_path_factory.mktemp("example-build")
    configure(EXAMPLE, binary, prefix)
    build(binary)
    return binary / "run_forward"


@pytest.mark.parametrize("fixture, needs_xnnpack", [("nprt/const_methods.pte", False), ("nprt/add.pte", True)])
def test_the_example_runs_a_fixture(example, fixture, needs_xnnpack, with_xnnpack):
    root = fixtures_dir()
    if root is None:
        pytest.skip("shared fixtures not found (expected ../shared/fixtures or $ETNP_FIXTURES)")
    if needs_xnnpack and not with_xnnpack:
        pytest.skip("the build has no XNNPACK delegate")
    # const_methods: forward(x) = x + 1 (portable kernels); add: forward(a, b) = a + b (one XNNPACK delegate).
    assert run([str(example), str(root / fixture)]).stdout == "output 0: 2 2 2\n"


def test_the_example_reports_a_load_error(example, tmp_path):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"PK\x03\x04 not a program")
    result = subprocess.run([str(example), str(bad)], capture_output=True, text=True)
    assert result.returncode == 1 and result.stderr.startswith("ProgramLoadError: ")


def test_the_docs_show_the_example_as_it_is():
    doc = (REPO / "docs" / "cpp.md").read_text()
    for name in ("CMakeLists.txt", "main.cpp"):
        assert (EXAMPLE / name).read_text() in doc, f"docs/cpp.md must show examples/cmake_package/{name} verbatim"


def readme_example():
    """The C++ API example of README.md, as a program: its #include lines, then the rest as main's body."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## C++ API"):]
    code = re.search(r"^```cpp\n(.*?)^```", section, flags=re.S | re.M).group(1)
    includes = [line for line in code.splitlines() if line.startswith("#include")]
    body = [line for line in code.splitlines() if not line.startswith("#include")]
    return "\n".join(includes + ["", "int main() {"] + ["  " + line for line in body] + ["  return 0;", "}", ""])


def test_readme_example_compiles_and_links_against_the_package(prefix, tmp_path, with_xnnpack):
    """Also: COMPONENTS xnnpack is found exactly when the build has the delegate."""
    (tmp_path / "readme.cpp").write_text(readme_example())
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(readme LANGUAGES CXX)\nset(CMAKE_CXX_STANDARD 20)\n"
        "find_package(etnp CONFIG REQUIRED COMPONENTS xnnpack)\n"
        "add_executable(readme readme.cpp)\ntarget_link_libraries(readme PRIVATE etnp::etnp)\n")
    if not with_xnnpack:
        result = configure(tmp_path, tmp_path / "build", prefix, check=False)
        assert result.returncode != 0 and "built without the XNNPACK delegate" in " ".join(result.stderr.split())
        return
    configure(tmp_path, tmp_path / "build", prefix)
    build(tmp_path / "build")
    assert (tmp_path / "build" / "readme").is_file()


def test_the_allocation_free_loop_of_the_docs_compiles_and_links(prefix, tmp_path):
    """docs/cpp.md "Calls that allocate nothing": its example, as written, against the installed package."""
    doc = (REPO / "docs" / "cpp.md").read_text()
    section = doc.split("## Calls that allocate nothing", 1)[1]
    code = section.split("```cpp\n", 1)[1].split("```", 1)[0]
    (tmp_path / "frames.cpp").write_text(code + "\nint main() { return 0; }\n")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(frames LANGUAGES CXX)\nset(CMAKE_CXX_STANDARD 20)\n"
        "find_package(etnp CONFIG REQUIRED)\nadd_executable(frames frames.cpp)\n"
        "target_compile_options(frames PRIVATE -Wall -Wextra -Werror)\n"
        "target_link_libraries(frames PRIVATE etnp::etnp)\n")
    configure(tmp_path, tmp_path / "build", prefix)
    build(tmp_path / "build")
    assert (tmp_path / "build" / "frames").is_file()


def test_a_program_compiles_its_own_kernels_and_sees_the_xnnpack_backend(prefix, tmp_path, with_xnnpack):
    """docs/cpp.md: a KernelRegistrar in one of the program's own files registers it (examples/custom_kernel)."""
    (tmp_path / "main.cpp").write_text(
        "#include <etnp/backend.h>\n#include <etnp/kernel.h>\n#include <cstdio>\n"
        "int main() {\n"
        "  for (const auto& name : etnp::registered_kernel_names())\n"
        "    if (name.starts_with(\"my_ops::\")) std::printf(\"kernel %s\\n\", name.c_str());\n"
        "  for (const auto& name : etnp::registered_backend_names()) std::printf(\"backend %s\\n\", name.c_str());\n"
        "}\n")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(kernels LANGUAGES CXX)\nset(CMAKE_CXX_STANDARD 20)\n"
        "find_package(etnp CONFIG REQUIRED)\n"
        f"add_executable(kernels main.cpp {REPO / 'examples' / 'custom_kernel' / 'my_kernels.cpp'})\n"
        "target_link_libraries(kernels PRIVATE etnp::etnp)\n")
    configure(tmp_path, tmp_path / "build", prefix)
    build(tmp_path / "build")
    expected = "kernel my_ops::scaled_add.out\n" + ("backend XnnpackBackend\n" if with_xnnpack else "")
    assert run([str(tmp_path / "build" / "kernels")]).stdout == expected


def test_an_unknown_component_fails_clearly(prefix, tmp_path):
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(bad LANGUAGES CXX)\n"
        "find_package(etnp CONFIG REQUIRED COMPONENTS cuda)\n")
    result = configure(tmp_path, tmp_path / "build", prefix, check=False)
    assert result.returncode != 0 and "etnp has no component 'cuda'" in " ".join(result.stderr.split())


def test_an_incompatible_version_is_not_found(prefix, tmp_path):
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(old LANGUAGES CXX)\nfind_package(etnp 0.99 CONFIG)\n"
        "if(etnp_FOUND)\n  message(FATAL_ERROR \"etnp 0.99 found\")\nendif()\n")
    configure(tmp_path, tmp_path / "build", prefix)


def test_pkg_config_link_line(prefix, libdir, tmp_path):
    """The example built with the compiler alone, from `pkg-config --cflags --libs etnp`."""
    pkg_config = shutil.which("pkg-config")
    compiler = shutil.which("c++")
    if pkg_config is None or compiler is None:
        pytest.skip("pkg-config or c++ not found")
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir / "pkgconfig"))
    flags = run([pkg_config, "--cflags", "--libs", "etnp"], env=env).stdout.split()
    run([compiler, "-std=c++20", "-O1", str(EXAMPLE / "main.cpp"), "-o", str(tmp_path / "run_forward"), *flags])
    root = fixtures_dir()
    if root is not None:
        assert run([str(tmp_path / "run_forward"), str(root / "nprt" / "const_methods.pte")]).stdout == \
            "output 0: 2 2 2\n"
