#!/usr/bin/env bash
# Device call g6 (nvidia-h200), from the repo root with OUT set: wy_blocked's final widths (four
# tiers by b n), checked (22 tests, 12 benchmarks, special matrices, n = 1..4095) and timed; then
# `steer bench --mode quick` of the previous wy_blocked (0e4825f, g1/wy_blocked_old.py) and this one,
# with geqrf, in one run.
set -u
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
timeout 200 python3 scripts/qr_families.py --families wy_blocked --time --profile --timeout 190 --out /tmp/g6 > $OUT/fam.txt 2>&1
echo "fam rc=$? wall=$((SECONDS - start)) s" >> $OUT/fam.txt
grep -v "^profile" $OUT/fam.txt | tail -18
timeout 330 python3 -m agent.cli bench --mode quick --device cuda docs/h200/2026-12-02-g/g1/wy_blocked_old.py \
    kernels/qr/candidates/wy_blocked.py > $OUT/bench.txt 2>&1
echo "bench rc=$? wall=$((SECONDS - start)) s" >> $OUT/bench.txt
tail -17 $OUT/bench.txt
