"""Every ```python example of docs/python.md runs as written, in a folder holding the files the examples name:
model.pte (forward(x, y) = x + y on float32[2, 2], from programs.py) and linear.pte / linear.ptd (the public
fixture upstream/linear; the examples that use it are skipped without the fixtures)."""

import re
import shutil

import pytest

from conftest import REPO, fixtures_dir

DOC = REPO / "docs" / "python.md"
# Its examples start and stop clusters: test_scale_out.py runs them, on clusters it shares between them.
SCALE_OUT = "## Scale-out with Ray and Dask"


def doc_blocks():
    """(code, first line, the ## heading above it) of every ```python block of the page."""
    text = DOC.read_text()
    blocks = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        headings = re.findall(r"^## .*$", text[: match.start()], flags=re.M)
        line = text.count("\n", 0, match.start()) + 2
        blocks.append((match.group(1), line, headings[-1] if headings else ""))
    return blocks


def python_blocks():
    skip = pytest.mark.skip(reason="a scale-out example: tests/python/test_scale_out.py runs it on a local cluster")
    return [pytest.param(code, line, id=f"line{line}", marks=[skip] if heading == SCALE_OUT else [])
            for code, line, heading in doc_blocks()]


def test_the_doc_has_examples():
    assert len(python_blocks()) >= 8


@pytest.mark.parametrize("code, line", python_blocks())
def test_example_runs(code, line, programs, tmp_path, monkeypatch):
    shutil.copy(programs["add"], tmp_path / "model.pte")
    if "linear.pte" in code:
        root = fixtures_dir()
        if root is None:
            pytest.skip("needs the fixture upstream/linear (shared fixtures not found)")
        shutil.copy(root / "upstream" / "linear.pte", tmp_path / "linear.pte")
        shutil.copy(root / "upstream" / "linear.ptd", tmp_path / "linear.ptd")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{DOC}:{line}", "exec"), {"__name__": f"docs_example_line{line}"})
