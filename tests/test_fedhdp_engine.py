"""dpfl.federated.fedhdp: FedHDP's round loop against FedAvg and its special cases."""
import numpy as np
import pytest
import torch

from dpfl.federated.client_dp import ClientDPConfig, ClientLevelDP
from dpfl.federated.fedhdp import FedHDP, FedHDPConfig
from dpfl.federated.loop import run
from dpfl.federated.local import LocalConfig
from dpfl.federated.sampling import FixedClients
from dpfl.models import FEMNIST_CNN, GEYER_MLP
from tests_support import device_under_test

torch.set_num_threads(2)
LOCAL = LocalConfig(optimizer="sgd", lr=0.1)
DEVICE = device_under_test()


def _cfg(**kw):
    base = dict(rounds=3, batch_size=8, local_steps=4, sampler=FixedClients(4), local=LOCAL, noise_multipliers=(0.0,),
                ratios=(1.0,), lams=(0.0,), personal_lr=0.1, seed=2)
    return FedHDPConfig(**(base | kw))


def test_one_non_private_group_is_adaptively_clipped_fedavg(mnist_shards):
    """Alg. 2 clips every client's update: a group without noise is DP-FedAvg at z = 0 (adaptive
    bound, exact count), not the plain mean — which it would equal only if nothing were clipped."""
    ours = run(FedHDP(GEYER_MLP, _cfg(), np.zeros(8, dtype=int)), mnist_shards, progress=False)

    def client_dp(clip):
        return run(ClientLevelDP(GEYER_MLP, ClientDPConfig(
            rounds=3, batch_size=8, local_steps=4, sampler=FixedClients(4), noise_multiplier=0.0, clip=clip,
            per_layer=False, local=LOCAL, seed=2)), mnist_shards, progress=False)

    adaptive, plain = client_dp("adaptive"), client_dp(1e9)
    np.testing.assert_allclose(ours["acc_g_0"], adaptive["acc_global"], atol=1e-6)
    np.testing.assert_allclose(ours["clip_0"], adaptive["clip_bound"], rtol=1e-12)
    assert (ours["clip_0"].iloc[1:] != 0.1).all()                  # the bound moved from clip_init
    assert (adaptive["mean_update_norm"] > ours["clip_0"]).any()    # something was clipped …
    assert not np.allclose(ours["acc_g_0"], plain["acc_global"])    # … so the plain mean differs


def test_ratio_zero_ignores_the_private_group_whatever_its_noise(mnist_shards):
    groups = np.array([0, 1] * 4)
    kw = dict(ratios=(1.0, 0.0), lams=(0.5, 0.5), rounds=3, count_noise_frac=20.0)   # σ_b = 40 > z/2
    loud = run(FedHDP(GEYER_MLP, _cfg(noise_multipliers=(0.0, 50.0), **kw), groups), mnist_shards, progress=False)
    quiet = run(FedHDP(GEYER_MLP, _cfg(noise_multipliers=(0.0, 0.5), **kw), groups), mnist_shards, progress=False)
    for col in ("acc_g", "acc_g_0", "acc_g_1"):
        np.testing.assert_allclose(loud[col], quiet[col], atol=1e-6)
    assert (np.diff(loud["eps_1"]) > 0).all() and (loud["eps_1"] < quiet["eps_1"]).all()   # more noise, less ε
    assert "eps_0" not in loud                                                              # non-private: no ε


def test_fedhdp_learns_and_personalises(mnist_shards):
    groups = np.array([0, 1, 1, 1, 1, 1, 1, 1])
    m = run(FedHDP(GEYER_MLP, _cfg(noise_multipliers=(0.0, 0.3), ratios=(1.0, 0.5), lams=(0.1, 0.1), rounds=6,
                          sampler=FixedClients(8), local_steps=10), groups), mnist_shards, progress=False)
    assert m["acc_g"].iloc[-1] > 0.3                          # chance 0.1
    assert m["acc_l_1"].iloc[-1] > 0.5                        # personalised, on 3–4 own labels
    assert np.isfinite(m["delta_l"]).all() and (m["clip_1"] > 0).all()


def test_bad_input(mnist_shards):
    with pytest.raises(ValueError, match="one entry per privacy group"):
        _cfg(noise_multipliers=(0.0, 1.0))
    with pytest.raises(ValueError, match="^ratios"):
        _cfg(ratios=(1.5,))
    with pytest.raises(ValueError, match="non-private"):
        _cfg(local=LocalConfig(dp=True))
    with pytest.raises(ValueError, match="^groups"):
        run(FedHDP(GEYER_MLP, _cfg(), np.zeros(5, dtype=int)), mnist_shards, progress=False)


@pytest.mark.parametrize("extra_lams", [(), ((0.0, 1.0), (2.0, 0.5))])
def test_resume_is_exact(mnist_shards, tmp_path, extra_lams):
    """A checkpoint holds every set of λ's personal models (``extra_lams``) and their accuracy caches."""
    groups = np.array([0, 1] * 4)
    kw = dict(noise_multipliers=(0.0, 1.0), ratios=(1.0, 0.5), lams=(0.1, 0.2), count_noise_frac=1.0,
              extra_lams=extra_lams)
    full = run(FedHDP(GEYER_MLP, _cfg(rounds=4, **kw), groups), mnist_shards, progress=False)
    ckpt = tmp_path / "fedhdp.pt"
    run(FedHDP(GEYER_MLP, _cfg(rounds=2, checkpoint_every=2, **kw), groups), mnist_shards, checkpoint=ckpt,
                 progress=False)
    resumed = run(FedHDP(GEYER_MLP, _cfg(rounds=4, checkpoint_every=2, **kw), groups), mnist_shards, checkpoint=ckpt,
                           progress=False)
    cols = [c for c in full.columns if c != "seconds"]
    assert full[cols].equals(resumed[cols])
    assert sum(c.startswith("acc_l_") for c in cols) == 2 * (1 + len(extra_lams))


def test_each_set_of_lambdas_trains_as_alone_with_dropout(mnist_shards):
    """Every group and set of λ personalises in one call; a model with dropout (FEMNIST's CNN) shows each
    set drawing its masks from a replica of the clients' generators: the set's personal models equal a
    run's with that set alone — bit for bit on a CPU; on a GPU (``DPFL_TEST_DEVICE=cuda``) to round-off, a
    vmapped call of other clients rounding differently — and λ leaves the global model alone."""
    groups = np.array([0, 1] * 4)
    kw = dict(noise_multipliers=(0.0, 1.0), ratios=(1.0, 0.5), count_noise_frac=1.0, rounds=2, local_steps=2,
              sampler=FixedClients(6))
    same = torch.equal if DEVICE == "cpu" else (lambda a, b: torch.allclose(a, b, rtol=1e-4, atol=1e-5))
    both = FedHDP(FEMNIST_CNN, _cfg(lams=(0.1, 0.2), extra_lams=((0.0, 1.0),), **kw), groups)
    run(both, mnist_shards, progress=False, device=DEVICE)
    for lams, part in [((0.1, 0.2), both.state), ((0.0, 1.0), both.state["variants"][0])]:
        alone = FedHDP(FEMNIST_CNN, _cfg(lams=lams, **kw), groups)
        run(alone, mnist_shards, progress=False, device=DEVICE)
        for k, v in alone.state["personal"].items():
            assert same(part["personal"][k], v), (lams, k)
            assert same(both.state["global"][k], alone.state["global"][k])
    moved = both.state["personal"]["fc1.weight"] - both.state["variants"][0]["personal"]["fc1.weight"]
    assert float(moved.abs().max()) > 1e-3


def test_a_rounds_operations_do_not_grow_with_the_sets_of_lambda(mnist_shards):
    """At the GPU's chunking (every client in one vmapped call) Ditto's three sets of λ cost a step only the extra
    copies' mask draws (one per client and step), not two more training calls: what the per-step operations of
    personalisation gain from the extra sets does not grow with the local steps (a FEMNIST unit's step: 980 → 554
    operations, docs/aldaghri_fedhdp.md)."""
    from dpfl.opcount import OpCounter

    class Counted(FedHDP):
        def personalise(self, *args):
            with OpCounter() as self.count:
                super().personalise(*args)

    groups, m = np.array([0, 1] * 4), 6
    extra = {}
    for steps in (2, 4):
        counts = []
        for extra_lams in ((), ((0.0, 1.0), (2.0, 0.5))):
            algo = Counted(FEMNIST_CNN, _cfg(lams=(0.1, 0.2), extra_lams=extra_lams, noise_multipliers=(0.0, 1.0),
                                             ratios=(1.0, 0.5), count_noise_frac=1.0, rounds=1, local_steps=steps,
                                             sampler=FixedClients(m), chunk=64), groups)
            run(algo, mnist_shards, progress=False, device=DEVICE)
            counts.append(algo.count)
        assert counts[1].draws - counts[0].draws == 2 * m * steps        # the two extra copies' masks
        extra[steps] = (counts[1].ops - counts[1].draws) - (counts[0].ops - counts[0].draws)
    assert extra[2] == extra[4] and extra[2] < 100, extra               # a few per set (copying the models), none per step
