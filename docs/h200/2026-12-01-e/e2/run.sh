#!/usr/bin/env bash
# Device call e2 (nvidia-h200), run from the repo root with OUT set: knob variants, timed only.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout 500 python3 scripts/qr_families.py --families wy_triton,superpanel --time --sizes "" --special-sizes "" \
    --variants "wy_triton:split_min=528;wy_triton:bn=32;wy_triton:graph_max_elems=33554432;wy_triton:panel_epw=4096;superpanel:graph_max_elems=33554432;superpanel:split_min=528" \
    --out $OUT/fam > $OUT/fam.txt 2>&1
echo "fam rc=$?" >> $OUT/fam.txt
tail -30 $OUT/fam.txt
