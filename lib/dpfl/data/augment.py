"""Training-time augmentation on stacked, normalised batches, vectorised over every image.

Zheng et al.'s CIFAR-10 runs (docs/zheng2021.md §2) augment each training image with torchvision's
``RandomCrop(32, padding=4)`` followed by ``RandomHorizontalFlip()``, before normalising; we
apply the same transformation after normalisation by padding with the normalised value of a
black pixel, which is what zero padding becomes.
"""
from __future__ import annotations

import torch

from dpfl import checks
from dpfl.federated import threads

__all__ = ["crop_flip", "CROP_CHUNK"]

#: images cropped per call on a CPU: a chunk's padded copy (≈ 20 MB for CIFAR-10) is reused from the allocator's heap,
#: where one of every image (≈ 1 GB for a round of Zheng's 100 clients) is fresh memory to fault in each round
CROP_CHUNK = 1024


def crop_flip(x: torch.Tensor, generator: torch.Generator, *, pad: int = 4, fill=None,
              chunk: int | None = None) -> torch.Tensor:
    """Random crop of the original size from the image padded by ``pad`` on every side, then a
    horizontal flip with probability ½, independently per image.

    ``x``: (..., C, H, W); ``fill``: the padding value per channel (default 0). Offsets and flips come from
    ``generator`` (row-major over the leading axes: every row's vertical offset, then every horizontal one, then
    the flips), so the result is repeatable. ``chunk``: images per call, by default all on a GPU and
    :data:`CROP_CHUNK` on a CPU, where the chunks are cropped side by side, one thread a core
    (``dpfl.federated.threads``): a Zheng CIFAR-10 round's 51 200 images took 1.5–2.3 s in one piece on a 2-core
    CPU (the first version: one padded copy of every image, then one gather), ≈ 0.5 s so (``make bench``,
    row (k)); the same bits either way (``tests/test_data.py``).
    """
    pad = checks.nonnegative("pad", pad)
    *lead, C, H, W = x.shape
    flat = x.reshape(-1, C, H, W)
    n = flat.shape[0]
    if chunk is None:
        chunk = max(n, 1) if x.is_cuda else CROP_CHUNK
    chunk = checks.positive_int("chunk", chunk)
    dev = x.device
    fill = (torch.zeros(C, dtype=x.dtype, device=dev) if fill is None
            else torch.as_tensor(fill, dtype=x.dtype, device=dev))
    fill = fill.view(1, C, 1, 1)
    oy = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device=generator.device).to(dev)
    ox = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device=generator.device).to(dev)
    flip = (torch.rand(n, generator=generator, device=generator.device) < 0.5).to(dev)
    out = torch.empty(n, C, H, W, dtype=x.dtype, device=dev)

    def crop(slices):                                   # one thread's run of chunks
        for sl in slices:
            padded = fill.expand(sl.stop - sl.start, C, H + 2 * pad, W + 2 * pad).clone()
            # the image as the first version had it, (x − fill) + fill, zero-padded and shifted back: the round-off
            # is kept so that every cached run computes again bit for bit (tests/test_data.py)
            padded[:, :, pad:pad + H, pad:pad + W] = (flat[sl] - fill).add_(fill)
            windows = padded.unfold(2, H, 1).unfold(3, W, 1)        # (n, C, 2·pad + 1, 2·pad + 1, H, W): a view
            rows = torch.arange(sl.stop - sl.start, device=dev)
            crops = windows[rows, :, oy[sl], ox[sl]]                # each image's crop: (n, C, H, W)
            out[sl] = torch.where(flip[sl].view(-1, 1, 1, 1), crops.flip(-1), crops)

    threads.by_chunks(crop, n, chunk, side_by_side=not x.is_cuda)
    return out.reshape(*lead, C, H, W)
