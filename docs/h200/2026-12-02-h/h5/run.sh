#!/usr/bin/env bash
# Device call h5 (nvidia-h200): the final cholqr (fused panels only below split_min) checked
# (22 tests, 12 benchmarks, special matrices, n = 1..4095) and timed, then `steer bench` of cholqr
# with geqrf and a headless tune run of cholqr alone (scripts/h200_tune.sh, FAMILIES=cholqr).
set -u
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 150 python3 scripts/qr_families.py --families cholqr --time --timeout 140 --out /tmp/h5 > $OUT/fam.txt 2>&1
echo "fam rc=$? wall=$((SECONDS - start)) s" >> $OUT/fam.txt
tail -18 $OUT/fam.txt
cp /tmp/h5/cholqr.json $OUT/ 2>/dev/null
FAMILIES=cholqr bash scripts/h200_tune.sh $((470 - (SECONDS - start)))
