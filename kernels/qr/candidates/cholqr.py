"""cholqr: blocked Householder QR whose panels are factored by CholeskyQR2 with Householder reconstruction.

Each panel P (the m = n - k0 rows of nb columns) is factored without a column-by-column Householder
loop over its rows. In float64: G = P'P, R1 = chol(G) (its inverse from the same loop), G2 =
(P R1^-1)'(P R1^-1), and R2 with R2'R2 = G2 (CholeskyQR2), so Q = P (R2 R1)^-1 is orthonormal.
G2 is I + E with max|E| <= thr for every accepted panel, so R2 and R2^-1 come from five small
products (_near_identity_chol), not from a second Cholesky loop. The compact Householder form comes
from Q as LAPACK's orhr_col recovers it: an unpivoted LU of Q - S on Q's top nb x nb block, S_k =
-sign of the current pivot (every pivot is >= 1 in magnitude), gives V = L (below the block: Q_low
U^-1), T = -U S L1^-T, tau = diag(T) and R = S R2 R1. The rows only enter through three passes of
float64 tensor-core products (P'P, (P R1^-1)'(P R1^-1), P M); the sequential work (the Cholesky and
the LU, each with its inverse in the same loop) is on nb x nb tiles, not on the m x nb panel. Below
split_min matrices, a panel of <= `rows` rows is one launch per matrix; taller panels split their
rows across programs (Gram pieces summed with float64 atomics); batches that fill the GPU take the
same four kernels with one program per matrix (the one-launch kernel needs 255 registers a thread).
Panels are nb_small (16) wide up to n = small_n (352), else nb (32).

The decision is per matrix and per panel, from that panel's own numbers: a pivot of the Cholesky at
or below rel x G's largest diagonal entry, max|Q1'Q1 - I| > thr (1e-5, roughly cond(P) > 3e5), or a
non-finite result sends that matrix's panel to a Householder panel (column by column, float64
norms, its rows read from L1/L2 in chunks), which every step launches for every matrix and which
returns at once for those accepted. Counted on the H200 (call h6), it takes the zero-column panels
of rankdef (2,560 of 640 x 16), 2% of mixed 640x512's, 114 of the 128 panels of the random upper-
triangular test (exponentially ill-conditioned), and one panel of dense 60x1024's 1,920; no panel
of the other dense, clustered, band, row-scaled, near-rank or near-collinear cases. The trailing
matrix is updated as in wy_triton (C -= V (T' (V' C)), bf16x3 tensor-core dots for n >= bf16_min_n,
rows split with atomics where the batch is small), and launch-bound shapes replay a CUDA graph.

Where the time goes (H200 profile, calls h4/h5, 2026-12-02): at 640x512 the trailing update (3.6 ms
of 7.6) and the panels (second kernel 1.8 ms, Gram passes 1.0, Cholesky 0.7: ~0.25 ms a panel over
640 matrices); at 60x1024 the update (2.9 of 6.5 ms) and the panels; at 2x4096 the row-split
updates (8.4 of 20.8 ms) and the per-matrix second kernel (4.6 ms: ~39 us a panel on 2 SMs); at
20-352 the panels' two nb-step loops (~20 us a 16-wide panel on one matrix), the critical path.
On a CPU tensor it runs the same algorithm in PyTorch, or the Triton kernels when TRITON_INTERPRET=1.
"""
import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # a CPU-only machine without Triton still gets the PyTorch path
    triton = None

CONFIG = {"nb": 32, "nb_small": 16, "small_n": 352, "fused": True, "rows": 256, "split_min": 264, "thr": 1e-5,
          "rel": 1e-13, "bk": 32, "chol_warps": 4, "chol_warps_many": 2,
          "bn": 64, "trail_warps": 4, "prec": "bf16x3", "bf16_min_n": 256, "rev_rows": True,
          "graph_max_elems": 33554432}
SPACE = {"nb": [16, 32, 64], "nb_small": [16, 32], "small_n": [0, 176, 352, 512], "fused": [True, False],
         "rows": [128, 256, 512, 1024], "split_min": [0, 132, 264, 528],
         "thr": [1e-7, 1e-6, 1e-5], "rel": [1e-14, 1e-13, 1e-12], "bk": [16, 32, 64], "chol_warps": [1, 2, 4, 8],
         "chol_warps_many": [1, 2, 4],
         "bn": [32, 64, 128], "trail_warps": [4, 8], "prec": ["tf32x3", "bf16x3", "ieee"],
         "bf16_min_n": [128, 256, 512], "rev_rows": [False, True], "graph_max_elems": [0, 8388608, 33554432]}
# matrix panels factored, and refactored by Householder, on the PyTorch path only (read by scripts); the
# Triton path counts its fallbacks on the device, read by fallbacks()
STATS = {"panels": 0, "fallback": 0}


# ----------------------------------------------------------------------------------- Triton: the panel
if triton is not None:
    @triton.jit
    def _dot64(a, b, acc):
        """acc + a @ b in float64 (out_dtype must be given: Triton 3.6 defaults it to float32)."""
        return tl.dot(a, b, acc, input_precision="ieee", out_dtype=tl.float64)

    @triton.jit
    def _gram(base, n, k0, nb, r_beg, r_end, m1, NB: tl.constexpr, BK: tl.constexpr, SECOND: tl.constexpr):
        """X'X in float64 over rows r_beg..r_end of the panel's columns k0..k0+nb; X = P, or P m1 (SECOND)."""
        kk = tl.arange(0, NB)
        g = tl.zeros([NB, NB], dtype=tl.float64)
        for r0 in range(r_beg, r_end, BK):
            rows = r0 + tl.arange(0, BK)
            x = tl.load(base + rows[:, None] * n + (k0 + kk)[None, :],
                        mask=(rows < r_end)[:, None] & (kk < nb)[None, :], other=0.0).to(tl.float64)
            if SECOND:
                x = _dot64(x, m1, tl.zeros([BK, NB], dtype=tl.float64))
            g = _dot64(tl.trans(x), x, g)
        return g

    @triton.jit
    def _chol_inv(g, nb, rel, NB: tl.constexpr):
        """(R, R^-1, ok) with g = R'R on the leading nb x nb block (g is the identity outside it).

        One loop: the rows' elimination, applied to the identity beside g, leaves R^-T there. ok
        is False where a pivot is <= rel x the largest diagonal entry or not finite."""
        rr = tl.arange(0, NB)
        eye = rr[:, None] == rr[None, :]
        e = tl.where(eye, 1.0, 0.0).to(tl.float64)
        floor = rel * tl.max(tl.sum(tl.where(eye, g, 0.0), axis=1), axis=0)
        ok = floor >= 0.0
        for k in range(0, nb):
            isk = rr[:, None] == k
            rowk = tl.sum(tl.where(isk, g, 0.0), axis=0)
            erow = tl.sum(tl.where(isk, e, 0.0), axis=0)
            piv = tl.sum(tl.where(rr == k, rowk, 0.0), axis=0)
            good = piv > floor
            ok = ok & good
            ri = 1.0 / tl.sqrt(tl.where(good, piv, 1.0))
            rs = tl.where(rr >= k, rowk * ri, 0.0)            # row k of R
            below = tl.where(rr > k, rs, 0.0)                # column k of the rest: the multipliers x r
            g = tl.where(isk, rs[None, :], g - below[:, None] * rs[None, :])
            e = tl.where(isk, (erow * ri)[None, :], e - (below * ri)[:, None] * erow[None, :])
        return tl.where(rr[:, None] <= rr[None, :], g, 0.0), tl.trans(e), ok

    @triton.jit
    def _near_identity_chol(e, z, NB: tl.constexpr):
        """(R, R^-1) with R'R = I + e, R upper with a positive diagonal, for max|e| <= thr (1e-5):
        R = I + U, U = Phi(e - U'U) (Phi: the upper triangle, the diagonal halved) from U = Phi(e),
        twice, each time multiplying the error by ~2||U|| <= 2 nb thr; R^-1 = I - U + U^2 - U^3 + U^4.
        Five small products in place of a second Cholesky's nb-step loop."""
        rr = tl.arange(0, NB)
        eye = tl.where(rr[:, None] == rr[None, :], 1.0, 0.0).to(tl.float64)
        phi = tl.where(rr[:, None] < rr[None, :], 1.0, eye * 0.5)
        u = e * phi
        for _ in tl.static_range(2):
            u = (e - _dot64(tl.trans(u), u, z)) * phi
        x = eye - u
        for _ in tl.static_range(3):
            x = eye - _dot64(u, x, z)
        return eye + u, x

    @triton.jit
    def _lu_signs(x, nb, NB: tl.constexpr):
        """x - S = L U, unpivoted, S_k = -sign(pivot k) (LAPACK's dlaorhr_col_getrfnp); also (x - S)^-1.

        Gauss-Jordan: the rows above each pivot are eliminated too, so the identity beside x ends
        as D (x - S)^-1, D the pivots. U's row k and L's column k are taken at step k, where
        they are the LU's (above-pivot elimination never touches rows at or below the pivot)."""
        rr = tl.arange(0, NB)
        eye = rr[:, None] == rr[None, :]
        e = tl.where(eye, 1.0, 0.0).to(tl.float64)
        lmat = e
        umat = tl.where(eye, 1.0, 0.0).to(tl.float64)
        s = tl.full([NB], -1.0, dtype=tl.float64)
        for k in range(0, nb):
            isk = rr[:, None] == k
            rowk = tl.sum(tl.where(isk, x, 0.0), axis=0)
            colk = tl.sum(tl.where(rr[None, :] == k, x, 0.0), axis=1)
            erow = tl.sum(tl.where(isk, e, 0.0), axis=0)
            d = tl.sum(tl.where(rr == k, rowk, 0.0), axis=0)
            sk = tl.where(d >= 0.0, -1.0, 1.0)
            p = d - sk
            rowk = tl.where(rr == k, p, rowk)
            coef = tl.where(rr != k, colk * (1.0 / p), 0.0)
            x = tl.where(isk, rowk[None, :], x - coef[:, None] * rowk[None, :])
            e = tl.where(isk, erow[None, :], e - coef[:, None] * erow[None, :])
            umat = tl.where(isk, tl.where(rr >= k, rowk, 0.0)[None, :], umat)
            lmat = tl.where((rr[None, :] == k) & (rr[:, None] > k), coef[:, None], lmat)
            s = tl.where(rr == k, sk, s)
        piv = tl.sum(tl.where(eye, umat, 0.0), axis=1)
        return lmat, umat, s, e / piv[:, None]

    @triton.jit
    def _first(G, M1, OK, b, nb, rel, NB: tl.constexpr):
        """R1^-1 from the summed Gram matrix G (then zeroed for the next sum), and the first ok."""
        rr = tl.arange(0, NB)
        gp = G + b * NB * NB + rr[:, None] * NB + rr[None, :]
        inside = (rr < nb)[:, None] & (rr < nb)[None, :]
        g = tl.where(inside, tl.load(gp), tl.where(rr[:, None] == rr[None, :], 1.0, 0.0).to(tl.float64))
        tl.debug_barrier()  # every thread's load of G before any thread zeroes it (layouts differ)
        tl.store(gp, tl.zeros([NB, NB], dtype=tl.float64))
        r1, r1i, ok = _chol_inv(g, nb, rel, NB)
        tl.store(M1 + b * 2 * NB * NB + rr[:, None] * NB + rr[None, :], r1i)
        tl.store(M1 + b * 2 * NB * NB + NB * NB + rr[:, None] * NB + rr[None, :], r1)
        tl.store(OK + b, ok.to(tl.int32))

    @triton.jit
    def _second(A, TAU, TW, G, M1, MF, OK, b, n, k0, nb, stride_b, rel, thr, NB: tl.constexpr, NBT: tl.constexpr):
        """CholeskyQR2's second Cholesky, the acceptance, and the reconstruction: the panel's top nb
        rows (L below the diagonal, R = S R2 R1 on and above), tau, T, and MF = R1^-1 R2^-1 U^-1,
        which takes the panel's lower rows to V. Nothing is written for a rejected matrix."""
        rr = tl.arange(0, NB)
        eye = rr[:, None] == rr[None, :]
        inside = (rr < nb)[:, None] & (rr < nb)[None, :]
        gp = G + b * NB * NB + rr[:, None] * NB + rr[None, :]
        g2 = tl.where(inside, tl.load(gp), tl.where(eye, 1.0, 0.0).to(tl.float64))
        tl.debug_barrier()  # as in _first
        tl.store(gp, tl.zeros([NB, NB], dtype=tl.float64))
        z = tl.zeros([NB, NB], dtype=tl.float64)
        e2 = g2 - tl.where(eye, 1.0, 0.0)
        err = tl.max(tl.max(tl.abs(e2), axis=1), axis=0)
        r2, r2i = _near_identity_chol(e2, z, NB)
        mp = M1 + b * 2 * NB * NB + rr[:, None] * NB + rr[None, :]
        r1i = tl.load(mp)
        r1 = tl.load(mp + NB * NB)
        minv = _dot64(r1i, r2i, z)
        base = A + b * stride_b
        tp = base + (k0 + rr)[:, None] * n + (k0 + rr)[None, :]
        ptop = tl.load(tp, mask=inside, other=0.0).to(tl.float64)
        lmat, umat, s, ainv = _lu_signs(_dot64(ptop, minv, z), nb, NB)
        uinv = _dot64(ainv, lmat, z)
        mf = _dot64(minv, uinv, z)
        linvt = tl.trans(_dot64(umat, ainv, z))      # L1^-T
        t = -_dot64(umat * s[None, :], linvt, z)
        t = tl.where(rr[:, None] <= rr[None, :], t, 0.0)
        rhh = s[:, None] * _dot64(r2, r1, z)
        top = tl.where(rr[:, None] > rr[None, :], lmat, rhh)
        ok = (tl.load(OK + b) != 0) & (err <= thr)
        fin = tl.abs(top) + tl.abs(t) + tl.abs(mf)
        ok = ok & (tl.max(tl.max(tl.where(inside, fin, 0.0), axis=1), axis=0) < 1e300)
        tl.store(OK + b, ok.to(tl.int32))
        if ok:
            tl.store(tp, top.to(tl.float32), mask=inside)
            tl.store(TAU + b * n + k0 + rr, tl.sum(tl.where(eye, t, 0.0), axis=1).to(tl.float32), mask=rr < nb)
            tl.store(TW + b * NBT * NBT + rr[:, None] * NBT + rr[None, :], t.to(tl.float32))
            tl.store(MF + b * NB * NB + rr[:, None] * NB + rr[None, :], mf)

    @triton.jit
    def _lower(A, MF, OK, b, n, k0, nb, r_beg, r_end, stride_b, NB: tl.constexpr, BK: tl.constexpr):
        """V = P MF over rows r_beg..r_end of an accepted matrix's panel, written over P."""
        if tl.load(OK + b) != 0:
            rr = tl.arange(0, NB)
            mf = tl.load(MF + b * NB * NB + rr[:, None] * NB + rr[None, :])
            base = A + b * stride_b
            for r0 in range(r_beg, r_end, BK):
                rows = r0 + tl.arange(0, BK)
                ptr = base + rows[:, None] * n + (k0 + rr)[None, :]
                msk = (rows < r_end)[:, None] & (rr < nb)[None, :]
                x = tl.load(ptr, mask=msk, other=0.0).to(tl.float64)
                v = _dot64(x, mf, tl.zeros([BK, NB], dtype=tl.float64))
                tl.store(ptr, v.to(tl.float32), mask=msk)

    @triton.jit
    def _panel_kernel(A, TAU, TW, G, M1, MF, OK, n, k0, nb, stride_b, rel, thr,
                      NB: tl.constexpr, NBT: tl.constexpr, BK: tl.constexpr):
        """A whole panel by one program per matrix: two Gram passes, both Choleskys, the
        reconstruction and the lower rows, in one launch."""
        b = tl.program_id(0).to(tl.int64)
        base = A + b * stride_b
        rr = tl.arange(0, NB)
        g = _gram(base, n, k0, nb, k0, n, 0.0, NB, BK, False)
        tl.store(G + b * NB * NB + rr[:, None] * NB + rr[None, :], g)
        tl.debug_barrier()
        _first(G, M1, OK, b, nb, rel, NB)
        tl.debug_barrier()
        r1i = tl.load(M1 + b * 2 * NB * NB + rr[:, None] * NB + rr[None, :])
        g = _gram(base, n, k0, nb, k0, n, r1i, NB, BK, True)
        tl.store(G + b * NB * NB + rr[:, None] * NB + rr[None, :], g)
        tl.debug_barrier()
        _second(A, TAU, TW, G, M1, MF, OK, b, n, k0, nb, stride_b, rel, thr, NB, NBT)
        tl.debug_barrier()
        _lower(A, MF, OK, b, n, k0, nb, k0 + nb, n, stride_b, NB, BK)

    @triton.jit
    def _gram_kernel(A, G, M1, n, k0, nb, rb, stride_b, NB: tl.constexpr, BK: tl.constexpr, SECOND: tl.constexpr):
        """Row-split Gram matrix: this program's rows k0 + pid1*rb .. +rb, added into G (float64 atomics)."""
        b = tl.program_id(0).to(tl.int64)
        rr = tl.arange(0, NB)
        r_beg = k0 + tl.program_id(1) * rb
        if SECOND:
            m1 = tl.load(M1 + b * 2 * NB * NB + rr[:, None] * NB + rr[None, :])
            g = _gram(A + b * stride_b, n, k0, nb, r_beg, tl.minimum(n, r_beg + rb), m1, NB, BK, True)
        else:
            g = _gram(A + b * stride_b, n, k0, nb, r_beg, tl.minimum(n, r_beg + rb), 0.0, NB, BK, False)
        tl.atomic_add(G + b * NB * NB + rr[:, None] * NB + rr[None, :], g)

    @triton.jit
    def _first_kernel(G, M1, OK, nb, rel, NB: tl.constexpr):
        _first(G, M1, OK, tl.program_id(0).to(tl.int64), nb, rel, NB)

    @triton.jit
    def _second_kernel(A, TAU, TW, G, M1, MF, OK, n, k0, nb, stride_b, rel, thr, NB: tl.constexpr, NBT: tl.constexpr):
        _second(A, TAU, TW, G, M1, MF, OK, tl.program_id(0).to(tl.int64), n, k0, nb, stride_b, rel, thr, NB, NBT)

    @triton.jit
    def _lower_kernel(A, MF, OK, n, k0, nb, rb, stride_b, NB: tl.constexpr, BK: tl.constexpr):
        r_beg = k0 + nb + tl.program_id(1) * rb
        _lower(A, MF, OK, tl.program_id(0).to(tl.int64), n, k0, nb, r_beg, tl.minimum(n, r_beg + rb), stride_b, NB, BK)

    @triton.jit
    def _householder_kernel(A, TAU, TW, OK, CNT, n, k0, nb, stride_b, NB: tl.constexpr, NBT: tl.constexpr,
                            BK: tl.constexpr):
        """The fallback: Householder QR of the panel of each rejected matrix, column by column (LAPACK
        slarfg signs), its rows read from L1/L2 in chunks of BK; norms and w = v'P in float64, so
        1e-30 and 1e30 entries need no rescaling. T is built as it goes (larft's recurrence)."""
        b = tl.program_id(0).to(tl.int64)
        if tl.load(OK + b) == 0:
            tl.atomic_add(CNT, 1)
            base = A + b * stride_b
            cols = tl.arange(0, NB)
            t = tl.zeros([NB, NB], dtype=tl.float32)
            for j in range(0, nb):
                c = k0 + j
                ssq = tl.zeros([BK], dtype=tl.float64)
                for r0 in range(c + 1, n, BK):
                    rows = r0 + tl.arange(0, BK)
                    x = tl.load(base + rows * n + c, mask=rows < n, other=0.0).to(tl.float64)
                    ssq += x * x
                ssq_s = tl.sum(ssq, axis=0)
                alpha = tl.load(base + c * n + c).to(tl.float64)
                live = ssq_s > 0.0
                nrm = tl.sqrt(alpha * alpha + ssq_s)
                beta = tl.where(alpha >= 0.0, -nrm, nrm)
                tau = tl.where(live, (beta - alpha) / tl.where(live, beta, 1.0), 0.0)
                rdn = tl.where(live, 1.0 / tl.where(live, alpha - beta, 1.0), 0.0)
                # w = v'P over the panel's columns, v = (1, x / dn); v is written as it goes
                w = tl.load(base + c * n + k0 + cols, mask=cols < nb, other=0.0).to(tl.float64)
                for r0 in range(c + 1, n, BK):
                    rows = r0 + tl.arange(0, BK)
                    ptr = base + rows[:, None] * n + (k0 + cols)[None, :]
                    msk = (rows < n)[:, None] & (cols < nb)[None, :]
                    p = tl.load(ptr, mask=msk, other=0.0)
                    v = tl.sum(tl.where(cols[None, :] == j, p, 0.0), axis=1).to(tl.float64) * rdn
                    w += tl.sum(v[:, None] * p.to(tl.float64), axis=0)
                    tl.store(base + rows * n + c, v.to(tl.float32), mask=rows < n)
                tl.debug_barrier()
                later = cols > j
                tw = tl.where(later, tau * w, 0.0).to(tl.float32)
                top = tl.load(base + c * n + k0 + cols, mask=cols < nb, other=0.0)
                top = tl.where(later, top - tw, tl.where(cols == j, tl.where(live, beta, alpha).to(tl.float32), top))
                tl.store(base + c * n + k0 + cols, top, mask=cols < nb)
                for r0 in range(c + 1, n, BK):
                    rows = r0 + tl.arange(0, BK)
                    ptr = base + rows[:, None] * n + (k0 + cols)[None, :]
                    msk = (rows < n)[:, None] & later[None, :] & (cols < nb)[None, :]
                    p = tl.load(ptr, mask=msk, other=0.0)
                    v = tl.load(base + rows * n + c, mask=rows < n, other=0.0)
                    tl.store(ptr, p - v[:, None] * tw[None, :], mask=msk)
                tl.debug_barrier()
                g = tl.where(cols < j, w, 0.0).to(tl.float32)
                tg = tl.sum(t * g[None, :], axis=1)
                tf = tau.to(tl.float32)
                t = tl.where(cols[None, :] == j, tl.where(cols < j, -tf * tg, tl.where(cols == j, tf, 0.0))[:, None], t)
                tl.store(TAU + b * n + c, tf)
            tl.store(TW + b * NBT * NBT + cols[:, None] * NBT + cols[None, :], t)


# ----------------------------------------------------------------------------------- Triton: the update
if triton is not None:
    @triton.jit
    def _mm(a, b, acc, PREC: tl.constexpr):
        """acc + a @ b. "bf16x3" splits each operand x = hi + lo (bfloat16 parts) and sums three
        tensor-core products in fp32 (~2^-17 relative; lo*lo dropped); "bf16x3-fp32" is the same
        split with fp32 products (the interpreter's bfloat16 dot is wrong); else Triton's own."""
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
    def _load_v(base, rows, rlim, n, pc, kk, nb):
        """Rows `rows` (< rlim) of the reflectors in columns pc (kk < nb): unit diagonal, zero above."""
        lower = (rows[:, None] > pc[None, :]) & (kk < nb)[None, :]
        v = tl.load(base + rows[:, None] * n + pc[None, :], mask=(rows < rlim)[:, None] & lower, other=0.0)
        return tl.where((rows[:, None] == pc[None, :]) & (kk < nb)[None, :], 1.0, v)

    @triton.jit
    def _vtc(base, n, k0, nb, cols, r_beg, r_end, NBT: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
             PREC: tl.constexpr, REV: tl.constexpr):
        """V'C over rows r_beg..r_end (REV: bottom-up, so the top-down update pass after it finds
        the rows read last still in L2)."""
        kk = tl.arange(0, NBT)
        w = tl.zeros([NBT, BN], dtype=tl.float32)
        nch = tl.cdiv(r_end - r_beg, BK)
        for i in range(0, nch):
            if REV:
                r0 = r_beg + (nch - 1 - i) * BK
            else:
                r0 = r_beg + i * BK
            rows = r0 + tl.arange(0, BK)
            v = _load_v(base, rows, r_end, n, k0 + kk, kk, nb)
            c = tl.load(base + rows[:, None] * n + cols[None, :], mask=(rows < r_end)[:, None] & (cols < n)[None, :],
                        other=0.0)
            w = _mm(tl.trans(v), c, w, PREC)
        return w

    @triton.jit
    def _sub_vw(base, n, k0, nb, cols, r_beg, r_end, w, NBT: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr):
        """C -= V w over rows r_beg..r_end."""
        kk = tl.arange(0, NBT)
        for r0 in range(r_beg, r_end, BK):
            rows = r0 + tl.arange(0, BK)
            v = _load_v(base, rows, r_end, n, k0 + kk, kk, nb)
            cp = base + rows[:, None] * n + cols[None, :]
            cm = (rows < r_end)[:, None] & (cols < n)[None, :]
            tl.store(cp, tl.load(cp, mask=cm, other=0.0) - _mm(v, w, None, PREC), mask=cm)

    @triton.jit
    def _trail_kernel(A, TW, n, k0, nb, stride_b, NBT: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                      PREC: tl.constexpr, REV: tl.constexpr):
        """C -= V (T' (V' C)) for column block program_id(0) of matrix program_id(1), all rows."""
        b = tl.program_id(1).to(tl.int64)
        base = A + b * stride_b
        cols = k0 + nb + tl.program_id(0) * BN + tl.arange(0, BN)
        kk = tl.arange(0, NBT)
        w = _vtc(base, n, k0, nb, cols, k0, n, NBT, BN, BK, PREC, REV)
        tt = tl.load(TW + b * NBT * NBT + kk[:, None] * NBT + kk[None, :])
        _sub_vw(base, n, k0, nb, cols, k0, n, tl.dot(tl.trans(tt), w, input_precision="ieee"), NBT, BK, PREC)

    @triton.jit
    def _vtc_kernel(A, WB, n, k0, nb, rb, stride_b, stride_wb, NBT: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                    PREC: tl.constexpr):
        """Row-split W = V'C: this program's rows k0 + pid2*rb .. +rb, added into WB with atomics."""
        b = tl.program_id(0).to(tl.int64)
        c = tl.program_id(1) * BN + tl.arange(0, BN)
        kk = tl.arange(0, NBT)
        r_beg = k0 + tl.program_id(2) * rb
        w = _vtc(A + b * stride_b, n, k0, nb, k0 + nb + c, r_beg, tl.minimum(n, r_beg + rb), NBT, BN, BK, PREC, False)
        tl.atomic_add(WB + b * stride_wb + kk[:, None] * n + c[None, :], w, mask=(k0 + nb + c < n)[None, :])

    @triton.jit
    def _upd_kernel(A, WB, TW, n, k0, nb, rb, stride_b, stride_wb, NBT: tl.constexpr, BN: tl.constexpr,
                    BK: tl.constexpr, PREC: tl.constexpr):
        """Row-split C -= V (T' W) for this program's rows, W = V'C summed by _vtc_kernel."""
        b = tl.program_id(0).to(tl.int64)
        c = tl.program_id(1) * BN + tl.arange(0, BN)
        kk = tl.arange(0, NBT)
        w = tl.load(WB + b * stride_wb + kk[:, None] * n + c[None, :], mask=(k0 + nb + c < n)[None, :], other=0.0)
        tt = tl.load(TW + b * NBT * NBT + kk[:, None] * NBT + kk[None, :])
        r_beg = k0 + tl.program_id(2) * rb
        _sub_vw(A + b * stride_b, n, k0, nb, k0 + nb + c, r_beg, tl.minimum(n, r_beg + rb),
                tl.dot(tl.trans(tt), w, input_precision="ieee"), NBT, BK, PREC)


def _prec(cfg, n):
    """The update dots' precision: bf16x3 only where n >= bf16_min_n (the checker's 20 n eps32
    leaves too little room below), emulated in fp32 under the interpreter."""
    if cfg["prec"] != "bf16x3":
        return cfg["prec"]
    if n < cfg["bf16_min_n"]:
        return "ieee"
    return "bf16x3-fp32" if os.environ.get("TRITON_INTERPRET") == "1" else "bf16x3"


def _pow2(x):
    return 1 << max(0, int(x) - 1).bit_length()


class _Work:
    """The scratch of one shape: float64 Gram sums (kept zero between uses), R1^-1 and R1, MF, the
    accept flags, T (float32), W of row-split updates, and the fallback counter."""

    def __init__(self, a, cfg):
        b, n, _ = a.shape
        NB = max(16, _pow2(min(_width(cfg, n), n)))
        d = a.device
        self.NB = NB
        self.g = torch.zeros(b, NB, NB, dtype=torch.float64, device=d)
        self.m1 = torch.zeros(b, 2, NB, NB, dtype=torch.float64, device=d)
        self.mf = torch.zeros(b, NB, NB, dtype=torch.float64, device=d)
        self.ok = torch.zeros(b, dtype=torch.int32, device=d)
        self.tw = torch.zeros(b, NB, NB, dtype=torch.float32, device=d)
        self.wb = torch.zeros(b, NB, n, dtype=torch.float32, device=d) if b < cfg["split_min"] else None
        self.cnt = torch.zeros(1, dtype=torch.int32, device=d)


def _row_split(cfg, b, m):
    """Rows per program of a panel's kernels: all m where the batch fills the GPU (split_min) or m
    fits `rows`, else `rows` (the Gram pieces summed with atomics)."""
    return m if b >= cfg["split_min"] or m <= cfg["rows"] else cfg["rows"]


def _width(cfg, n):
    """The panel width: nb_small for n <= small_n (shorter loops on smaller tiles, more panels), else nb."""
    return int(cfg["nb_small"] if n <= cfg["small_n"] else cfg["nb"])


def _update_rows(cfg, programs, rows):
    """Rows per program of a row-split trailing update, where programs are too few (split_min), else 0."""
    if programs >= cfg["split_min"] or rows <= cfg["bk"]:
        return 0
    nrb = min(triton.cdiv(rows, cfg["bk"]), triton.cdiv(cfg["split_min"], programs))
    return triton.cdiv(triton.cdiv(rows, nrb), cfg["bk"]) * cfg["bk"]


def _panel(a, tau, k0, nb, cfg, ws):
    b, n, _ = a.shape
    m = n - k0
    NB, bk = ws.NB, int(cfg["bk"])
    cw = int(cfg["chol_warps_many"] if b >= cfg["split_min"] else cfg["chol_warps"])
    rel, thr = float(cfg["rel"]), float(cfg["thr"])
    rb = _row_split(cfg, b, m)
    # One launch per panel only for batches below split_min: the fused kernel holds 255 registers a
    # thread (ptxas, with spills), so few programs share an SM; where the batch fills the GPU the
    # four smaller kernels overlap better (H200, call h4: 640x512 8.1 -> 7.6 ms), and where it does
    # not, launches cost more than occupancy (40x176 369 -> 451 us split)
    if cfg["fused"] and rb >= m and b < cfg["split_min"]:
        _panel_kernel[(b,)](a, tau, ws.tw, ws.g, ws.m1, ws.mf, ws.ok, n, k0, nb, n * n, rel, thr,
                            NB=NB, NBT=NB, BK=bk, num_warps=cw)
    else:
        grid = (b, triton.cdiv(m, rb))
        _gram_kernel[grid](a, ws.g, ws.m1, n, k0, nb, rb, n * n, NB=NB, BK=bk, SECOND=False, num_warps=cw)
        _first_kernel[(b,)](ws.g, ws.m1, ws.ok, nb, rel, NB=NB, num_warps=cw)
        _gram_kernel[grid](a, ws.g, ws.m1, n, k0, nb, rb, n * n, NB=NB, BK=bk, SECOND=True, num_warps=cw)
        _second_kernel[(b,)](a, tau, ws.tw, ws.g, ws.m1, ws.mf, ws.ok, n, k0, nb, n * n, rel, thr,
                             NB=NB, NBT=NB, num_warps=cw)
        if m > nb:
            _lower_kernel[(b, triton.cdiv(m - nb, rb))](a, ws.mf, ws.ok, n, k0, nb, rb, n * n, NB=NB, BK=bk,
                                                         num_warps=cw)
    _householder_kernel[(b,)](a, tau, ws.tw, ws.ok, ws.cnt, n, k0, nb, n * n, NB=NB, NBT=NB, BK=bk, num_warps=cw)


def _update(a, k0, nb, cfg, ws):
    b, n, _ = a.shape
    NB, c0 = ws.NB, k0 + nb
    bn = int(cfg["bn"])
    ncb = triton.cdiv(n - c0, bn)
    prec = _prec(cfg, n)
    rb = _update_rows(cfg, b * ncb, n - k0) if ws.wb is not None else 0
    if not rb:
        _trail_kernel[(ncb, b)](a, ws.tw, n, k0, nb, n * n, NBT=NB, BN=bn, BK=cfg["bk"], PREC=prec,
                                REV=cfg["rev_rows"], num_warps=cfg["trail_warps"])
        return
    grid = (b, ncb, triton.cdiv(n - k0, rb))
    ws.wb[:, :, :n - c0].zero_()
    _vtc_kernel[grid](a, ws.wb, n, k0, nb, rb, n * n, ws.wb.stride(0), NBT=NB, BN=bn, BK=cfg["bk"], PREC=prec,
                      num_warps=cfg["trail_warps"])
    _upd_kernel[grid](a, ws.wb, ws.tw, n, k0, nb, rb, n * n, ws.wb.stride(0), NBT=NB, BN=bn, BK=cfg["bk"],
                      PREC=prec, num_warps=cfg["trail_warps"])


def _factor_triton(a, tau, cfg, ws):
    n = a.shape[-1]
    for k0 in range(0, n, ws.NB):
        nb = min(ws.NB, n - k0)
        _panel(a, tau, k0, nb, cfg, ws)
        if k0 + nb < n:
            _update(a, k0, nb, cfg, ws)


# ----------------------------------------------------------------------------------- PyTorch
def _householder_torch(a, tau, k0, w):
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


def _pivots_ok(r, g, cfg):
    """Every pivot R_kk^2 of g = R'R above rel x g's largest diagonal entry (as the kernel decides)."""
    piv = torch.diagonal(r, dim1=1, dim2=2) ** 2
    return (piv > cfg["rel"] * torch.diagonal(g, dim1=1, dim2=2).amax(dim=1, keepdim=True)).all(dim=1)


def _cholqr2_torch(p, cfg):
    """CholeskyQR2 + reconstruction of panels p (B, m, w), float64: (new panel, tau, ok)."""
    w = p.shape[-1]
    x = p.double()
    eye = torch.eye(w, dtype=torch.float64, device=p.device)
    g1 = x.mT @ x
    l1, info1 = torch.linalg.cholesky_ex(g1)
    r1 = l1.mT
    q1 = torch.linalg.solve_triangular(r1, x, upper=True, left=False)
    g2 = q1.mT @ q1
    err = (g2 - eye).abs().amax(dim=(1, 2))
    l2, info2 = torch.linalg.cholesky_ex(g2)
    r2 = l2.mT
    q = torch.linalg.solve_triangular(r2, q1, upper=True, left=False)
    lu = q[:, :w].clone()
    s = torch.empty(p.shape[0], w, dtype=torch.float64, device=p.device)
    for j in range(w):  # q_top - S = L U, S_j = -sign(pivot j)
        s[:, j] = torch.where(lu[:, j, j] >= 0, -1.0, 1.0)
        lu[:, j, j] -= s[:, j]
        lu[:, j + 1:, j] /= lu[:, j, j].unsqueeze(1)
        lu[:, j + 1:, j + 1:] -= lu[:, j + 1:, j:j + 1] * lu[:, j:j + 1, j + 1:]
    u = torch.triu(lu)
    low = torch.linalg.solve_triangular(u, q[:, w:], upper=True, left=False)
    top = torch.tril(lu, -1) + torch.triu(s.unsqueeze(2) * (r2 @ r1))
    out = torch.cat([top, low], dim=1)
    tau = -s * torch.diagonal(u, dim1=1, dim2=2)
    ok = (info1 == 0) & (info2 == 0) & (err <= cfg["thr"]) & _pivots_ok(r1, g1, cfg) & _pivots_ok(r2, g2, cfg)
    ok &= torch.isfinite(out).all(dim=2).all(dim=1) & torch.isfinite(tau).all(dim=1)
    return out.float(), tau.float(), ok


def _factor_torch(a, tau, cfg):
    n = a.shape[-1]
    nb = max(1, min(_width(cfg, n), n))
    for k0 in range(0, n, nb):
        w = min(nb, n - k0)
        p = a[:, k0:, k0:k0 + w]
        out, t, ok = _cholqr2_torch(p, cfg)
        p[ok] = out[ok]
        tau[ok, k0:k0 + w] = t[ok]
        bad = (~ok).nonzero().flatten()
        STATS["panels"] += a.shape[0]
        STATS["fallback"] += bad.numel()
        if bad.numel():
            sub, tsub = a[bad], tau[bad]
            _householder_torch(sub, tsub, k0, w)
            a[bad], tau[bad] = sub, tsub
        if k0 + w < n:
            v = torch.tril(p, -1)
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
        self.inp = a.clone()
        self.tau = torch.empty(b, n, dtype=a.dtype, device=a.device)
        self.ws = _Work(a, cfg)
        _factor_triton(self.inp, self.tau, cfg, self.ws)  # compiles every kernel before capture
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            _factor_triton(self.inp, self.tau, cfg, self.ws)

    def __call__(self, a):
        self.inp.copy_(a)
        self.graph.replay()
        return self.inp.clone(), self.tau.clone()


_REPLAYS, _WORK = {}, {}


def fallbacks(device):
    """Matrix panels the Triton path's Householder fallback has refactored on `device` so far (a
    sync; for scripts and tests, never the timing). "cuda" counts every CUDA device."""
    d = torch.device(device)

    def on(key):
        return key[0].type == d.type and (d.index is None or key[0].index == d.index)
    return sum(int(ws.cnt.item()) for key, ws in _WORK.items() if on(key)) + \
        sum(int(r.ws.cnt.item()) for key, r in _REPLAYS.items() if on(key))


def custom_kernel(data):
    cfg = dict(CONFIG)
    a = data if data.dtype == torch.float32 else data.float()
    a = a if a.is_contiguous() else a.contiguous()
    b, n, _ = a.shape
    if b == 0 or n == 0:
        return a, torch.zeros(b, n, dtype=a.dtype, device=a.device)
    tau = torch.empty(b, n, dtype=a.dtype, device=a.device)
    if not _use_triton(a):
        _factor_torch(a, tau, cfg)
        return a, tau
    if a.is_cuda and b * n * n <= cfg["graph_max_elems"]:
        key = (a.device, b, n)
        if key not in _REPLAYS:
            _REPLAYS[key] = _Replay(a, cfg)
        return _REPLAYS[key](a)
    key = (a.device, b, n)
    if key not in _WORK:
        _WORK[key] = _Work(a, cfg)
    _factor_triton(a, tau, cfg, _WORK[key])
    return a, tau
