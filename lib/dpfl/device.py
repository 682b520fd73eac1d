"""Where training runs, and the settings that make it repeatable there.

"One seed makes a run repeatable on one device" needs, on CUDA, deterministic kernels (cuDNN and
cuBLAS otherwise pick atomic-add algorithms whose sums depend on thread timing) and IEEE fp32
arithmetic (PyTorch runs fp32 convolutions in TF32 by default: ~1e-3 relative error, so a CUDA run
would differ from its CPU twin by more than round-off and per-sample norms would not match the sums
they clip). Compute is not the bottleneck of these small CNNs, so both cost little.

"One device" means one GPU model, one torch/CUDA/cuDNN version and these flags: CUDA random
streams depend on the number of SMs (PyTorch sizes the Philox grid by it), so :func:`describe`
records all of them with every result (``dpfl.provenance``). On a CPU the kernels torch picks follow the
SIMD level (AVX2, AVX-512), so round-off differs from one CPU model to another and grows over a run's
rounds: two x86-64 CPUs drew a twin's clients alike, yet its accuracies drifted apart (docs/zheng2021.md,
the twins). The CPU's model and torch's SIMD level are recorded too.
"""
from __future__ import annotations

import os
import platform

__all__ = ["configure", "cpu_model", "describe"]


def configure(device) -> None:
    """Deterministic kernels and IEEE fp32 on CUDA (a no-op on a CPU). Call before the first CUDA op."""
    import torch

    if torch.device(device).type != "cuda":
        return
    # cuBLAS needs a fixed workspace for deterministic results; must be set before its first call.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False          # the number of sampled clients changes every round
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)


def describe(device=None) -> dict:
    """What a result computed on ``device`` depends on: for CUDA the GPU model, its SM count, torch,
    CUDA and cuDNN versions and the precision flags; for a CPU the machine, its model and SIMD level, and torch version."""
    import torch

    from dpfl.federated import graphs

    info = {"torch": torch.__version__}
    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(dev)
        info.update(gpu=props.name, sm_count=props.multi_processor_count,
                    gpu_memory_gib=round(props.total_memory / 2 ** 30, 1), cuda=torch.version.cuda,
                    cudnn=torch.backends.cudnn.version(), cudnn_deterministic=torch.backends.cudnn.deterministic,
                    tf32=bool(torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32),
                    cuda_graphs=graphs.enabled(dev))             # the same bits (tests/test_cuda_graphs.py); recorded
    else:
        info.update(cpu=platform.machine(), cpu_model=cpu_model(), simd=torch.backends.cpu.get_cpu_capability(),
                    cores=os.cpu_count(), threads=torch.get_num_threads())
    return info


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``; "" where neither says)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return platform.processor()
