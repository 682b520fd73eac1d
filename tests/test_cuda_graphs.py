"""dpfl.federated.graphs: local steps replayed as one CUDA graph compute what the eager steps compute, bit for bit.

On a CPU (CI) the capture is replaced by a stand-in that runs the step again: this checks the orchestration (the
first step eager, each later step's batch copied into the fixed buffers before its replay, one capture a chunk).
On a GPU (``DPFL_TEST_DEVICE=cuda``, ``benchmarks/gpu_session.sh``) the real graphs run, with the clients'
generators registered, under the settings the runs use (``dpfl.device.configure``)."""
import pytest
import torch

from dpfl.device import configure, describe
from dpfl.federated import graphs
from dpfl.federated.local import LocalConfig, client_generators, init_state, local_train
from dpfl.models import FEMNIST_CNN, MNIST_CNN
from tests_support import device_under_test

DEVICE = device_under_test()

#: (model, LocalConfig, per-client λ of Ditto's proximal term or None): DP-SGD with Adam, dropout and noise; plain
#: SGD with dropout and a λ per client (Ditto's sets of λ in one call)
CASES = {"mnist-dp-adam": (MNIST_CNN, LocalConfig(dp=True, noise_multiplier=1.0, lr=1e-3), None),
         "femnist-ditto-sgd": (FEMNIST_CNN, LocalConfig(optimizer="sgd", lr=0.05), [0.0, 0.5, 2.0, 0.5])}


def _train(name, steps, chunk, calls=2):
    """``calls`` successive ``local_train`` calls of case ``name`` on DEVICE, each from the last one's parameters and
    optimiser state, with the same generators (as a FedHDP round's global update and its Ditto pass share them);
    returns (params, state, the generators' states after)."""
    model, cfg, lams = CASES[name]
    m = 4
    g = torch.Generator().manual_seed(0)
    init = {k: v.to(DEVICE) for k, v in model.init(g).items()}
    params = {k: v.unsqueeze(0) + 0.01 * torch.randn(m, *v.shape, generator=g).to(DEVICE) for k, v in init.items()}
    x = torch.randn(m, steps, 6, *model.input_shape, generator=g).to(DEVICE)
    y = torch.randint(0, 10, (m, steps, 6), generator=g).to(DEVICE)
    gens = client_generators(0, 1, range(m), device=DEVICE)
    state = init_state(params, cfg)
    for _ in range(calls):
        params, state = local_train(model, cfg, params, state, x, y, gens, chunk=chunk, anchor=init if lams else None,
                                    prox=lams)
    return params, state, [gen.get_state() for gen in gens]


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(u, v) for u, v in zip(a, b))
    return torch.equal(a, b)


@pytest.mark.parametrize("chunk", [4, 2])
@pytest.mark.parametrize("name", list(CASES))
def test_the_orchestration_replays_each_step_on_its_own_batch(monkeypatch, name, chunk):
    """With a stand-in capture (runs the step, returns it as the "replay"), the graph path gives the eager path's
    bits: so each replay reads its own step's batch, and nothing runs twice or is skipped. One capture a chunk and
    call, ``steps`` − 1 replays each."""
    eager = _train(name, 3, chunk)
    captures, replays = [], []

    def stand_in(body, generators):
        captures.append(len(generators))
        body()

        def replay():
            replays.append(1)
            body()
        return replay

    monkeypatch.setattr(graphs, "enabled", lambda device: True)
    monkeypatch.setattr(graphs, "warm_capture", stand_in)
    assert _equal(_train(name, 3, chunk), eager)
    assert captures == [chunk] * (2 * 4 // chunk) and len(replays) == 2 * (2 * 4 // chunk)
    captures.clear()
    _train(name, 1, chunk)                       # a single step: nothing to replay, no capture
    assert captures == []


def test_a_replay_that_kept_the_first_batch_would_be_caught(monkeypatch):
    """The comparison above can fail: a run_steps that forgot to copy the later batches differs."""
    eager = _train("femnist-ditto-sgd", 3, 4)

    def stale_run_steps(step, inputs, steps, generators, graph):
        first = inputs(0)
        for _ in range(steps):
            step(first)

    monkeypatch.setattr(graphs, "run_steps", stale_run_steps)
    assert not _equal(_train("femnist-ditto-sgd", 3, 4), eager)


def test_graphs_are_off_unless_asked_for_and_on_a_gpu_only(monkeypatch):
    monkeypatch.delenv(graphs.FLAG, raising=False)
    assert not graphs.enabled("cuda") and not graphs.enabled("cpu")
    monkeypatch.setenv(graphs.FLAG, "1")
    assert graphs.enabled("cuda") and not graphs.enabled("cpu")


@pytest.mark.skipif(DEVICE != "cuda", reason="real CUDA graphs: DPFL_TEST_DEVICE=cuda (a GPU session)")
@pytest.mark.parametrize("chunk", [4, 2])
@pytest.mark.parametrize("name", list(CASES))
def test_cuda_graphs_give_the_eager_bits(monkeypatch, name, chunk):
    """On the GPU: parameters, optimiser state and every client's generator state after two calls are equal bit
    for bit with and without graphs (the generators: the replays advanced them as the eager draws do, so the
    second call, with a graph of its own, draws alike). The provenance records that graphs were on."""
    configure(DEVICE)
    monkeypatch.delenv(graphs.FLAG, raising=False)
    eager = _train(name, 5, chunk)
    monkeypatch.setenv(graphs.FLAG, "1")
    assert describe(DEVICE)["cuda_graphs"] is True
    assert _equal(_train(name, 5, chunk), eager)
