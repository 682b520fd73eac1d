"""dpfl against the simulator a user would pick instead (pfl-research), on one workload, side by side.

The workload (issue: engine speed against peers): Geyer's MLP 784-600-100-10 without biases,
MNIST label shards (K = 100 clients of 600 images, 2 shards of 300 each), 1 local epoch of 10
batches of 60, plain SGD at 0.1, client-level DP-FedAvg with whole-model clipping at S = 1 and
noise multiplier 1, m of K clients drawn without replacement each round; 6 rounds, the median
seconds of rounds 2–6, the process's peak RSS and the test accuracy after round 6 (all frameworks
start from the same weights and see the same split, so they do the same work).

    python benchmarks/peers.py prepare OUT.npz          # with dpfl: the split and initial weights
    python benchmarks/peers.py dpfl OUT.npz M           # each prints one JSON line
    python benchmarks/peers.py pfl OUT.npz M            # in a virtual environment with pfl 0.6.0

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
DATA_PATH: list = []     # the prepared .npz, for Flower's client processes
LOADED: dict = {}        # its arrays, in each Flower worker process


def prepare(path: str) -> None:
    """The split (``dpfl.data.partition.label_shards``, seed 0) and Geyer's initial weights (seed 0)."""
    from dpfl.data import load_dataset, partition
    from dpfl.models import GEYER_MLP

    train, test = load_dataset("mnist", "train"), load_dataset("mnist", "test")
    rng = np.random.default_rng(0)
    clients = [rng.permutation(c) for c in partition.label_shards(train.y.numpy(), K, 2, N // 2, rng)]  # shards mixed:
    # pfl walks a client's data in stored order (dpfl draws a permutation per epoch)
    x = train.to_float().reshape(len(train.y), -1).numpy()
    weights = GEYER_MLP.init(torch.Generator().manual_seed(0))
    np.savez(path, x=np.stack([x[c] for c in clients]), y=np.stack([train.y.numpy()[c] for c in clients]),
             test_x=test.to_float().reshape(len(test.y), -1).numpy(), test_y=test.y.numpy(),
             **{k.replace(".", "_"): v.numpy() for k, v in weights.items()})


def _report(name: str, m: int, seconds: list, accuracy: float, peak_rss_mib: float | None = None) -> None:
    if peak_rss_mib is None:
        peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"framework": name, "m": m, "s_per_round": float(np.median(seconds[1:])),
                      "peak_rss_mib": peak_rss_mib,
                      "accuracy": accuracy, "threads": torch.get_num_threads()}))


def run_dpfl(data, m: int) -> None:
    from dpfl.data import FederatedDataset
    from dpfl.federated.client_dp import ClientDPConfig, ClientLevelDP
    from dpfl.federated.local import LocalConfig
    from dpfl.federated.loop import run
    from dpfl.federated.sampling import FixedClients
    from dpfl.models import GEYER_MLP

    x = torch.from_numpy(data["x"]).reshape(K * N, 1, 28, 28)
    clients = [np.arange(k * N, (k + 1) * N) for k in range(K)]
    tests = np.array_split(np.arange(len(data["test_y"])), K)         # equal parts: their mean is the test accuracy
    fd = FederatedDataset(x, torch.from_numpy(data["y"]).reshape(-1), torch.from_numpy(data["test_x"]).reshape(-1, 1, 28, 28),
                          torch.from_numpy(data["test_y"]), clients, tests, "mnist")
    cfg = ClientDPConfig(rounds=ROUNDS, batch_size=N // BATCHES, local_steps=BATCHES, sampler=FixedClients(m),
                         local=LocalConfig(optimizer="sgd", lr=LR), noise_multiplier=Z, clip=CLIP, per_layer=False,
                         batch_sampling="shuffle")
    rows = run(ClientLevelDP(GEYER_MLP, cfg), fd, progress=False)
    _report("dpfl", m, list(rows.seconds), float(rows.acc_global.iloc[-1]))


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
        accuracy = float((net(torch.from_numpy(data["test_x"])).argmax(-1).numpy() == data["test_y"]).mean())
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


def run_flower(data, m: int, cpus_per_client: float) -> None:
    """Flower's simulation runtime (Ray backend): FedAvg wrapped in its server-side fixed-clipping DP
    strategy; ``cpus_per_client`` is Flower's ``client_resources`` (its default: 2 CPUs per client)."""
    import torch.nn.functional as F
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg
    from flwr.simulation import run_simulation

    names = [f"fc{i}.weight" for i in (1, 2, 3)]

    def forward(w, x):
        return F.linear(F.relu(F.linear(F.relu(F.linear(x, w[0])), w[1])), w[2])

    client = ClientApp()

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        torch.manual_seed(int(context.node_config["partition-id"]) * 1000 + int(msg.content["config"]["server-round"]))
        path = msg.content["config"]["data"]
        if path not in LOADED:                    # once per worker process, as a Flower user would
            LOADED[path] = {key: torch.from_numpy(np.load(path)[key]) for key in ("x", "y")}
        k = int(context.node_config["partition-id"])
        x, y = LOADED[path]["x"][k], LOADED[path]["y"][k].long()
        state = msg.content["arrays"].to_torch_state_dict()
        w = [state[n].clone().requires_grad_(True) for n in names]
        opt = torch.optim.SGD(w, lr=LR)
        for batch in torch.randperm(N).split(N // BATCHES):
            opt.zero_grad()
            F.cross_entropy(forward(w, x[batch]), y[batch]).backward()
            opt.step()
        reply = RecordDict({"arrays": ArrayRecord({n: v.detach() for n, v in zip(names, w)}),
                            "metrics": MetricRecord({"num-examples": N})})
        return Message(content=reply, reply_to=msg)

    server = ServerApp()
    seconds, accuracy, memory = [], [np.nan], [0.0]
    clock = [None]

    def evaluate(server_round: int, arrays: ArrayRecord):
        now = time.perf_counter()
        if clock[0] is not None:
            seconds.append(now - clock[0])
        clock[0] = now
        memory[0] = max(memory[0], _tree_rss_mib())
        if server_round == ROUNDS:
            state = arrays.to_torch_state_dict()
            with torch.no_grad():
                pred = forward([state[n] for n in names], torch.from_numpy(data["test_x"])).argmax(-1)
            accuracy[0] = float((pred.numpy() == data["test_y"]).mean())
        return MetricRecord({})

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = DifferentialPrivacyServerSideFixedClipping(
            FedAvg(fraction_train=m / K, fraction_evaluate=0.0, min_available_nodes=K, min_train_nodes=m),
            noise_multiplier=Z, clipping_norm=CLIP, num_sampled_clients=m)
        initial = ArrayRecord({n: torch.from_numpy(data[n.replace(".", "_")]) for n in names})
        strategy.start(grid=grid, initial_arrays=initial, num_rounds=ROUNDS, evaluate_fn=evaluate,
                       train_config=ConfigRecord({"data": DATA_PATH[0]}))

    run_simulation(server_app=server, client_app=client, num_supernodes=K,
                   backend_config={"client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0}})
    _report("flower", m, seconds, accuracy[0], peak_rss_mib=memory[0])


if __name__ == "__main__":
    torch.set_num_threads(torch.get_num_threads())
    what, path = sys.argv[1], sys.argv[2]
    DATA_PATH.append(str(Path(path).resolve()))
    if what == "prepare":
        prepare(path)
    elif what.startswith("flower"):          # flower-<CPUs per client>
        run_flower(np.load(path), int(sys.argv[3]), float(what.split("-")[1]))
    else:
        {"dpfl": run_dpfl, "pfl": run_pfl}[what](np.load(path), int(sys.argv[3]))
