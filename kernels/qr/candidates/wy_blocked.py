"""wy_blocked: blocked Householder QR with the compact WY representation, in plain PyTorch.

Each panel of nb columns is copied, transposed and in float64, to a scratch buffer and factored
there column by column, batched over every matrix of the batch, in 2 kernels per column on a GPU:
one batched GEMV, z = x'P for the column x and the panel's columns P from the diagonal down (z's
first entry is the squared norm), and one jiterator kernel that applies the reflector to the
panel's remaining columns and writes the column's final values (_STEP: one square root and one
division an element). The columns go back to the matrix once per panel; tau = 2 / v'v and
T = D (I + triu(V'V, 1) D)^-1 (larft's recurrence as one unit-triangular solve) come from the
panel's Gram matrix V'V in float64; the trailing matrix gets Q' = I - V T' V' through three batched
GEMMs in float32. Where b n is large, a panel is factored in narrower inner panels whose
reflectors update the rest of the panel by float64 GEMMs (two levels, _widths). On a GPU the whole
sequence is captured once per shape as a CUDA graph and replayed. The CPU runs the same steps in
torch ops.

Where the time goes (H200, torch.profiler, docs/h200/2026-12-02-g/g6): the column steps. A step
kernel costs ~4.8 us even on a tiny panel, replayed from a graph, against ~1.3 us for a plain
torch.add (g3), and the GEMV 1.8-5 us: 2x4096 spends 20.8 ms in 4096 steps and 15.9 ms in their
GEMVs of its 54.8 ms; 20x32 152 of its ~250 us in 32 steps. At 640x512 a step moves the inner
panel's remaining columns in and out (6.2 ms in 512 steps); the trailing GEMMs (~4/3 n^3 flops
per matrix, float32 without TF32) and the copies around the graph take most of the rest. Norms and
reflectors are computed in float64, so entries near 1e-30 or 1e30, and rounding-noise columns of
rank-deficient matrices that shrink toward denormals, neither underflow nor overflow.
"""
import torch

# Panel widths by b n, the rows of a batch's panel. The column steps are latency-bound for small
# b n, so there wider panels cost nothing a column and save panels: nb_few where b n <= few_bn, nb
# up to many_bn. Above that a step's bytes (about b n w / 2 elements for w columns) count, so a
# panel of nb_many columns is factored nbi_many columns at a time (two levels; the inner update is
# three float64 GEMMs on the panel's remaining columns): the steps move narrow panels while the
# trailing matrix is read and written once per nb_many columns. From most_bn on, nb_most and
# nbi_most. H200 (docs/h200/2026-12-02-g, g4-g5): 60x1024 best at 64/16 (18.7 ms; 20.8 with one
# level of 32), 640x512 at 32/8 (22.2 ms; 24.1 at 32/16, 27.7 with one level of 16).
CONFIG = {"nb": 32, "few_bn": 8192, "nb_few": 64, "many_bn": 32768, "nb_many": 64, "nbi_many": 16,
          "most_bn": 131072, "nb_most": 32, "nbi_most": 8, "graph": True, "graph_min_n": 2, "jit": True}
SPACE = {"nb": [8, 16, 24, 32, 48, 64, 96, 128], "few_bn": [0, 4096, 8192, 16384], "nb_few": [16, 32, 64, 128],
         "many_bn": [16384, 32768, 131072, 524288], "nb_many": [16, 32, 64, 128], "nbi_many": [8, 16, 32, 64],
         "most_bn": [65536, 131072, 524288], "nb_most": [16, 32, 64], "nbi_most": [4, 8, 16, 32],
         "graph": [True, False], "graph_min_n": [2, 64, 256], "jit": [True, False]}

# One column step of a panel held transposed (each panel column a row), elementwise over the
# panel's columns j.. and all its rows r, in float64. x is column j, alpha = x[j],
# z_c = x[j:]'P_c[j:] (so z0 = alpha^2 + ||x[j+1:]||^2) and prow_c = P_c[j]. f is r, plus _FIRST
# on column j's own row. With beta = -sign(alpha) sqrt(z0), d = alpha - beta, v = (1, x[j+1:] / d)
# and tau = (beta - alpha) / beta, I - tau v v' takes P_c to P_c + (z_c - beta prow_c) x s below the
# diagonal and z_c / beta on it, where s = 1 / (beta d) = 1 / (alpha beta - z0) (|beta d| >= z0: no
# cancellation), so an element costs one square root and one division. Column j becomes beta on
# the diagonal and v = x beta s below it; rows above j do not change. |v| <= 1 whatever the
# column's scale. A column with z0 <= 1e-280 (all of it <= 1e-140 from the diagonal down, where
# squares near float64's underflow would make beta and v inexact) is reflected by v = e_j, tau = 2:
# row j changes sign and the entries below the diagonal, which no nonzero float32 input's checks
# can see (||A|| >= 1.4e-45), become 0. Either way tau = 2 / v'v afterwards (_wy) is the value that
# makes the stored reflector exactly orthogonal.
_FIRST = 1 << 30
_STEP = """
template <typename T> T wy_step(T p, T x, T z, T prow, T alpha, T z0, T f, T j) {
  bool first = f >= T(%d);
  T r = first ? f - T(%d) : f;
  if (r < j) return p;
  if (!(z0 > T(1e-280))) return r == j ? -p : (first ? T(0) : p);
  T beta = -copysign(sqrt(z0), alpha);
  T s = T(1) / (alpha * beta - z0);
  if (first) return r == j ? beta : x * beta * s;
  return r == j ? z * (alpha - beta) * s : p + (z - beta * prow) * x * s;
}
""" % (_FIRST, _FIRST)
_JIT = {}


def _step_jit(p, x, z, prow, alpha, z0, f, j):
    """_STEP in one CUDA kernel; every input is float64 (mixed dtypes would take jiterator's
    dynamic-casting path, about 3x slower). Jiterator takes at most 8 tensors."""
    if "fn" not in _JIT:
        _JIT["fn"] = torch.cuda.jiterator._create_jit_fn(_STEP, j=0.0)
    return _JIT["fn"](p, x, z, prow, alpha, z0, f, j=float(j))


def _step_torch(p, x, z, prow, alpha, z0, f, j):
    """_STEP's values with torch ops (the CPU, or jit=False), in place in p, which it returns: the
    per-matrix scalars once, then only the rows from the diagonal down, the other columns first
    (they read column j and row j), then column j. f is not needed."""
    live = z0 > 1e-280
    beta = torch.where(live, -torch.copysign(z0.sqrt(), alpha), -alpha)  # a dead column: v = e_j
    s = torch.where(live, 1.0 / torch.where(live, alpha * beta - z0, -1.0), 0.0)
    if p.shape[1] > 1:
        zc, pc = z[:, 1:], prow[:, 1:]
        p[:, 1:, j + 1:].addcmul_((zc - beta * pc) * x[:, :, j + 1:], s)
        pc.copy_(torch.where(live, zc * (alpha - beta) * s, -pc))
    x[:, :, j + 1:].mul_(beta).mul_(s)
    alpha.copy_(beta)
    return p


def _columns(pr, f, step):
    """Householder QR of the transposed panel pr (B, w, m), column by column: per column one
    batched GEMV (z = x'P from the diagonal down) and one step. Returns the final columns (B, w, m)."""
    w, m = pr.shape[1], pr.shape[2]
    cols = []
    for j in range(w):
        z = torch.bmm(pr[:, :, j:], pr[:, 0, j:].unsqueeze(2))  # (B, w - j, 1), z0 first
        out = step(pr, pr[:, :1], z, pr[:, :, j:j + 1], pr[:, :1, j:j + 1], z[:, :1], f[:, :w - j, :m], j)
        cols.append(out[:, 0])
        pr = out[:, 1:]
    return torch.stack(cols, dim=1)


def _wy(h, upper, eye, with_t=True):
    """V' (unit diagonal, zeros before it), tau = 2 / v'v and T (I - V T V' = H_1 ... H_w, larft's
    forward columnwise T; None unless with_t) of the reflectors in the final transposed columns
    h (B, w, m), in float64.

    larft's recurrence is T = D - T S D with S = triu(V'V, 1) and D = diag(tau), so
    T = D (I + S D)^-1: one unit-triangular solve (its lower triangle and diagonal are not read).
    """
    w, m = h.shape[1], h.shape[2]
    vt = torch.where(upper[:, :w, :m], h, eye[:, :w, :m])
    g = torch.bmm(vt, vt.transpose(1, 2))
    tau = 2.0 / g.diagonal(dim1=1, dim2=2)
    if not with_t:
        return vt, tau, None
    x = torch.linalg.solve_triangular(g.mul_(tau.unsqueeze(1)), eye[:, :w, :w], upper=True, unitriangular=True)
    return vt, tau, x.mul_(tau.unsqueeze(2))


def _panel(a, tau, k0, w, wi, masks, step, with_t):
    """Householder QR of the panel a[:, k0:, k0:k0+w] in place, tau written; returns V' and T
    (float64; T only with_t, for a trailing update).

    The panel is factored in a float64 transposed copy, each column a contiguous row, wi columns
    at a time; after each wi columns, their reflectors update the panel's remaining columns.
    """
    f, upper, eye = masks
    p = a[:, k0:, k0:k0 + w]
    pt = p.transpose(1, 2).to(torch.float64, copy=True, memory_format=torch.contiguous_format)
    if wi >= w:  # one level: the final columns go to the matrix as they are
        pt = _columns(pt, f, step)
    else:
        for i0 in range(0, w, wi):
            sub = pt[:, i0:i0 + wi, i0:]
            h = _columns(sub, f, step)
            sub.copy_(h)
            if i0 + wi < w:
                vt, _, t = _wy(h, upper, eye)
                rest = pt[:, i0 + wi:, i0:]  # P' <- P' - (P' V) T V'
                rest.baddbmm_(torch.bmm(torch.bmm(rest, vt.transpose(1, 2)), t), vt, alpha=-1.0)
    p.copy_(pt.transpose(1, 2))
    vt, t64, t = _wy(pt, upper, eye, with_t)
    tau[:, k0:k0 + w].copy_(t64)
    return vt, t


def _masks(n, nb, device):
    """f (row index, plus _FIRST on row 0), upper (r > c) and eye (r == c), each (1, nb, n), float64
    but upper; sliced by every panel and step."""
    r = torch.arange(n, device=device).view(1, 1, n)
    c = torch.arange(nb, device=device).view(1, nb, 1)
    f = (r + _FIRST * (c == 0)).to(torch.float64)
    return f, r > c, (r == c).to(torch.float64)


def _householder(a, tau, nb, wi):
    """Blocked Householder QR of a contiguous (B, n, n) in place; tau (B, n) is written."""
    n = a.shape[-1]
    masks = _masks(n, nb, a.device)
    step = _step_jit if a.is_cuda and CONFIG["jit"] else _step_torch
    for k0 in range(0, n, nb):
        w = min(nb, n - k0)
        vt, t = _panel(a, tau, k0, w, wi, masks, step, k0 + w < n)
        if k0 + w < n:
            v = vt.transpose(1, 2).to(a.dtype)
            c = a[:, k0:, k0 + w:]  # C <- C - V T' V' C
            wt = torch.bmm(t.transpose(1, 2).to(a.dtype), torch.bmm(v.transpose(1, 2), c))
            c.baddbmm_(v, wt, alpha=-1.0)


class _Replay:
    """One captured factorization for one shape: copy in, replay, copy the outputs out."""

    def __init__(self, a, nb, wi):
        b, n, _ = a.shape
        self.inp = a.clone()
        self.tau = torch.empty(b, n, dtype=a.dtype, device=a.device)
        _householder(self.inp.copy_(a), self.tau, nb, wi)  # warm-up: cuBLAS handles and workspaces
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            _householder(self.inp, self.tau, nb, wi)

    def __call__(self, a):
        self.inp.copy_(a)
        self.graph.replay()
        return self.inp.clone(), self.tau.clone()


_REPLAYS = {}


def _widths(b, n):
    """(nb, nbi): the panel width and the inner width for b matrices of order n."""
    bn = b * n
    if bn >= CONFIG["many_bn"]:
        tier = "most" if bn >= CONFIG["most_bn"] else "many"
        nb = max(1, min(int(CONFIG[f"nb_{tier}"]), n))
        return nb, max(1, min(int(CONFIG[f"nbi_{tier}"]), nb))
    nb = max(1, min(int(CONFIG["nb_few" if bn <= CONFIG["few_bn"] else "nb"]), n))
    return nb, nb


def custom_kernel(data):
    a = data if data.dtype == torch.float32 else data.float()
    a = a if a.is_contiguous() else a.contiguous()
    b, n, _ = a.shape
    if b == 0 or n == 0:
        return a, torch.zeros(b, n, dtype=a.dtype, device=a.device)
    nb, wi = _widths(b, n)
    if a.is_cuda and CONFIG["graph"] and n >= CONFIG["graph_min_n"]:
        key = (a.device, b, n, nb, wi)
        if key not in _REPLAYS:
            _REPLAYS[key] = _Replay(a, nb, wi)
        return _REPLAYS[key](a)
    tau = torch.empty(b, n, dtype=a.dtype, device=a.device)
    _householder(a, tau, nb, wi)
    return a, tau
