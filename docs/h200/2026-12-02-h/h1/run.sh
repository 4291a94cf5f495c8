#!/usr/bin/env bash
# Device call h1 (nvidia-h200), from the repo root with OUT set: the new cholqr (CholeskyQR2 +
# Householder reconstruction per panel, Triton), checked (22 tests, 12 benchmarks, special
# matrices, n = 1..4095), timed and profiled; then a few of its knobs, timed only.
set -u
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
timeout 300 python3 scripts/qr_families.py --families cholqr --time --profile --timeout 290 --out /tmp/h1 > $OUT/fam.txt 2>&1
echo "fam rc=$? wall=$((SECONDS - start)) s" >> $OUT/fam.txt
grep -v "^profile" $OUT/fam.txt | tail -22
grep "^profile" $OUT/fam.txt | cut -c1-400
timeout 230 python3 scripts/qr_families.py --families "" --time --timeout 75 --out /tmp/h1v \
    --variants "cholqr:rows=256;cholqr:chol_warps=8;cholqr:chol_warps=2;cholqr:nb=16" > $OUT/var.txt 2>&1
echo "var rc=$? wall=$((SECONDS - start)) s" >> $OUT/var.txt
tail -20 $OUT/var.txt
cp /tmp/h1/*.json /tmp/h1/*.log $OUT/ 2>/dev/null
