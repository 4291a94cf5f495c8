#!/usr/bin/env bash
# Device call g4 (nvidia-h200), from the repo root with OUT set: wy_blocked with a 7-tensor step
# (row index and first-column flag in one tensor), fewer kernels per panel (T by one solve against
# the identity, no triu/diag_embed/where), and two-level panels for b n >= many_bn (nb_many 32 in
# inner panels of nbi 16), checked and timed; width variants timed.
set -u
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
timeout 560 python3 scripts/qr_families.py --families wy_blocked --time --profile --timeout 300 \
    --variants "wy_blocked:nb_many=16,nbi=16;wy_blocked:nb_many=64,nbi=16;wy_blocked:nb_many=64,nbi=32;wy_blocked:nb=48;wy_blocked:nb=24" \
    --out /tmp/g4 > $OUT/fam.txt 2>&1
echo "fam rc=$? wall=$((SECONDS - start)) s" >> $OUT/fam.txt
cp /tmp/g4/*.log $OUT/ 2>/dev/null
grep -v "^profile" $OUT/fam.txt | tail -30
