"""dpfl against the simulator a user would pick instead (pfl-research), on one workload, side by side.

The workload (issue: engine speed against peers): Geyer's MLP 784-600-100-10 without biases,
MNIST label shards (K = 100 clients of 600 images, 2 shards of 300 each), 1 local epoch of 10
batches of 60, plain SGD at 0.1, client-level DP-FedAvg with whole-model clipping at S = 1 and
noise multiplier 1, m of K clients drawn without replacement each round; 6 rounds, the median
seconds of rounds 2–6, the process's peak RSS and the test accuracy after round 6 (all frameworks
start from the same weights and see the same split, so they do the same work). ``dpfl`` evaluates the
global model after the last round only, as the peers do here (their accuracy is computed after the
timed rounds); ``dpfl-eval1`` evaluates it on the 10 000 test images every round, its default.

The record-level workload (``*-records``): Zheng et al.'s MnistCNN trained by DP-SGD inside the
clients — per-sample clipping at C = 1, Gaussian noise of multiplier 2 (Zheng's σ = 1), batches of 16,
37 steps (one epoch of 600) with Adam at 1e-3 — FedAvg over the first M clients of the same split,
all M every round (dpfl: PriFedSync with α = η = 1 and p = 1, which is FedAvg here); 4 rounds, the
median of rounds 2–4, the accuracy on 2000 test images after round 4. Flower's clients run Opacus
1.6 (``GradSampleModule`` + ``DPOptimizer``), a fresh Adam each round (Flower clients are stateless
unless given state); dpfl's PriFedSync keeps each client's Adam moments across rounds, as Zheng's code
does — the same arithmetic per step.

    python benchmarks/peers.py prepare OUT.npz          # with dpfl: the split and initial weights
    python benchmarks/peers.py dpfl OUT.npz M           # each prints one JSON line
    python benchmarks/peers.py pfl OUT.npz M            # in a virtual environment with pfl 0.6.0
    python benchmarks/peers.py dpfl-records OUT.npz M   # the record-level workload
    python benchmarks/peers.py flower-records-1 OUT.npz M   # with flwr 1.41 and opacus 1.6, 1 CPU per client

``make bench`` (``benchmarks/run_peers.py``) creates the peers' environments and runs them all.
Only torch and numpy are imported at the top: the peers' environments hold no dpfl.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

K, N, ROUNDS, BATCHES, LR, CLIP, Z = 100, 600, 6, 10, 0.1, 1.0, 1.0
#: the record-level workload: rounds, batch size, steps (one epoch), Adam's rate, DP-SGD's multiplier, test images
R_ROUNDS, R_BATCH, R_STEPS, R_LR, R_Z, R_TEST = 4, 16, 37, 1e-3, 2.0, 2000
#: where dpfl trains: CUDA when there is one, as pfl (its ``get_default_device``); ``DPFL_BENCH_DEVICE`` overrides
DEVICE = os.environ.get("DPFL_BENCH_DEVICE", "cuda" if torch.cuda.is_available() else "cpu")
DATA_PATH: list = []     # the prepared .npz, for Flower's client processes
LOADED: dict = {}        # its arrays, in each Flower worker process


class TorchMnistCNN(torch.nn.Module):
    """Zheng et al.'s MnistCNN as the authors wrote it (an nn.Module, which Opacus wraps): the peers'
    record-level clients and ``benchmarks/engine.py``'s Opacus baseline."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.fc1, self.fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)
        self.drop1, self.drop2 = nn.Dropout2d(0.25), nn.Dropout(0.5)

    def forward(self, x):
        F = torch.nn.functional
        h = self.drop1(F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2))
        return F.log_softmax(self.fc2(self.drop2(F.relu(self.fc1(h.flatten(1))))), dim=-1)


def prepare(path: str) -> None:
    """The split (``dpfl.data.partition.label_shards``, seed 0) and Geyer's initial weights (seed 0)."""
    from dpfl.data import load_dataset, partition
    from dpfl.models import GEYER_MLP, MNIST_CNN

    train, test = load_dataset("mnist", "train"), load_dataset("mnist", "test")
    rng = np.random.default_rng(0)
    clients = [rng.permutation(c) for c in partition.label_shards(train.y.numpy(), K, 2, N // 2, rng)]  # shards mixed:
    # pfl walks a client's data in stored order (dpfl draws a permutation per epoch)
    x = train.to_float().reshape(len(train.y), -1).numpy()
    weights = GEYER_MLP.init(torch.Generator().manual_seed(0))
    cnn = MNIST_CNN.init(torch.Generator().manual_seed(0))
    np.savez(path, x=np.stack([x[c] for c in clients]), y=np.stack([train.y.numpy()[c] for c in clients]),
             test_x=test.to_float().reshape(len(test.y), -1).numpy(), test_y=test.y.numpy(),
             **{k.replace(".", "_"): v.numpy() for k, v in weights.items()},
             **{"cnn_" + k.replace(".", "_"): v.numpy() for k, v in cnn.items()})


def _report(name: str, m: int, seconds: list, accuracy: float, peak_rss_mib: float | None = None) -> None:
    if peak_rss_mib is None:
        peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"framework": name, "m": m, "s_per_round": float(np.median(seconds[1:])),
                      "peak_rss_mib": peak_rss_mib,
                      "accuracy": accuracy, "threads": torch.get_num_threads()}))


def _dpfl_data(data, clients: int, test_images: int):
    """The first ``clients`` clients of the split as a dpfl FederatedDataset; the first ``test_images``
    test images dealt in equal parts (their mean accuracy is the accuracy on all of them)."""
    from dpfl.data import FederatedDataset

    x = torch.from_numpy(data["x"][:clients]).reshape(clients * N, 1, 28, 28)
    tests = np.array_split(np.arange(test_images), clients)
    return FederatedDataset(x, torch.from_numpy(data["y"][:clients]).reshape(-1),
                            torch.from_numpy(data["test_x"][:test_images]).reshape(-1, 1, 28, 28),
                            torch.from_numpy(data["test_y"][:test_images]), [np.arange(k * N, (k + 1) * N)
                                                                              for k in range(clients)], tests, "mnist")


def run_dpfl(data, m: int, eval_every: int = ROUNDS) -> None:
    from dpfl.federated.client_dp import ClientDPConfig, ClientLevelDP
    from dpfl.federated.local import LocalConfig
    from dpfl.federated.loop import run
    from dpfl.federated.sampling import FixedClients
    from dpfl.models import GEYER_MLP

    cfg = ClientDPConfig(rounds=ROUNDS, batch_size=N // BATCHES, local_steps=BATCHES, sampler=FixedClients(m),
                         local=LocalConfig(optimizer="sgd", lr=LR), noise_multiplier=Z, clip=CLIP, per_layer=False,
                         batch_sampling="shuffle", eval_every=eval_every)
    rows = run(ClientLevelDP(GEYER_MLP, cfg), _dpfl_data(data, K, len(data["test_y"])), progress=False, device=DEVICE)
    _report("dpfl" if eval_every == ROUNDS else "dpfl-eval1", m, list(rows.seconds), float(rows.acc_global.iloc[-1]))


def run_dpfl_records(data, m: int) -> None:
    """The record-level workload: PriFedSync with α = η = 1 over m clients, all m every round (FedAvg)."""
    from dpfl.federated.engine import PriFedSync, RoundConfig
    from dpfl.federated.local import LocalConfig
    from dpfl.federated.loop import run
    from dpfl.federated.sampling import PoissonClients
    from dpfl.models import MNIST_CNN

    cfg = RoundConfig(rounds=R_ROUNDS, batch_size=R_BATCH, local_steps=R_STEPS, sampler=PoissonClients(1.0),
                      local=LocalConfig(optimizer="adam", lr=R_LR, dp=True, clip=CLIP, noise_multiplier=R_Z),
                      alpha=1.0, eta=1.0, eval_every=R_ROUNDS)
    rows = run(PriFedSync(MNIST_CNN, cfg), _dpfl_data(data, m, R_TEST), progress=False,  # seed 0: prepare's weights
               device=DEVICE)
    _report("dpfl-records", m, list(rows.seconds), float(rows.acc_global.iloc[-1]))


def run_pfl(data, m: int) -> None:
    import torch.nn as nn
    import torch.nn.functional as F
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.aggregate.weighting import WeightByUser
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Metrics, Weighted
    from pfl.model.pytorch import PyTorchModel
    from pfl.privacy import CentrallyAppliedPrivacyMechanism, GaussianMechanism

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.ModuleList([nn.Linear(784, 600, bias=False), nn.Linear(600, 100, bias=False),
                                     nn.Linear(100, 10, bias=False)])
            for i, layer in enumerate(self.fc, 1):
                layer.weight.data.copy_(torch.from_numpy(data[f"fc{i}_weight"]))

        def forward(self, x):
            return self.fc[2](F.relu(self.fc[1](F.relu(self.fc[0](x)))))

        def loss(self, x, y, eval=False):
            return F.cross_entropy(self(x), y)

        @torch.no_grad()
        def metrics(self, x, y, eval=False):
            correct = (self(x).argmax(-1) == y).sum().item()
            return {"accuracy": Weighted(correct, len(y))}

    class WithoutReplacement:
        """m distinct clients per round: pfl draws a cohort one user at a time, so hand out a fresh
        permutation's first m, one by one (pfl has no such sampler)."""

        def __init__(self):
            self.rng, self.queue = np.random.default_rng(0), []

        def __call__(self):
            if not self.queue:
                self.queue = list(self.rng.permutation(K)[:m])
            return int(self.queue.pop())

    class Clock(TrainingProcessCallback):
        def __init__(self):
            self.seconds, self.last = [], None

        def on_train_begin(self, *, model):
            self.last = time.perf_counter()
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            now = time.perf_counter()
            self.seconds.append(now - self.last)
            self.last = now
            return False, Metrics()

    xs, ys = data["x"], data["y"]
    train = FederatedDataset(lambda u: Dataset((torch.from_numpy(xs[u]), torch.from_numpy(ys[u]).long())),
                             WithoutReplacement(), user_id_to_weight={k: N for k in range(K)})
    val = FederatedDataset(lambda u: Dataset((torch.from_numpy(data["test_x"]), torch.from_numpy(data["test_y"]).long())),
                           lambda: 0)
    net = MLP()
    model = PyTorchModel(net, local_optimizer_create=torch.optim.SGD, central_optimizer=torch.optim.SGD(net.parameters(), 1.0))
    mechanism = CentrallyAppliedPrivacyMechanism(GaussianMechanism(clipping_bound=CLIP, relative_noise_stddev=Z))
    clock = Clock()
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(central_num_iterations=ROUNDS, evaluation_frequency=10 ** 6,
                                           train_cohort_size=m, val_cohort_size=0),
        backend=SimulatedBackend(train, val, postprocessors=[WeightByUser(), mechanism]), model=model,
        model_train_params=NNTrainHyperParams(local_learning_rate=LR, local_num_epochs=1, local_batch_size=N // BATCHES),
        model_eval_params=NNEvalHyperParams(local_batch_size=1000), callbacks=[clock])
    with torch.no_grad():
        accuracy = float((net.cpu()(torch.from_numpy(data["test_x"])).argmax(-1).numpy() == data["test_y"]).mean())
    _report("pfl", m, clock.seconds, accuracy)


def _tree_rss_mib() -> float:
    """Resident memory of this process and all its descendants (Ray's raylet, workers), from /proc."""
    parents, rss = {}, {}
    for stat in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in stat.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        pid = int(stat.parent.name)
        parents[pid] = int(fields["PPid"])
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0]) / 1024
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier and pid not in tree]
        tree.update(frontier)
    return sum(rss.get(pid, 0.0) for pid in tree)


def _flower(client, strategy, initial: dict, forward, data, nodes: int, rounds: int, test: int,
            cpus_per_client: float) -> tuple:
    """Flower's simulation runtime (Ray backend): ``strategy`` over ``nodes`` supernodes running
    ``client``, from the weights ``initial``; each round timed by the server-side evaluation hook,
    which also records the peak memory of the whole process tree and the accuracy of the last round's
    model (``forward(state, x)``) on the first ``test`` test images. Returns (seconds, accuracy, peak
    RSS in MiB)."""
    from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    server = ServerApp()
    seconds, accuracy, memory, clock = [], [np.nan], [0.0], [None]

    def evaluate(server_round: int, arrays: ArrayRecord):
        now = time.perf_counter()
        if clock[0] is not None:
            seconds.append(now - clock[0])
        clock[0] = now
        memory[0] = max(memory[0], _tree_rss_mib())
        if server_round == rounds:
            with torch.no_grad():
                pred = forward(arrays.to_torch_state_dict(), torch.from_numpy(data["test_x"][:test])).argmax(-1)
            accuracy[0] = float((pred.numpy() == data["test_y"][:test]).mean())
        return MetricRecord({})

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy.start(grid=grid, initial_arrays=ArrayRecord(initial), num_rounds=rounds, evaluate_fn=evaluate,
                       train_config=ConfigRecord({"data": DATA_PATH[0]}))

    run_simulation(server_app=server, client_app=client, num_supernodes=nodes,
                   backend_config={"client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0}})
    return seconds, accuracy[0], memory[0]


def _client_data(msg, context):
    """This client's (x, y), the prepared file loaded once per worker process (as a Flower user would)."""
    path = msg.content["config"]["data"]
    if path not in LOADED:
        LOADED[path] = {key: torch.from_numpy(np.load(path)[key]) for key in ("x", "y")}
    k = int(context.node_config["partition-id"])
    return LOADED[path]["x"][k], LOADED[path]["y"][k].long()


def run_flower(data, m: int, cpus_per_client: float) -> None:
    """Client-level DP: FedAvg wrapped in Flower's server-side fixed-clipping DP strategy, K = 100
    supernodes of which m train each round; ``cpus_per_client`` is Flower's ``client_resources``
    (its default: 2 CPUs per client)."""
    import torch.nn.functional as F
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg

    names = [f"fc{i}.weight" for i in (1, 2, 3)]

    def forward(state, x):
        w = [state[n] for n in names]
        return F.linear(F.relu(F.linear(F.relu(F.linear(x, w[0])), w[1])), w[2])

    client = ClientApp()

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        torch.manual_seed(int(context.node_config["partition-id"]) * 1000 + int(msg.content["config"]["server-round"]))
        x, y = _client_data(msg, context)
        state = msg.content["arrays"].to_torch_state_dict()
        w = [state[n].clone().requires_grad_(True) for n in names]
        opt = torch.optim.SGD(w, lr=LR)
        for batch in torch.randperm(N).split(N // BATCHES):
            opt.zero_grad()
            F.cross_entropy(forward(dict(zip(names, w)), x[batch]), y[batch]).backward()
            opt.step()
        reply = RecordDict({"arrays": ArrayRecord({n: v.detach() for n, v in zip(names, w)}),
                            "metrics": MetricRecord({"num-examples": N})})
        return Message(content=reply, reply_to=msg)

    strategy = DifferentialPrivacyServerSideFixedClipping(
        FedAvg(fraction_train=m / K, fraction_evaluate=0.0, min_available_nodes=K, min_train_nodes=m),
        noise_multiplier=Z, clipping_norm=CLIP, num_sampled_clients=m)
    initial = {n: torch.from_numpy(data[n.replace(".", "_")]) for n in names}
    seconds, accuracy, memory = _flower(client, strategy, initial, forward, data, K, ROUNDS, len(data["test_y"]),
                                        cpus_per_client)
    _report("flower", m, seconds, accuracy, peak_rss_mib=memory)


def run_flower_records(data, m: int, cpus_per_client: float) -> None:
    """The record-level workload in Flower: each of the m clients trains the MnistCNN with Opacus
    DP-SGD from the global model; plain FedAvg of the m models every round."""
    import torch.nn.functional as F
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp.strategy import FedAvg

    def forward(state, x):
        net = TorchMnistCNN().eval()
        net.load_state_dict(state)
        return net(x.reshape(-1, 1, 28, 28))

    client = ClientApp()

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        torch.manual_seed(int(context.node_config["partition-id"]) * 1000 + int(msg.content["config"]["server-round"]))
        x, y = _client_data(msg, context)
        x = x.reshape(-1, 1, 28, 28)
        net = TorchMnistCNN()
        net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        net = GradSampleModule(net)
        opt = DPOptimizer(torch.optim.Adam(net.parameters(), lr=R_LR), noise_multiplier=R_Z, max_grad_norm=CLIP,
                          expected_batch_size=R_BATCH)
        for batch in torch.randperm(N)[:R_STEPS * R_BATCH].split(R_BATCH):
            opt.zero_grad()
            F.nll_loss(net(x[batch]), y[batch]).backward()
            opt.step()
        state = {k.removeprefix("_module."): v.detach() for k, v in net.state_dict().items()}
        reply = RecordDict({"arrays": ArrayRecord(state), "metrics": MetricRecord({"num-examples": N})})
        return Message(content=reply, reply_to=msg)

    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=m, min_train_nodes=m)
    initial = {k: torch.from_numpy(data["cnn_" + k.replace(".", "_")]) for k in
               ("conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight", "fc1.bias", "fc2.weight",
                "fc2.bias")}
    seconds, accuracy, memory = _flower(client, strategy, initial, forward, data, m, R_ROUNDS, R_TEST,
                                        cpus_per_client)
    _report("flower-records", m, seconds, accuracy, peak_rss_mib=memory)


if __name__ == "__main__":
    torch.set_num_threads(torch.get_num_threads())
    what, path = sys.argv[1], sys.argv[2]
    DATA_PATH.append(str(Path(path).resolve()))
    if what == "prepare":
        prepare(path)
    elif what.startswith("flower-records"):  # flower-records-<CPUs per client>
        run_flower_records(np.load(path), int(sys.argv[3]), float(what.split("-")[2]))
    elif what.startswith("flower"):          # flower-<CPUs per client>
        run_flower(np.load(path), int(sys.argv[3]), float(what.split("-")[1]))
    elif what == "dpfl-eval1":
        run_dpfl(np.load(path), int(sys.argv[3]), eval_every=1)
    else:
        {"dpfl": run_dpfl, "pfl": run_pfl, "dpfl-records": run_dpfl_records}[what](np.load(path), int(sys.argv[3]))
