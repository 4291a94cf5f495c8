"""Numerical helpers shared by reference.py and the seed candidates."""
import torch

EPS32 = torch.finfo(torch.float32).eps


def matrix_one_norm(x: torch.Tensor) -> torch.Tensor:
    """Per-matrix 1-norm (largest absolute column sum) of a (batch, m, n) tensor."""
    return x.abs().sum(dim=-2).amax(dim=-1)


def column_scale(a: torch.Tensor, cond: float) -> torch.Tensor:
    """Multiply column j by logspace(0, -cond, n)[j]; the identity when cond is 0."""
    if cond == 0:
        return a
    n = a.shape[-1]
    return a * torch.logspace(0, -cond, n, device=a.device, dtype=a.dtype)
