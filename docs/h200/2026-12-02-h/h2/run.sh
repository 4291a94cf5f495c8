#!/usr/bin/env bash
# Device call h2 (nvidia-h200): cholqr after the G load/zero race fix. The panel kernels timed one
# launch at a time (scripts/cholqr_probe.py), then the family checked and timed, and chol_warps 1, 2.
set -u
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 150 python3 scripts/cholqr_probe.py > $OUT/probe.txt 2>&1
echo "probe rc=$? wall=$((SECONDS - start)) s" >> $OUT/probe.txt
cat $OUT/probe.txt | tail -20
timeout 330 python3 scripts/qr_families.py --families cholqr --time --profile --timeout 150 --out /tmp/h2 \
    --variants "cholqr:chol_warps=1;cholqr:chol_warps=2" > $OUT/fam.txt 2>&1
echo "fam rc=$? wall=$((SECONDS - start)) s" >> $OUT/fam.txt
grep -v "^profile" $OUT/fam.txt | tail -22
grep "^profile" $OUT/fam.txt | cut -c1-300
cp /tmp/h2/*.json /tmp/h2/*.log $OUT/ 2>/dev/null
