"""The papers' networks as pure functions of (parameters, inputs, dropout masks).

Written functionally so that ``torch.func`` can vmap them over clients and over samples, and so
that dropout randomness is an explicit input drawn from each client's own generator (results then
do not depend on how clients are batched). Each model is a :class:`Model`: ``init(generator)``
returns a parameter dict initialised as PyTorch's default layers are, ``forward(params, x, masks)``
returns log-probabilities, and ``masks(batch, generators)`` draws the dropout masks of one batch for each
client, one generator each, stacked (``None`` for models without dropout; pass ``None`` or ``{}`` to ``forward``
to evaluate).
``forward``'s optional ``tap`` (:class:`Tap`) exposes the fully connected layers (``linear``) for
ghost clipping, and the convolutions (``convs``) for per-sample gradients in one call per layer.

* :data:`MNIST_CNN` — Zheng et al.'s MnistCNN (docs/zheng2021.md §2): conv 32 → conv 64 → max-pool →
  Dropout2d(0.25) → FC 128 → dropout(0.5) → FC 10. The authors apply ``Dropout2d`` to the 2-D FC
  activations, which PyTorch treats as element-wise dropout; we use element-wise dropout there.
* :data:`CIFAR_CNN` / :func:`cifar_cnn` — the TF-tutorial CNN of Zheng et al.'s CIFAR-10 runs;
  the authors' code omits the third ReLU (``relu3=False``, the faithful default).
* :data:`GEYER_MLP` — Geyer et al.'s FC 784-600-100-10 without biases.
* :func:`fedhdp_mlp`, :data:`FEMNIST_CNN` — FedHDP's (F)MNIST and FEMNIST networks (sizes assumed).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch
import torch.nn.functional as F

__all__ = ["Model", "Tap", "im2col", "MNIST_CNN", "CIFAR_CNN", "GEYER_MLP", "FEMNIST_CNN", "cifar_cnn", "fedhdp_mlp",
           "softmax_regression", "get_model"]


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    input_shape: tuple
    init: Callable            # generator → {name: tensor}
    forward: Callable         # (params, x, masks) → log-probabilities
    masks: Callable           # (batch, generators) → {name: (clients, batch, …)} or None: a generator a client
    linear: tuple = ()        # names of the fully connected layers (``<name>.weight``/``.bias``)
    convs: tuple = ()         # names of the 2-D convolutions, all of stride 1 without padding
    #: the forward pass is exactly FC → ReLU → … → FC → log-softmax over ``linear``, in order, with no
    #: dropout (``dpfl.federated.mlp_sgd`` then trains it by hand)
    plain_mlp: bool = False


def _uniform(shape, bound, g):
    return (torch.rand(shape, generator=g) * 2 - 1) * bound


def _conv(g, out_c, in_c, k):
    """PyTorch's default Conv2d init: kaiming_uniform(a=√5) ⇒ U(±1/√fan_in) for weight and bias."""
    bound = 1 / math.sqrt(in_c * k * k)
    return _uniform((out_c, in_c, k, k), bound, g), _uniform((out_c,), bound, g)


def _linear(g, out_f, in_f, bias=True):
    bound = 1 / math.sqrt(in_f)
    return _uniform((out_f, in_f), bound, g), (_uniform((out_f,), bound, g) if bias else None)


class Tap:
    """Taps layers for per-sample gradients (``dpfl.federated.local``): at each layer ``name`` that
    has a probe (a fully connected layer or a convolution), the forward pass records the layer's input
    in ``inputs[name]`` and adds the zero tensor ``probes[name]`` to its output, so that the gradient
    with respect to the probe is the gradient with respect to the layer's output. ``matmul``: every
    convolution is computed as a matrix product of its unfolded input (im2col), and a probed one records
    the unfolded input, (N, in·k², L), instead of the input (docs/per-sample-gradients.md §2); with no
    probes, a forward pass that only computes its convolutions that way (non-private training)."""

    def __init__(self, probes: dict, matmul: bool = False):
        self.probes = probes
        self.matmul = matmul
        self.inputs = {}


def _tapped(out, name, h, tap: Tap | None):
    if tap is None or name not in tap.probes:
        return out
    tap.inputs[name] = h
    return out + tap.probes[name]


def _fc(p, name, h, tap: Tap | None = None):
    """A fully connected layer (bias if the parameters have one), tapped when ``tap`` probes it."""
    return _tapped(F.linear(h, p[name + ".weight"], p.get(name + ".bias")), name, h, tap)


class _Im2col(torch.autograd.Function):
    """:func:`im2col`'s forward as a strided view and one copy, its backward as ``F.fold`` (ATen's col2im,
    F.unfold's own backward: the same sums in the same order). Without it autograd would differentiate the
    view by ``unfold_backward``, which ``vmap`` runs one batch element at a time (it has no batching rule)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(h, kernel):
        kh, kw = kernel
        patches = h.unfold(-2, kh, 1).unfold(-2, kw, 1)               # (N, C, H', W', kh, kw), a view
        n, c, rows, cols = patches.shape[:4]
        return patches.permute(0, 1, 4, 5, 2, 3).reshape(n, c * kh * kw, rows * cols)

    @staticmethod
    def setup_context(ctx, inputs, output):
        h, kernel = inputs
        ctx.kernel, ctx.size = tuple(kernel), tuple(h.shape[-2:])

    @staticmethod
    def backward(ctx, grad_cols):
        return F.fold(grad_cols, ctx.size, ctx.kernel), None


def im2col(h, kernel: tuple):
    """``F.unfold(h, kernel)`` for stride 1, no padding and no dilation: (N, C, H, W) → (N, C·kh·kw, H'·W'),
    the same values in the same layout (row c·kh·kw + i·kw + j, column y·W' + x holds h[n, c, y + i, x + j])
    and the same gradient, bit for bit. CUDA's ``im2col`` launches one kernel per batch element: under ``vmap``
    over clients and samples, 6 400 launches in one profiled MnistCNN round of 100 clients
    (``benchmarks/gpu/2026-11-27/profile_routes.txt``, the matmul route). Here the forward pass is one copy of a
    strided view of the whole batch, and the backward pass F.unfold's own batched col2im
    (docs/per-sample-gradients.md §2)."""
    return _Im2col.apply(h, tuple(kernel))


def _max_pool2(h):
    """2×2 max-pooling of stride 2 of an NCHW input, ``F.max_pool2d(h, 2)``'s values, layout and gradient bit for
    bit, faster on a CPU: each window's largest entry is found by PyTorch's channels-last kernel on a channels-last
    copy of ``h`` (both kernels keep the first largest entry of a window in row-major order, or a NaN) and taken from
    ``h`` by index (``gather``), whose gradient puts each output's gradient on that entry as ``max_pool2d``'s does.
    For a FEMNIST batch's first pooling (20 × 32 × 26 × 26, one thread) ``max_pool2d``'s NCHW kernel took 2.3 ms
    forward and 2.7 ms forward and backward, this 0.45 and 0.75 ms. Where the channels-last layout reached autograd
    instead (a ReLU backward over mixed layouts) it lost more than it gained (``benchmarks/CPU_LOG.md``, 2026-12-01);
    so did a custom ``autograd.Function``, whose Python dispatch under ``vmap`` and ``grad`` cost ≈ 0.5 ms a call."""
    with torch.no_grad():
        channels_last = h.movedim(-3, -1).contiguous().movedim(-1, -3)   # NCHW shape, channels-last strides
        index = F.max_pool2d_with_indices(channels_last, 2)[1].contiguous()
    return h.flatten(-2).gather(-1, index.flatten(-2)).unflatten(-1, index.shape[-2:])


def _relu_pool(h):
    """``max_pool2d(relu(h), 2)`` computed as ``relu(max_pool2d(h, 2))``: ReLU is monotone, so a window's largest
    entry is the same one either way (the first of the window's largest, where it is positive; where it is not, the
    output is zero and no gradient reaches the window) — the same values and gradients bit for bit (but for the
    sign of a zero where a window's largest input is exactly −0.0), with ReLU on a quarter of the entries. On a CPU
    an input in the NCHW layout is pooled by PyTorch's channels-last kernel (:func:`_max_pool2`); one already in the
    channels-last layout (the CIFAR-10 images are stored so, and a convolution keeps it) by ``max_pool2d``, which
    then runs that kernel itself and keeps the layout for the layers after it, whose kernels (and bits) depend on it
    (docs/per-sample-gradients.md §3)."""
    pooled = _max_pool2(h) if h.device.type == "cpu" and h.stride(-1) == 1 else F.max_pool2d(h, 2)
    return F.relu(pooled)


def _conv2d(p, name, h, tap: Tap | None = None):
    """A convolution of stride 1 without padding, tapped when ``tap`` probes it (as a matrix product
    of the unfolded input when the tap asks for it: the same numbers up to round-off)."""
    weight, bias = p[name + ".weight"], p[name + ".bias"]
    if tap is None or not tap.matmul:
        return _tapped(F.conv2d(h, weight, bias), name, h, tap)
    cols = im2col(h, weight.shape[-2:])                                         # (N, in·k², L)
    side = tuple(n - k + 1 for n, k in zip(h.shape[-2:], weight.shape[-2:]))
    return _tapped((weight.flatten(1) @ cols + bias[:, None]).unflatten(-1, side), name, cols, tap)


def _init(g, convs=(), fcs=()):
    """Parameters in PyTorch's default initialisation, drawn in order: ``convs`` as
    (name, out_channels, in_channels, kernel), then ``fcs`` as (name, out_features, in_features)."""
    p = {}
    for name, out_c, in_c, k in convs:
        p[f"{name}.weight"], p[f"{name}.bias"] = _conv(g, out_c, in_c, k)
    for name, out_f, in_f in fcs:
        p[f"{name}.weight"], p[f"{name}.bias"] = _linear(g, out_f, in_f)
    return p


def _dropout_masks(batch, generators, **layers):
    """Inverted-dropout masks for one batch of each client, stacked: {name: (m, batch, *shape)}, ``layers`` =
    {name: (shape per example, drop rate)}. Client c's are one uniform draw for all layers from ``generators[c]``
    (one kernel launch per client and step, not two per layer), split in the order given; an entry is kept (scaled
    by 1/(1 − rate)) where its uniform is < 1 − rate. The thresholding runs once on the stacked draws, not per
    client: a FEMNIST round on the GPU's chunking counted 163 000 operations, ≈ 10 a client and step in masks
    (``benchmarks/CPU_LOG.md``, 2026-12-03). The same bits as drawing and thresholding client by client (tested)."""
    sizes = [math.prod(shape) for shape, _ in layers.values()]
    u = torch.empty(len(generators), batch, sum(sizes), device=generators[0].device)
    for row, g in zip(u, generators):
        row.uniform_(generator=g)                        # torch.rand's draw, into its row of the stack
    out = {}
    for (name, (shape, rate)), part in zip(layers.items(), u.split(sizes, dim=2)):
        out[name] = (part < 1 - rate).reshape(len(generators), batch, *shape).to(u.dtype) / (1 - rate)
    return out


# -- MnistCNN -------------------------------------------------------------------------------------

def _mnist_init(g):
    return _init(g, [("conv1", 32, 1, 3), ("conv2", 64, 32, 3)], [("fc1", 128, 9216), ("fc2", 10, 128)])


def _mnist_forward(p, x, masks=None, tap=None):
    h = F.relu(_conv2d(p, "conv1", x, tap))
    h = _relu_pool(_conv2d(p, "conv2", h, tap))
    if masks:
        h = h * masks["drop1"][..., None, None]              # Dropout2d(0.25): whole channels
    h = F.relu(_fc(p, "fc1", h.flatten(-3), tap))
    if masks:
        h = h * masks["drop2"]                               # dropout(0.5)
    return F.log_softmax(_fc(p, "fc2", h, tap), dim=-1)


def _mnist_masks(batch, generators):
    return _dropout_masks(batch, generators, drop1=((64,), 0.25), drop2=((128,), 0.5))


MNIST_CNN = Model("mnist_cnn", (1, 28, 28), _mnist_init, _mnist_forward, _mnist_masks, ("fc1", "fc2"),
                  ("conv1", "conv2"))


# -- CifarCNN -------------------------------------------------------------------------------------

def _cifar_init(g):
    return _init(g, [("conv1", 32, 3, 3), ("conv2", 64, 32, 3), ("conv3", 64, 64, 3)],
                 [("fc1", 64, 1024), ("fc2", 10, 64)])


def cifar_cnn(relu3: bool = False) -> Model:
    """The TF-tutorial CNN; ``relu3=False`` reproduces the authors' code (no third ReLU)."""

    def forward(p, x, masks=None, tap=None):
        h = _relu_pool(_conv2d(p, "conv1", x, tap))
        h = _relu_pool(_conv2d(p, "conv2", h, tap))
        h = _conv2d(p, "conv3", h, tap)
        if relu3:
            h = F.relu(h)
        h = F.relu(_fc(p, "fc1", h.flatten(-3), tap))
        return F.log_softmax(_fc(p, "fc2", h, tap), dim=-1)

    return Model("cifar_cnn" + ("_relu3" if relu3 else ""), (3, 32, 32), _cifar_init, forward,
                 lambda batch, generators: None, ("fc1", "fc2"), ("conv1", "conv2", "conv3"))


CIFAR_CNN = cifar_cnn()


# -- Geyer's MLP ----------------------------------------------------------------------------------

def _geyer_init(g):
    """Truncated normal in [−2, 2] scaled by 1/√fan_in, no biases (docs/geyer2017.md §2)."""
    p = {}
    for name, (out_f, in_f) in {"fc1.weight": (600, 784), "fc2.weight": (100, 600), "fc3.weight": (10, 100)}.items():
        w = torch.empty(out_f, in_f)
        torch.nn.init.trunc_normal_(w, a=-2.0, b=2.0, generator=g)
        p[name] = w / math.sqrt(in_f)
    return p


def _geyer_forward(p, x, masks=None, tap=None):
    h = F.relu(_fc(p, "fc1", x.flatten(-3), tap))
    h = F.relu(_fc(p, "fc2", h, tap))
    return F.log_softmax(_fc(p, "fc3", h, tap), dim=-1)


GEYER_MLP = Model("geyer_mlp", (1, 28, 28), _geyer_init, _geyer_forward, lambda batch, generators: None,
                  ("fc1", "fc2", "fc3"), plain_mlp=True)

# -- FedHDP's networks (Aldaghri et al., Table 6; the layer sizes were lost, docs/aldaghri_fedhdp.md §1) --------

def fedhdp_mlp(hidden: int = 200, classes: int = 10) -> Model:
    """FedHDP's (F)MNIST net, Input → Flatten → FC (ReLU) → FC (softmax) (Table 6's structure).
    The hidden width was lost; 200 (the FedAvg paper's MLP width) is our assumption, a parameter."""

    def init(g):
        return _init(g, fcs=[("fc1", hidden, 784), ("fc2", classes, hidden)])

    def forward(p, x, masks=None, tap=None):
        return F.log_softmax(_fc(p, "fc2", F.relu(_fc(p, "fc1", x.flatten(-3), tap)), tap), dim=-1)

    return Model(f"fedhdp_mlp{hidden}", (1, 28, 28), init, forward, lambda batch, generators: None, ("fc1", "fc2"),
                 plain_mlp=True)


# -- the audits' model (docs/audits.md) ------------------------------------------------------------

def softmax_regression(classes: int = 10) -> Model:
    """Multinomial logistic regression on 28×28 images without bias, initialised at zero: the model of
    the white-box DP-SGD audit (``dpfl.audit.canaries``), where an image with one non-zero pixel has
    a gradient confined to that pixel's column and an all-zero image has none."""

    def init(g):
        return {"fc.weight": torch.zeros(classes, 784)}

    def forward(p, x, masks=None, tap=None):
        return F.log_softmax(_fc(p, "fc", x.flatten(-3), tap), dim=-1)

    return Model(f"softmax_regression{classes}", (1, 28, 28), init, forward, lambda batch, generators: None, ("fc",),
                 plain_mlp=True)


def _femnist_init(g):
    return _init(g, [("conv1", 32, 1, 3), ("conv2", 64, 32, 3)], [("fc1", 128, 1600), ("fc2", 62, 128)])


def _femnist_forward(p, x, masks=None, tap=None):
    h = _relu_pool(_conv2d(p, "conv1", x, tap))
    h = _relu_pool(_conv2d(p, "conv2", h, tap))
    if masks:
        h = h * masks["drop1"]                               # dropout(0.25), element-wise
    h = F.relu(_fc(p, "fc1", h.flatten(-3), tap))
    if masks:
        h = h * masks["drop2"]                               # dropout(0.5)
    return F.log_softmax(_fc(p, "fc2", h, tap), dim=-1)


def _femnist_masks(batch, generators):
    return _dropout_masks(batch, generators, drop1=((64, 5, 5), 0.25), drop2=((128,), 0.5))


#: FedHDP's FEMNIST CNN (Table 6's structure: conv → pool → conv → pool → dropout → FC → dropout →
#: FC) with TFF's EMNIST ``cnn_dropout`` sizes (32/64 filters 3×3, FC 128, dropout 0.25/0.5, 62
#: classes) — the correspondence is an assumption (docs/aldaghri_fedhdp.md §1).
FEMNIST_CNN = Model("femnist_cnn", (1, 28, 28), _femnist_init, _femnist_forward, _femnist_masks, ("fc1", "fc2"),
                    ("conv1", "conv2"))

_MODELS = {m.name: m for m in (MNIST_CNN, CIFAR_CNN, cifar_cnn(relu3=True), GEYER_MLP, fedhdp_mlp(), FEMNIST_CNN)}


def get_model(name: str) -> Model:
    """A model by name: mnist_cnn, cifar_cnn, cifar_cnn_relu3, geyer_mlp, fedhdp_mlp200, femnist_cnn."""
    if name not in _MODELS:
        raise ValueError(f"model must be one of {', '.join(_MODELS)}; got {name!r}")
    return _MODELS[name]
