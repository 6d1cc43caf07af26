"""The ``etnp`` console command of the wheel: it execs the C++ ``etnp`` binary installed in the package
(``executorch_numpy_runtime/bin/etnp``) with the same arguments, so its output, exit codes and terminal behaviour
are the binary's own. ``etnp --help`` lists the commands; docs/cli.md documents them."""

import os
import sys
from pathlib import Path
from typing import List, Optional


def binary_path() -> Path:
    """Where the package's ``etnp`` binary is (present in an installed wheel, not in a build tree)."""
    return Path(__file__).resolve().parent / "bin" / "etnp"


def main(argv: Optional[List[str]] = None) -> int:
    """Replace this process with ``etnp ARGV...`` (default: this command's own arguments)."""
    args = sys.argv[1:] if argv is None else list(argv)
    exe = binary_path()
    if not os.access(exe, os.X_OK):
        print(f"etnp: the etnp binary is missing from this installation ({exe}); reinstall the package",
              file=sys.stderr)
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, ["etnp", *args])
    return 0  # not reached: execv returns only by raising OSError


if __name__ == "__main__":
    sys.exit(main())
