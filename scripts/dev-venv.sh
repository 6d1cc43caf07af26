#!/usr/bin/env bash
# The development venv: the official ExecuTorch (exporter and runtime bindings), torch, torchvision,
# transformers, onnx, onnxruntime and ml_dtypes, at the versions pinned in requirements-dev.txt. Tests and
# benchmarks use them as oracles and baselines; etnp itself never does.
#
#   ./scripts/dev-venv.sh          make (or reuse) the venv, print its path on stdout
#   ./scripts/dev-venv.sh --check  print the path if the venv is ready, exit 1 otherwise; installs nothing
#
# The venv lives in $ETNP_DEV_VENV, default ~/.cache/etnp/dev-venv. It is keyed by the requirements file and
# the interpreter: while both are unchanged a second run only checks the stamp (well under a second), so every
# clone on a machine shares one venv. The file's "# no-deps: " lines are installed last, without their
# dependencies. The interpreter is $ETNP_VENV_PYTHON, else the first Python 3.11 found (the torch wheels this
# project pins are built for 3.11), else /usr/bin/python3.
# Exit status 3: the venv cannot be made here (no suitable Python, or the packages cannot be fetched).
set -euo pipefail
cd "$(dirname "$0")/.."
requirements="$PWD/requirements-dev.txt"
venv="${ETNP_DEV_VENV:-$HOME/.cache/etnp/dev-venv}"

log() { echo "dev-venv: $*" >&2; }

find_python() {
  local candidate
  for candidate in ${ETNP_VENV_PYTHON:-python3.11 /usr/bin/python3.11 /usr/local/bin/python3.11 /usr/bin/python3}; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import venv, ensurepip' 2>/dev/null; then
      command -v "$candidate"
      return
    fi
  done
}

python=$(find_python)
if [ -z "$python" ]; then
  log "no Python with venv and ensurepip found (${ETNP_VENV_PYTHON:+ETNP_VENV_PYTHON=$ETNP_VENV_PYTHON; }set ETNP_VENV_PYTHON to one)"
  exit 3
fi
python_id=$("$python" -c 'import sys, platform; print(sys.version.split()[0], platform.machine())')
key="$(sha256sum "$requirements" | cut -c1-16) $python_id"

if [ -f "$venv/.etnp-stamp" ] && [ "$(cat "$venv/.etnp-stamp")" = "$key" ] && [ -x "$venv/bin/python" ]; then
  echo "$venv"
  exit 0
fi
if [ "${1:-}" = "--check" ]; then
  exit 1
fi

log "making $venv with $python ($python_id) from requirements-dev.txt (first time: a few minutes)"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$python" -m venv "$venv"
# pip's own cache keeps the downloads, so a rebuild after a pin change fetches only what changed.
if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements" >&2; then
  log "installing requirements-dev.txt failed (offline, or a pinned version is not available for $python_id)"
  rm -rf "$venv"
  exit 3
fi
# The "# no-deps: NAME==VERSION" lines: packages whose own pins conflict with the ones above, installed after them
# without their dependencies (the file lists those too).
mapfile -t no_deps < <(sed -n 's/^# no-deps: *//p' "$requirements")
if [ "${#no_deps[@]}" -gt 0 ] &&
   ! "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "${no_deps[@]}" >&2; then
  log "installing the no-deps lines of requirements-dev.txt failed (${no_deps[*]})"
  rm -rf "$venv"
  exit 3
fi
echo "$key" >"$venv/.etnp-stamp"
log "ready"
echo "$venv"
