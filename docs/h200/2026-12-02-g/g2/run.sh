#!/usr/bin/env bash
# Device call g2 (nvidia-h200), from the repo root with OUT set: wy_blocked's column step with one
# square root and one division an element (g1's had one and three) and its panel width by b n,
# checked and timed; variants: nb 32 everywhere (g1's widths), nb_many 8, nb_few 128; and, for
# wy_triton's question, superpanel with tall="householder" (its tall panels as register panels,
# no grid panels), timed.
set -u
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
timeout 560 python3 scripts/qr_families.py --families wy_blocked --time --profile --timeout 300 \
    --variants "wy_blocked:nb_few=32,nb_many=32;wy_blocked:nb_many=8;wy_blocked:nb_few=128;superpanel:tall=householder" \
    --out /tmp/g2 > $OUT/fam.txt 2>&1
echo "fam rc=$? wall=$((SECONDS - start)) s" >> $OUT/fam.txt
cp /tmp/g2/*.log $OUT/ 2>/dev/null
grep -v "^profile" $OUT/fam.txt | tail -30
