#!/usr/bin/env bash
# Device call e4 (nvidia-h200), run from the repo root with OUT set: wy_triton with two-level tall
# panels (_outer_kernel), all checks and timed, against two_level=False timed in the same call.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 400 python3 scripts/qr_families.py --families wy_triton --time --profile \
    --variants "wy_triton:two_level=false" --out $OUT/fam > $OUT/fam.txt 2>&1
echo "fam rc=$?" >> $OUT/fam.txt
tail -40 $OUT/fam.txt
