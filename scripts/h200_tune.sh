#!/usr/bin/env bash
# One device call on nvidia-h200: `steer bench` of the seed families (quick mode), then a headless
# `tune` run of the qr task with the seed families as the beam, stopped by Ctrl-C (SIGINT) 45 s
# before TOTAL seconds from the start are spent; bench table and session record come back in $OUT.
# Usage (device machine, repo root, wheels in .whl/): [FAMILIES=a,b] bash scripts/h200_tune.sh TOTAL
# FAMILIES limits the bench and the beam to those seed families (`steer run --families`).
set -u
total=${1:-560}
families=${FAMILIES:-}
files=()
for f in ${families//,/ }; do files+=("kernels/qr/candidates/$f.py"); done
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
python3 -m agent.cli bench --mode quick --device cuda "${files[@]}" > "$OUT/bench.txt" 2>&1
echo "bench rc=$? wall=$((SECONDS - start)) s" >> "$OUT/bench.txt"
cat "$OUT/bench.txt"
# Stop at TOTAL - 45 s: SIGINT lets the evaluation in flight finish; if it has not within 25 s, a
# second SIGINT aborts it, so the records below are always copied before the call's limit (in
# call f3 one SIGINT 40 s before the limit was not enough, and the session's events were lost).
budget=$((total - 45 - (SECONDS - start)))
python3 -m agent.cli run h200 --headless --max-iterations 200 --gpus 0 --root /tmp/sess \
    ${families:+--families "$families"} > "$OUT/run.log" 2>&1 &
agent=$!
( sleep "$budget"; kill -INT $agent 2>/dev/null; sleep 25; kill -INT $agent 2>/dev/null ) &
stopper=$!
wait $agent
echo "run rc=$?" >> "$OUT/run.log"
kill $stopper 2>/dev/null
git -C /tmp/sess/h200/repo log --all --format='%h %d %s' > "$OUT/gitlog.txt" 2>/dev/null || true
cp /tmp/sess/h200/events.jsonl "$OUT/events.jsonl" 2>/dev/null || true
tar czf "$OUT/session.tgz" -C /tmp/sess h200
tail -n 30 "$OUT/run.log"
