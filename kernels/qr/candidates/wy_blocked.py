"""wy_blocked: blocked Householder QR with the compact WY representation, in plain PyTorch.

Each panel of nb columns is factored column by column, batched over every matrix of the batch
(about 25 small kernels per column); T is built by recursive doubling (T12 = -T1 V1'V2 T2, all
levels batched); the trailing matrix gets Q' = I - V T' V' through three batched GEMMs. On a GPU
the whole sequence is captured once per shape as a CUDA graph and replayed.

Where the time goes: the per-column kernels of the panels, n columns x ~25 launches, each a
microsecond or two even when replayed from a graph; they are latency-bound. The trailing GEMMs
(fp32, ~4/3 n^3 flops per matrix) and the three copies around the graph (input in, outputs
out) matter only at 640x512 and 60x1024. Each reflector is computed from x / max|x|, so
entries near 1e-30 or 1e30, and rounding-noise columns of rank-deficient matrices, stay exact.
"""
import torch

CONFIG = {"nb": 32, "graph": True, "graph_min_n": 2}
SPACE = {"nb": [8, 16, 24, 32, 48, 64, 96, 128], "graph": [True, False], "graph_min_n": [2, 64, 256]}


def _panel(a, tau, k0, w):
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
        beta = torch.where(live, bs * sc, alpha)  # before x[:, 0] is overwritten below
        if j + 1 < k0 + w:
            x[:, 0] = 1.0
            c = a[:, j:, j + 1:k0 + w]
            wv = torch.bmm(x.unsqueeze(1), c)
            c.baddbmm_(x.unsqueeze(2), wv * t.view(-1, 1, 1), alpha=-1.0)
        x[:, 0] = beta


def _block_view(x, s, r, c):
    """(B, q, s, s) view of the s x s blocks at (p*2s + r, p*2s + c) of a contiguous (B, w, w)."""
    b, w, _ = x.shape
    q = w // (2 * s)
    return x.as_strided((b, q, s, s), (w * w, 2 * s * w + 2 * s, w, 1), x.storage_offset() + r * w + c)


def _t_factor(v, tau):
    """T of I - V T V' = H_1 ... H_w (larft, forward, columnwise), by recursive doubling."""
    b, m, w = v.shape
    wp = 1 << (w - 1).bit_length()
    if wp != w:  # pad with identity reflectors (v = 0, tau = 0): their T rows/columns are zero
        v = torch.nn.functional.pad(v, (0, wp - w))
        tau = torch.nn.functional.pad(tau, (0, wp - w))
    g = torch.bmm(v.transpose(1, 2), v)
    t = torch.diag_embed(tau).contiguous()
    s = 1
    while s < wp:
        t12 = torch.matmul(torch.matmul(_block_view(t, s, 0, 0), _block_view(g, s, 0, s)), _block_view(t, s, s, s))
        _block_view(t, s, 0, s).copy_(t12.neg_())
        s *= 2
    return t[:, :w, :w]


def _householder(a, tau, nb):
    """Blocked Householder QR of a contiguous (B, n, n) in place; tau (B, n) is written."""
    n = a.shape[-1]
    for k0 in range(0, n, nb):
        w = min(nb, n - k0)
        _panel(a, tau, k0, w)
        if k0 + w < n:
            v = torch.tril(a[:, k0:, k0:k0 + w], -1)
            v.diagonal(dim1=1, dim2=2).fill_(1.0)
            t = _t_factor(v, tau[:, k0:k0 + w])
            c = a[:, k0:, k0 + w:]
            wt = torch.bmm(t.transpose(1, 2), torch.bmm(v.transpose(1, 2), c))
            c.baddbmm_(v, wt, alpha=-1.0)


def _factor(a, tau, nb):
    _householder(a, tau, nb)


class _Replay:
    """One captured factorization for one shape: copy in, replay, copy the outputs out."""

    def __init__(self, a, nb):
        b, n, _ = a.shape
        self.inp = a.clone()
        self.tau = torch.empty(b, n, dtype=a.dtype, device=a.device)
        _factor(self.inp.copy_(a), self.tau, nb)  # warm-up: cuBLAS handles and workspaces
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            _factor(self.inp, self.tau, nb)

    def __call__(self, a):
        self.inp.copy_(a)
        self.graph.replay()
        return self.inp.clone(), self.tau.clone()


_REPLAYS = {}


def custom_kernel(data):
    a = data if data.dtype == torch.float32 else data.float()
    a = a if a.is_contiguous() else a.contiguous()
    b, n, _ = a.shape
    nb = max(1, min(int(CONFIG["nb"]), n))
    if b == 0 or n == 0:
        return a, torch.zeros(b, n, dtype=a.dtype, device=a.device)
    if a.is_cuda and CONFIG["graph"] and n >= CONFIG["graph_min_n"]:
        key = (a.device, b, n, nb)
        if key not in _REPLAYS:
            _REPLAYS[key] = _Replay(a, nb)
        return _REPLAYS[key](a)
    tau = torch.empty(b, n, dtype=a.dtype, device=a.device)
    _factor(a, tau, nb)
    return a, tau
