#!/usr/bin/env bash
# Issue 59 on the GPU machine, in one call: build the plugin (sm_90a only, no tests) unless
# build-gpu/ already holds one, train the model, evaluate every cache format through the plugin's
# CUDA write and attend, run the needle at 1M tokens, and leave the results in $OUT (7 files: the
# two JSON files, scales.json and four logs). QUALITY_TRAIN_SECONDS caps training (default 170 s).
# Needs, carried: build-quality/data (run.py prepare, here) and .gpu-deps (the build's cJSON).
# Then, back here: copy quality_lm.json and needle.json into results/quality_lm/ and run
#   python3 bench/quality_lm/run.py report results/quality_lm/quality_lm.json --needle results/quality_lm/needle.json
#   usage: bash bench/quality_lm/device.sh [--toy]   (--toy: the CPU chain's sizes, --device cpu)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/quality-lm-out}
mkdir -p "$out" build-quality
start=$SECONDS
step() { echo "== [$((SECONDS - start)) s] $*"; }
if [ "${1:-}" = "--toy" ]; then
    dev=cpu; plugin=build/plugin
    train=(--config toy --steps 30 --batch 8); eval=(--seeds 2 --batch 2 --topk 32 --calib-windows 2)
    needle=(--tokens 16384 --layers 1,65 --count-tokens 256)
else
    dev=cuda; plugin=build-gpu/plugin
    train=(--config small --steps 1200 --batch 32); eval=(--seeds 5 --batch 16 --topk 128)
    needle=(--tokens 1048576 --count-tokens 65536)
    [ -f .gpu-deps/enter.sh ] && source .gpu-deps/enter.sh
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    if [ ! -f build-gpu/plugin/libnvfp4_mla.so ] || [ ! -f build-gpu/host_shims/cli/nvfp4-mla ]; then
        step "build (sm_90a, plugin and CLI only)"
        meson setup build-gpu -Dcuda=enabled -Dgpu_archs=90a -Dtests=disabled --buildtype=release \
            >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
        ninja -C build-gpu plugin/libnvfp4_mla.so host_shims/cli/nvfp4-mla >>"$out/build.log" 2>&1 \
            || { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
    fi
fi
export NVFP4_MLA_PLUGIN=$PWD/$plugin PYTHONPATH=host_shims/python${PYTHONPATH:+:$PYTHONPATH}
py=${PYTHON:-python3}
run=bench/quality_lm/run.py
[ -f build-quality/data/train.u8 ] || { echo "build-quality/data is missing: run '$run prepare' where the text is installed and carry it"; exit 1; }
# The call must end within the device tool's 10 minutes: training stops by itself (recorded in the
# checkpoint) so that evaluation and the needle (about 150 s together, estimated) still fit in 540 s.
if [ $dev = cuda ]; then
    cap=${QUALITY_TRAIN_SECONDS:-170}  # the coordinator may lower it to fit a smaller device budget
    budget=$((540 - SECONDS - 150)); [ $budget -gt $cap ] && budget=$cap; [ $budget -lt 60 ] && budget=60
    train+=(--max-seconds $budget)
fi
step "train"
model=build-quality/model$([ $dev = cpu ] && echo -toy).pt
rm -f "$model"
$py $run train --device $dev "${train[@]}" --out "$model" 2>&1 | tee "$out/train.log"
[ -f "$model" ] || exit 1
step "evaluate"
$py $run evaluate --device $dev "${eval[@]}" --model "$model" --out "$out/quality_lm.json" 2>&1 | tee "$out/evaluate.log" | tail -4
step "needle"
$py bench/quality_lm/needle.py --device $dev "${needle[@]}" --out "$out/needle.json" 2>&1 | tee "$out/needle.log" | tail -8
cp build-quality/eval/scales.json "$out/scales.json" 2>/dev/null
[ -f "$out/quality_lm.json" ] && $py $run report "$out/quality_lm.json" --print | sed -n '/^In short/,/^\*\*dense/p' | head -8
step "done"
ls -la "$out"
[ -f "$out/quality_lm.json" ] && [ -f "$out/needle.json" ]
