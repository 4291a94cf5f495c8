#!/usr/bin/env bash
# Device call h4 (nvidia-h200): cholqr with widths by n (16 up to n = 352, else 32) and rows 256;
# checked and timed; variants: the row-split kernels for every panel (fused=False), 32 wide
# everywhere (small_n=0); then the panel kernels one launch at a time.
set -u
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 300 python3 scripts/qr_families.py --families cholqr --time --profile --timeout 150 --out /tmp/h4 \
    --variants "cholqr:fused=false;cholqr:small_n=0;cholqr:fused=false,chol_warps_many=4" > $OUT/fam.txt 2>&1
echo "fam rc=$? wall=$((SECONDS - start)) s" >> $OUT/fam.txt
grep -v "^profile" $OUT/fam.txt | tail -22
grep "^profile cholqr" $OUT/fam.txt | cut -c1-300
timeout 80 python3 scripts/cholqr_probe.py --warps 2,4 --shapes 640x512@0,60x1024@512 > $OUT/probe.txt 2>&1
echo "probe rc=$? wall=$((SECONDS - start)) s" >> $OUT/probe.txt
tail -6 $OUT/probe.txt
cp /tmp/h4/*.json /tmp/h4/*.log $OUT/ 2>/dev/null
