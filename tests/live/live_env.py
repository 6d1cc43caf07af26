"""The live-export suite's environment: programs exported at test time by the official ExecuTorch exporter,
run by etnp and compared with the official runtime's outputs on the same inputs.

etnp's side runs in whatever Python runs pytest (the package is found as in tests/python: $ETNP_PYTHON_DIR, an
installed package, or build/python). The exports and the official outputs come from the dev venv
(scripts/dev-venv.sh), through tests/live/export.py in a child process, and are cached
(~/.cache/etnp/live-exports, or $ETNP_LIVE_CACHE), so only the first run after a change exports.

Where the venv cannot be made (offline, no Python 3.11), the suite is skipped with the reason; under CI=true it
fails instead. ETNP_SKIP_LIVE=1 skips it on purpose. ETNP_LIVE_RECORDS=FILE runs etnp's side on exports made
elsewhere instead: FILE lists their folders, one per line, as export.py prints them (the other-release chroot
of scripts/test-other-release.sh, which has no torch wheels, gets the host's exports so); the tests that need
the venv itself are skipped there. ETNP_LIVE_ONLY=NAME[:FORM],... limits the suite to those zoo entries.
"""
import json
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
_records = None


class LiveUnavailable(Exception):
    pass


def in_ci():
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def dev_python():
    """The dev venv's interpreter (made on first use), or LiveUnavailable with the reason."""
    if os.environ.get("ETNP_SKIP_LIVE") == "1":
        raise LiveUnavailable("live exports skipped: ETNP_SKIP_LIVE=1")
    if os.environ.get("ETNP_LIVE_RECORDS"):
        raise LiveUnavailable("ETNP_LIVE_RECORDS: the exports were made on another system; no dev venv here")
    proc = subprocess.run([str(REPO / "scripts" / "dev-venv.sh")], capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise LiveUnavailable("the dev venv could not be made (scripts/dev-venv.sh exit %d): %s" % (proc.returncode, last))
    return pathlib.Path(proc.stdout.strip().splitlines()[-1]) / "bin" / "python"


def dev_python_or_skip():
    """dev_python() for a test: skipped where the venv cannot be made, failed instead under CI=true."""
    try:
        return dev_python()
    except LiveUnavailable as e:
        if in_ci():
            pytest.fail("CI=true: %s" % e)
        pytest.skip(str(e))


def live_records():
    """Every export record of the zoo (exporting what the cache lacks), each with its folder as "dir"."""
    global _records
    if _records is None:
        records_file = os.environ.get("ETNP_LIVE_RECORDS")
        if os.environ.get("ETNP_SKIP_LIVE") == "1":
            raise LiveUnavailable("live exports skipped: ETNP_SKIP_LIVE=1")
        if records_file:
            folders = [line for line in pathlib.Path(records_file).read_text().splitlines() if line.strip()]
            if not folders:
                raise RuntimeError("ETNP_LIVE_RECORDS=%s lists no export folders" % records_file)
        else:
            python = dev_python()
            only = [arg for name in os.environ.get("ETNP_LIVE_ONLY", "").split(",") if name
                    for arg in ("--only", name)]
            proc = subprocess.run([str(python), str(REPO / "tests" / "live" / "export.py")] + only,
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError("tests/live/export.py failed:\n" + proc.stderr[-4000:])
            folders = proc.stdout.splitlines()
        _records = []
        for folder in map(pathlib.Path, folders):
            record = json.loads((folder / "export.json").read_text())
            record["dir"] = str(folder)
            _records.append(record)
    return _records


