"""superpanel: two-level blocked Householder QR (compact WY) in Triton, for tall panels.

Where a panel of nb columns fits in registers (n - k0 <= tile_max / nb rows), it is factored by one
program per matrix (as in wy_triton: fused block reductions per column, T written by the same
kernel). Steps whose trailing update is small (<= lookahead_elems elements and <= lookahead_rows
rows) run with look-ahead: one launch updates the next panel's columns and factors them while the
other programs update the rest. Where a register panel does not fit (the first half of n = 2048 and
4096), an outer panel of nbo columns is factored by a grid panel (tall="grid"): all of a matrix's
programs at once, grid_rows rows each, meeting at a grid barrier once per column, one more program
building T as they go; then one wide update C -= V (T' (V' C)) follows. tall="householder" factors
those outer panels as narrow register panels that update only the rest of the outer panel (then a
Gram kernel); tall="cholqr" by CholeskyQR2 in float64 with Householder reconstruction (orhr_col). A
matrix a grid or CholeskyQR2 panel rejects is refactored by Householder. When matrices x column
blocks are too few to fill the GPU (batch 2 to 60), the updates split the rows across programs and
add V'C with atomics. Small n (<= small_max) is factored on chip in one launch (one register panel,
or small_nb-column panels applied by the same program), and after a shape's first call that launch
skips Triton's argument binding: 20x32 is a 15.6 us kernel, so its host time decides. Launch-bound
shapes replay a CUDA graph. trail="gemm" makes the updates cuBLAS GEMMs (fp32; measured no faster
than the Triton kernel; tall panels then go the householder way).

The update dots run on the tensor cores in bf16x3 (prec; each operand split into two bfloat16 parts,
three products, ~2^-17 relative; only for n >= bf16_min_n, where the checker's 20 n eps32 leaves
room), and the one-launch trailing kernel reads V'C's rows bottom-up (rev_rows) so its top-down
update pass finds the rows read last still in L2. Register panels of up to 16384 floats set each
column's final values once after the column loop rather than with a select per element per column
(_panel's LATE: 20x32 17.5 -> 15.6 us; larger tiles spill with it).

Where the time goes (H200 profile, dense cases): at 640x512 the trailing update ~3.6 ms (bf16x3,
~2.7 TB/s derived from the 12 bytes per element per panel it moves; fp32 FMA dots took ~5 ms) and
the register panels ~2.7 ms (~5 elementwise ops per tile element per column, counted in the code);
at 176-352 the panels' column loop (the critical path; look-ahead hides the updates behind it); at
2x4096 the grid panels (9.6 ms of 23.4: ~3.1 us a column, kernel time over columns, against 30 ms
for one program per matrix), the outer updates (9.7 ms) and the last 1024 columns' steps (3.4 ms);
at 20x32 the call's host time (14-23 us measured, by machine) against a 15.6 us kernel. On a CPU
tensor it runs the same blocked algorithm in PyTorch, or the Triton kernels when TRITON_INTERPRET=1.
"""
import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # a CPU-only machine without Triton still gets the PyTorch path
    triton = None

CONFIG = {"nb": 32, "nbo": 64, "tile_max": 32768, "small_max": 128, "prec": "bf16x3", "bn": 128, "bk": 32,
          "bn_inner": 16, "trail_warps": 4, "panel_epw": 2048, "outer_warps": 8, "split_min": 264,
          "graph_max_elems": 67108864, "trail": "triton",
          "lookahead_elems": 33554432, "lookahead_rows": 512, "tall": "grid", "chol_rel": 1e-12, "chol_orth": 0.1,
          "chol_rows": 1024, "chol_warps": 8,
          "grid_rows": 64, "grid_spin": 4194304, "bf16_min_n": 256, "rev_rows": True, "small_nb": 0}
SPACE = {"nb": [16, 32, 64], "nbo": [32, 64, 128], "tile_max": [8192, 16384, 32768],
         "small_max": [0, 32, 64, 128], "prec": ["tf32x3", "bf16x3", "ieee"], "bn": [32, 64, 128], "bk": [16, 32, 64],
         "bn_inner": [16, 32, 64], "trail_warps": [4, 8], "panel_epw": [512, 1024, 2048, 4096],
         "outer_warps": [4, 8], "split_min": [0, 132, 264, 528],
         "graph_max_elems": [0, 8388608, 33554432, 67108864], "trail": ["triton", "gemm"],
         "lookahead_elems": [0, 2097152, 8388608, 33554432], "lookahead_rows": [256, 512, 1024, 4096],
         "tall": ["householder", "cholqr", "grid"],
         "chol_rel": [1e-14, 1e-12, 1e-10], "chol_orth": [0.01, 0.1, 0.5], "chol_rows": [1024, 2048, 3072],
         "chol_warps": [2, 4, 8], "grid_rows": [32, 64, 128, 256],
         "grid_spin": [1048576, 4194304], "bf16_min_n": [128, 256, 512],
         "rev_rows": [False, True], "small_nb": [0, 8, 16, 32]}
# host-side counts: CholeskyQR2 and grid outer panels launched (a captured graph counts once), and
# matrices refactored by Householder after such a panel rejected them (or its barrier timed out)
STATS = {"cholqr_panels": 0, "grid_panels": 0, "fallback": 0}


# ----------------------------------------------------------------------------------- Triton
if triton is not None:
    _LATE_MAX = tl.constexpr(16384)  # register panels of up to this many floats are LATE (_panel)

    @triton.jit
    def _sum_sum_max(a0, b0, c0, a1, b1, c1):
        return a0 + a1, b0 + b1, tl.maximum(c0, c1)

    @triton.jit
    def _panel_kernel(A, TAU, TW, VB, n, k0, nb, stride_b, stride_vb, ldv, voff,
                      BM: tl.constexpr, NB: tl.constexpr, NBT: tl.constexpr, WRITE_T: tl.constexpr,
                      WRITE_V: tl.constexpr):
        _panel(A, TAU, TW, VB, tl.program_id(0).to(tl.int64), n, k0, nb, stride_b, stride_vb, ldv, voff,
               BM, NB, NBT, WRITE_T, WRITE_V)

    @triton.jit
    def _panel(A, TAU, TW, VB, b, n, k0, nb, stride_b, stride_vb, ldv, voff,
               BM: tl.constexpr, NB: tl.constexpr, NBT: tl.constexpr, WRITE_T: tl.constexpr,
               WRITE_V: tl.constexpr):
        """Householder QR of rows k0.., columns k0..k0+nb of matrix b, in registers; T too.

        With WRITE_V the reflectors also go to VB (unit diagonal, zeros above, row/column voff of a
        dense m x ldv block per matrix) for the cuBLAS trailing update.

        Per column: one fused block reduction (alpha, sum of squares, max) and one for w = v'P;
        the norm is rescaled by max|x| only when the plain sum of squares could have lost range.
        """
        base = A + b * stride_b
        rows = tl.arange(0, BM)
        cols = tl.arange(0, NB)
        m = n - k0
        mask = (rows < m)[:, None] & (cols < nb)[None, :]
        ptrs = base + (k0 + rows)[:, None] * n + (k0 + cols)[None, :]
        p = tl.load(ptrs, mask=mask, other=0.0)
        taus = tl.zeros([NB], dtype=tl.float32)
        # LATE: column c's final values are rebuilt after the loop from its state at step c, x (no
        # later step touches it), and these: v = x * (1 / dn) below the diagonal, beta on it. That
        # saves a select per tile element per column. A column scaled by sc != 1 (tiny or huge)
        # gets v in the loop instead, and 1 / dn = 1 here: T's V'v comes from the tile's x times
        # 1 / dn, never from denormal x. Only for tiles of <= _LATE_MAX = 16384 floats (<= 8 warps
        # with the default panel_epw): at 16 warps a thread has 128 registers, and the extra live
        # values spill (wy_triton 2x4096: 89 -> 102 ms with 4096 x 8 tiles).
        LATE: tl.constexpr = BM * NB <= _LATE_MAX
        rdns = tl.full([NB], 1.0, dtype=tl.float32)
        betas = tl.zeros([NB], dtype=tl.float32)
        t = tl.zeros([NB, NB], dtype=tl.float32)
        tr = tl.arange(0, NB)
        for j in range(0, nb):
            sel = cols[None, :] == j
            cj = tl.sum(tl.where(sel, p, 0.0), axis=1)
            below = rows > j
            xb = tl.where(below, cj, 0.0)
            alpha, ssq, amax = tl.reduce((tl.where(rows == j, cj, 0.0), xb * xb, tl.abs(xb)), 0, _sum_sum_max)
            live = amax > 0.0
            # The reflector is computed from x / sc, so v, tau and beta / sc are O(1) whatever the
            # column's scale (rounding-noise columns shrink toward denormals in rank-deficient
            # matrices); sc = 1 when the plain sum of squares is safe.
            scaled = (ssq < 1e-20) | (ssq > 1e30) | (tl.abs(alpha) > 1e15)
            if scaled:
                sc = tl.where(live, tl.maximum(amax, tl.abs(alpha)), 1.0)
                xs = xb / sc
                an = alpha / sc
                nrm = tl.sqrt(an * an + tl.sum(xs * xs, axis=0))
            else:
                sc = amax * 0.0 + 1.0
                an = alpha
                nrm = tl.sqrt(alpha * alpha + ssq)
            bs = tl.where(an >= 0.0, -nrm, nrm)
            dn = tl.where(live, an - bs, 1.0)
            tau = tl.where(live, (bs - an) / tl.where(live, bs, 1.0), 0.0)
            beta = bs * sc
            if LATE:
                # v = x / dn as x times 1 / dn (as LAPACK's slarfg scales): one division a column,
                # and the same product rebuilds v after the loop; a scaled column divides as before
                rdn = 1.0 / dn
                v = tl.where(below, tl.where(scaled, (cj / sc) / dn, cj * rdn), tl.where(rows == j, 1.0, 0.0))
            else:
                v = tl.where(below, (cj / sc) / dn, tl.where(rows == j, 1.0, 0.0))
            # w[c] = v' p[:, c]: the update of columns > j, and for c < j the column (V' v) of T
            w = tl.sum(v[:, None] * p, axis=0)
            # columns > j get the rank-1 update: one FMA per element (w is zeroed for columns <= j
            # on the short vector, not on the tile); w times 1 / dn is V'v for T (LATE)
            p = p - (tau * v)[:, None] * tl.where(cols > j, w, 0.0)[None, :]
            onj = cols == j
            taus = tl.where(onj, tau, taus)
            if LATE:
                betas = tl.where(onj, tl.where(live, beta, alpha), betas)
                if scaled:
                    p = tl.where(sel, tl.where(below, v, cj)[:, None], p)
                else:  # sc = 1: v = x * (1 / dn)
                    rdns = tl.where(onj, rdn, rdns)
            else:  # column j's final values now: a select per element
                p = tl.where(sel, tl.where(below, v, tl.where(rows == j, tl.where(live, beta, alpha), cj))[:, None], p)
            if WRITE_T:
                g = tl.where(cols < j, w * rdns, 0.0)
                tg = tl.sum(t * g[None, :], axis=1)
                tcol = tl.where(tr < j, -tau * tg, tl.where(tr == j, tau, 0.0))
                t = tl.where(sel, tcol[:, None], t)
        if LATE:
            rc = rows[:, None] - cols[None, :]
            p = tl.where(rc > 0, p * rdns[None, :], tl.where(rc == 0, betas[None, :], p))
        tl.store(ptrs, p, mask=mask)
        tl.store(TAU + b * n + k0 + cols, taus, mask=cols < nb)
        if WRITE_V:
            vv = tl.where(rows[:, None] > cols[None, :], p, tl.where(rows[:, None] == cols[None, :], 1.0, 0.0))
            tl.store(VB + b * stride_vb + (voff + rows)[:, None] * ldv + (voff + cols)[None, :], vv, mask=mask)
        if WRITE_T:
            tbase = TW + b * NBT * NBT
            tl.store(tbase + tr[:, None] * NBT + cols[None, :], t)
            if NB < NBT:  # zero the rest of the NBT x NBT block (stale from a wider panel otherwise)
                big = tl.arange(0, NBT)
                outside = (big[:, None] >= NB) | (big[None, :] >= NB)
                tl.store(tbase + big[:, None] * NBT + big[None, :], tl.zeros([NBT, NBT], dtype=tl.float32),
                         mask=outside)

    @triton.jit
    def _mm(a, b, acc, PREC: tl.constexpr):
        """acc + a @ b. PREC "ieee" (fp32 FMA) and "tf32x3" are Triton's; "bf16x3" splits each
        operand x = hi + lo (hi = bf16(x), lo = bf16(x - hi)) and sums lo*hi + hi*lo + hi*hi on the
        tensor cores with fp32 accumulation: ~2^-17 relative per product (lo*lo dropped), inside
        the checker's 20 n eps bound for n >= bf16_min_n, where plain tf32 (2^-11) is not. "bf16x3-fp32" is the same
        split with the products in fp32 (the interpreter's bfloat16 dot is wrong)."""
        if PREC == "bf16x3" or PREC == "bf16x3-fp32":
            ah = a.to(tl.bfloat16).to(tl.float32)
            al = (a - ah).to(tl.bfloat16).to(tl.float32)
            bh = b.to(tl.bfloat16).to(tl.float32)
            bl = (b - bh).to(tl.bfloat16).to(tl.float32)
            if PREC == "bf16x3":
                acc = tl.dot(al.to(tl.bfloat16), bh.to(tl.bfloat16), acc)
                acc = tl.dot(ah.to(tl.bfloat16), bl.to(tl.bfloat16), acc)
                return tl.dot(ah.to(tl.bfloat16), bh.to(tl.bfloat16), acc)
            else:
                acc = tl.dot(al, bh, acc, input_precision="ieee")
                acc = tl.dot(ah, bl, acc, input_precision="ieee")
                return tl.dot(ah, bh, acc, input_precision="ieee")
        else:
            return tl.dot(a, b, acc, input_precision=PREC)

    @triton.jit
    def _trail_kernel(A, TW, n, k0, nb, cend, stride_b,
                      NBT: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr, REV: tl.constexpr):
        # grid (column blocks, matrices): one matrix's blocks are neighbours in launch order, so
        # they run together and read its V from L2 rather than HBM
        b = tl.program_id(1).to(tl.int64)
        _apply(A, TW, b, n, k0, nb, k0 + nb + tl.program_id(0) * BN, cend, stride_b, NBT, BN, BK, PREC, REV)

    @triton.jit
    def _apply(A, TW, b, n, k0, nb, c0, cend, stride_b,
               NBT: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr, REV: tl.constexpr = False):
        """C = A[k0:, c0:c0+BN] (columns < cend) of matrix b: C -= V (T' (V' C)), V the panel's reflectors."""
        base = A + b * stride_b
        cols = c0 + tl.arange(0, BN)
        kk = tl.arange(0, NBT)
        w = _vtc_rows(base, n, k0, nb, cols, cend, k0, n, NBT, BN, BK, PREC, REV)
        tt = tl.load(TW + b * NBT * NBT + kk[:, None] * NBT + kk[None, :])
        _sub_vw_rows(base, n, k0, nb, cols, cend, k0, n, tl.dot(tl.trans(tt), w, input_precision="ieee"), NBT, BK, PREC)

    @triton.jit
    def _vtc_rows(base, n, k0, nb, cols, cend, r_beg, r_end,
                  NBT: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr, REV: tl.constexpr = False):
        """V' C over rows r_beg..r_end of one matrix (V: the reflectors of columns k0..k0+nb).

        REV walks the rows bottom-up, so the update pass that follows (top-down) starts on the
        rows read last, the ones most likely still in L2."""
        kk = tl.arange(0, NBT)
        pc = k0 + kk
        w = tl.zeros([NBT, BN], dtype=tl.float32)
        if REV:
            last = r_beg + (tl.cdiv(r_end - r_beg, BK) - 1) * BK
            for i in range(0, tl.cdiv(r_end - r_beg, BK)):
                w = _vtc_chunk(base, n, nb, cols, cend, last - i * BK, r_end, pc, kk, w, BK, PREC)
        else:
            for r0 in range(r_beg, r_end, BK):
                w = _vtc_chunk(base, n, nb, cols, cend, r0, r_end, pc, kk, w, BK, PREC)
        return w

    @triton.jit
    def _vtc_chunk(base, n, nb, cols, cend, r0, r_end, pc, kk, w, BK: tl.constexpr, PREC: tl.constexpr):
        rows = r0 + tl.arange(0, BK)
        v = _load_v(base, rows, r_end, n, pc, kk, nb)
        c = tl.load(base + rows[:, None] * n + cols[None, :], mask=(rows < r_end)[:, None] & (cols < cend)[None, :],
                    other=0.0)
        return _mm(tl.trans(v), c, w, PREC)

    @triton.jit
    def _sub_vw_rows(base, n, k0, nb, cols, cend, r_beg, r_end, w,
                     NBT: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr):
        """C -= V w over rows r_beg..r_end of one matrix."""
        kk = tl.arange(0, NBT)
        pc = k0 + kk
        for r0 in range(r_beg, r_end, BK):
            rows = r0 + tl.arange(0, BK)
            v = _load_v(base, rows, r_end, n, pc, kk, nb)
            cp = base + rows[:, None] * n + cols[None, :]
            cm = (rows < r_end)[:, None] & (cols < cend)[None, :]
            c = tl.load(cp, mask=cm, other=0.0)
            tl.store(cp, c - _mm(v, w, None, PREC), mask=cm)

    @triton.jit
    def _step_kernel(A, TAU, TWP, TWN, n, k0, nb, k1, nb1, stride_b,
                     NBT: tl.constexpr, BM: tl.constexpr, NB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                     PREC: tl.constexpr):
        """One step of the blocked loop with look-ahead, in one launch.

        The panel at k0 (V in A, T in TWP) updates every column from k1 = k0 + nb on. Programs
        (b, 0) update the next panel's nb1 columns and factor them at once (T into TWN), while
        programs (b, 1..) update the rest: the next panel's column loop, the critical path, runs
        beside the trailing update instead of after it. (b, 0) come first in launch order.
        """
        b = tl.program_id(0).to(tl.int64)
        cb = tl.program_id(1)
        if cb == 0:
            _apply(A, TWP, b, n, k0, nb, k1, k1 + nb1, stride_b, NBT, NB, BK, PREC)
            tl.debug_barrier()  # this program's writes of the panel columns, before it loads them
            _panel(A, TAU, TWN, TAU, b, n, k1, nb1, stride_b, 0, 0, 0, BM, NB, NBT, True, False)
        else:
            _apply(A, TWP, b, n, k0, nb, k1 + nb1 + (cb - 1) * BN, n, stride_b, NBT, BN, BK, PREC)

    @triton.jit
    def _one_kernel(A, TAU, n, BM: tl.constexpr):
        """A whole matrix (n <= BM) per program as one register panel: the small path's launch, with
        few arguments (a launch's host time grows with them)."""
        _panel(A, TAU, TAU, TAU, tl.program_id(0).to(tl.int64), n, 0, n, n * n, 0, 0, 0, BM, BM, 16, False, False)

    @triton.jit
    def _small_kernel(A, TAU, TW, n, BM: tl.constexpr, NB: tl.constexpr, NBT: tl.constexpr):
        """A whole small matrix per program, in one launch: panels of NB columns factored in
        registers, each applied by the same program to the columns right of it (T through TW,
        the data through L1/L2). Each column's tile work is NB wide, not BM."""
        b = tl.program_id(0).to(tl.int64)
        for k0 in range(0, n, NB):
            nb = tl.minimum(NB, n - k0)
            _panel(A, TAU, TW, TAU, b, n, k0, nb, n * n, 0, 0, 0, BM, NB, NBT, True, False)
            if k0 + nb < n:
                tl.debug_barrier()  # the panel's stores (and T's) before the update loads them
                _apply(A, TW, b, n, k0, nb, k0 + nb, n, n * n, NBT, BM, BM, "ieee")
                tl.debug_barrier()  # the update's stores before the next panel loads them

    @triton.jit
    def _load_v(base, rows, rlim, n, pc, kk, nb):
        """Rows `rows` (< rlim) of the reflectors in columns pc (kk < nb): unit diagonal, zero above."""
        lower = (rows[:, None] > pc[None, :]) & (kk < nb)[None, :]
        v = tl.load(base + rows[:, None] * n + pc[None, :], mask=(rows < rlim)[:, None] & lower, other=0.0)
        return tl.where((rows[:, None] == pc[None, :]) & (kk < nb)[None, :], 1.0, v)

    @triton.jit
    def _vtc_kernel(A, WB, n, k0, nb, c0, cend, rb, stride_b, stride_wb,
                    NBT: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr):
        """Row-split W = V' C: this program's rows k0 + pid2*rb .. +rb, added into WB with atomics."""
        b = tl.program_id(0).to(tl.int64)
        cols = c0 + tl.program_id(1) * BN + tl.arange(0, BN)
        kk = tl.arange(0, NBT)
        r_beg = k0 + tl.program_id(2) * rb
        w = _vtc_rows(A + b * stride_b, n, k0, nb, cols, cend, r_beg, tl.minimum(n, r_beg + rb), NBT, BN, BK, PREC)
        tl.atomic_add(WB + b * stride_wb + kk[:, None] * n + (cols - c0)[None, :], w, mask=(cols < cend)[None, :])

    @triton.jit
    def _upd_kernel(A, WB, TW, n, k0, nb, c0, cend, rb, stride_b, stride_wb,
                    NBT: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr):
        """Row-split C -= V (T' W) for this program's rows, W = V' C summed by _vtc_kernel."""
        b = tl.program_id(0).to(tl.int64)
        cols = c0 + tl.program_id(1) * BN + tl.arange(0, BN)
        kk = tl.arange(0, NBT)
        w = tl.load(WB + b * stride_wb + kk[:, None] * n + (cols - c0)[None, :], mask=(cols < cend)[None, :], other=0.0)
        tt = tl.load(TW + b * NBT * NBT + kk[:, None] * NBT + kk[None, :])
        r_beg = k0 + tl.program_id(2) * rb
        _sub_vw_rows(A + b * stride_b, n, k0, nb, cols, cend, r_beg, tl.minimum(n, r_beg + rb),
                     tl.dot(tl.trans(tt), w, input_precision="ieee"), NBT, BK, PREC)

    @triton.jit
    def _gram_kernel(A, GB, n, k0, w, rb, stride_b, WT: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr):
        """Row-split G = V'V of the w reflectors in columns k0..k0+w, added into GB with atomics."""
        b = tl.program_id(0).to(tl.int64)
        base = A + b * stride_b
        kk = tl.arange(0, WT)
        pc = k0 + kk
        r_beg = k0 + tl.program_id(1) * rb
        r_end = tl.minimum(n, r_beg + rb)
        g = tl.zeros([WT, WT], dtype=tl.float32)
        for r0 in range(r_beg, r_end, BK):
            v = _load_v(base, r0 + tl.arange(0, BK), r_end, n, pc, kk, w)
            g = _mm(tl.trans(v), v, g, PREC)
        tl.atomic_add(GB + b * WT * WT + kk[:, None] * WT + kk[None, :], g)

    @triton.jit
    def _larft_kernel(GB, TAU, TW, n, k0, w, WT: tl.constexpr):
        """T (WT x WT, zero-padded) of the w reflectors in columns k0..k0+w, from G = V'V (larft)."""
        b = tl.program_id(0).to(tl.int64)
        kk = tl.arange(0, WT)
        km = kk < w
        g = tl.load(GB + b * WT * WT + kk[:, None] * WT + kk[None, :])
        tau = tl.load(TAU + b * n + k0 + kk, mask=km, other=0.0)
        t = tl.zeros([WT, WT], dtype=tl.float32)
        for j in range(0, w):
            gj = tl.where(kk < j, tl.sum(tl.where(kk[:, None] == j, g, 0.0), axis=0), 0.0)  # (V' v_j)[:j]
            tj = tl.sum(tl.where(kk == j, tau, 0.0), axis=0)
            tg = tl.sum(t * gj[None, :], axis=1)
            tcol = tl.where(kk < j, -tj * tg, tl.where(kk == j, tj, 0.0))
            t = tl.where(kk[None, :] == j, tcol[:, None], t)
        tl.store(TW + b * WT * WT + kk[:, None] * WT + kk[None, :], t)

if triton is not None:
    @triton.jit
    def _upper_inverse(u, i, w):
        """The inverse of the upper triangular w x w block of u (a W x W tile), by rows from the bottom."""
        ui = tl.zeros_like(u)
        for jj in range(0, w):
            j = w - 1 - jj
            row = tl.sum(tl.where(i[:, None] == j, u, 0.0), axis=0)
            s = tl.sum(row[:, None] * ui, axis=0)  # sum over k > j of U[j, k] U^-1[k, :] (rows <= j still 0)
            ujj = tl.sum(tl.where(i == j, row, 0.0), axis=0)
            ui = tl.where(i[:, None] == j, ((tl.where(i == j, 1.0, 0.0) - s) / ujj)[None, :], ui)
        return ui

    @triton.jit
    def _chol_kernel(G, R, RI, BAD, w, rel, orth, W: tl.constexpr, CHECK_ORTH: tl.constexpr):
        """G = R'R (float64, w x w) of one matrix: R and R^-1 out; BAD set when a pivot is not above
        rel * max(diag G) (or not finite), or with CHECK_ORTH when max |G - I| > orth."""
        b = tl.program_id(0).to(tl.int64)
        i = tl.arange(0, W)
        live = (i[:, None] < w) & (i[None, :] < w)
        offs = b * w * w + i[:, None] * w + i[None, :]
        g = tl.load(G + offs, mask=live, other=0.0)
        diag = tl.where(i[:, None] == i[None, :], g, 0.0)
        ok = tl.max(tl.sum(diag, axis=1), axis=0) > 0.0
        if CHECK_ORTH:
            ok = ok & (tl.max(tl.max(tl.abs(g - tl.where((i[:, None] == i[None, :]) & live, 1.0, 0.0)), axis=1),
                              axis=0) <= orth)
        floor = rel * tl.max(tl.sum(diag, axis=1), axis=0)
        r = tl.zeros_like(g)
        for j in range(0, w):
            row = tl.sum(tl.where(i[:, None] == j, g, 0.0), axis=0)
            piv = tl.sum(tl.where(i == j, row, 0.0), axis=0)
            good = piv > floor  # false for NaN too
            ok = ok & good
            rj = tl.where(i >= j, row / tl.sqrt(tl.where(good, piv, 1.0)), 0.0)
            r = tl.where(i[:, None] == j, rj[None, :], r)
            g = g - rj[:, None] * rj[None, :]
        tl.store(R + offs, r, mask=live)
        tl.store(RI + offs, _upper_inverse(tl.where(i[:, None] == i[None, :], tl.where(live, r, 1.0), r), i, w),
                 mask=live)
        tl.store(BAD + b, 1, mask=~ok)

    @triton.jit
    def _signed_lu_kernel(Q, LU, UI, D, TAU, stride_qb, n, k0, w, W: tl.constexpr):
        """Unpivoted LU of Q1 - D (Q1 the top w x w block of this matrix's Q, float64), D_j = -sign of
        the j-th pivot as it comes (so |pivot| = |q| + 1 >= 1), as LAPACK's orhr_col: L and U in LU,
        U^-1 in UI, D, and tau_j = -U_jj D_j into TAU (float32, columns k0..)."""
        b = tl.program_id(0).to(tl.int64)
        i = tl.arange(0, W)
        live = (i[:, None] < w) & (i[None, :] < w)
        x = tl.load(Q + b * stride_qb + i[:, None] * w + i[None, :], mask=live, other=0.0)
        d = tl.zeros([W], dtype=tl.float64)
        for j in range(0, w):
            col = tl.sum(tl.where(i[None, :] == j, x, 0.0), axis=1)
            ajj = tl.sum(tl.where(i == j, col, 0.0), axis=0)
            dj = tl.where(ajj >= 0.0, -1.0, 1.0)
            piv = ajj - dj
            d = tl.where(i == j, dj, d)
            x = tl.where((i[:, None] == j) & (i[None, :] == j), piv, x)
            row = tl.where(i > j, tl.sum(tl.where(i[:, None] == j, x, 0.0), axis=0), 0.0)
            l = tl.where(i > j, col / piv, 0.0)
            x = x - l[:, None] * row[None, :]
            x = tl.where((i[:, None] > j) & (i[None, :] == j), l[:, None], x)
        offs = b * w * w + i[:, None] * w + i[None, :]
        tl.store(LU + offs, x, mask=live)
        u = tl.where(i[:, None] <= i[None, :], x, 0.0)
        tl.store(UI + offs, _upper_inverse(tl.where(live, u, tl.where(i[:, None] == i[None, :], 1.0, 0.0)), i, w),
                 mask=live)
        tl.store(D + b * w + i, d, mask=i < w)
        udiag = tl.sum(tl.where(i[:, None] == i[None, :], x, 0.0), axis=1)
        tl.store(TAU + b * n + k0 + i, (-udiag * d).to(tl.float32), mask=i < w)


    @triton.jit
    def _grid_column(z, q, cols, j):
        """From column j's sums (z = x'P below the diagonal, q = P's row j; float64): tau, v'P,
        1 / (alpha - beta), the new diagonal entry, and ||x||^2."""
        ssq = tl.sum(tl.where(cols == j, z, 0.0), axis=0)
        alpha = tl.sum(tl.where(cols == j, q, 0.0), axis=0)
        live = ssq > 0.0
        nrm = tl.sqrt(alpha * alpha + ssq)
        bs = tl.where(alpha >= 0.0, -nrm, nrm)
        dn = tl.where(live, alpha - bs, 1.0)
        tau = tl.where(live, (bs - alpha) / tl.where(live, bs, 1.0), 0.0).to(tl.float32)
        w = (z / dn + q).to(tl.float32)  # v'P: v is x / dn below j and 1 at j
        return tau, w, (1.0 / dn).to(tl.float32), tl.where(live, bs, alpha).to(tl.float32), ssq

    @triton.jit
    def _grid_panel_kernel(A, TAU, TW, ACC, CNT, BAD, n, k0, nb, nprog, stride_b, spin_max,
                           R: tl.constexpr, NB: tl.constexpr):
        """Householder QR of the tall panel A[k0:, k0:k0+nb] of matrix b by nprog programs at once.

        Program (b, i < nprog) holds rows i*R..(i+1)*R of the panel in registers. Per column j it
        adds its part of z = x'P (x: column j below the diagonal; float32 products and sums over
        its rows) into ACC in float64, the owner of row j stores P's row j beside it, and the
        matrix's programs meet at a grid barrier (a counter in CNT). Then each has v'P = z /
        (alpha - beta) + P[j] and updates its own rows: one barrier per column, where one program
        per matrix would run the whole chain on one SM. Program (b, nprog) never arrives at the
        barrier: it follows the counter and builds T from the same sums (T[:j, j] = -tau_j T V'v_j,
        V'v_j = v'P for the columns < j), so the others never wait for T.

        A matrix goes to BAD, to be refactored by Householder, when a float32 part could have lost
        range (z not finite, or a nonzero column whose sum of squares is below 1e-30: then its
        entries are under ~1e-15 and their squares may have underflowed), or when a program has
        polled the barrier spin_max times in all and stopped waiting. The barrier needs every
        program of the matrix resident at once (the host sizes the launch to fit, _grid_rows):
        a wrong guess costs time, not a hang or a wrong answer.
        """
        b = tl.program_id(0).to(tl.int64)
        pid = tl.program_id(1)
        cols = tl.arange(0, NB)
        acc = ACC + (b * n + k0) * (2 * NB + 1)
        cnt = CNT + b * n + k0
        spins = tl.full([], 0, tl.int32)
        if pid == nprog:
            t = tl.zeros([NB, NB], dtype=tl.float32)
            for j in range(0, nb):
                seen = tl.atomic_add(cnt, 0, sem="acquire")
                while (seen < (j + 1) * nprog) & (spins < spin_max):
                    seen = tl.atomic_add(cnt, 0, sem="acquire")
                    spins += 1
                tl.debug_barrier()
                slot = acc + j * (2 * NB + 1)
                tau, w, rdn, top, ssq = _grid_column(tl.load(slot + cols, cache_modifier=".cg"),
                                                     tl.load(slot + NB + cols, cache_modifier=".cg"), cols, j)
                tg = tl.sum(t * tl.where(cols < j, w, 0.0)[None, :], axis=1)
                tcol = tl.where(cols < j, -tau * tg, tl.where(cols == j, tau, 0.0))
                t = tl.where(cols[None, :] == j, tcol[:, None], t)
            tl.store(TW + b * NB * NB + cols[:, None] * NB + cols[None, :], t)
        else:
            base = A + b * stride_b
            rows = pid * R + tl.arange(0, R)
            m = n - k0
            mask = (rows < m)[:, None] & (cols < nb)[None, :]
            ptrs = base + (k0 + rows)[:, None] * n + (k0 + cols)[None, :]
            p = tl.load(ptrs, mask=mask, other=0.0)
            taus = tl.zeros([NB], dtype=tl.float32)
            lost = tl.full([], 0, tl.int32)
            for j in range(0, nb):
                sel = cols[None, :] == j
                cj = tl.sum(tl.where(sel, p, 0.0), axis=1)
                below = rows > j
                slot = acc + j * (2 * NB + 1)
                xb = tl.where(below, cj, 0.0)
                tl.atomic_add(slot + cols, tl.sum(xb[:, None] * p, axis=0).to(tl.float64), sem="relaxed")
                tl.atomic_add(slot + 2 * NB, tl.sum(tl.abs(xb), axis=0).to(tl.float64), sem="relaxed")
                if (j >= pid * R) & (j < pid * R + R):
                    tl.store(slot + NB + cols,
                             tl.sum(tl.where((rows == j)[:, None], p, 0.0), axis=0).to(tl.float64))
                tl.debug_barrier()  # every thread's part is out before the arrival is counted
                seen = tl.atomic_add(cnt, 1, sem="release") + 1
                while (seen < (j + 1) * nprog) & (spins < spin_max):
                    seen = tl.atomic_add(cnt, 0, sem="acquire")
                    spins += 1
                tl.debug_barrier()
                z = tl.load(slot + cols, cache_modifier=".cg")
                tau, w, rdn, top, ssq = _grid_column(z, tl.load(slot + NB + cols, cache_modifier=".cg"), cols, j)
                l1 = tl.load(slot + 2 * NB, cache_modifier=".cg")
                lost = lost | (((l1 > 0.0) & (ssq < 1e-30)) | ~(tl.max(tl.abs(z), axis=0) < 1e300)).to(tl.int32)
                v = tl.where(below, cj * rdn, tl.where(rows == j, 1.0, 0.0))
                newc = tl.where(below, v, tl.where(rows == j, top, cj))
                p = p - (tau * v)[:, None] * tl.where(cols > j, w, 0.0)[None, :]
                p = tl.where(sel, newc[:, None], p)
                taus = tl.where(cols == j, tau, taus)
            tl.store(ptrs, p, mask=mask)
            if pid == 0:
                tl.store(TAU + b * n + k0 + cols, taus, mask=cols < nb)
            if lost != 0:
                tl.store(BAD + b, 1)
        if spins >= spin_max:
            tl.store(BAD + b, 1)

def _cholqr_panel(a, tau, k0, w, cfg, bad):
    """The outer panel A[k0:, k0:k0+w] by CholeskyQR2 in float64 and Householder reconstruction.

    P = Q R1 (Cholesky of P'P), then Q = Q R2 again; the Householder vectors, tau and R with signs
    come from the signed LU of Q's top block (orhr_col): Q1 - D = L U gives V1 = L, V2 = Q2 U^-1,
    tau_j = -U_jj D_j and R_h = D R2 R1. Every step is a batched GEMM or a w-step kernel on w x w
    tiles, so a panel of 4096 rows costs no 4096-long chain of block reductions. A matrix whose
    Cholesky meets a tiny pivot, or whose first Q is far from orthonormal (then the second pass
    would not be accurate), is marked in `bad` and refactored by Householder afterwards.
    """
    b, n, _ = a.shape
    STATS["cholqr_panels"] += 1
    m, W = n - k0, max(16, _pow2(w))
    q = torch.empty(b, m, w, dtype=torch.float64, device=a.device)
    q.copy_(a[:, k0:, k0:k0 + w])
    z = dict(dtype=torch.float64, device=a.device)
    rs = []
    for check in (False, True):
        g = torch.bmm(q.transpose(1, 2), q)
        r, ri = torch.empty(b, w, w, **z), torch.empty(b, w, w, **z)
        _chol_kernel[(b,)](g, r, ri, bad, w, cfg["chol_rel"], cfg["chol_orth"], W=W, CHECK_ORTH=check,
                           num_warps=cfg["chol_warps"])
        q = torch.bmm(q, ri)
        rs.append(r)
    lu, ui, d = torch.empty(b, w, w, **z), torch.empty(b, w, w, **z), torch.empty(b, w, **z)
    _signed_lu_kernel[(b,)](q, lu, ui, d, tau, q.stride(0), n, k0, w, W=W, num_warps=cfg["chol_warps"])
    a[:, k0 + w:, k0:k0 + w] = torch.bmm(q[:, w:], ui)
    a[:, k0:k0 + w, k0:k0 + w] = torch.triu(d.unsqueeze(2) * torch.bmm(rs[1], rs[0])) + torch.tril(lu, -1)


def _prec(cfg, n):
    """The update dots' precision for n x n matrices, as the kernels take it. bf16x3 (~2^-17
    relative per product) only where n >= bf16_min_n: the checker allows 20 n eps32, so small n
    has too little room (n = 24 failed under the interpreter). Its bfloat16 dots are emulated there."""
    if cfg["prec"] != "bf16x3":
        return cfg["prec"]
    if n < cfg["bf16_min_n"]:
        return "ieee"
    return "bf16x3-fp32" if os.environ.get("TRITON_INTERPRET") == "1" else "bf16x3"


def _pow2(x):
    return 1 << max(0, int(x) - 1).bit_length()


def _warps(elems, per_warp):
    """Warps for a register tile of `elems` floats: one per `per_warp` elements, 1 to 16, a power of two.

    Fewer warps make the per-column block reductions cheaper (one warp needs no barrier); more
    warps spread the elementwise work and keep registers per thread low."""
    w = max(1, min(16, elems // per_warp))
    return 1 << (w.bit_length() - 1)


def _inner_width(cfg, rows):
    """Columns of a register panel with `rows` rows: a power of two, at most nb."""
    bm = max(16, _pow2(rows))
    nbp = max(1, min(int(cfg["nb"]), cfg["tile_max"] // bm))
    return bm, 1 << (nbp.bit_length() - 1)


def _row_blocks(cfg, programs, rows):
    """Rows per program when `programs` programs are too few to fill the GPU (split_min), else 0."""
    if programs >= cfg["split_min"] or rows <= cfg["bk"]:
        return 0
    nrb = min(triton.cdiv(rows, cfg["bk"]), triton.cdiv(cfg["split_min"], programs))
    return triton.cdiv(triton.cdiv(rows, nrb), cfg["bk"]) * cfg["bk"]


def _update_gemm(a, v, t, k0, c0, cend):
    """A[k0:, c0:cend] -= V (T' (V' A[k0:, c0:cend])) by three cuBLAS batched GEMMs (fp32, no TF32)."""
    c = a[:, k0:, c0:cend]
    c.baddbmm_(v, torch.bmm(t.transpose(1, 2), torch.bmm(v.transpose(1, 2), c)), alpha=-1.0)


def _update(a, t, nbt, k0, nb, cend, cfg, wb, bn, warps):
    """A[k0:, k0+nb:cend] -= V (T' (V' A[k0:, k0+nb:cend])) with V, T of the panel at k0."""
    b, n, _ = a.shape
    c0 = k0 + nb
    ncb = triton.cdiv(cend - c0, bn)
    rb = _row_blocks(cfg, b * ncb, n - k0) if wb is not None else 0
    if not rb:
        _trail_kernel[(ncb, b)](a, t, n, k0, nb, cend, n * n, NBT=nbt, BN=bn, BK=cfg["bk"], PREC=_prec(cfg, n),
                                REV=cfg["rev_rows"], num_warps=warps)
        return
    grid = (b, ncb, triton.cdiv(n - k0, rb))
    wb[:, :nbt, :cend - c0].zero_()
    _vtc_kernel[grid](a, wb, n, k0, nb, c0, cend, rb, n * n, wb.stride(0), NBT=nbt, BN=bn, BK=cfg["bk"],
                      PREC=_prec(cfg, n), num_warps=warps)
    _upd_kernel[grid](a, wb, t, n, k0, nb, c0, cend, rb, n * n, wb.stride(0), NBT=nbt, BN=bn, BK=cfg["bk"],
                      PREC=_prec(cfg, n), num_warps=warps)


_SCRATCH = {}


def _scratch(device, b, nbt):
    """T of the small kernel's panels: b x nbt x nbt floats, kept per shape (only the launch that
    writes it reads it, and launches run in order)."""
    key = (device, b, nbt)
    if key not in _SCRATCH:
        _SCRATCH[key] = torch.zeros(b, nbt, nbt, dtype=torch.float32, device=device)
    return _SCRATCH[key]


def _small_launch(a, tau, cfg):
    """(kernel, grid, args, warps) of the n <= small_max path: the whole factorization in one
    launch, one program per matrix, in panels of small_nb columns (0: one panel as wide as n)."""
    b, n, _ = a.shape
    np2 = max(16, _pow2(n))
    nb = min(np2, int(cfg["small_nb"]) or np2)
    if nb >= np2:
        return _one_kernel, (b,), (a, tau, n, np2), _warps(np2 * np2, cfg["panel_epw"])
    tw = _scratch(a.device, b, max(16, nb))
    return _small_kernel, (b,), (a, tau, tw, n, np2, nb, max(16, nb)), _warps(np2 * nb, cfg["panel_epw"])


def _factor_small(a, tau, cfg):
    kernel, grid, args, warps = _small_launch(a, tau, cfg)
    kernel[grid](*args, num_warps=warps)


class _Small:
    """The n <= small_max path for one shape on a GPU, set up once. A 20x32 call is a ~16 us
    kernel, so host time per call decides its timing: after the first call, which goes through
    Triton's launch (binding, specialization, cache), each call allocates tau and calls the
    compiled kernel's runner (H200 host: 8-14 us a call against 13-27 for Triton's launch). Triton
    specialized the kernel on the first call's arguments; all but the input and tau are fixed
    here, tau comes from torch's allocator (aligned), and an input that is not 16-byte aligned
    (which Triton's pointer specialization assumes) takes Triton's launch."""

    def __init__(self, cfg):
        self.cfg, self.run, self.rest = cfg, None, ()

    def __call__(self, a):
        tau = torch.empty(a.shape[0], a.shape[1], dtype=a.dtype, device=a.device)
        if self.run is not None and a.data_ptr() % 16 == 0:
            self.run(a, tau, *self.rest)
            return a, tau
        kernel, grid, args, warps = _small_launch(a, tau, self.cfg)
        compiled = kernel[grid](*args, num_warps=warps)
        if self.run is None and a.data_ptr() % 16 == 0 and hasattr(compiled, "__getitem__"):
            self.run, self.rest = compiled[(grid[0], 1, 1)], args[2:]
        return a, tau


def _factor_triton(a, tau, cfg, ws):
    b, n, _ = a.shape
    if n <= cfg["small_max"]:
        _factor_small(a, tau, cfg)
        return
    twi, two, gb, wb, vb, twi2, grid, bad = ws
    nbt, wt = twi.shape[-1], two.shape[-1]
    if bad is not None:
        bad.zero_()
    if grid is not None:
        grid[0].zero_()
        grid[1].zero_()
    gemm = vb is not None
    ldv = vb.shape[-1] // n if gemm else 0
    ahead = not gemm
    pend, tws = None, (twi, twi2)  # look-ahead: the last panel (k0, width, which T) not yet applied
    k0 = 0
    while k0 < n:
        # Two levels only where a register panel is narrower than nb (tall panels); elsewhere one
        # register panel is the whole outer panel (no Gram/larft pass), as in wy_triton.
        bm, nbp0 = _inner_width(cfg, n - k0)
        if ahead and nbp0 >= int(cfg["nb"]):  # one register panel per step, from here to the end
            w, cur = min(nbp0, n - k0), 1 - pend[2] if pend else 0
            warps = _warps(bm * nbp0, cfg["panel_epw"])
            if pend is None:
                _panel_kernel[(b,)](a, tau, tws[cur], tau, n, k0, w, n * n, 0, 0, 0, BM=bm, NB=nbp0, NBT=nbt,
                                    WRITE_T=True, WRITE_V=False, num_warps=warps)
            else:
                grid = (b, 1 + triton.cdiv(n - k0 - w, cfg["bn"]))
                _step_kernel[grid](a, tau, tws[pend[2]], tws[cur], n, pend[0], pend[1], k0, w, n * n, NBT=nbt, BM=bm,
                                   NB=nbp0, BN=cfg["bn"], BK=cfg["bk"], PREC=_prec(cfg, n),
                                   num_warps=max(warps, cfg["trail_warps"]))
            pend = None
            if b * (n - k0) * (n - k0 - w) > cfg["lookahead_elems"] or n - k0 > cfg["lookahead_rows"]:
                # a big trailing update runs alone: in the fused launch it would run with the
                # panel's warps and registers (measured slower at 640x512 and 60x1024)
                if k0 + w < n:
                    _update(a, tws[cur], nbt, k0, w, n, cfg, wb, cfg["bn"], cfg["trail_warps"])
                k0 += w
                continue
            pend = (k0, w, cur)
            k0 += w
            continue
        kend = min(n, k0 + (int(cfg["nbo"]) if nbp0 < int(cfg["nb"]) else nbp0))
        m = n - k0
        # V of this outer panel, as the dense m x (kend - k0) matrix the GEMMs read
        vo = vb[:, :m * ldv].view(b, m, ldv)[:, :, :kend - k0] if gemm else None
        k1, single = k0, True
        rg = _grid_rows(cfg, b, m, a.device) if grid is not None else 0
        if rg:  # the outer panel by all of the matrix's programs at once, then its T
            STATS["grid_panels"] += 1
            nprog = triton.cdiv(m, rg)
            _grid_panel_kernel[(b, nprog + 1)](a, tau, two, grid[0], grid[1], bad, n, k0, kend - k0, nprog, n * n,
                                               cfg["grid_spin"] if a.is_cuda or nprog == 1 else 0, R=rg, NB=wt,
                                               num_warps=_warps(rg * wt, cfg["panel_epw"]))
            if kend < n:
                _update(a, two, wt, k0, kend - k0, n, cfg, wb, cfg["bn"], cfg["outer_warps"])
            k0 = kend
            continue
        if cfg["tall"] == "cholqr" and bad is not None and m > cfg["chol_rows"]:  # CholeskyQR2 + reconstruction
            _cholqr_panel(a, tau, k0, kend - k0, cfg, bad)
            k1, single = kend, False
        while k1 < kend:
            bm, nbp = _inner_width(cfg, n - k1)
            nb1 = min(nbp, kend - k1)
            if gemm and k1 > k0:  # rows above this inner panel: zeros in V (stale from an earlier panel)
                vo[:, :k1 - k0, k1 - k0:k1 - k0 + nb1].zero_()
            _panel_kernel[(b,)](a, tau, twi, vb if gemm else tau, n, k1, nb1, n * n, vb.stride(0) if gemm else 0,
                                ldv, k1 - k0, BM=bm, NB=nbp, NBT=nbt, WRITE_T=True, WRITE_V=gemm,
                                num_warps=_warps(bm * nbp, cfg["panel_epw"]))
            if k1 + nb1 < kend:  # inner update: only the rest of this outer panel
                single = False
                if gemm:
                    _update_gemm(a, vo[:, k1 - k0:, k1 - k0:k1 - k0 + nb1], twi[:, :nb1, :nb1], k1, k1 + nb1, kend)
                else:
                    _update(a, twi, nbt, k1, nb1, kend, cfg, wb, cfg["bn_inner"], cfg["trail_warps"])
            k1 += nb1
        if kend < n:
            w = kend - k0
            if single:  # the outer panel was one register panel: its T is already there
                if gemm:
                    _update_gemm(a, vo, twi[:, :w, :w], k0, kend, n)
                else:
                    _update(a, twi, nbt, k0, w, n, cfg, wb, cfg["bn"], cfg["trail_warps"])
            else:
                gb.zero_()
                if gemm:
                    gb[:, :w, :w] = torch.bmm(vo.transpose(1, 2), vo)
                else:
                    rb = _row_blocks(cfg, b, m) or triton.cdiv(m, cfg["bk"]) * cfg["bk"]
                    # (T's Gram matrix never in bf16x3: _prec(cfg, 0))
                    _gram_kernel[(b, triton.cdiv(m, rb))](a, gb, n, k0, w, rb, n * n, WT=wt, BK=cfg["bk"],
                                                          PREC=_prec(cfg, 0), num_warps=cfg["outer_warps"])
                _larft_kernel[(b,)](gb, tau, two, n, k0, w, WT=wt, num_warps=cfg["outer_warps"])
                if gemm:
                    _update_gemm(a, vo, two[:, :w, :w], k0, kend, n)
                else:
                    _update(a, two, wt, k0, w, n, cfg, wb, cfg["bn"], cfg["outer_warps"])
        k0 = kend


def _gemm_updates(cfg):
    """cuBLAS trailing updates only in full fp32: with TF32 matmuls allowed, the Triton kernels run."""
    return cfg["trail"] == "gemm" and torch.get_float32_matmul_precision() == "highest"


def _workspaces(a, cfg):
    """T of a register panel, T and G of an outer panel, and W for row-split updates (small batches,
    Triton updates) or V as a dense matrix per panel (cuBLAS updates)."""
    b, n, _ = a.shape
    nbt, wt = max(16, int(cfg["nb"])), max(16, _pow2(cfg["nbo"]))
    z = dict(dtype=a.dtype, device=a.device)
    gemm = _gemm_updates(cfg)
    wb = torch.zeros(b, max(nbt, wt), n, **z) if b < cfg["split_min"] and not gemm else None
    vb = torch.zeros(b, n * max(nbt, wt), **z) if gemm else None
    tall = _tall_panels(cfg, n) and not gemm
    rg = _grid_rows(cfg, b, n, a.device) if tall and cfg["tall"] == "grid" else 0
    bad = torch.zeros(b, dtype=torch.int32, device=a.device) if rg or (tall and cfg["tall"] == "cholqr") else None
    # grid panels: float64 sums (z | P's row | sum |x|) per column, and a barrier counter per panel
    grid = (torch.zeros(b, n, 2 * wt + 1, dtype=torch.float64, device=a.device),
            torch.zeros(b, n, dtype=torch.int32, device=a.device)) if rg else None
    return (torch.zeros(b, nbt, nbt, **z), torch.zeros(b, wt, wt, **z), torch.zeros(b, wt, wt, **z), wb, vb,
            torch.zeros(b, nbt, nbt, **z), grid, bad)


def _tall_panels(cfg, n):
    """Whether the first outer panels are too tall for a register panel nb wide (two levels)."""
    return n > cfg["small_max"] and _inner_width(cfg, n)[1] < int(cfg["nb"])


def _grid_rows(cfg, b, m, device):
    """Rows per program of a grid panel of m rows, or 0 where one would not fit the GPU.

    Every program of a matrix waits for the others at each column, so all b * (cdiv(m, rows) + 1)
    of them (one more per matrix builds T) must be resident together. Rows grow from grid_rows
    until they fit two programs per SM, as programs of at most 4 warps (those measured) surely do:
    255 registers x 128 threads is half an SM's 65536. Where that needs more than 4 warps, there
    is no grid panel. (The interpreter runs programs one after another, so there the programs of
    a matrix can never meet: with more than one, they do not wait at all (spin_max 0) and the
    matrix goes to the Householder redo.)"""
    rows, wt = int(cfg["grid_rows"]), _pow2(cfg["nbo"])
    if device.type != "cuda":
        return rows
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    while rows * wt <= cfg["tile_max"] and _warps(rows * wt, cfg["panel_epw"]) <= 4:
        if b * (triton.cdiv(m, rows) + 1) <= 2 * sms:
            return rows
        rows *= 2
    return 0


def _redo_rejected(orig, h, tau, bad, cfg):
    """Refactor by Householder (tall panels too) the matrices a CholeskyQR2 or grid panel rejected."""
    idx = torch.nonzero(bad).flatten()
    if idx.numel() == 0:
        return
    STATS["fallback"] += int(idx.numel())
    cfg = dict(cfg, tall="householder")
    sub = orig.index_select(0, idx).contiguous()
    sub_tau = torch.empty(sub.shape[0], sub.shape[1], dtype=sub.dtype, device=sub.device)
    _factor_triton(sub, sub_tau, cfg, _workspaces(sub, cfg))
    h.index_copy_(0, idx, sub)
    tau.index_copy_(0, idx, sub_tau)


# ----------------------------------------------------------------------------------- PyTorch
def _panel_torch(a, tau, k0, w):
    """Householder QR of a[:, k0:, k0:k0+w] in place, column by column (LAPACK slarfg signs)."""
    for j in range(k0, k0 + w):
        x = a[:, j:, j]
        alpha, tail = x[:, 0], x[:, 1:]
        amax = tail.abs().amax(dim=1) if tail.shape[1] else torch.zeros_like(alpha)
        live = amax > 0
        # v, tau and beta / sc from x / sc: O(1) and consistent whatever the column's scale
        sc = torch.where(live, torch.maximum(amax, alpha.abs()), 1.0)
        xs = tail / sc.unsqueeze(1)
        an = alpha / sc
        bs = torch.copysign(torch.hypot(an, torch.linalg.vector_norm(xs, dim=1)), -an)
        dn = torch.where(live, an - bs, 1.0)
        t = torch.where(live, (bs - an) / torch.where(live, bs, 1.0), 0.0)
        tail.copy_(torch.where(live.unsqueeze(1), xs / dn.unsqueeze(1), tail))
        tau[:, j] = t
        beta = torch.where(live, bs * sc, alpha)
        if j + 1 < k0 + w:
            x[:, 0] = 1.0
            c = a[:, j:, j + 1:k0 + w]
            c.baddbmm_(x.unsqueeze(2), torch.bmm(x.unsqueeze(1), c) * t.view(-1, 1, 1), alpha=-1.0)
        x[:, 0] = beta


def _factor_torch(a, tau, nb):
    n = a.shape[-1]
    for k0 in range(0, n, nb):
        w = min(nb, n - k0)
        _panel_torch(a, tau, k0, w)
        if k0 + w < n:
            v = torch.tril(a[:, k0:, k0:k0 + w], -1)
            v.diagonal(dim1=1, dim2=2).fill_(1.0)
            g = torch.bmm(v.transpose(1, 2), v)
            t = torch.zeros(a.shape[0], w, w, dtype=a.dtype, device=a.device)
            for j in range(w):  # larft recurrence: T[:j, j] = -tau_j T[:j, :j] (V' v_j)[:j]
                t[:, j, j] = tau[:, k0 + j]
                if j:
                    t[:, :j, j] = -tau[:, k0 + j, None] * torch.bmm(t[:, :j, :j], g[:, :j, j:j + 1])[..., 0]
            c = a[:, k0:, k0 + w:]
            c.baddbmm_(v, torch.bmm(t.transpose(1, 2), torch.bmm(v.transpose(1, 2), c)), alpha=-1.0)


# ----------------------------------------------------------------------------------- entry
def _use_triton(a):
    if triton is None:
        return False
    return a.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"


class _Replay:
    """A captured factorization for one shape: copy in, replay, copy the outputs out."""

    def __init__(self, a, cfg):
        b, n, _ = a.shape
        self.cfg = cfg
        self.inp = a.clone()
        self.tau = torch.empty(b, n, dtype=a.dtype, device=a.device)
        self.tw = _workspaces(a, cfg)
        _factor_triton(self.inp, self.tau, cfg, self.tw)  # compiles every kernel before capture
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            _factor_triton(self.inp, self.tau, cfg, self.tw)

    def __call__(self, a):
        self.inp.copy_(a)
        self.graph.replay()
        h, tau = self.inp.clone(), self.tau.clone()
        if self.tw[-1] is not None:  # a is untouched: the rejected matrices start again from it
            _redo_rejected(a, h, tau, self.tw[-1], self.cfg)
        return h, tau


_REPLAYS, _SMALLS = {}, {}


def custom_kernel(data):
    if data.is_cuda and data.dtype == torch.float32 and data.dim() == 3 and data.is_contiguous():
        # the small path's set-up, found with as little host work as possible
        small = _SMALLS.get((data.device, data.shape[0], data.shape[2], CONFIG["small_max"], CONFIG["small_nb"],
                             CONFIG["panel_epw"]))
        if small is not None:
            return small(data)
    cfg = dict(CONFIG)
    a = data if data.dtype == torch.float32 else data.float()
    a = a if a.is_contiguous() else a.contiguous()
    b, n, _ = a.shape
    if b == 0 or n == 0:
        return a, torch.zeros(b, n, dtype=a.dtype, device=a.device)
    if not _use_triton(a):
        tau = torch.empty(b, n, dtype=a.dtype, device=a.device)
        _factor_torch(a, tau, max(1, min(cfg["nbo"], n)))
        return a, tau
    multi = n > cfg["small_max"]
    if a.is_cuda and not multi and triton is not None:
        small = _SMALLS[(a.device, b, n, cfg["small_max"], cfg["small_nb"], cfg["panel_epw"])] = _Small(cfg)
        return small(a)
    if a.is_cuda and multi and b * n * n <= cfg["graph_max_elems"]:
        key = (a.device, b, n)
        if key not in _REPLAYS:
            _REPLAYS[key] = _Replay(a, cfg)
        return _REPLAYS[key](a)
    tau = torch.empty(b, n, dtype=a.dtype, device=a.device)
    ws = _workspaces(a, cfg) if multi else None
    orig = a.clone() if ws is not None and ws[-1] is not None else None
    _factor_triton(a, tau, cfg, ws)
    if orig is not None:
        _redo_rejected(orig, a, tau, ws[-1], cfg)
    return a, tau
