"""The extension keeps etnp's own symbols inside it (python/CMakeLists.txt links the layers with --exclude-libs):
exported, every call between etnp functions went through the PLT and could be interposed by another extension."""

import shutil
import subprocess

import pytest

import executorch_numpy_runtime._C as _C


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) is not installed")
def test_extension_exports_no_etnp_symbol():
    result = subprocess.run(["nm", "-D", "--defined-only", _C.__file__], capture_output=True, text=True, check=True)
    names = [line.split()[-1] for line in result.stdout.splitlines() if line.strip()]
    assert "PyInit__C" in names
    # Itanium-mangled names in namespace etnp: _ZN4etnp..., _ZNK4etnp..., _ZTIN4etnp... (typeinfo) and so on.
    ours = [n for n in names if "4etnp" in n and not n.startswith(("_ZTI", "_ZTS"))]
    assert ours == [], "etnp symbols exported by %s: %s" % (_C.__file__, ours[:10])
