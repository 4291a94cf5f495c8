#!/usr/bin/env bash
# Device call g7 (nvidia-h200), from the repo root with OUT set: a headless `tune` run of wy_blocked
# alone (a copy of the qr task whose only seed is wy_blocked.py), stopped by SIGINT 45 s before
# TOTAL seconds (a second SIGINT 25 s later), as scripts/h200_tune.sh stops its run.
set -u
total=${1:-330}
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
cp -r kernels/qr /tmp/qr_wyb && rm /tmp/qr_wyb/candidates/cholqr.py /tmp/qr_wyb/candidates/superpanel.py /tmp/qr_wyb/candidates/wy_triton.py
budget=$((total - 45 - (SECONDS - start)))
python3 -m agent.cli run wyb --task /tmp/qr_wyb --headless --beam 1 --max-iterations 200 --gpus 0 --root /tmp/sess > "$OUT/run.log" 2>&1 &
agent=$!
( sleep "$budget"; kill -INT $agent 2>/dev/null; sleep 25; kill -INT $agent 2>/dev/null ) &
stopper=$!
wait $agent
echo "run rc=$? wall=$((SECONDS - start)) s" >> "$OUT/run.log"
kill $stopper 2>/dev/null
git -C /tmp/sess/wyb/repo log --all --format='%h %d %s' > "$OUT/gitlog.txt" 2>/dev/null || true
cp /tmp/sess/wyb/events.jsonl "$OUT/events.jsonl" 2>/dev/null || true
tail -n 40 "$OUT/run.log"
