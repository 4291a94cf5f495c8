#!/usr/bin/env bash
# Device call g1 (nvidia-h200), from the repo root with OUT set: wy_blocked with two kernels a
# column (batched GEMV + one jiterator step) and T from one triangular solve, checked (22 tests,
# 12 benchmarks, special matrices, n = 1..4095) and timed, with the previous version
# (wy_blocked_old.py, commit 0e4825f) and nb 16 / 64 timed in the same call.
set -u
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
cp docs/h200/2026-12-02-g/g1/wy_blocked_old.py kernels/qr/candidates/
timeout 560 python3 scripts/qr_families.py --families wy_blocked --time --profile --timeout 300 \
    --variants "wy_blocked_old:nb=32;wy_blocked:nb=16;wy_blocked:nb=64" --out /tmp/g1 > $OUT/fam.txt 2>&1
echo "fam rc=$? wall=$((SECONDS - start)) s" >> $OUT/fam.txt
cp /tmp/g1/*.log $OUT/ 2>/dev/null
tail -40 $OUT/fam.txt
