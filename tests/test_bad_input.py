"""Bad input fails before any work with a ValueError naming the parameter (issue #14, "validation
gaps"): each case below was accepted by the code before, or failed deep inside NumPy/torch."""
from __future__ import annotations

import math

import numpy as np
import pytest

from dpfl import checks
from dpfl.accounting import calibrate, composition, gaussian, gdp, rdp
from dpfl.accounting.accountant import Accountant, GaussianEvent, SampledGaussianEvent
from dpfl.data import partition
from dpfl.data.federated import FederatedDataset
from dpfl.federated.client_dp import ClientDPConfig
from dpfl.federated.engine import RoundConfig
from dpfl.federated.fedhdp import FedHDPConfig
from dpfl.federated.local import LocalConfig
from dpfl.federated.sampling import PoissonClients
from dpfl.federated.schedule import LearningRate

INF = math.inf


def _round(**kw):
    return RoundConfig(**{"rounds": 2, "batch_size": 4, "local_steps": 1, "sampler": PoissonClients(1.0),
                          "local": LocalConfig(), **kw})


def _client_dp(**kw):
    return ClientDPConfig(**{"rounds": 2, "batch_size": 4, "local_steps": 1, "sampler": PoissonClients(1.0),
                             "local": LocalConfig(), "noise_multiplier": 1.0, **kw})


def _fedhdp(**kw):
    return FedHDPConfig(**{"rounds": 2, "batch_size": 4, "local_steps": 1, "sampler": PoissonClients(1.0),
                           "local": LocalConfig(), "noise_multipliers": (1.0,), "ratios": (1.0,), "lams": (0.1,),
                           "personal_lr": 0.1, **kw})


def _fd():
    import torch

    x, y = torch.zeros(12, 1, 4, 4), torch.arange(12) % 3
    clients = [np.arange(i, 12, 3) for i in range(3)]
    return FederatedDataset(x, y, x, y, clients, clients, "toy")


CASES = {
    # accounting: σ = ∞, ε = ∞, fractional or boolean step counts, no orders, overflow
    "GaussianEvent sigma=inf": ("sigma", lambda: GaussianEvent(INF)),
    "SampledGaussianEvent sigma=inf": ("sigma", lambda: SampledGaussianEvent(INF, 0.1)),
    "rdp.gaussian sigma=inf": ("sigma", lambda: rdp.gaussian(INF)),
    "gdp.clt_mu sigma=inf": ("sigma", lambda: gdp.clt_mu(INF, 16, 600, 10)),
    "gdp.clt_mu steps=2.5": ("steps", lambda: gdp.clt_mu(1.0, 16, 600, 2.5)),
    "gdp.clt_mu steps=True": ("steps", lambda: gdp.clt_mu(1.0, 16, 600, True)),
    "gdp.clt_mu_poisson steps=0.5": ("steps", lambda: gdp.clt_mu_poisson(1.0, 0.1, 0.5)),
    "moments_accountant_delta steps=1.5": ("steps", lambda: rdp.moments_accountant_delta(0.1, 1.0, 1.5, 1.0)),
    "Accountant.compose count=True": ("count", lambda: Accountant().compose(GaussianEvent(1.0), True)),
    "Accountant.compose count=2.0": ("count", lambda: Accountant().compose(GaussianEvent(1.0), 2.0)),
    "Accountant.delta eps=inf": ("eps", lambda: Accountant().compose(GaussianEvent(1.0)).delta(INF)),
    "gdp.delta eps=inf": ("eps", lambda: gdp.delta(1.0, INF)),
    "gaussian.analytic_sigma eps=inf": ("eps", lambda: gaussian.analytic_sigma(INF, 1e-5)),
    "dpsgd_sigma eps=inf": ("target_eps", lambda: calibrate.dpsgd_sigma(INF, 1e-5, 0.01, 100)),
    "dpsgd_sigma steps=True": ("steps", lambda: calibrate.dpsgd_sigma(1.0, 1e-5, 0.01, True)),
    "Accountant orders=[]": ("orders", lambda: Accountant("rdp", orders=[])),
    "rdp.epsilon orders=[]": ("orders", lambda: rdp.epsilon([], [], 1e-5)),
    "composition.advanced overflow": ("eps0", lambda: composition.advanced(800.0, 0.0, 10, 1e-6)),
    # configurations
    "ClientDPConfig clip='foo'": ("clip", lambda: _client_dp(clip="foo")),
    "ClientDPConfig clip=inf": ("clip", lambda: _client_dp(clip=INF)),
    "ClientDPConfig batch_sampling='poisson'": ("batch_sampling", lambda: _client_dp(batch_sampling="poisson")),
    "ClientDPConfig target_eps=0": ("target_eps", lambda: _client_dp(target_eps=0)),
    "ClientDPConfig target_eps=-1": ("target_eps", lambda: _client_dp(target_eps=-1.0)),
    "ClientDPConfig seed=-1": ("seed", lambda: _client_dp(seed=-1)),
    "ClientDPConfig eval_every=0": ("eval_every", lambda: _client_dp(eval_every=0)),
    "FedHDPConfig delta=0": ("delta", lambda: _fedhdp(delta=0)),
    "FedHDPConfig target_quantile=2": ("target_quantile", lambda: _fedhdp(target_quantile=2)),
    "LearningRate(0.9, 0)": ("lr schedule every", lambda: LearningRate(0.9, 0)),
    "LearningRate(2, 50)": ("lr schedule factor", lambda: LearningRate(2.0, 50)),
    "LearningRate per='epoch'": ("lr schedule per", lambda: LearningRate(0.9, 50, per="epoch")),
    "FedHDPConfig per client epoch": ("lr schedule per", lambda: _fedhdp(lr_schedule=LearningRate(0.9, 1, per="client_epoch"))),
    "RoundConfig seed=-1": ("seed", lambda: _round(seed=-1)),
    "RoundConfig seed=True": ("seed", lambda: _round(seed=True)),
    "LocalConfig clip=inf": ("clip", lambda: LocalConfig(clip=INF)),
    "LocalConfig noise_multiplier=inf": ("noise_multiplier", lambda: LocalConfig(dp=True, noise_multiplier=INF)),
    # data
    "batches client -1": ("client_ids", lambda: _fd().batches([-1], 2, 1, np.random.default_rng(0))),
    "batches client 3 of 3": ("client_ids", lambda: _fd().batches([3], 2, 1, np.random.default_rng(0))),
    "test_batch client -1": ("client_ids", lambda: _fd().test_batch([-1])),
    "dirichlet beta=inf": ("beta", lambda: partition.dirichlet(np.arange(100) % 10, 2, INF, 10,
                                                               np.random.default_rng(0))),
    "geyer_shards too few labels": ("train_size", lambda: partition.geyer_shards(np.arange(1000) % 10, 10,
                                                                                np.random.default_rng(0))),
    "checks.in_range 'foo'": ("x", lambda: checks.positive("x", "foo")),
}

#: a paper's run config with bad input used to be accepted and fail only when its turn in a grid came (after hours of
#: other runs), deep in the data or the loop (2026-12-02); ZhengRun(local_steps=0) silently trained the default K
_ZHENG = dict(dataset="mnist", p=1.0, sigma=1.0, batch_size=16, rounds=3)
_GEYER = dict(num_clients=100, m=10, sigma=1.0)
_FEDHDP = dict(dataset="noniid_mnist", algorithm="FedHDP", lam_np=0.1, lam_p=0.1)
RUNS = {
    "ZhengRun device='tpu'": ("zheng", dict(device="tpu"), "device"),
    "ZhengRun seed=-1": ("zheng", dict(seed=-1), "seed"),
    "ZhengRun local_steps=0": ("zheng", dict(local_steps=0), "local_steps"),
    "ZhengRun eval_every=0": ("zheng", dict(eval_every=0), "eval_every"),
    "ZhengRun alpha=2": ("zheng", dict(alpha=2.0), "alpha"),
    "ZhengRun stop_at=2": ("zheng", dict(stop_at=2.0), "stop_at"),
    "ZhengRun 101 MNIST clients": ("zheng", dict(num_clients=101), "num_clients"),
    "GeyerRun device='tpu'": ("geyer", dict(device="tpu"), "device"),
    "GeyerRun seed=-1": ("geyer", dict(seed=-1), "seed"),
    "GeyerRun stop_on='x'": ("geyer", dict(stop_on="x"), "stop_on"),
    "GeyerRun accumulations=0": ("geyer", dict(accumulations=0), "accumulations"),
    "GeyerRun batches=7": ("geyer", dict(batches=7), "batches"),
    "FedHDPRun device='tpu'": ("fedhdp", dict(device="tpu"), "device"),
    "FedHDPRun seed=-1": ("fedhdp", dict(seed=-1), "seed"),
    "FedHDPRun data_seed=-1": ("fedhdp", dict(data_seed=-1), "data_seed"),
    "FedHDPRun delta=2": ("fedhdp", dict(delta=2.0), "delta"),
    "FedHDPRun data key": ("fedhdp", dict(data=(("nonsense", 3),)), "data's keys"),
    "FedHDPRun data clients=0": ("fedhdp", dict(data=(("clients", 0),)), "clients"),
}


@pytest.mark.parametrize("case", list(RUNS))
def test_a_run_config_with_bad_input_fails_when_built(case):
    from dpfl.experiments.aldaghri_fedhdp_fl import FedHDPRun
    from dpfl.experiments.geyer2017 import GeyerRun
    from dpfl.experiments.zheng2021 import ZhengRun

    paper, changes, name = RUNS[case]
    cls, base = {"zheng": (ZhengRun, _ZHENG), "geyer": (GeyerRun, _GEYER), "fedhdp": (FedHDPRun, _FEDHDP)}[paper]
    cls(**base)                                                             # the base itself is fine
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        cls(**(base | changes))


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_a_clear_error_naming_the_parameter(case):
    name, call = CASES[case]
    with pytest.raises(ValueError, match=name):
        call()


def test_limits_that_are_meaningful_stay_accepted():
    """∞ where it is a meaningful limit: a Rényi order with infinite RDP, θ at r = ∞ (Asoodeh's Lemma 2)."""
    from dpfl.accounting import hockey_stick

    assert rdp.epsilon([INF, 1.0], [2.0, 3.0], 1e-5) < INF
    assert float(hockey_stick.theta(1.0, INF)) == pytest.approx(1.0)
    assert gdp.clt_mu(1.0, 16, 600, 3.0) == pytest.approx(gdp.clt_mu(1.0, 16, 600, 3))   # integral floats count
