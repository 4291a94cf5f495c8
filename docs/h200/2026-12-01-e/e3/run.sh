#!/usr/bin/env bash
# Device call e3 (nvidia-h200), run from the repo root with OUT set: wy_triton's full check sweep,
# then `steer bench` of the seeds and a headless tune run (scripts/h200_tune.sh).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
start=$SECONDS
timeout 150 python3 scripts/qr_families.py --families wy_triton --out $OUT/fam > $OUT/fam.txt 2>&1
echo "fam rc=$? wall=$((SECONDS - start)) s" >> $OUT/fam.txt
tail -4 $OUT/fam.txt
bash scripts/h200_tune.sh $((540 - (SECONDS - start)))
