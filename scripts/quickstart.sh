#!/usr/bin/env bash
# The main job: install what is missing, build, then inspect and run a model.
#   ./scripts/quickstart.sh            the default model (the MobileNetV2 demo, written by etnp itself)
#   ./scripts/quickstart.sh model.pte  your own program (random inputs at its full input shapes)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
ETNP_BUILD_TESTS=OFF ./scripts/build.sh -DETNP_BUILD_TESTS=OFF >/dev/null
etnp=build/etnp

model="${1:-}"
extra=()
if [ -z "$model" ]; then
  if [ -x build/etnp_demo ]; then
    model=build/demo/mobilenet_v2_xnnpack.pte
    [ -f "$model" ] || build/etnp_demo --output-dir build/demo >/dev/null
  elif [ -f ../shared/fixtures/exported/mobilenet_v2_xnnpack_fp32.pte ]; then
    model=../shared/fixtures/exported/mobilenet_v2_xnnpack_fp32.pte
  else
    echo "usage: $0 MODEL.pte   (no default model is available in this checkout)" >&2
    exit 2
  fi
fi
shift || true
for data in "$@"; do extra+=(--data "$data"); done

echo "== etnp inspect $model"
"$etnp" inspect "$model" "${extra[@]}"
echo
echo "== etnp run $model (random inputs)"
"$etnp" run "$model" "${extra[@]}" --fill random --seed 0 --output-dir build/quickstart-out --print summary
echo
echo "== etnp bench $model"
"$etnp" bench "$model" "${extra[@]}" --warmup 3 --iters 20
