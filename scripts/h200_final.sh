#!/usr/bin/env bash
# One device call on nvidia-h200-x2: a headless tune run on GPU 0 (wall-bounded), while GPU 1
# runs the GPU fault scenarios and the harness overhead script on the seed families.
# Usage (device machine, repo root): bash scripts/h200_final.sh SECONDS
set -u
budget=${1:-380}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
( timeout -s TERM "$budget" python3 -m agent.cli run h200 --headless --max-iterations 60 --gpus 0 \
    --root /tmp/sess > "$OUT/run.log" 2>&1; echo "run rc=$?" >> "$OUT/run.log" ) &
run_pid=$!
export CUDA_VISIBLE_DEVICES=1
python3 scripts/gpu_faults.py --json "$OUT/faults.json" > "$OUT/faults.txt" 2>&1
timeout 150 python3 scripts/bench_harness.py kernels/qr/candidates/superpanel.py kernels/qr/candidates/wy_triton.py \
    --json "$OUT/harness.json" > "$OUT/harness.txt" 2>&1
wait $run_pid
tar czf "$OUT/session.tgz" -C /tmp/sess h200
cat "$OUT/faults.txt" "$OUT/harness.txt"; tail -n 25 "$OUT/run.log"
