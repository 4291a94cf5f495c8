#!/usr/bin/env bash
# Device call e1 (nvidia-h200), run from the repo root with OUT set.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout 150 python3 scripts/panel_probe.py --shapes 2x4096x8,2x2048x16,2x1024x32,640x512x32 --warps 8,16,32 \
    --late-max 16384,1048576 > $OUT/probe.txt 2>&1; echo "probe rc=$?" >> $OUT/probe.txt
cat $OUT/probe.txt
for w in 16 8; do
  timeout 90 ncu --kernel-name regex:_panel_kernel --launch-skip 1 --launch-count 1 --section LaunchStats \
    --section WarpStateStats --section InstructionStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis python3 scripts/panel_probe.py --shapes 2x4096x8 --warps $w --late-max 16384 \
    > $OUT/ncu_4096x8_w$w.txt 2>&1
  grep -E "Registers|Local|Ipc Active|Cycles Per Issued|Executed Instructions  |Duration|Stall" $OUT/ncu_4096x8_w$w.txt | head -20
done
timeout 330 python3 scripts/qr_families.py --families wy_triton --time --profile \
    --variants "wy_triton:split_min=0;wy_triton:lookahead_rows=0" --out $OUT/fam > $OUT/fam.txt 2>&1
echo "fam rc=$?" >> $OUT/fam.txt
tail -45 $OUT/fam.txt
