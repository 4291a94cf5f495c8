"""Static SASS counts of one Triton kernel of a candidate file, compiled here for sm_90 (no GPU needed).

    python3 scripts/sass_count.py FILE KERNEL --sig A=*fp32,n=i32,... --const BM=32,NB=32,... \
        [--warps 1] [--div A,n,...] [--unscaled]

Prints the kernel's instruction count, its local-memory spills (LDL/STL) and, for each loop
(a backward branch), the loop body's size and opcode mix. The counts are static: both sides of a
branch inside a loop count. --unscaled compiles a copy in which the panels' column scaling
branch never runs (its condition replaced by False), so the loop counts are those of the path
every ordinary column takes. --div marks the named arguments divisible by 16, as Triton
specializes them at launch (k0 = 0 or a multiple of 16 picks a vectorized tile layout).
Docs quote counts from triton 3.6.0 (the H200's version, installed in a separate venv here).
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SCALED_TESTS = ("scaled = (ssq < 1e-20) | (ssq > 1e30) | (tl.abs(alpha) > 1e15)",
                "if (ssq < 1e-20) | (ssq > 1e30) | (tl.abs(alpha) > 1e15):")


def _pairs(text: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in filter(None, text.split(",")))


def _load(path: Path, unscaled: bool):
    src = path.read_text()
    if unscaled:
        src = src.replace(SCALED_TESTS[0], "scaled = False").replace(SCALED_TESTS[1], "if False:")
    tmp = Path(tempfile.mkdtemp()) / path.name  # Triton reads the source back from a real file
    tmp.write_text(src)
    spec = importlib.util.spec_from_file_location(f"sass_{path.stem}", tmp)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("kernel")
    ap.add_argument("--sig", required=True, help="runtime arguments in order: name=type (*fp32, i32, ...)")
    ap.add_argument("--const", default="", help="constexpr arguments: name=python literal")
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--div", default="", help="runtime arguments specialized as divisible by 16")
    ap.add_argument("--unscaled", action="store_true")
    args = ap.parse_args()

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    mod = _load(args.file, args.unscaled)
    sig = _pairs(args.sig)
    consts = {k: eval(v) for k, v in _pairs(args.const).items()}  # noqa: S307 - literals from the command line
    names = list(sig) + list(consts)
    div = set(filter(None, args.div.split(",")))
    attrs = {(names.index(k),): [["tt.divisibility", 16]] for k in div}
    src = ASTSource(fn=getattr(mod, args.kernel), signature=sig, constexprs=consts, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": args.warps})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        sass = subprocess.run([str(tool), "-sass", f.name], capture_output=True, text=True, check=True).stdout
    ins = [(int(m.group(1), 16), m.group(2).strip()) for m in
           (re.match(r"\s+/\*([0-9a-f]{4})\*/\s+(.*?);", line) for line in sass.splitlines()) if m]
    ops = [re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0] for _, text in ins]
    print(f"triton {triton.__version__}, {args.kernel} {consts} warps={args.warps}: {len(ins)} instructions, "
          f"LDL {ops.count('LDL')}, STL {ops.count('STL')}")
    for addr, text in ins:
        target = re.search(r"BRA\s.*?0x([0-9a-f]+)", text)
        if target and int(target.group(1), 16) < addr:
            start = int(target.group(1), 16)
            body = [op for (a, _), op in zip(ins, ops) if start <= a <= addr]
            mix = collections.Counter(body).most_common(12)
            print(f"  loop {start:#x}-{addr:#x}: {len(body)} instructions: " + ", ".join(f"{k} {v}" for k, v in mix))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    sys.exit(main())
