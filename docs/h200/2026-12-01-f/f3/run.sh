#!/usr/bin/env bash
# Device call f3 (nvidia-h200), run from the repo root with OUT set: a headless tune run of the qr
# task with each family judged against its own measured noise floor (e10b28b), stopped by SIGINT
# when the call's time is spent; then `steer status` of the session.
set -u
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
timeout -s INT $((560 - (SECONDS - start))) python3 -m agent.cli run h200 --headless --max-iterations 200 --gpus 0 \
    --root /tmp/sess > "$OUT/run.log" 2>&1
echo "run rc=$? wall=$((SECONDS - start)) s" >> "$OUT/run.log"
python3 -m agent.cli status h200 --root /tmp/sess > "$OUT/status.txt" 2>&1
git -C /tmp/sess/h200/repo log --all --format='%h %d %s' > "$OUT/gitlog.txt" 2>/dev/null || true
cp /tmp/sess/h200/events.jsonl "$OUT/events.jsonl" 2>/dev/null || true
cat "$OUT/status.txt"
tail -n 30 "$OUT/run.log"
