#!/usr/bin/env bash
# Device call h6 (nvidia-h200): how many matrix panels cholqr's Householder fallback refactors in
# each of the 12 benchmarks and 22 tests (a shape's second call, checked), counted on the device by the
# fallback kernel (cholqr.fallbacks).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 200 python3 - > $OUT/fallbacks.txt 2>&1 <<'PY'
import importlib.util, sys, torch, yaml
sys.path.insert(0, "kernels/qr")
import reference
spec = importlib.util.spec_from_file_location("cq", "kernels/qr/candidates/cholqr.py")
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
doc = yaml.safe_load(open("kernels/qr/task.yml"))
dev = torch.device("cuda")
for kind in ("benchmarks", "tests"):
    for s in doc[kind]:
        a = reference.generate_input(**s)
        mod.custom_kernel(a.clone())  # a shape's first call also runs once eagerly before its graph capture
        torch.cuda.synchronize()
        before = mod.fallbacks(dev)
        ok, msg = reference.check_implementation(a, mod.custom_kernel(a.clone()))
        torch.cuda.synchronize()
        nb = mod._width(mod.CONFIG, s["n"])
        print(f"{kind[:5]} {s['case']:<14} {s['batch']:>3}x{s['n']:<5} c{s['cond']} ok={ok} "
              f"fallback panels {mod.fallbacks(dev) - before} of {s['batch'] * -(-s['n'] // nb)}", flush=True)
PY
echo "rc=$?" >> $OUT/fallbacks.txt
cat $OUT/fallbacks.txt
