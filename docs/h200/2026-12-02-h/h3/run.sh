#!/usr/bin/env bash
# Device call h3 (nvidia-h200): cholqr with the second Cholesky replaced by five small products
# (near-identity R2, thr 1e-5) and 2 warps for batches >= split_min; checked and timed, then
# knob variants timed; the panel kernels one launch at a time.
set -u
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 330 python3 scripts/qr_families.py --families cholqr --time --profile --timeout 150 --out /tmp/h3 \
    --variants "cholqr:nb=16;cholqr:chol_warps_many=4;cholqr:rows=256;cholqr:chol_warps=2" > $OUT/fam.txt 2>&1
echo "fam rc=$? wall=$((SECONDS - start)) s" >> $OUT/fam.txt
grep -v "^profile" $OUT/fam.txt | tail -22
grep "^profile cholqr [0-9]" $OUT/fam.txt | cut -c1-300
timeout 100 python3 scripts/cholqr_probe.py --warps 2,4 --shapes 1x32@0,640x512@0,60x1024@512 > $OUT/probe.txt 2>&1
echo "probe rc=$? wall=$((SECONDS - start)) s" >> $OUT/probe.txt
tail -8 $OUT/probe.txt
cp /tmp/h3/*.json /tmp/h3/*.log $OUT/ 2>/dev/null
