"""`etnp inspect`: its verdict is "runs here" exactly when every method loads, and otherwise names every reason,
in text and in `--json`; on every public fixture it agrees with what the manifest expects of a load."""
import json
import pathlib
import subprocess


def inspect(etnp, fixtures, entry_file, *extra, check=True):
    proc = subprocess.run([etnp, "inspect", str(fixtures / entry_file), *extra], capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def inspect_json(etnp, fixtures, entry_file, *extra):
    return json.loads(inspect(etnp, fixtures, entry_file, "--json", *extra).stdout)


def test_json_fields_of_a_program_that_runs(etnp, fixtures):
    record = inspect_json(etnp, fixtures, "nprt/add.pte")
    assert list(record) == ["file", "file_size", "schema", "version", "extended_header", "program_size",
                            "segment_base_offset", "segment_data_size", "segments", "constant_bytes",
                            "legacy_constant_buffer", "named_data", "methods", "runs_here", "missing_operators",
                            "missing_backends", "verdict"]
    assert record["schema"] == "ET12" and record["file_size"] == (fixtures / "nprt/add.pte").stat().st_size
    assert len(record["segments"]) == 2 and set(record["segments"][0]) == {"offset", "size"}
    (method,) = record["methods"]
    assert list(method) == ["name", "inputs", "outputs", "instructions", "planned_buffers", "planned_bytes",
                            "operators", "delegates", "loads", "problems"]
    assert method["name"] == "forward" and method["delegates"] == ["XnnpackBackend"]
    assert method["inputs"][0] == {"type": "Tensor", "dtype": "float32", "sizes": [3], "dim_order": [0],
                                   "dynamic": False, "memory_planned": True, "nbytes": 12}
    assert method["loads"] is True and method["problems"] == []
    assert record["runs_here"] is True and record["verdict"] == "runs here"
    assert record["missing_operators"] == [] and record["missing_backends"] == []


def test_non_tensor_values_keep_their_json_types(etnp, fixtures):
    methods = {m["name"]: m for m in inspect_json(etnp, fixtures, "nprt/const_methods.pte")["methods"]}
    assert methods["get_scalar"]["outputs"] == [{"type": "Int", "value": 128}]
    assert methods["get_double"]["outputs"] == [{"type": "Double", "value": 2.5}]
    assert methods["get_bool"]["outputs"] == [{"type": "Bool", "value": True}]


def test_a_missing_backend_in_text_and_json(etnp, fixtures):
    text = inspect(etnp, fixtures, "backends/ethos_u_minimal.pte").stdout.splitlines()
    at = text.index("verdict: does not run here")
    assert text[at + 1].startswith("  forward: backend 'EthosUBackend' is not available in this runtime (available: ")
    record = inspect_json(etnp, fixtures, "backends/ethos_u_minimal.pte")
    assert record["runs_here"] is False and record["missing_backends"] == ["EthosUBackend"]
    problem = record["methods"][0]["problems"][0]
    assert problem["kind"] == "missing_backend" and problem["name"] == "EthosUBackend"
    assert record["verdict"].startswith("does not run here: forward: backend 'EthosUBackend' is not available")


def test_missing_operators_are_those_the_official_runtime_reported(etnp, fixtures, manifest):
    entry = next(e for e in manifest if e["id"] == "upstream/keyword_spotting")
    record = inspect_json(etnp, fixtures, entry["file"])
    assert record["missing_operators"] == entry["official_error"]["missing_operators"]
    assert [p["kind"] for p in record["methods"][0]["problems"]] == ["missing_operator"] * 7


def test_a_program_without_its_ptd_does_not_run(etnp, fixtures, manifest):
    entry = next(e for e in manifest if e["id"] == "exported/mobilenet_v2_xnnpack_fp32_ptd__missing_data")
    record = inspect_json(etnp, fixtures, entry["file"])
    assert record["runs_here"] is False and not record["methods"][0]["loads"]
    assert entry["expect"]["names"] in record["verdict"]
    data = fixtures / "exported/mobilenet_v2_xnnpack_fp32_ptd.ptd"
    assert inspect_json(etnp, fixtures, entry["file"], "--data", str(data))["runs_here"] is True


def test_every_fixture_gets_the_verdict_the_manifest_expects(etnp, fixtures, manifest):
    checked = 0
    for entry in manifest:
        if entry["kind"] not in ("program", "bundled_program", "not_a_program"):
            continue
        extra = [arg for f in entry["data_files"] for arg in ("--data", str(fixtures / f))]
        expect = entry["expect"]
        if entry["kind"] == "not_a_program":
            proc = inspect(etnp, fixtures, entry["file"], "--json", *extra, check=False)
            assert proc.returncode == 1 and proc.stderr.startswith("error: ProgramLoadError: "), entry["id"]
            continue
        record = inspect_json(etnp, fixtures, entry["file"], *extra)
        checked += 1
        if expect == "ok":
            assert record["runs_here"] is True, (entry["id"], record["verdict"])
            assert all(m["loads"] for m in record["methods"]), entry["id"]
            continue
        assert record["runs_here"] is False, entry["id"]
        if expect["error"] == "BackendNotAvailable":
            assert expect["names"] in record["missing_backends"], entry["id"]
        elif expect["error"] == "OperatorNotFound":
            assert expect["names"] in record["missing_operators"], entry["id"]
        else:
            assert expect["names"] in record["verdict"], entry["id"]
    assert checked > 150


def test_version_names_the_schema_and_the_executorch_release(etnp):
    import executorch_numpy_runtime as et

    out = subprocess.run([etnp, "--version"], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == f"etnp {et.__version__} (reads ExecuTorch programs with schema ET12; verified against " \
                       f"ExecuTorch {et.__et_version__})"
    # Then each backend with its library: the XNNPACK API the build found in the header it compiled against.
    assert lines[1].startswith("backend XnnpackBackend: XNNPACK, create/"), out
    header = pathlib.Path("/usr/include/xnnpack.h")
    if header.is_file():
        reshape_api = "xnn_reshape_convolution2d_nhwc_f32" in header.read_text()
        assert ("create/reshape/setup" in lines[1]) == reshape_api, out
    assert len(lines) == 2, out


def test_text_is_a_summary_and_verbose_adds_the_detail(etnp, fixtures):
    summary = inspect(etnp, fixtures, "nprt/add.pte").stdout
    lines = summary.splitlines()
    assert lines[1] == "schema: ET12, version 0"
    assert "methods: 1" in lines
    assert "  forward: 2 inputs, 1 output, planned memory 112 bytes" in lines
    assert "    input 0: float32[3]" in lines and "    output 0: float32[3]" in lines
    assert "    delegates: XnnpackBackend x1" in lines and lines[-1] == "verdict: runs here"
    assert not any(line.startswith(("  segment ", "container:", "    plan:")) for line in lines)
    verbose = inspect(etnp, fixtures, "nprt/add.pte", "--verbose").stdout.splitlines()
    assert verbose[2].startswith("container: extended header: yes; program data: ")
    assert "  segment 0: offset 0, " in " ".join(verbose)
    assert any(line.startswith("    plan: 1 instruction, ") for line in verbose)
    assert set(lines) <= set(verbose)


def test_json_is_the_same_with_verbose(etnp, fixtures):
    plain = inspect(etnp, fixtures, "nprt/add.pte", "--json").stdout
    assert inspect(etnp, fixtures, "nprt/add.pte", "--json", "--verbose").stdout == plain


def test_verbose_says_what_fill_gives_a_token_input(etnp, fixtures):
    text = inspect(etnp, fixtures, "exported/tiny_llama_kv_portable.pte", "-v").stdout.splitlines()
    assert "    input 0: int64[1, 1]; an index below 512: --fill random draws from [0, 512)" in text
