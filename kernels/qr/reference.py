"""Reference for the qr task: input generator, torch.geqrf, and the per-matrix checker.

Inputs live on the GPU when one is visible, else on the CPU (Steer's CPU mode).
"""
import torch

from task import input_t, output_t
from utils import EPS32, column_scale, matrix_one_norm

STRESS_PROFILES = ("rankdef", "nearrank", "clustered", "band", "rowscale", "nearcollinear")
MIXED_ORDER = ("dense",) + STRESS_PROFILES
MIXED_WEIGHTS = (6.0,) + (1.0,) * len(STRESS_PROFILES)
CASES = ("dense", "upper", "diagonal") + STRESS_PROFILES + ("mixed",)

RESIDUAL_FACTOR = 20.0
ORTHOGONALITY_FACTOR = 100.0


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _rank(n: int) -> int:
    return max(1, 3 * n // 4)


def _apply_profile(base: torch.Tensor, case: str, cond: float, g: torch.Generator) -> torch.Tensor:
    """Turn a (b, n, n) standard-normal draw into one case's matrices."""
    b, n, _ = base.shape
    dev, dt = base.device, base.dtype
    if case == "dense":
        return column_scale(base, cond)
    if case == "upper":
        a = torch.triu(base)
        a = a + torch.diag_embed(torch.linspace(1.0, 0.25, n, device=dev, dtype=dt)).expand(b, n, n)
        return column_scale(a, cond)
    if case == "diagonal":
        signs = torch.where(torch.randn(b, n, generator=g, device=dev, dtype=dt) > 0, 1.0, -1.0)
        mags = torch.logspace(0, -max(cond, 2), n, device=dev, dtype=dt)
        return torch.diag_embed(signs * mags)
    if case == "rankdef":
        a = base.clone()
        a[:, :, _rank(n):] = 0
        return column_scale(a, cond)
    if case == "nearrank":
        a = base.clone()
        k = n - _rank(n)
        if k > 0:
            noise = torch.randn(b, n, k, generator=g, device=dev, dtype=dt)
            a[:, :, n - k:] = a[:, :, :k] + 1e-5 * noise
        return column_scale(a, cond)
    if case == "clustered":
        scale = torch.ones(n, device=dev, dtype=dt)
        scale[n // 2:] = 4 * EPS32
        if n >= 8:
            scale[n // 2 - 2:n // 2 + 2] = EPS32 ** 0.5
        return base * scale
    if case == "band":
        width = max(2, min(32, n // 32))
        i = torch.arange(n, device=dev)
        keep = (i[:, None] - i[None, :]).abs() <= width
        a = base * keep
        a = a + torch.diag_embed(torch.linspace(1.0, 0.5, n, device=dev, dtype=dt)).expand(b, n, n)
        return column_scale(a, cond)
    if case == "nearcollinear":
        common = torch.randn(b, n, 1, generator=g, device=dev, dtype=dt)
        noise = torch.randn(b, n, n, generator=g, device=dev, dtype=dt)
        return column_scale(common + 1e-4 * noise, cond)
    if case == "rowscale":
        rows = torch.logspace(0, -max(cond, 4), n, device=dev, dtype=dt)
        return base * rows[:, None]
    raise ValueError(f"unknown case {case!r}; known: {', '.join(CASES)}")


def _mixed_profiles(batch: int, g: torch.Generator, dev: torch.device) -> torch.Tensor:
    """Profile index per matrix (into MIXED_ORDER); with batch >= 2, one dense and one stress at least."""
    weights = torch.tensor(MIXED_WEIGHTS, device=dev)
    draw = torch.multinomial(weights, batch, replacement=True, generator=g)
    if batch >= 2:
        if not bool((draw == 0).any()):
            pos = int(torch.randint(batch, (1,), generator=g, device=dev))
            draw[pos] = 0
        if not bool((draw != 0).any()):
            pos = int(torch.randint(batch, (1,), generator=g, device=dev))
            draw[pos] = int(torch.randint(1, len(MIXED_ORDER), (1,), generator=g, device=dev))
    return draw


def _generate(batch: int, n: int, cond: int, seed: int, case: str) -> tuple[torch.Tensor, list[str]]:
    dev = _device()
    g = torch.Generator(device=dev)
    g.manual_seed(int(seed))
    base = torch.randn(batch, n, n, generator=g, device=dev, dtype=torch.float32)
    if case != "mixed":
        return _apply_profile(base, case, cond, g).contiguous(), [case] * batch
    draw = _mixed_profiles(batch, g, dev)
    out = base.clone()
    for index, profile in enumerate(MIXED_ORDER):
        members = (draw == index).nonzero().flatten()
        if members.numel():
            out[members] = _apply_profile(base[members], profile, cond, g)
    return out.contiguous(), [MIXED_ORDER[int(i)] for i in draw.tolist()]


def generate_input(batch: int, n: int, cond: int, seed: int, case: str = "dense") -> input_t:
    return _generate(batch, n, cond, seed, case)[0]


def profiles_of(batch: int, n: int, cond: int, seed: int, case: str = "dense") -> list[str]:
    """The profile each matrix of generate_input(...) got; for mixed, the seeded draw."""
    return _generate(batch, n, cond, seed, case)[1]


def householder_q(h: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Q = H_1 H_2 ... H_n from geqrf's (H, tau), in H's dtype: torch.linalg.householder_product's Q.

    For many small matrices it is built through the compact WY identity Q = I - V T V^T with
    T^-1 = striu(V^T V) + diag(1/tau), batched: on an H200 that is 25 ms instead of 220 ms for
    640 x 512 x 512 in float64, and it agrees with householder_product to ~1e-15. A reflector
    with tau == 0 is the identity; it becomes v = 0, tau = 1, which is the identity too.
    """
    batch, n, _ = h.shape
    if batch < 16 or n > 1024:
        return torch.linalg.householder_product(h, tau)
    eye = torch.eye(n, dtype=h.dtype, device=h.device)
    zero = tau == 0
    v = (torch.tril(h, -1) + eye) * (~zero).unsqueeze(-2)
    t_inv = torch.triu(v.transpose(-1, -2) @ v, 1) + torch.diag_embed(torch.where(zero, 1.0, 1.0 / tau))
    t = torch.linalg.solve_triangular(t_inv, eye.expand_as(t_inv), upper=True)
    return eye - v @ t @ v.transpose(-1, -2)


def ref_kernel(data: input_t) -> output_t:
    return torch.geqrf(data)


def _reject(message: str) -> tuple[bool, str, float]:
    return False, message, float("inf")


def check_implementation(data: input_t, output: output_t) -> tuple[bool, str]:
    """Per-matrix backward error and orthogonality of (H, tau), in float64."""
    ok, message, _ = check_margin(data, output)
    return ok, message


def check_margin(data: input_t, output: output_t) -> tuple[bool, str, float]:
    """check_implementation's verdict, and how much of its tolerance the output used: the largest,
    over the matrices, of ||R - Q^T A||_1 and ||Q^T Q - I||_1 as fractions of what each may be
    (above 1.0 fails; inf where the output was rejected before measuring). A Steer extension:
    GPU MODE calls check_implementation only."""
    a = data
    if not isinstance(output, (tuple, list)) or len(output) != 2:
        return _reject(f"expected a pair (H, tau), got {type(output).__name__}")
    h, tau = output
    if not isinstance(h, torch.Tensor) or not isinstance(tau, torch.Tensor):
        return _reject(f"expected tensors, got ({type(h).__name__}, {type(tau).__name__})")
    batch, n, _ = a.shape
    if tuple(h.shape) != tuple(a.shape):
        return _reject(f"H has shape {tuple(h.shape)}, expected {tuple(a.shape)}")
    if tuple(tau.shape) != (batch, n):
        return _reject(f"tau has shape {tuple(tau.shape)}, expected {(batch, n)}")
    for name, t in (("H", h), ("tau", tau)):
        if t.dtype != torch.float32:
            return _reject(f"{name} has dtype {t.dtype}, expected torch.float32")
        if t.device != a.device:
            return _reject(f"{name} is on {t.device}, expected {a.device}")
        if not bool(torch.isfinite(t).all()):
            bad = (~torch.isfinite(t)).flatten(1).any(dim=1).nonzero().flatten()
            return _reject(f"{name} has NaN/Inf in matrix {int(bad[0])} ({bad.numel()} matrices affected)")

    h64, tau64, a64 = h.double(), tau.double(), a.double()
    q = householder_q(h64, tau64)
    r = torch.triu(h64)
    qt = q.transpose(-1, -2)
    residual = matrix_one_norm(r - qt @ a64)
    allowed = RESIDUAL_FACTOR * n * EPS32 * matrix_one_norm(a64)
    eye = torch.eye(n, dtype=torch.float64, device=a.device)
    orth = matrix_one_norm(qt @ q - eye)
    orth_allowed = ORTHOGONALITY_FACTOR * n * EPS32

    margin = float(torch.maximum(residual / allowed.clamp_min(torch.finfo(torch.float64).tiny),
                                 orth / orth_allowed).max()) if batch and n else 0.0
    bad_res = residual > allowed
    if bool(bad_res.any()):
        scaled = residual / (n * EPS32 * matrix_one_norm(a64)).clamp_min(torch.finfo(torch.float64).tiny)
        worst = int(torch.where(bad_res, scaled, torch.zeros_like(scaled)).argmax())
        return False, (
            f"backward error too large in {int(bad_res.sum())} of {batch} matrices; worst is matrix {worst}: "
            f"||R - Q^T A||_1 = {float(scaled[worst]):.3g} n*eps32*||A||_1 (allowed {RESIDUAL_FACTOR:g})"
        ), margin
    bad_orth = orth > orth_allowed
    if bool(bad_orth.any()):
        scaled = orth / (n * EPS32)
        worst = int(scaled.argmax())
        return False, (
            f"Q not orthogonal in {int(bad_orth.sum())} of {batch} matrices; worst is matrix {worst}: "
            f"||Q^T Q - I||_1 = {float(scaled[worst]):.3g} n*eps32 (allowed {ORTHOGONALITY_FACTOR:g})"
        ), margin
    return True, "", margin
