"""A chunk's local steps replayed as one CUDA graph: the same kernels, launched by one call a step.

On a GPU the engine's local step is launch-bound. Its kernels are small (FEMNIST's CNN: 20 images a client), and
there are hundreds a step: 554 operations for a FedHDP unit's step at the GPU's chunking (``dpfl.opcount``,
``benchmarks/CPU_LOG.md``, 2026-12-03). The host takes longer to launch each one than the GPU takes to run it
(Zheng's H200 rounds: ≈ 22.5 µs of wall time an operation). A CUDA graph records a step's kernels once; each
later step launches them all with one call (PyTorch's docs: "CUDA Graphs", torch.cuda.graph).

The replayed steps compute what the eager steps would, bit for bit:
- Every kernel is the one the eager step launches, in the same order.
- Parameters, optimiser state and scratch tensors are updated in place at fixed addresses.
- Each step's batch is copied into fixed buffers before the replay.
- The clients' generators are registered with the graph. A replay draws from each generator's current state
  and advances it as the eager draws would (PyTorch's graph-safe RNG: ``CUDAGraph.register_generator_state``),
  so the dropout masks and the DP noise are the same draws.

``tests/test_cuda_graphs.py`` checks both paths against each other: bit for bit on a GPU, and the orchestration
on a CPU with a stand-in for the capture.

Opt-in, ``DPFL_CUDA_GRAPHS=1``. It is an execution detail, not part of a run's key (the same bits), and
``dpfl.device.describe`` records it with every result. Until a GPU session has run that test
(``benchmarks/GPU_QUEUE.md``), it stays off by default.
"""
from __future__ import annotations

import torch

from dpfl.runs import env_flag

__all__ = ["enabled", "warm_capture", "run_steps"]

#: the environment variable that turns graphs on (a CUDA device only)
FLAG = "DPFL_CUDA_GRAPHS"


def enabled(device) -> bool:
    """Whether local steps on ``device`` replay a CUDA graph: a CUDA device and ``DPFL_CUDA_GRAPHS`` set."""
    return torch.device(device).type == "cuda" and env_flag(FLAG)


def warm_capture(body, generators):
    """Run ``body()`` once, then return a function that runs it again by replaying a CUDA graph of its kernels.

    The first run is eager, on the side stream the capture will use. It warms that stream up: cuBLAS and cuDNN
    create their handles and workspaces there, which a capture may not do. The capture itself runs nothing.
    ``generators`` (the clients' ``torch.Generator``s that ``body`` draws from) are registered with the graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        body()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    for g in generators:
        graph.register_generator_state(g)
    with torch.cuda.graph(graph, stream=stream):
        body()
    return graph.replay


def run_steps(step, inputs, steps: int, generators, graph: bool) -> None:
    """Local steps 0 … ``steps`` − 1: ``step(batch)`` runs one step on ``batch = inputs(k)`` ({name: tensor}).

    Eager (``graph`` false, or a single step): ``step(inputs(k))`` for each k. With ``graph``: step 0 runs eagerly on
    fixed copies of its batch, then its kernels are captured (:func:`warm_capture`); each later step copies its batch
    into those copies and replays the graph."""
    if not graph or steps < 2:
        for k in range(steps):
            step(inputs(k))
        return
    fixed = {name: t.clone() for name, t in inputs(0).items()}
    replay = warm_capture(lambda: step(fixed), generators)
    for k in range(1, steps):
        for name, t in inputs(k).items():
            fixed[name].copy_(t)
        replay()
