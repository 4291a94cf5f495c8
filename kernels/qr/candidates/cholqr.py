"""cholqr: CholeskyQR2 in float64 with Householder reconstruction, and a per-matrix fallback.

For each matrix: G = A'A, R1 = chol(G), Q1 = A R1^-1; then again on Q1 (CholeskyQR2), all in
float64 (bmm, cholesky_ex, solve_triangular). The compact Householder form is recovered as
LAPACK's orhr_col does: an unpivoted LU of Q - S, S_j = -sign of the current pivot (so every
pivot is >= 1 in magnitude), gives V = L, tau_j = -S_j U_jj and R = S R2 R1. The LU is blocked
(columns batched over the matrices, L11^-1 by recursive doubling, GEMM updates) and replayed as a
CUDA graph. A matrix is accepted only if both Choleskys succeed, ||Q1'Q1 - I||_F <= thr (then
CholeskyQR2's second pass is accurate) and its outputs are finite; every other matrix (rank-
deficient, clustered, strongly graded...) is refactored by a Householder QR (the wy_triton
kernels), decided per matrix from its own numbers, never from the shape.

Where the time goes: square matrices are the worst case for CholeskyQR: ~5n^3 float64 flops in
GEMM/TRSM plus the batched Cholesky, plus the 2/3 n^3 LU (launch-bound column loop), against
4/3 n^3 for Householder; and the fallback re-does the matrices it rejects. It is kept as a
family for batches of well-conditioned matrices, not as the fastest one here.
"""
import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # a CPU-only machine without Triton still gets the PyTorch path
    triton = None

CONFIG = {"nb_lu": 32, "thr": 0.1, "graph": True, "hh_nb": 32, "hh_tile_max": 32768, "hh_small_max": 128,
          "hh_prec": "ieee", "hh_panel_epw": 2048}
SPACE = {"nb_lu": [16, 32, 64, 128], "thr": [0.01, 0.1, 0.5], "graph": [True, False], "hh_nb": [16, 32, 64],
         "hh_tile_max": [16384, 32768], "hh_small_max": [0, 64, 128], "hh_prec": ["tf32x3", "ieee"],
         "hh_panel_epw": [512, 1024, 2048, 4096]}


# ----------------------------------------------------------------------------------- Triton
if triton is not None:
    @triton.jit
    def _sum_sum_max(a0, b0, c0, a1, b1, c1):
        return a0 + a1, b0 + b1, tl.maximum(c0, c1)

    @triton.jit
    def _panel_kernel(A, TAU, TW, n, k0, nb, stride_b,
                      BM: tl.constexpr, NB: tl.constexpr, NBT: tl.constexpr, WRITE_T: tl.constexpr):
        """Householder QR of rows k0.., columns k0..k0+nb of one matrix, in registers; T too.

        Per column: one fused block reduction (alpha, sum of squares, max) and one for w = v'P;
        the norm is rescaled by max|x| only when the plain sum of squares could have lost range.
        """
        b = tl.program_id(0).to(tl.int64)
        base = A + b * stride_b
        rows = tl.arange(0, BM)
        cols = tl.arange(0, NB)
        m = n - k0
        mask = (rows < m)[:, None] & (cols < nb)[None, :]
        ptrs = base + (k0 + rows)[:, None] * n + (k0 + cols)[None, :]
        p = tl.load(ptrs, mask=mask, other=0.0)
        taus = tl.zeros([NB], dtype=tl.float32)
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
            if (ssq < 1e-20) | (ssq > 1e30) | (tl.abs(alpha) > 1e15):
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
            v = tl.where(below, (cj / sc) / dn, tl.where(rows == j, 1.0, 0.0))
            # w[c] = v' p[:, c]: the update of columns > j, and for c < j the column (V' v) of T
            w = tl.sum(v[:, None] * p, axis=0)
            newc = tl.where(below, v, tl.where(rows == j, tl.where(live, beta, alpha), cj))
            # columns > j get the rank-1 update, column j its final values: one FMA and one select
            # per element (w is zeroed for columns <= j on the short vector, not on the tile)
            p = p - (tau * v)[:, None] * tl.where(cols > j, w, 0.0)[None, :]
            p = tl.where(sel, newc[:, None], p)
            taus = tl.where(cols == j, tau, taus)
            if WRITE_T:
                g = tl.where(cols < j, w, 0.0)
                tg = tl.sum(t * g[None, :], axis=1)
                tcol = tl.where(tr < j, -tau * tg, tl.where(tr == j, tau, 0.0))
                t = tl.where(sel, tcol[:, None], t)
        tl.store(ptrs, p, mask=mask)
        tl.store(TAU + b * n + k0 + cols, taus, mask=cols < nb)
        if WRITE_T:
            tbase = TW + b * NBT * NBT
            tl.store(tbase + tr[:, None] * NBT + cols[None, :], t)
            if NB < NBT:  # zero the rest of the NBT x NBT block (stale from a wider panel otherwise)
                big = tl.arange(0, NBT)
                outside = (big[:, None] >= NB) | (big[None, :] >= NB)
                tl.store(tbase + big[:, None] * NBT + big[None, :], tl.zeros([NBT, NBT], dtype=tl.float32),
                         mask=outside)

    @triton.jit
    def _trail_kernel(A, TW, n, k0, nb, cend, stride_b,
                      NBT: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr):
        """C = A[k0:, c0:c0+BN] (columns < cend) of one matrix: C -= V (T' (V' C)), V the panel's reflectors.

        Grid (column blocks, matrices): one matrix's blocks are neighbours in launch order, so they
        run together and read its V from L2 rather than HBM."""
        b = tl.program_id(1).to(tl.int64)
        base = A + b * stride_b
        c0 = k0 + nb + tl.program_id(0) * BN
        cols = c0 + tl.arange(0, BN)
        kk = tl.arange(0, NBT)
        pc = k0 + kk
        w = tl.zeros([NBT, BN], dtype=tl.float32)
        for r0 in range(k0, n, BK):
            rows = r0 + tl.arange(0, BK)
            rm = rows < n
            lower = (rows[:, None] > pc[None, :]) & (kk < nb)[None, :]
            v = tl.load(base + rows[:, None] * n + pc[None, :], mask=rm[:, None] & lower, other=0.0)
            v = tl.where((rows[:, None] == pc[None, :]) & (kk < nb)[None, :], 1.0, v)
            c = tl.load(base + rows[:, None] * n + cols[None, :], mask=rm[:, None] & (cols < cend)[None, :], other=0.0)
            w = tl.dot(tl.trans(v), c, w, input_precision=PREC)
        tt = tl.load(TW + b * NBT * NBT + kk[:, None] * NBT + kk[None, :])
        w = tl.dot(tl.trans(tt), w, input_precision="ieee")
        for r0 in range(k0, n, BK):
            rows = r0 + tl.arange(0, BK)
            rm = rows < n
            lower = (rows[:, None] > pc[None, :]) & (kk < nb)[None, :]
            v = tl.load(base + rows[:, None] * n + pc[None, :], mask=rm[:, None] & lower, other=0.0)
            v = tl.where((rows[:, None] == pc[None, :]) & (kk < nb)[None, :], 1.0, v)
            cp = base + rows[:, None] * n + cols[None, :]
            cm = rm[:, None] & (cols < cend)[None, :]
            c = tl.load(cp, mask=cm, other=0.0)
            c = c - tl.dot(v, w, input_precision=PREC)
            tl.store(cp, c, mask=cm)


def _pow2(x):
    return 1 << max(0, int(x) - 1).bit_length()


def _warps(elems, per_warp):
    """Warps for a register tile of `elems` floats: one per `per_warp` elements, 1 to 16, a power of two.

    Fewer warps make the per-column block reductions cheaper (one warp needs no barrier); more
    warps spread the elementwise work and keep registers per thread low."""
    w = max(1, min(16, elems // per_warp))
    return 1 << (w.bit_length() - 1)


def _factor_triton(a, tau, cfg, tw):
    b, n, _ = a.shape
    if n <= cfg["hh_small_max"]:
        np2 = max(16, _pow2(n))
        _panel_kernel[(b,)](a, tau, tau, n, 0, n, n * n, BM=np2, NB=np2, NBT=16, WRITE_T=False,
                            num_warps=_warps(np2 * np2, cfg["hh_panel_epw"]))
        return
    nbt = tw.shape[-1]
    k0 = 0
    while k0 < n:
        m = n - k0
        bm = max(16, _pow2(m))
        nbp = max(1, min(int(cfg["hh_nb"]), cfg["hh_tile_max"] // bm))
        nbp = 1 << (nbp.bit_length() - 1)          # power of two for tl.arange
        nb = min(nbp, m)
        _panel_kernel[(b,)](a, tau, tw, n, k0, nb, n * n, BM=bm, NB=nbp, NBT=nbt, WRITE_T=True,
                            num_warps=_warps(bm * nbp, cfg["hh_panel_epw"]))
        if k0 + nb < n:
            grid = (triton.cdiv(n - k0 - nb, 64), b)
            _trail_kernel[grid](a, tw, n, k0, nb, n, n * n, NBT=nbt, BN=64, BK=32,
                                PREC=cfg["hh_prec"], num_warps=4)
        k0 += nb


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


# ----------------------------------------------------------------------------------- CholeskyQR2 + LU
def _block_view(x, s, r, c):
    """(B, q, s, s) view of the s x s blocks at (p*2s + r, p*2s + c) of a contiguous (B, w, w)."""
    b, w, _ = x.shape
    q = w // (2 * s)
    return x.as_strided((b, q, s, s), (w * w, 2 * s * w + 2 * s, w, 1), x.storage_offset() + r * w + c)


def _unit_lower_inverse(l):
    """Inverse of the unit lower triangle of l (B, w, w) by recursive doubling: X21 = -X2 L21 X1."""
    b, w, _ = l.shape
    wp = 1 << (w - 1).bit_length()
    lo = torch.zeros(b, wp, wp, dtype=l.dtype, device=l.device)
    lo[:, :w, :w] = torch.tril(l, -1)
    x = torch.eye(wp, dtype=l.dtype, device=l.device).expand(b, wp, wp).contiguous()
    s = 1
    while s < wp:
        x21 = torch.matmul(torch.matmul(_block_view(x, s, s, s), _block_view(lo, s, s, 0)), _block_view(x, s, 0, 0))
        _block_view(x, s, s, 0).copy_(x21.neg_())
        s *= 2
    return x[:, :w, :w]


def _lu_signs(q, sgn, nb):
    """In place: q - diag(S) = L U, unpivoted, S_j = -sign(current pivot) (LAPACK dlaorhr_col_getrfnp)."""
    n = q.shape[-1]
    for k0 in range(0, n, nb):
        w = min(nb, n - k0)
        for j in range(k0, k0 + w):
            d = q[:, j, j]
            sj = torch.where(d >= 0, -1.0, 1.0).to(q.dtype)
            sgn[:, j] = sj
            q[:, j, j] = d - sj
            q[:, j + 1:, j] /= q[:, j, j].unsqueeze(1)
            if j + 1 < k0 + w:
                q[:, j + 1:, j + 1:k0 + w].baddbmm_(q[:, j + 1:, j:j + 1], q[:, j:j + 1, j + 1:k0 + w], alpha=-1.0)
        if k0 + w < n:
            u12 = torch.bmm(_unit_lower_inverse(q[:, k0:k0 + w, k0:k0 + w]), q[:, k0:k0 + w, k0 + w:])
            q[:, k0:k0 + w, k0 + w:] = u12
            q[:, k0 + w:, k0 + w:].baddbmm_(q[:, k0 + w:, k0:k0 + w], u12, alpha=-1.0)


class _LU:
    """The sign-LU of one shape, captured as a graph on a fixed float64 buffer (or run eagerly)."""

    def __init__(self, b, n, device, nb, graph):
        self.q = torch.zeros(b, n, n, dtype=torch.float64, device=device)
        self.sgn = torch.zeros(b, n, dtype=torch.float64, device=device)
        self.nb = nb
        self.graph = None
        if graph and device.type == "cuda":
            self.q.copy_(torch.eye(n, dtype=torch.float64, device=device))
            _lu_signs(self.q, self.sgn, nb)  # warm-up before capture
            torch.cuda.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                _lu_signs(self.q, self.sgn, nb)

    def run(self):
        if self.graph is not None:
            self.graph.replay()
        else:
            _lu_signs(self.q, self.sgn, self.nb)


_LUS = {}
STATS = {"matrices": 0, "fallback": 0}  # read by scripts/qr_families.py; never by the timing


def _cholqr2(a, cfg):
    """(H, tau, ok) for every matrix of a: CholeskyQR2 + reconstruction; ok says which to trust."""
    b, n, _ = a.shape
    key = (a.device, b, n, int(cfg["nb_lu"]), bool(cfg["graph"]))
    if key not in _LUS:
        _LUS[key] = _LU(b, n, a.device, int(cfg["nb_lu"]), bool(cfg["graph"]))
    lu = _LUS[key]
    a64 = a.double()
    l1, info1 = torch.linalg.cholesky_ex(a64.transpose(1, 2) @ a64)
    r1 = l1.transpose(1, 2)
    q1 = torch.linalg.solve_triangular(r1, a64, upper=True, left=False)
    g2 = q1.transpose(1, 2) @ q1
    eye = torch.eye(n, dtype=torch.float64, device=a.device)
    err = torch.linalg.matrix_norm(g2 - eye)
    l2, info2 = torch.linalg.cholesky_ex(g2)
    r2 = l2.transpose(1, 2)
    torch.linalg.solve_triangular(r2, q1, upper=True, left=False, out=lu.q)
    del q1, g2, a64
    r = torch.triu(r2 @ r1)
    lu.run()
    sgn = lu.sgn
    h = (torch.tril(lu.q, -1) + sgn.unsqueeze(2) * r).float()
    tau = (-sgn * lu.q.diagonal(dim1=1, dim2=2)).float()
    ok = (info1 == 0) & (info2 == 0) & (err <= cfg["thr"])
    ok &= torch.isfinite(h).all(dim=2).all(dim=1) & torch.isfinite(tau).all(dim=1)
    return h, tau, ok


def _use_triton(a):
    if triton is None:
        return False
    return a.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"


def _householder(a, cfg):
    """Householder QR of a (B, n, n) contiguous float32, in place: (H, tau)."""
    b, n, _ = a.shape
    tau = torch.empty(b, n, dtype=a.dtype, device=a.device)
    if _use_triton(a):
        nbt = max(16, int(cfg["hh_nb"]))
        tw = torch.zeros(b, nbt, nbt, dtype=a.dtype, device=a.device)
        _factor_triton(a, tau, cfg, tw)
    else:
        _factor_torch(a, tau, max(1, min(int(cfg["hh_nb"]), n)))
    return a, tau


def custom_kernel(data):
    cfg = dict(CONFIG)
    a = data if data.dtype == torch.float32 else data.float()
    a = a if a.is_contiguous() else a.contiguous()
    b, n, _ = a.shape
    if b == 0 or n == 0:
        return a, torch.zeros(b, n, dtype=a.dtype, device=a.device)
    h, tau, ok = _cholqr2(a, cfg)
    bad = (~ok).nonzero().flatten()  # the one host sync: which matrices need the Householder path
    STATS["matrices"] += b
    STATS["fallback"] += bad.numel()
    if bad.numel():
        hb, tb = _householder(a[bad].contiguous(), cfg)
        h[bad] = hb
        tau[bad] = tb
    return h, tau
