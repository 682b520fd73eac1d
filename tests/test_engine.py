"""dpfl.federated: samplers, elastic averaging, the round loop (convergence, resume, chunking)."""
import numpy as np
import pytest
import torch

from dpfl.accounting import gdp
from dpfl.data import FederatedDataset, load_dataset, partition
from dpfl.federated import server
from dpfl.federated.engine import PriFedSync, RoundConfig
from dpfl.federated.loop import run
from dpfl.federated.local import LocalConfig
from dpfl.federated.sampling import FixedClients, PoissonClients
from dpfl.federated.schedule import LearningRate
from dpfl.models import GEYER_MLP, MNIST_CNN
from tests_support import shared_root

torch.set_num_threads(2)


def test_poisson_sampling_frequencies_and_redraw():
    rng = np.random.default_rng(0)
    s = PoissonClients(0.3)
    counts = np.zeros(50)
    for _ in range(4000):
        counts[s.sample(50, rng)] += 1
    assert np.allclose(counts / 4000, 0.3, atol=0.04)
    tiny = PoissonClients(0.001)
    assert all(tiny.sample(5, rng).size >= 1 for _ in range(200))          # never empty
    ev = s.event(1.5)
    assert (ev.q, ev.sigma, ev.sampling) == (0.3, 1.5, "poisson")


def test_fixed_sampling_without_replacement_and_schedule():
    rng = np.random.default_rng(1)
    s = FixedClients(30, schedule=(20, 30, 40))
    for t in range(5):
        chosen = s.sample(100, rng, t)
        assert len(np.unique(chosen)) == len(chosen) == (20, 30, 40, 40, 40)[t]
    assert s.event(1.0, 100, 0).q == 0.2 and s.event(1.0, 100, 0).sampling == "without_replacement"
    with pytest.raises(ValueError, match="exceeds the number of clients"):
        FixedClients(200).sample(100, rng)
    with pytest.raises(ValueError, match="m = 40 exceeds the number of clients K = 35"):
        s.check(35)                                   # the schedule's largest m_t, before any round runs
    PoissonClients(0.5).check(1)                      # any K fits Poisson sampling
    with pytest.raises(ValueError, match="^p"):
        PoissonClients(0.0)


def test_elastic_averaging_moves_only_selected_clients():
    local = {"w": torch.tensor([[0.0], [2.0], [10.0]])}
    glob = {"w": torch.tensor([5.0])}
    new_global, new_local = server.elastic(glob, local, [0, 1], alpha=0.1, eta=1.0)
    assert new_global["w"].item() == pytest.approx(1.0)                    # mean of selected
    assert new_local["w"][:, 0].tolist() == pytest.approx([0.1, 1.9, 10.0])
    half, _ = server.elastic(glob, local, [0, 1], alpha=0.1, eta=0.5)
    assert half["w"].item() == pytest.approx(3.0)
    assert server.fedavg(local)["w"].item() == pytest.approx(4.0)


def test_convergence_on_real_mnist_shards(mnist_shards):
    """Non-private and DP-SGD clients learn well above chance in 3 rounds (Geyer's MLP, for speed).
    Chance: ≈ 0.3 on a client's own 3–4 labels (local), 0.1 over 10 classes (global)."""
    runs = {
        "non-private": (LocalConfig(optimizer="adam", lr=1e-3), 16, 0.8, 0.4),
        # z = 1 (Zheng's σ = 0.5) with B = 32: at σ = 1, B = 16 the per-coordinate noise 0.125 needs
        # Zheng's ~3500 steps, not 36, to rise above chance.
        "dp-sgd": (LocalConfig(optimizer="adam", lr=1e-3, dp=True, clip=1.0, noise_multiplier=1.0), 32, 0.45, 0.2),
    }
    for name, (local, batch, min_local, min_global) in runs.items():
        cfg = RoundConfig(rounds=3, batch_size=batch, local_steps=12, sampler=PoissonClients(1.0), local=local,
                          seed=0, eval_every=3)
        m = run(PriFedSync(GEYER_MLP, cfg), mnist_shards, progress=False)
        assert m["acc_stored_local"].iloc[-1] > min_local, name
        assert m["acc_global"].iloc[-1] > min_global, name
        if local.dp:
            assert m["mu_max_clt"].iloc[-1] == pytest.approx(float(gdp.clt_mu(0.5, 32, 600, 36)))


def test_resume_is_exact_and_chunking_does_not_matter(mnist_shards, tmp_path):
    base = dict(batch_size=8, local_steps=4, sampler=PoissonClients(0.5), seed=3,
                local=LocalConfig(optimizer="adam", dp=True, noise_multiplier=2.0))
    full = run(PriFedSync(GEYER_MLP, RoundConfig(rounds=4, **base)), mnist_shards, progress=False)
    ckpt = tmp_path / "run.pt"
    run(PriFedSync(GEYER_MLP, RoundConfig(rounds=2, checkpoint_every=2, **base)), mnist_shards, checkpoint=ckpt, progress=False)
    resumed = run(PriFedSync(GEYER_MLP, RoundConfig(rounds=4, checkpoint_every=2, **base)), mnist_shards, checkpoint=ckpt,
                    progress=False)
    cols = [c for c in full.columns if c != "seconds"]
    assert full[cols].equals(resumed[cols])
    chunked = run(PriFedSync(GEYER_MLP, RoundConfig(rounds=4, chunk=1, **base)), mnist_shards, progress=False)
    np.testing.assert_allclose(chunked[cols].to_numpy(dtype=float), full[cols].to_numpy(dtype=float), rtol=0, atol=1e-6)


def test_per_client_step_lr_stop_at_target_and_augmentation(mnist_shards, tmp_path):
    base = dict(batch_size=8, local_steps=3, seed=1, local=LocalConfig(optimizer="adam", lr=1e-3))
    # StepLR(1, 0.5) per client epoch: with every client in every round, round t runs at lr·0.5^(t−1)
    m = run(PriFedSync(GEYER_MLP, RoundConfig(rounds=3, sampler=PoissonClients(1.0), **base,
                                                    lr_schedule=LearningRate(0.5, 1, per="client_epoch"))), mnist_shards, progress=False)
    np.testing.assert_allclose(m["lr_mean"], [1e-3, 5e-4, 2.5e-4])
    # with p = 0.5 a client's decay counts only the rounds it took part in, so the mean lies above
    # the all-clients schedule and the first round is undecayed
    half = run(PriFedSync(GEYER_MLP, RoundConfig(rounds=4, sampler=PoissonClients(0.5), **base,
                                                       lr_schedule=LearningRate(0.5, 1, per="client_epoch"))), mnist_shards, progress=False)
    assert half["lr_mean"].iloc[0] == pytest.approx(1e-3)
    assert (half["lr_mean"].to_numpy()[1:] >= 1e-3 * 0.5 ** np.arange(1, 4) - 1e-12).all()
    # stop_at: the run ends at the first round whose stored accuracy reaches the target, with the
    # same metrics as the run without the rule
    full = run(PriFedSync(GEYER_MLP, RoundConfig(rounds=5, sampler=PoissonClients(1.0), **base)), mnist_shards, progress=False)
    target = float(full["acc_stored_local"].iloc[2])
    first = int(np.argmax(full["acc_stored_local"].to_numpy() >= target))
    stopped = run(PriFedSync(GEYER_MLP, RoundConfig(rounds=5, sampler=PoissonClients(1.0), stop_at=target,
                                                          **base)), mnist_shards, progress=False)
    assert len(stopped) == first + 1
    assert stopped["acc_stored_local"].equals(full["acc_stored_local"].iloc[:first + 1])
    # augmentation is part of the seeded randomness: repeatable, and it changes the run
    aug = [run(PriFedSync(GEYER_MLP, RoundConfig(rounds=1, sampler=PoissonClients(1.0), augment=True, **base)), mnist_shards,
                 progress=False) for _ in range(2)]
    assert aug[0]["acc_global"].equals(aug[1]["acc_global"])
    assert not np.allclose(aug[0]["acc_local_all"], full["acc_local_all"].iloc[:1])
    with pytest.raises(ValueError, match="^lr schedule factor"):
        RoundConfig(rounds=1, sampler=PoissonClients(1.0), lr_schedule=LearningRate(0.0), **base)
    with pytest.raises(ValueError, match="^stop_at"):
        RoundConfig(rounds=1, sampler=PoissonClients(1.0), stop_at=90, **base)


def test_shared_accuracy_equals_the_per_client_evaluation(mnist_shards):
    from dpfl.federated.evaluate import accuracy, shared_accuracy

    params = GEYER_MLP.init(torch.Generator().manual_seed(0))
    K = mnist_shards.num_clients
    x, y, mask = mnist_shards.test_batch(np.arange(K))
    index, mask2 = mnist_shards.test_index(np.arange(K))
    acc, loss = shared_accuracy(GEYER_MLP, params, mnist_shards.test_x, mnist_shards.test_y, index, mask2,
                                with_loss=True)
    torch.testing.assert_close(acc, accuracy(GEYER_MLP, params, x, y, mask, stacked=False))
    for c in range(K):                                   # the loss: mean NLL over the client's test images
        direct = torch.nn.functional.nll_loss(GEYER_MLP.forward(params, x[c][mask[c]], None), y[c][mask[c]])
        torch.testing.assert_close(loss[c], direct)


def test_shared_accuracy_is_the_same_by_any_core_count_and_chunk(mnist_shards):
    """MnistCNN's global evaluation by chunks of 500 images side by side (the CPU's default), by chunks of 7 and in one
    piece, on one thread and on two: for a given chunk the same accuracies and losses bit for bit whatever the core
    count; across chunks the same accuracies, and losses equal up to round-off — on 2026-12-01's AVX-512 Xeon, forward
    passes of fewer than 16 images took other kernels than larger ones (the NLL's last bit moved at chunks of 1–8;
    16 and above matched one piece bit for bit), where the machines before it had matched at every chunk. A
    bad chunk is refused by name."""
    from dpfl.federated.evaluate import shared_accuracy

    params = MNIST_CNN.init(torch.Generator().manual_seed(3))
    index, mask = mnist_shards.test_index(np.arange(mnist_shards.num_clients))
    run = lambda **kw: shared_accuracy(MNIST_CNN, params, mnist_shards.test_x, mnist_shards.test_y, index, mask,
                                       with_loss=True, **kw)
    ref = run(chunk=10**6)
    before = torch.get_num_threads()
    try:
        for chunk in (None, 7):
            by_cores = []
            for threads_ in (1, 2):
                torch.set_num_threads(threads_)
                by_cores.append(run(chunk=chunk))
            one, two = by_cores
            assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1]), chunk
            assert torch.equal(one[0], ref[0]), chunk
            torch.testing.assert_close(one[1], ref[1], rtol=1e-6, atol=0)
    finally:
        torch.set_num_threads(before)
    assert 0.02 < float(ref[0].mean()) < 0.3                      # an untrained model: about chance
    with pytest.raises(ValueError, match="^chunk"):
        run(chunk=0)


def test_a_diverged_model_has_no_accuracy(mnist_shards):
    """A model with a NaN parameter outputs NaN log-probabilities, whose arg-max is class 0: until 2026-12-07 that
    scored FEMNIST's diverged Ditto models as 7.45 % accurate (the share of class 0). Now its accuracy is NaN, by
    both evaluators, and the finite clients' accuracies are the same bits as before."""
    from dpfl.federated.evaluate import accuracy, shared_accuracy

    K = mnist_shards.num_clients
    test = mnist_shards.test_batch(np.arange(K))
    index, mask = mnist_shards.test_index(np.arange(K))
    inits = [GEYER_MLP.init(torch.Generator().manual_seed(c)) for c in range(K)]
    stacked = {k: torch.stack([p[k] for p in inits]) for k in inits[0]}
    before = accuracy(GEYER_MLP, stacked, *test, stacked=True)
    assert torch.isfinite(before).all()
    for c in range(K):                                   # a plain evaluation, client by client
        x, y, m = (t[c] for t in test)
        assert before[c] == (GEYER_MLP.forward(inits[c], x, None).argmax(-1) == y)[m].float().mean()
    broken = {k: v.clone() for k, v in stacked.items()}
    first = next(iter(broken))
    broken[first][2].view(-1)[0] = float("nan")
    after = accuracy(GEYER_MLP, broken, *test, stacked=True)
    assert torch.isnan(after[2]) and torch.equal(torch.cat([after[:2], after[3:]]), torch.cat([before[:2], before[3:]]))
    one = {k: v[2] for k, v in broken.items()}
    assert torch.isnan(accuracy(GEYER_MLP, one, *test, stacked=False)).all()
    acc, loss = shared_accuracy(GEYER_MLP, one, mnist_shards.test_x, mnist_shards.test_y, index, mask, with_loss=True)
    assert torch.isnan(acc).all() and not torch.isfinite(loss).any()
    fine = shared_accuracy(GEYER_MLP, inits[2], mnist_shards.test_x, mnist_shards.test_y, index, mask)
    assert torch.equal(fine, accuracy(GEYER_MLP, inits[2], *test, stacked=False))


def test_refresh_accuracy_recomputes_the_marked_clients_only_and_equals_a_full_evaluation(mnist_shards):
    """MnistCNN, so that the clients' convolutions are batched (one group per client): a call with
    some of the clients gives each the same logits as a call with all, bit for bit on a CPU."""
    from dpfl.federated.evaluate import accuracy, accuracy_cache, refresh_accuracy

    K = mnist_shards.num_clients
    test = mnist_shards.test_batch(np.arange(K))
    inits = [MNIST_CNN.init(torch.Generator().manual_seed(c)) for c in range(2 * K)]
    stack = lambda seeds: {k: torch.stack([inits[c][k] for c in seeds]) for k in inits[0]}
    full = lambda params: accuracy(MNIST_CNN, params, *test, stacked=True)
    params, cache = stack(range(K)), accuracy_cache(K, "cpu")
    assert torch.equal(refresh_accuracy(MNIST_CNN, params, test, cache), full(params)) and not cache["stale"].any()
    moved = [1, 4, 6]
    params = stack([K + c if c in moved else c for c in range(K)])
    cache["stale"][moved] = True
    cache["acc"][0] = -1.0                         # not marked: kept as it is, not recomputed
    acc = refresh_accuracy(MNIST_CNN, params, test, cache)
    assert acc[0] == -1.0 and not cache["stale"].any()
    assert torch.equal(acc[1:], full(params)[1:])


def test_a_cpu_evaluates_one_client_a_call_with_the_numbers_of_a_vmapped_chunk(mnist_shards):
    """``accuracy``'s CPU default (one client per call, faster there: ``make bench`` row (i)) gives MnistCNN's
    accuracies bit for bit as chunks of 25 do (the GPU's default); a chunk that is not a positive integer is
    refused by name."""
    from dpfl.federated.evaluate import GPU_EVAL_CHUNK, accuracy

    K = mnist_shards.num_clients
    test = mnist_shards.test_batch(np.arange(K))
    inits = [MNIST_CNN.init(torch.Generator().manual_seed(c)) for c in range(K)]
    params = {k: torch.stack([i[k] for i in inits]) for k in inits[0]}
    default = accuracy(MNIST_CNN, params, *test, stacked=True)
    assert torch.equal(default, accuracy(MNIST_CNN, params, *test, stacked=True, chunk=GPU_EVAL_CHUNK))
    assert torch.equal(default, accuracy(MNIST_CNN, params, *test, stacked=True, chunk=1))
    assert 0.0 < float(default.mean()) < 0.5                          # untrained models: near chance, not all zero
    with pytest.raises(ValueError, match="^chunk must be a positive integer"):
        accuracy(MNIST_CNN, params, *test, stacked=True, chunk=0)


def test_evaluating_the_moved_models_only_changes_no_number(mnist_shards, tmp_path):
    """PriFedSync's ``acc_local_all`` and FedHDP's personal accuracies, each recomputed only for the clients whose
    model moved, equal a full evaluation every round, including after resuming from a checkpoint written
    before the algorithms kept those accuracies."""
    from dpfl.federated.evaluate import accuracy
    from dpfl.federated.fedhdp import FedHDP, FedHDPConfig

    class EvaluateAll(PriFedSync):
        def evaluate(self, r):
            return {"acc_local_all": float(accuracy(self.model, self.state["local"], *self.test, stacked=True).mean())}

    base = dict(batch_size=8, local_steps=2, sampler=PoissonClients(0.5), seed=3,
                local=LocalConfig(optimizer="adam", dp=True, noise_multiplier=2.0))
    ours = run(PriFedSync(MNIST_CNN, RoundConfig(rounds=4, **base)), mnist_shards, progress=False)
    assert (ours.clients < mnist_shards.num_clients).all()
    assert ours.acc_local_all.equals(run(EvaluateAll(MNIST_CNN, RoundConfig(rounds=4, **base)), mnist_shards,
                                         progress=False).acc_local_all)
    ckpt = tmp_path / "run.pt"
    run(PriFedSync(MNIST_CNN, RoundConfig(rounds=2, checkpoint_every=2, **base)), mnist_shards, checkpoint=ckpt,
        progress=False)
    saved = torch.load(ckpt, weights_only=False)
    del saved["algorithm"]["local_acc"]                            # as written before it existed
    torch.save(saved, ckpt)
    resumed = run(PriFedSync(MNIST_CNN, RoundConfig(rounds=4, checkpoint_every=2, **base)), mnist_shards,
                  checkpoint=ckpt, progress=False)
    assert resumed.acc_local_all.equals(ours.acc_local_all)

    fedhdp = FedHDP(MNIST_CNN, FedHDPConfig(rounds=3, batch_size=8, local_steps=2, sampler=FixedClients(3),
                                            local=LocalConfig(optimizer="sgd", lr=0.1), noise_multipliers=(0.0,),
                                            ratios=(1.0,), lams=(0.1,), personal_lr=0.1, eval_every=2),
                    np.zeros(mnist_shards.num_clients, dtype=int))
    run(fedhdp, mnist_shards, progress=False)
    assert torch.equal(fedhdp.state["personal_acc"]["acc"],
                       accuracy(MNIST_CNN, fedhdp.state["personal"], *fedhdp.test, stacked=True))


def test_bad_configs_fail_before_training(mnist_shards):
    ok = dict(rounds=1, batch_size=8, local_steps=1, sampler=PoissonClients(1.0), local=LocalConfig())
    with pytest.raises(ValueError, match="batch_size 10000 exceeds"):
        run(PriFedSync(MNIST_CNN, RoundConfig(**(ok | {"batch_size": 10000}))), mnist_shards, progress=False)
    with pytest.raises(ValueError, match="m = 20 exceeds"):
        run(PriFedSync(MNIST_CNN, RoundConfig(**(ok | {"sampler": FixedClients(20)}))), mnist_shards, progress=False)
    with pytest.raises(ValueError, match="^alpha"):
        RoundConfig(**(ok | {"alpha": 1.5}))
    with pytest.raises(ValueError, match="^sampler"):
        RoundConfig(**(ok | {"sampler": 0.5}))


def test_client_level_clipping_median_bounds_and_noise():
    updates = {"a": torch.tensor([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]]), "b": torch.tensor([[0.0], [1.0], [2.0]])}
    clipped, norms = server.clip_updates(updates, 1.0)
    whole = torch.sqrt(torch.tensor([25.0, 1.25, 104.0]))
    torch.testing.assert_close(norms, whole)
    flat = torch.cat([clipped["a"], clipped["b"]], dim=1)
    torch.testing.assert_close(flat.norm(dim=1), torch.minimum(whole, torch.ones(3)))
    bounds = server.median_bounds(updates)                         # Geyer: per-layer median norm
    assert bounds == {"a": pytest.approx(5.0), "b": pytest.approx(1.0)}
    per_layer, layer_norms = server.clip_updates(updates, bounds, per_layer=True)
    assert per_layer["a"].norm(dim=1).tolist() == pytest.approx([5.0, 0.5, 5.0])
    assert per_layer["b"][:, 0].tolist() == pytest.approx([0.0, 1.0, 1.0])
    # noise: std z·S/m per coordinate around the clipped mean
    big = {"w": torch.zeros(4, 200_000)}
    g = torch.Generator().manual_seed(0)
    out = server.gaussian_mean(big, 2.0, 1.5, g)
    assert float(out["w"].std()) == pytest.approx(1.5 * 2.0 / 4, rel=0.01)
    noiseless = server.gaussian_mean(clipped, 1.0, 0.0, g)
    torch.testing.assert_close(noiseless["a"], clipped["a"].mean(0))
    with pytest.raises(ValueError, match="^bound"):
        server.clip_updates(updates, 0.0)


@pytest.mark.parametrize("per_layer", [False, True])
def test_clipping_in_place_gives_the_same_numbers_and_scales_the_input(per_layer):
    make = lambda: {"a": torch.randn(20, 30, 7, generator=torch.Generator().manual_seed(3)) * 3,
                    "b": torch.randn(20, 5, generator=torch.Generator().manual_seed(4))}
    bound = {"a": 2.0, "b": 0.5} if per_layer else 1.5
    copy, norms = server.clip_updates(make(), bound, per_layer=per_layer)
    updates = make()
    same, norms_in_place = server.clip_updates(updates, bound, per_layer=per_layer, inplace=True)
    for k in copy:
        assert torch.equal(copy[k], same[k]) and same[k] is updates[k]
    torch.testing.assert_close(norms, norms_in_place, rtol=0, atol=0)
    if not per_layer:       # the norms, computed a few clients at a time, equal one reduction over all
        assert torch.equal(norms, torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in make().values())))


@pytest.mark.parametrize("q, sigmas, accumulations, budget, rounds", [
    (0.5, (1.75, 1.8), 3, 1e-3, (11, 11)),     # K = 100, m = 50 (docs/geyer2017.md §5)
    (0.5, (1.15, 1.2), 1, 1e-3, (10, 12)),
    (0.22, (2.1, 2.15), 3, 1e-5, (52, 55)),    # K = 1000, m = 220: bracket CR = 54
])
def test_geyer_moments_accountant_reproduces_the_inferred_noise_levels(q, sigmas, accumulations, budget, rounds):
    """docs/geyer2017.md §5: with Geyer's accountant, these σ make δ (at ε = 8) first exceed δ′ at the
    paper's number of rounds (11 for K = 100, 54 for K = 1000)."""
    from dpfl.accounting import rdp

    def first_exceeding(sigma):
        return next(t for t in range(1, 1000)
                    if rdp.moments_accountant_delta(q, sigma, t * accumulations, 8.0) > budget)

    assert tuple(first_exceeding(s) for s in sigmas) == rounds


def test_client_dp_round_without_noise_is_fedavg(mnist_shards):
    from dpfl.federated.client_dp import ClientDPConfig, ClientLevelDP
    from dpfl.federated.local import client_generators, init_state, local_train

    cfg = ClientDPConfig(rounds=1, batch_size=8, local_steps=3, sampler=FixedClients(4), noise_multiplier=0.0,
                         clip=1e9, per_layer=False, local=LocalConfig(optimizer="sgd", lr=0.1), seed=2)
    metrics = run(ClientLevelDP(GEYER_MLP, cfg), mnist_shards, progress=False)
    # the same round by hand: sample, train from the global model, average
    from dpfl.federated.sampling import round_rng
    from dpfl.federated.evaluate import accuracy

    rng = round_rng(2, 1)
    selected = cfg.sampler.sample(8, rng, 0)
    x, y, _ = mnist_shards.batches(selected, 8, 3, rng)
    g0 = GEYER_MLP.init(torch.Generator().manual_seed(2))
    start = {k: v.unsqueeze(0).repeat(4, *[1] * v.ndim) for k, v in g0.items()}
    local, _ = local_train(GEYER_MLP, cfg.local, start, init_state(start, cfg.local), x, y,
                           client_generators(2, 1, selected))
    by_hand = server.fedavg(local)
    xt, yt, mt = mnist_shards.test_batch(np.arange(8))
    acc = float(accuracy(GEYER_MLP, by_hand, xt, yt, mt, stacked=False).mean())
    assert metrics["acc_global"].iloc[0] == pytest.approx(acc, abs=1e-6)
    assert metrics["delta"].iloc[0] == 1.0                               # no noise, no privacy


def test_client_dp_learns_accounts_and_stops_at_the_budget():
    from dpfl.accounting import rdp
    from dpfl.experiments.geyer2017 import GeyerConfig, GeyerDP

    root = shared_root()
    train_set, test_set = load_dataset("mnist", "train", root), load_dataset("mnist", "test", root)
    rng = np.random.default_rng(0)
    clients = partition.geyer_shards(train_set.y.numpy(), 100, rng)
    fd = FederatedDataset.from_partition(train_set, test_set, clients,
                                         partition.test_sets_like(train_set.y.numpy(), test_set.y.numpy(), clients, 50, rng))
    cfg = GeyerConfig(rounds=5, batch_size=50, local_steps=10, sampler=FixedClients(30), noise_multiplier=1.0,
                      local=LocalConfig(optimizer="sgd", lr=0.1), delta_budget=1e-3, stop_on="paper", accumulations=1)
    m = run(GeyerDP(GEYER_MLP, cfg), fd, progress=False)
    assert m["acc_global"].iloc[-1] > 0.35                                # chance: 0.1
    # Geyer's code's accounting (Poisson at q = m/K), and the guarantee of 30 of 100 without replacement
    paper = [rdp.moments_accountant_delta(0.3, 1.0, t, 8.0) for t in range(1, 6)]
    assert m["delta_paper"].tolist() == pytest.approx(paper)
    assert (m["delta"] > m["delta_paper"]).all()
    tight = run(GeyerDP(GEYER_MLP, GeyerConfig(**{**cfg.__dict__, "rounds": 50, "delta_budget": 1e-12})), fd,
                progress=False)
    assert tight["delta_paper"].iloc[-1] > 1e-12 and (tight["delta_paper"].iloc[:-1] <= 1e-12).all()   # stop_on="paper"
    safe = run(GeyerDP(GEYER_MLP, GeyerConfig(**{**cfg.__dict__, "rounds": 50, "stop_on": "guarantee"})), fd,
               progress=False)
    assert safe["delta"].iloc[-1] > 1e-3 and (safe["delta"].iloc[:-1] <= 1e-3).all() and len(safe) < len(m)
    with pytest.raises(ValueError, match="non-private"):
        GeyerConfig(**{**cfg.__dict__, "local": LocalConfig(dp=True)})


def test_fedhdp_two_step_equals_the_theorys_optimal_weights():
    """Two-step aggregation with r* = A/B equals the per-client weights of dpfl.theory.hetero_linear."""
    from dpfl.theory import hetero_linear as hl

    pop = hl.two_groups(N=20, rho=0.25, tau2=0.1, s2=0.5, sigma2_p=0.05)
    rng = np.random.default_rng(0)
    updates = torch.as_tensor(rng.standard_normal((20, 3)))
    group = np.repeat([0, 1], pop.counts)
    means = [{"w": updates[group == g].mean(0)} for g in (0, 1)]
    r = hl.optimal_ratio(pop)
    ours = server.two_step(means, pop.counts, r)["w"]
    w = torch.as_tensor(hl.optimal_weights(pop)[group])
    torch.testing.assert_close(ours, (w[:, None] * updates).sum(0))
    torch.testing.assert_close(server.two_step(means, pop.counts, [1, 1])["w"], updates.mean(0))   # HDP-FedAvg
    torch.testing.assert_close(server.two_step(means, pop.counts, [1, 0])["w"], means[0]["w"])     # r = 0
    with pytest.raises(ValueError, match="^ratios"):
        server.two_step(means, pop.counts, [1, 1.5])


def test_adaptive_clipping():
    g = torch.Generator().manual_seed(0)
    norms = torch.tensor([0.1, 0.2, 0.3, 5.0])                     # 3 of 4 below C = 1
    new, frac = server.adaptive_clip(norms, 1.0, target_quantile=0.5, lr=0.2, count_noise_std=0.0, generator=g)
    assert frac == pytest.approx(0.75) and new == pytest.approx(np.exp(-0.2 * 0.25))
    up, _ = server.adaptive_clip(torch.full((4,), 9.0), 1.0, target_quantile=0.5, lr=0.2, count_noise_std=0.0, generator=g)
    assert up == pytest.approx(np.exp(0.1))                        # nothing below C: C grows
    # the noised fraction has std σ_b/m
    fracs = [server.adaptive_clip(norms, 1.0, count_noise_std=2.0, generator=g)[1] for _ in range(4000)]
    assert np.std(fracs) == pytest.approx(2.0 / 4, rel=0.05) and np.mean(fracs) == pytest.approx(0.75, abs=0.02)
    # z_Δ → z as the count noise grows; a too-small count noise is refused
    assert server.effective_noise_multiplier(1.0, 1e6) == pytest.approx(1.0)
    assert server.effective_noise_multiplier(1.0, 2.5) == pytest.approx((1 - 0.04) ** -0.5)
    with pytest.raises(ValueError, match="^count_noise_std must exceed"):
        server.effective_noise_multiplier(1.0, 0.4)


def test_geyer_spread_quantities_against_their_definition():
    from dpfl.experiments.geyer2017 import spread

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 3, 4)), rng.standard_normal((5, 2))
    v_c, u_s = spread({"a": torch.as_tensor(a), "b": torch.as_tensor(b)})
    flat = np.concatenate([a.reshape(5, -1), b], axis=1)                 # P = 14 weights
    mu = flat.mean(0)
    assert v_c == pytest.approx(np.mean(((flat - mu) ** 2).mean(0)))
    assert u_s == pytest.approx(np.mean(mu ** 2))
    same = np.repeat(flat[:1], 5, axis=0)                                # identical clients: no variance
    assert spread({"w": torch.as_tensor(same)})[0] == pytest.approx(0.0, abs=1e-15)


def test_client_dp_adaptive_clipping_epochs_and_lr_decay(mnist_shards):
    from dpfl.experiments.geyer2017 import GeyerConfig as ClientDPConfig, GeyerDP

    base = dict(rounds=4, batch_size=50, local_steps=12, sampler=FixedClients(4), noise_multiplier=1.0,
                local=LocalConfig(optimizer="sgd", lr=0.1), seed=1, batch_sampling="shuffle", diagnostics=True)
    adaptive = run(GeyerDP(GEYER_MLP, ClientDPConfig(clip="adaptive", per_layer=False, clip_init=1e-3,
                                                     count_noise_std=1.0, lr_schedule=LearningRate(0.1, 24, "step", True),
                                                     **base)), mnist_shards, progress=False)
    # updates are far larger than 1e-3, so the count is ~0 and the bound grows by ≈ e^{0.2·0.5} per round
    growth = adaptive["clip_bound"].to_numpy()[1:] / adaptive["clip_bound"].to_numpy()[:-1]
    assert (growth > 1).all() and np.allclose(np.log(growth), 0.1, atol=0.2 * 3 / 4)
    np.testing.assert_allclose(adaptive["lr"], 0.1 * 0.1 ** (np.arange(4) * 12 / 24))
    assert (adaptive["V_c"] > 0).all() and (adaptive["U_s"] > 0).all()
    with pytest.raises(ValueError, match="^per_layer"):
        ClientDPConfig(clip="adaptive", **base)
    with pytest.raises(ValueError, match="^count_noise_std"):
        ClientDPConfig(clip="adaptive", per_layer=False, count_noise_std=0.1, **base)
    with pytest.raises(ValueError, match="^lr schedule per"):
        ClientDPConfig(lr_schedule=LearningRate(0.1, 24, per="client_epoch"), **base)


def test_client_dp_resume_is_exact(mnist_shards, tmp_path):
    from dpfl.federated.client_dp import ClientDPConfig, ClientLevelDP

    base = dict(batch_size=8, local_steps=3, sampler=FixedClients(4), noise_multiplier=1.0, clip="adaptive",
                per_layer=False, count_noise_std=1.0, local=LocalConfig(optimizer="sgd", lr=0.1), seed=5)
    full = run(ClientLevelDP(GEYER_MLP, ClientDPConfig(rounds=4, **base)), mnist_shards, progress=False)
    ckpt = tmp_path / "geyer.pt"
    run(ClientLevelDP(GEYER_MLP, ClientDPConfig(rounds=2, checkpoint_every=2, **base)), mnist_shards, checkpoint=ckpt,
                    progress=False)
    resumed = run(ClientLevelDP(GEYER_MLP, ClientDPConfig(rounds=4, checkpoint_every=2, **base)), mnist_shards,
                              checkpoint=ckpt, progress=False)
    cols = [c for c in full.columns if c != "seconds"]
    assert full[cols].equals(resumed[cols])
