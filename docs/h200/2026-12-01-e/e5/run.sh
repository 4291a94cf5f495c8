#!/usr/bin/env bash
# Device call e5 (nvidia-h200), run from the repo root with OUT set: look-ahead for big steps with
# wide updating programs (wide_steps), timed against the defaults in the same call.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 330 python3 scripts/qr_families.py --families superpanel,wy_triton --time --sizes "" --special-sizes "" \
    --variants "superpanel:wide_steps=16;wy_triton:wide_steps=16;superpanel:wide_steps=64;wy_triton:wide_steps=64" \
    --out $OUT/fam > $OUT/fam.txt 2>&1
echo "fam rc=$?" >> $OUT/fam.txt
tail -24 $OUT/fam.txt
