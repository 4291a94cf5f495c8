#!/usr/bin/env bash
# Device call e6 (nvidia-h200), run from the repo root with OUT set: knobs the tune runs never
# reached for the current code, timed against the defaults in the same call.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 230 python3 scripts/qr_families.py --families superpanel,wy_triton --time --sizes "" --special-sizes "" \
    --variants "wy_triton:bk=64;wy_triton:trail_warps=8;superpanel:bk=64;superpanel:trail_warps=8;superpanel:bn_inner=32;superpanel:graph_max_elems=33554432" \
    --out $OUT/fam > $OUT/fam.txt 2>&1
echo "fam rc=$?" >> $OUT/fam.txt
tail -26 $OUT/fam.txt
