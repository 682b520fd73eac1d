"""Training-time augmentation on stacked, normalised batches, vectorised over every image.

Zheng et al.'s CIFAR-10 runs (docs/zheng2021.md §2) augment each training image with torchvision's
``RandomCrop(32, padding=4)`` followed by ``RandomHorizontalFlip()``, before normalising; we
apply the same transformation after normalisation by padding with the normalised value of a
black pixel, which is what zero padding becomes.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from dpfl import checks

__all__ = ["crop_flip"]


def crop_flip(x: torch.Tensor, generator: torch.Generator, *, pad: int = 4, fill=None) -> torch.Tensor:
    """Random crop of the original size from the image padded by ``pad`` on every side, then a
    horizontal flip with probability ½, independently per image.

    ``x``: (..., C, H, W); ``fill``: the padding value per channel (default 0). Offsets and flips
    come from ``generator`` (row-major over the leading axes), so the result is repeatable.
    """
    pad = checks.nonnegative("pad", pad)
    *lead, C, H, W = x.shape
    flat = x.reshape(-1, C, H, W)
    n = flat.shape[0]
    dev = x.device
    fill = torch.zeros(C, dtype=x.dtype, device=dev) if fill is None else torch.as_tensor(fill, dtype=x.dtype, device=dev)
    padded = F.pad(flat - fill.view(1, C, 1, 1), (pad, pad, pad, pad)) + fill.view(1, C, 1, 1)
    oy = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device=generator.device).to(dev)
    ox = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device=generator.device).to(dev)
    flip = (torch.rand(n, generator=generator, device=generator.device) < 0.5).to(dev)
    rows = oy[:, None] + torch.arange(H, device=dev)
    cols = ox[:, None] + torch.arange(W, device=dev)
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    out = padded[torch.arange(n, device=dev)[:, None, None, None], torch.arange(C, device=dev)[None, :, None, None],
                 rows[:, None, :, None], cols[:, None, None, :]]
    return out.reshape(*lead, C, H, W)
