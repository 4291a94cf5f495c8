"""A valid submission: torch.geqrf itself. Copy it as the starting point of your own."""
import torch

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    return torch.geqrf(data)
