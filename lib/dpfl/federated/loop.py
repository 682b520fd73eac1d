"""The one round loop every federated algorithm here runs on.

PriFedSync (``engine``), client-level DP-FedAvg (``client_dp``) and FedHDP (``fedhdp``) differ only in
what one round does; everything else lives here, once (the shape of apple/pfl-research's
``FederatedAlgorithm.run``, with the accounting bound to the sampler as in jax_privacy):

* seeding — round t's generator from (seed, t) (:func:`~dpfl.federated.sampling.round_rng`), which
  draws the clients (the config's sampler) and, inside the algorithm, their batches;
* device placement — :func:`dpfl.device.configure` (deterministic kernels, TF32 off on CUDA) and
  the federated data moved to the device once;
* accounting — each round the algorithm names the events of the round (from the sampler that drew
  the clients or the records: ``sampler.event``, ``sampling.batch_event``; a round without noise a
  ``NonPrivateEvent``), the loop composes them into the algorithm's named accountants and records
  their readings (ε, δ at a target ε, or μ) in the round's row;
* metrics rows, timing, the progress bar;
* evaluation cadence — the algorithm's costly evaluations (``Algorithm.evaluate``) every
  ``cfg.eval_every`` rounds, at the last round and at the round that stops the run (apple/pfl-research's
  ``evaluation_frequency``); the rows in between carry no such columns (NaN in the table);
* stopping — the algorithm's rule (a target metric, a privacy budget) or the last round;
* checkpoints — atomic, with the run's key and every accountant's events, every
  ``checkpoint_every`` rounds and/or every ``checkpoint_seconds`` of wall time; a run finding a
  checkpoint resumes bit-identically (CPU) and refuses one written by another configuration; the
  returned table's ``attrs["segments"]`` lists the stretches the run took (first round, commit, start
  time), which ``dpfl.runs`` records in a resumed run's provenance;
* a ``deadline`` (``time.time()`` seconds): before a round that would end after it, the loop saves a
  checkpoint and raises :class:`Interrupted`, so a time-limited machine loses no finished round. "Would end
  after it": less than 1.5 × the longest of the last ``max(3, eval_every)`` rounds is left — a window that
  always holds an evaluated round, and that a one-off slow round (other work on a shared CPU) leaves; with
  ``whole=True`` it stops (:class:`CannotFinish`) as soon as the rounds left, at the pace of the stretch's longest
  round but its first, would end after it — for a machine whose disk goes away at the deadline, where a partial run
  is lost with its checkpoint. A stretch's first round is a warm-up (the cached H200 runs' took up to 2.5× their
  median round, 1.22 s against 0.48 s: kernel choice, allocator growth), so the run is judged from its second round
  on: a unit of ≈ 400 s in a 540 s call, given up after round 1 at its warm-up's pace, would have left a GPU session
  with nothing;
* a stop request — SIGTERM (``kill PID``) while the loop runs in a process's main thread: the round in progress
  finishes, the loop saves a checkpoint and raises :class:`Interrupted`, so a run stopped by hand (or by a machine
  that asks before it kills) resumes with nothing lost but that round's wall time.

An algorithm subclasses :class:`Algorithm` and overrides what differs.
"""
from __future__ import annotations

import collections
import dataclasses
import datetime
import signal
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import torch

from dpfl import checks
from dpfl.accounting.accountant import Accountant
from dpfl.data.federated import FederatedDataset
from dpfl.device import configure
from dpfl.federated import checkpoint as checkpoints
from dpfl.federated.evaluate import shared_accuracy, used_images
from dpfl.federated.local import LocalConfig
from dpfl.federated.sampling import FixedClients, PoissonClients, round_rng
from dpfl.federated.schedule import LearningRate
from dpfl.provenance import git_commit

__all__ = ["LoopConfig", "Round", "Privacy", "Algorithm", "Interrupted", "Stopped", "CannotFinish", "run"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoopConfig:
    """What every algorithm's configuration holds (keyword-only): ``rounds`` (the most), the client
    ``sampler``, the clients' ``batch_size``, ``local_steps`` per round and ``local`` training, the
    learning-rate schedule (``dpfl.federated.schedule``), the ``seed``, the ``chunk`` of clients
    trained in one call (None: ``local_train``'s default; changes the numbers only by round-off), how
    often the algorithm's evaluation runs (``eval_every`` rounds; always at the last round and at the
    round that stops the run) and the checkpoint cadence in rounds (0: none)."""

    rounds: int
    batch_size: int
    local_steps: int
    sampler: PoissonClients | FixedClients
    local: LocalConfig
    lr_schedule: LearningRate = LearningRate()
    seed: int = 0
    chunk: int | None = None
    eval_every: int = 1
    checkpoint_every: int = 0

    def __post_init__(self):
        checks.positive_int("rounds", self.rounds)
        checks.positive_int("batch_size", self.batch_size)
        checks.positive_int("local_steps", self.local_steps)
        if not isinstance(self.sampler, (PoissonClients, FixedClients)):
            raise ValueError("sampler must be PoissonClients or FixedClients")
        if not isinstance(self.local, LocalConfig):
            raise ValueError("local must be a LocalConfig")
        if not isinstance(self.lr_schedule, LearningRate):
            raise ValueError("lr_schedule must be a LearningRate")
        checks.nonnegative_int("seed", self.seed)
        if self.chunk is not None:
            checks.positive_int("chunk", self.chunk)
        checks.positive_int("eval_every", self.eval_every)
        checks.nonnegative_int("checkpoint_every", self.checkpoint_every)


@dataclasses.dataclass(frozen=True)
class Round:
    """What an algorithm's round sees: its number t (from 1), the clients drawn for it, the round's
    generator (after the draw: batches, noise seeds) and the device."""

    t: int
    selected: np.ndarray
    rng: np.random.Generator
    device: str

    def torch_generator(self, device: str | None = None) -> torch.Generator:
        """A torch generator on ``device`` (default the round's) seeded by the round's next draw: the
        server's noise, augmentation offsets."""
        return torch.Generator(device=device or self.device).manual_seed(int(self.rng.integers(2 ** 62)))


@dataclasses.dataclass
class Privacy:
    """One accounting the loop keeps for an algorithm: the accountant the round's events named
    ``name`` are composed into, and ``read`` — the row's columns from it (e.g. ``{"delta": …}``)."""

    name: str
    accountant: Accountant
    read: Callable[[Accountant], dict]


class Algorithm:
    """The base of what :func:`run` runs, built from a ``model`` and a :class:`LoopConfig` ``cfg``: a
    subclass overrides ``setup`` (calling this one first, then building ``self.state`` on the device)
    and ``round`` (one round → its row's metrics); one whose evaluation costs more than a round's
    bookkeeping ``evaluate`` (run every ``cfg.eval_every`` rounds); a private one also ``accountants``
    and ``events``; one with a stopping rule ``stop``. ``self.state`` is what a checkpoint saves; ``progress_metric``
    the column the progress bar shows."""

    state: dict
    progress_metric: str | None = None

    def __init__(self, model, cfg: LoopConfig):
        self.model, self.cfg = model, cfg

    def setup(self, fd: FederatedDataset, device: str) -> None:
        """Check that the data fit the model and the batches, and index every client's test images
        in the shared pool once (for :meth:`evaluate_global`)."""
        if tuple(fd.train_x.shape[1:]) != tuple(self.model.input_shape):
            raise ValueError(f"data of shape {tuple(fd.train_x.shape[1:])} do not fit {self.model.name} "
                             f"(expects {tuple(self.model.input_shape)})")
        if (fd.client_sizes < self.cfg.batch_size).any():
            raise ValueError(f"batch_size {self.cfg.batch_size} exceeds the data of some clients "
                             f"(smallest has {int(fd.client_sizes.min())})")
        self.cfg.sampler.check(fd.num_clients)
        self.fd, self.K = fd, fd.num_clients
        self.pool = fd.test_index(np.arange(self.K))
        self.used = used_images(*self.pool)

    def initial_params(self, device: str) -> dict:
        """The model's initial parameters from ``cfg.seed``, on ``device``."""
        init = self.model.init(torch.Generator().manual_seed(int(self.cfg.seed)))
        return {k: v.to(device) for k, v in init.items()}

    def evaluate_global(self, params: dict) -> dict:
        """One model on every client's test set: (accuracy, loss) per client, each (K,)."""
        return shared_accuracy(self.model, params, self.fd.test_x, self.fd.test_y, *self.pool, used=self.used,
                               with_loss=True)

    def round(self, r: Round) -> dict:
        raise NotImplementedError

    def evaluate(self, r: Round) -> dict:
        """The row's evaluation columns after round ``r`` (the loop calls it every ``cfg.eval_every``
        rounds, at the last and at the stopping round); none here."""
        return {}

    def accountants(self) -> list[Privacy]:
        return []

    def events(self, r: Round) -> dict:
        """The round's privacy events: {accountant name: [(event, count), …]}."""
        return {}

    def stop(self, row: dict) -> bool:
        return False

    def state_dict(self) -> dict:
        return self.state

    def load_state_dict(self, state: dict) -> None:
        self.state = state


class Interrupted(BaseException):
    """The run stopped before its deadline; a checkpoint holds every finished round. Like
    ``KeyboardInterrupt`` it is not an ``Exception``: a grid (``dpfl.runs.run_many``) stops at once
    instead of going on to its next run."""


class Stopped(Interrupted):
    """The run stopped at a stop request (SIGTERM) after the round in progress; a checkpoint holds every round."""


class CannotFinish(Interrupted):
    """The run stopped early: at the pace of its rounds so far, the rounds left would end after the
    deadline (``run(..., whole=True)``)."""


def run(algorithm: Algorithm, fd: FederatedDataset, *, checkpoint: Path | None = None,
        checkpoint_seconds: float | None = None, deadline: float | None = None, whole: bool = False,
        progress: bool = True, device: str = "cpu") -> pd.DataFrame:
    """Run ``algorithm`` for up to ``algorithm.cfg.rounds`` rounds; one row per round (a tidy DataFrame).

    ``checkpoint``: a path; state is saved there every ``cfg.checkpoint_every`` rounds and/or every
    ``checkpoint_seconds`` of wall time (the round that stops the run is always saved), and a run
    finding a checkpoint resumes from it — one written by another configuration (its
    ``checkpoint.run_key`` differs) is refused, as is one that went past where this run ends (a longer run's, or
    one on after a round where this run's stopping rule ends it). ``deadline``, ``whole``: see the module docstring
    (``whole`` assumes every round up to ``cfg.rounds`` runs: a run that would stop early at its
    target may be given up although it would have finished).
    """
    cfg = algorithm.cfg
    if checkpoint_seconds is not None:
        checks.positive("checkpoint_seconds", checkpoint_seconds)
    rounds, seed, sampler = cfg.rounds, cfg.seed, cfg.sampler
    key = checkpoints.run_key(algorithm.model, fd, cfg)
    configure(device)
    fd = fd.to(device)
    K = fd.num_clients
    algorithm.setup(fd, device)
    privacy = algorithm.accountants()
    rows, segments = [], []
    saved = checkpoints.load(checkpoint, key, device)
    if saved is not None:
        algorithm.load_state_dict(saved["algorithm"])
        rows = saved["rows"]
        segments = saved.get("segments") or [{"first_round": 1, "git_commit": "unknown", "started": None}]
        for p in privacy:
            p.accountant.load_state_dict(saved["accountants"][p.name])
        _check_prefix(checkpoint, rows, rounds, algorithm)
        if rows and algorithm.stop(rows[-1]):
            return _table(rows, segments)
    first = len(rows) + 1
    segments = [*segments, {"first_round": first, "git_commit": git_commit(),
                            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}]

    def save():
        checkpoints.save(checkpoint, key, {"rows": rows, "algorithm": algorithm.state_dict(), "segments": segments,
                                           "accountants": {p.name: p.accountant.state_dict() for p in privacy},
                                           "progress_metric": algorithm.progress_metric})

    from tqdm.auto import tqdm

    bar = tqdm(total=rounds, initial=first - 1, disable=not progress, desc="rounds", leave=False)
    last_save, longest = time.time(), 0.0                        # longest: of the stretch's rounds but its first
    recent = collections.deque(maxlen=max(3, cfg.eval_every))     # the deadline's pace (module docstring)
    request = _StopRequest()                                    # SIGTERM: stop after this round (module docstring)
    try:
        for t in range(first, rounds + 1):
            pace = max(recent, default=0.0)
            if deadline is not None and time.time() + 1.5 * pace > deadline:
                saved_now = checkpoint is not None and bool(rows)
                if saved_now:
                    save()
                raise Interrupted(f"stopped before round {t} of {rounds}: the deadline leaves too little time for "
                                  f"another round (the longest of the last {len(recent)} took {pace:.1f} s); "
                                  + (f"checkpoint {checkpoint} holds rounds 1–{t - 1}" if saved_now else "no checkpoint"))
            start = time.perf_counter()
            rng = round_rng(seed, t)
            r = Round(t, sampler.sample(K, rng, t - 1), rng, device)
            row = {"round": t, "clients": int(r.selected.size), "q": sampler.rate(K, t - 1), **algorithm.round(r)}
            events = algorithm.events(r)
            for p in privacy:
                for event, count in events.get(p.name, ()):
                    p.accountant.compose(event, count)
                row.update(p.read(p.accountant))
            stop = algorithm.stop(row)
            if t % cfg.eval_every == 0 or t == rounds or stop:
                row.update(algorithm.evaluate(r))
            row["seconds"] = time.perf_counter() - start
            if t > first:
                longest = max(longest, row["seconds"])
            recent.append(row["seconds"])
            rows.append(row)
            bar.update(1)
            if row.get(algorithm.progress_metric) is not None:
                bar.set_postfix({algorithm.progress_metric: f"{row[algorithm.progress_metric]:.3g}"})
            due = (cfg.checkpoint_every and t % cfg.checkpoint_every == 0) or \
                  (checkpoint_seconds is not None and time.time() - last_save >= checkpoint_seconds)
            if checkpoint is not None and (due or stop):
                save()
                last_save = time.time()
            if request.made:
                if checkpoint is not None and not (due or stop):
                    save()
                raise Stopped(f"stopped after round {t} of {rounds} by SIGTERM; "
                                  + (f"checkpoint {checkpoint} holds rounds 1–{t}" if checkpoint is not None else "no checkpoint"))
            if stop:
                break
            left = rounds - t
            if whole and deadline is not None and left and t > first and time.time() + left * longest > deadline:
                if checkpoint is not None and not due:
                    save()
                raise CannotFinish(f"gave up after round {t} of {rounds}: {left} more rounds of up to {longest:.1f} s "
                                   f"would end after the deadline")
    finally:
        bar.close()
        request.withdraw()
    return _table(rows, segments)


class _StopRequest:
    """SIGTERM's handler while a loop runs: it records the request (``made``) for the loop to stop at the end of the
    round in progress, instead of the process dying mid-round with up to ``checkpoint_seconds`` of rounds unsaved.
    Python runs signal handlers in the main thread only, so elsewhere (a worker thread) it installs nothing;
    :meth:`withdraw` puts the previous handler back."""

    def __init__(self):
        self.made, self._installed, self._previous = False, False, None
        if threading.current_thread() is threading.main_thread():
            self._previous, self._installed = signal.signal(signal.SIGTERM, self._make), True

    def _make(self, signum, frame):
        self.made = True

    def withdraw(self):
        if self._installed:            # None: a handler not set from Python; the default is the closest to it
            signal.signal(signal.SIGTERM, signal.SIG_DFL if self._previous is None else self._previous)
            self._installed = False


def _check_prefix(checkpoint, rows: list, rounds: int, algorithm: Algorithm) -> None:
    """Refuse a checkpoint (of this configuration: ``checkpoint.run_key``) that went past where this run ends — more
    rounds than ``rounds``, or on after a round that this run's stopping rule ends it at (``stop_at``, ``delta_budget``
    lowered since): its state cannot be rewound, and resuming from it returned those extra rounds as this run's."""
    if len(rows) > rounds:
        raise ValueError(f"checkpoint {checkpoint} holds rounds 1–{len(rows)}, past this run's {rounds} rounds: "
                         "delete it or use another path")
    early = next((row["round"] for row in rows[:-1] if algorithm.stop(row)), None)
    if early is not None:
        raise ValueError(f"checkpoint {checkpoint} holds rounds 1–{len(rows)}, but this run stops at round {early} "
                         "(its stopping rule, e.g. stop_at or delta_budget, ends it sooner): delete it or use another path")


def _table(rows: list, segments: list) -> pd.DataFrame:
    """The rows as a table; ``attrs["segments"]``: the stretches the run took, one per start or resume."""
    table = pd.DataFrame(rows)
    table.attrs["segments"] = segments
    return table
