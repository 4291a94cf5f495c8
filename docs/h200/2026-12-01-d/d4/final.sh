# the last device call of this session: probe, A/B of the panel change, small-size checks, bench + tune
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/d4
timeout 70 python3 scripts/launch_probe.py --small-nb 0 > $OUT/d4/probe.txt 2>&1; cat $OUT/d4/probe.txt
for r in 1 2; do
  timeout 30 python3 scripts/qr_families.py --one .ab/superpanel_panelold.py --time --no-checks --out /tmp/ab_old$r
  timeout 30 python3 scripts/qr_families.py --one kernels/qr/candidates/superpanel.py --time --no-checks --out /tmp/ab_new$r
done
python3 - <<'PY' > $OUT/d4/ab.txt 2>&1
import json, math, glob
rows = {}
for d in sorted(glob.glob("/tmp/ab_*")):
    for f in glob.glob(d + "/*.json"):
        rec = json.load(open(f)); b = rec.get("bench", [])
        if len(b) == 12:
            rows[d[-4:]] = b
names = [x["case"] for x in next(iter(rows.values()))]
print("case".ljust(22) + "".join(f"{k:>9}" for k in rows))
for i, nm in enumerate(names):
    print(nm.ljust(22) + "".join(f"{rows[k][i]['median_us']:>9.1f}" for k in rows))
print("geomean".ljust(22) + "".join(f"{math.exp(sum(math.log(x['median_us']) for x in rows[k]) / 12):>9.1f}" for k in rows))
PY
cat $OUT/d4/ab.txt
timeout 95 python3 scripts/qr_families.py --families superpanel,wy_triton --sizes 1,2,3,5,8,16,17,31,33,64,65,100,127,129 --special-sizes 1,5,40,100 --out /tmp/chk 2>&1 | tail -4 | tee $OUT/d4/checks.txt
OUT=$OUT/d4 bash scripts/h200_tune.sh 290
