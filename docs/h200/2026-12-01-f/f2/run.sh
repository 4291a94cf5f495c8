#!/usr/bin/env bash
# Device call f2 (nvidia-h200), run from the repo root with OUT set: the on-chip trailing update
# (fuse_rows/fuse_bn/fuse_warps, off by default) timed against the defaults; the best fused variant
# of each family, where it beats the defaults by more than 1%, is written into that family's
# CONFIG here (pick.py; its diff goes to $OUT/picked_FAMILY.diff), then `steer bench` of all seeds and the
# full per-matrix checks (sizes 1..4095, special matrices) of the families it changed.
set -u
# (the JSON files stay on the device: a call returns at most 8 files)
start=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi -L
timeout 280 python3 scripts/qr_families.py --families superpanel,wy_triton --time --sizes "" --special-sizes "" \
    --variants "superpanel:fuse_rows=512;superpanel:fuse_rows=512,fuse_bn=16;superpanel:fuse_rows=512,fuse_bn=64;superpanel:fuse_rows=512,fuse_warps=4;superpanel:fuse_rows=1024,fuse_bn=16;wy_triton:fuse_rows=512;wy_triton:fuse_rows=1024,fuse_bn=16" \
    --out /tmp/fam > $OUT/fam.txt 2>&1
echo "fam rc=$? wall=$((SECONDS - start)) s" >> $OUT/fam.txt
tail -24 $OUT/fam.txt
python3 docs/h200/2026-12-01-f/f2/pick.py /tmp/fam $OUT > $OUT/picked.txt 2>&1; cat $OUT/picked.txt
timeout 170 python3 -m agent.cli bench --mode quick --device cuda > $OUT/bench.txt 2>&1
echo "bench rc=$? wall=$((SECONDS - start)) s" >> $OUT/bench.txt
tail -17 $OUT/bench.txt
fams=$(cat $OUT/picked_families 2>/dev/null)
if [ -n "$fams" ]; then
  left=$((585 - (SECONDS - start)))
  timeout $left python3 scripts/qr_families.py --families $fams --out /tmp/checks > $OUT/checks.txt 2>&1
  echo "checks rc=$? wall=$((SECONDS - start)) s" >> $OUT/checks.txt
  tail -6 $OUT/checks.txt
fi
