"""Device call f2's pick: for each family, the fused variant with the lowest geomean over the 12
benchmarks (median µs), if it beats the family's defaults by more than 1% in this call and passed
its checks, is written into the family's CONFIG (the fuse_* values only)."""
import difflib
import json
import math
import re
import sys
from pathlib import Path

out, dest = Path(sys.argv[1]), Path(sys.argv[2])  # the sweep's JSON files; where the picks go
picked = []
recs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]


def geomean(rec):
    bench = rec.get("bench") or []
    if len(bench) != 12 or any(not c.get("ok", True) for c in rec.get("checks", [])):
        return None
    return math.exp(sum(math.log(b["median_us"]) for b in bench) / 12)


for fam in ("superpanel", "wy_triton"):
    base = [r for r in recs if r.get("family") == fam and r["config"].get("fuse_rows") == 0]
    tried = [r for r in recs if r.get("family") == fam and r["config"].get("fuse_rows")]
    if not base or geomean(base[0]) is None:
        print(f"{fam}: no default timing, nothing picked")
        continue
    g0 = geomean(base[0])
    scored = sorted((g, r) for r in tried if (g := geomean(r)) is not None)
    for g, r in scored:
        c = r["config"]
        print(f"{fam} fuse_rows={c['fuse_rows']} fuse_bn={c['fuse_bn']} fuse_warps={c['fuse_warps']}: "
              f"{g:.1f} us against {g0:.1f} ({100 * (1 - g / g0):+.1f}%)")
    if scored and scored[0][0] < 0.99 * g0:
        c = scored[0][1]["config"]
        path = Path("kernels/qr/candidates") / f"{fam}.py"
        text = path.read_text()
        new = re.sub(r'"fuse_rows": 0, "fuse_bn": 32, "fuse_warps": 8',
                     f'"fuse_rows": {c["fuse_rows"]}, "fuse_bn": {c["fuse_bn"]}, "fuse_warps": {c["fuse_warps"]}',
                     text, count=1)
        assert new != text, f"{fam}: CONFIG's fuse_* defaults not found"
        path.write_text(new)
        picked.append(fam)
        (dest / f"picked_{fam}.diff").write_text("".join(difflib.unified_diff(
            text.splitlines(True), new.splitlines(True), str(path), str(path))))
        print(f"{fam}: picked fuse_rows={c['fuse_rows']} fuse_bn={c['fuse_bn']} fuse_warps={c['fuse_warps']}")
    else:
        print(f"{fam}: defaults kept")
(dest / "picked_families").write_text(",".join(picked))
