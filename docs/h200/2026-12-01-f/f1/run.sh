#!/usr/bin/env bash
# Device call f1 (nvidia-h200), run from the repo root with OUT set: e6's knob sweep again with a
# longer limit (its output was lost), then a headless tune run of the qr task whose setup measures
# the session's noise floor on the H200 (the noise_measured event), stopped by SIGINT.
set -u
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
python3 -c "import torch, triton, sys; print('torch', torch.__version__, 'triton', triton.__version__, 'python', sys.version.split()[0])"
timeout 310 python3 scripts/qr_families.py --families superpanel,wy_triton --time --sizes "" --special-sizes "" \
    --variants "wy_triton:bk=64;wy_triton:trail_warps=8;superpanel:bk=64;superpanel:trail_warps=8;superpanel:bn_inner=32;superpanel:graph_max_elems=33554432" \
    --out $OUT/fam > $OUT/fam.txt 2>&1
echo "fam rc=$? wall=$((SECONDS - start)) s" >> $OUT/fam.txt
tail -26 $OUT/fam.txt
budget=$((555 - (SECONDS - start)))
timeout -s INT "$budget" python3 -m agent.cli run h200 --headless --max-iterations 200 --gpus 0 \
    --root /tmp/sess > "$OUT/run.log" 2>&1
echo "run rc=$? wall=$((SECONDS - start)) s" >> "$OUT/run.log"
git -C /tmp/sess/h200/repo log --all --format='%h %d %s' > "$OUT/gitlog.txt" 2>/dev/null || true
cp /tmp/sess/h200/events.jsonl "$OUT/events.jsonl" 2>/dev/null || true
grep -i "noise" "$OUT/run.log" | head -20
tail -n 12 "$OUT/run.log"
