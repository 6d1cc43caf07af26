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
inputs=(--fill random --seed 0)
if [ -z "$model" ]; then
  if [ -x build/etnp_demo ]; then
    model=build/demo/mobilenet_v2_xnnpack.pte
    # MobileNetV2 written by etnp's own .pte writer (seeded weights), with a sample input.
    [ -f "$model" ] && [ -f build/demo/mobilenet_v2_input.npy ] || build/etnp_demo --output-dir build/demo >/dev/null
    inputs=(--input build/demo/mobilenet_v2_input.npy)
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
echo "== etnp run $model (${inputs[*]})"
"$etnp" run "$model" "${extra[@]}" "${inputs[@]}" --output-dir build/quickstart-out --print summary --top 5
echo
echo "== etnp bench $model"
"$etnp" bench "$model" "${extra[@]}" --warmup 3 --iters 20
