#!/usr/bin/env bash
# Device call g5 (nvidia-h200), from the repo root with OUT set: wy_blocked without T for the last
# panel, checked and timed; variants: two-level panels from b n >= 32768 (60x1024 too), with
# nb_many 32 or 64, and inner panels of 8.
set -u
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
timeout 560 python3 scripts/qr_families.py --families wy_blocked --time --timeout 300 \
    --variants "wy_blocked:many_bn=32768;wy_blocked:many_bn=32768,nb_many=64;wy_blocked:nbi=8;wy_blocked:many_bn=32768,nbi=8" \
    --out /tmp/g5 > $OUT/fam.txt 2>&1
echo "fam rc=$? wall=$((SECONDS - start)) s" >> $OUT/fam.txt
cp /tmp/g5/*.log $OUT/ 2>/dev/null
tail -24 $OUT/fam.txt
