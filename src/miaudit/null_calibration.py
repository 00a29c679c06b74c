"""Null calibration: audits with provably nothing to find, for every attack and design
(docs/algorithms.md §11, "What the designs guarantee").

A *null bank* has the membership of a real design (:func:`miaudit.protocol.make_design`: the
same draws a run makes) and outputs that carry nothing about the target's membership:

- ``untrained``: no model learnt anything; every model's logits are the sample's own
  difficulty, a per-model bias and noise;
- ``unseen-members``: the references learnt their training rows (their true-class logit is
  raised on them) but the target's "members" are rows it never trained on (it learnt its
  public rows only), so the reference attacks have real signal to calibrate with and the
  scorers something real to learn, but nothing of it is the target's membership;
- for sequence banks, ``base-as-target`` too: the target is the pretrained base model itself
  (its token log-probabilities are the base model's), the LM audit's null.

On such a bank every attack's scores are independent of the target's membership, so its AUC
is Mann–Whitney's null and its TPR at each FPR the negative hypergeometric one
(:func:`miaudit.metrics.tpr_null_p_value`). :func:`null_figures` scores every attack that can
run and returns those figures with their null p-values; the suite (tests/null) asserts them
on tiny banks, `bench/null_calibration.py` over many seeded audits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from miaudit import metrics
from miaudit.attacks import TargetView, get_attack, list_attacks, run_attack
from miaudit.errors import AttackError
from miaudit.protocol import make_design, make_split
from miaudit.signals.assemble import Signals, assemble_bank
from miaudit.signals.bank import SignalBank

VARIANTS = ("untrained", "unseen-members")
SEQUENCE_VARIANTS = (*VARIANTS, "base-as-target")
# every design a run can draw, and two a bank from elsewhere may hold
DESIGNS = ("offline", "offline-members", "offline-canaries", "online", "paired-halves",
           "lira-keep", "independent")
N_CLASSES = 4


@dataclass(frozen=True)
class NullBank:
    """A bank with nothing to find for ``target``, and how it was made."""

    bank: SignalBank
    target: int
    design: str
    variant: str
    seed: int


def membership_of(design: str, n_models: int, seed: int, audit: int, public: int,
                  population: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """(membership [M, N], audit, population, canary masks [N], target) of ``design``: a
    registered design drawn as a run draws it, or ``lira-keep`` (LiRA's balanced ``keep``
    matrix over all M models, the target the last one, as LiRA's scripts evaluate) or
    ``independent`` (every model IN on each sample with probability ½, independently)."""
    rows = audit + public + population
    if design in ("lira-keep", "independent"):
        rng = np.random.default_rng([seed, 7])
        n = audit + public
        membership = np.zeros((n_models, rows), dtype=bool)
        if design == "lira-keep":
            ranks = rng.random((n_models, n)).argsort(axis=0).argsort(axis=0)
            membership[:, :n] = ranks < n_models // 2
        else:
            membership[:, :n] = rng.random((n_models, n)) < 0.5
        audit_mask, population_mask = np.arange(rows) < audit, np.arange(rows) >= n
        return (membership, audit_mask, population_mask, np.zeros(rows, dtype=bool),
                n_models - 1 if design == "lira-keep" else 0)
    canaries = population if design == "offline-canaries" else 0
    kind = design.split("-")[0] if design.startswith("offline") else design
    members = audit // 4 if design == "offline-members" else None
    split = make_split(rows + canaries, audit, public, population, seed, canaries=canaries)
    drawn = make_design(split, n_models, kind, seed, members=members)
    canary = drawn.canary_mask() if canaries else np.zeros(split.rows.size, dtype=bool)
    return (drawn.membership, drawn.audit_mask(), drawn.population_mask(), canary,
            drawn.target)


def classifier_bank(design: str, variant: str, n_models: int = 6, seed: int = 0,
                    audit: int = 300, public: int = 300, population: int = 100,
                    effect: float = 2.0) -> NullBank:
    """A classifier null bank (Q = 2 queries, 4 classes, a gradient-norm and a boundary
    channel, text sizes): see the module's docstring for ``variant``."""
    membership, audit_mask, population_mask, canary, target = membership_of(
        design, n_models, seed, audit, public, population)
    rng = np.random.default_rng([seed, 11])
    n = int(membership.shape[1])
    labels = rng.integers(0, N_CLASSES, n)
    # Untrained networks differ by model far more than by sample (outputs near their random
    # initialisation); trained ones share what the data says of each sample. Each model is
    # its own function of the inputs either way: a bias per class and a random projection of
    # the sample's features, against small query noise (what lets an attack tell models
    # apart, and read a design's counts through their outputs).
    shared = 0.1 if variant == "untrained" else 1.0
    difficulty = rng.normal(0.0, shared, (n, N_CLASSES))
    difficulty[np.arange(n), labels] += rng.normal(1.5 * shared, 1.5 * shared, n)
    features = rng.normal(0.0, 1.0, (n, 8))
    own = (rng.normal(0.0, 1.5, (n_models, 1, N_CLASSES))
           + np.einsum("nf,mfc->mnc", features, rng.normal(0.0, 0.3, (n_models, 8, N_CLASSES))))
    logits = (difficulty[None, :, None, :] + own[:, :, None, :]
              + rng.normal(0.0, 0.1, (n_models, n, 2, N_CLASSES)))
    learnt = _learnt(membership, audit_mask | canary, target, variant)
    logits[:, np.arange(n), :, labels] += (effect * learnt.T)[:, :, None]  # [N, M, Q]
    channels = {
        "grad_norm": np.abs(rng.normal(1.0, 0.3, (n_models, n))) * np.exp(-learnt),
        "boundary_distance": rng.gamma(2.0, 1.0, (n_models, n)) * np.exp(learnt),
        "boundary_distance_queries": np.full((n_models, n), 50.0),
    }
    bank = assemble_bank(Signals(logits.astype(np.float32), channels), labels, membership,
                         audit_mask, population_mask, _texts(rng, n),
                         canary=canary if canary.any() else None)
    return NullBank(bank, target, design, variant, seed)


def _texts(rng: np.random.Generator, n: int) -> list[str]:
    """Random texts of random lengths: their sizes are what the blind baseline reads."""
    letters = np.array(list("abcdefghij klmnop"))
    return ["".join(rng.choice(letters, int(length))) for length in rng.integers(20, 400, n)]


def sequence_bank(design: str, variant: str, n_models: int = 6, seed: int = 0,
                  audit: int = 120, public: int = 120, population: int = 40,
                  tokens: int = 12, effect: float = 0.8) -> NullBank:
    """A causal-LM null bank (per-token log-probabilities, next-token moments, a base model,
    ReCaLL's prefix, token ids, each model's top-1 right or wrong, text sizes)."""
    membership, audit_mask, population_mask, canary, target = membership_of(
        design, n_models, seed, audit, public, population)
    rng = np.random.default_rng([seed, 13])
    n = int(membership.shape[1])
    lengths = rng.integers(2, tokens + 1, n)
    base = -rng.exponential(2.0, (n, tokens))
    token = base[None] - rng.exponential(0.3, (n_models, n, tokens))
    token += effect * _learnt(membership, audit_mask | canary, target, variant)[:, :, None]
    if variant == "base-as-target":
        token[target] = base
    token = np.minimum(token, 0.0)
    mean = -rng.uniform(1.0, 5.0, (n_models, n, tokens))
    std = rng.uniform(0.1, 3.0, (n_models, n, tokens))
    prefix = np.minimum(token - rng.exponential(0.5, token.shape), 0.0)
    ids = rng.integers(0, 9, (n, tokens))
    pad = np.arange(tokens)[None, :] >= lengths[:, None]
    for array in (token, mean, std, prefix):
        array[:, pad] = 0.0
    base[pad], ids[pad] = 0.0, -1
    signals = Signals(None, seq_token_logprob=token.astype(np.float32),
                      seq_mean_logprob=mean.astype(np.float32),
                      seq_std_logprob=std.astype(np.float32), seq_lengths=lengths,
                      seq_prefix_token_logprob=prefix.astype(np.float32),
                      seq_base_token_logprob=base.astype(np.float32), seq_token_ids=ids,
                      seq_vocab_size=np.int64(9))
    bank = assemble_bank(signals, np.zeros(n, dtype=np.int64), membership, audit_mask,
                         population_mask, _texts(rng, n),
                         canary=canary if canary.any() else None)
    # whether each model's top-1 prediction is right (EZ-MIA's error zone): drawn apart from
    # everything above (its own generator: the other arrays are as they were), independent
    # of membership in every variant
    top1 = np.random.default_rng([seed, 17]).random((n_models, n, tokens)) < 0.4
    bank = bank.replace(seq_top1_correct=top1)
    return NullBank(bank, target, design, variant, seed)


def _learnt(membership: np.ndarray, evaluated: np.ndarray, target: int, variant: str
            ) -> np.ndarray:  # fmt: skip
    """float [M, N]: 1 where a model learnt a row (its output there shows it). ``evaluated``
    [N]: the rows whose membership the audit evaluates (audit rows and canaries), none of
    which the target learnt."""
    learnt = np.zeros(membership.shape)
    if variant == "unseen-members":
        learnt[:] = membership
        learnt[target] = membership[target] & ~evaluated  # it never saw its "members"
    return learnt


@dataclass(frozen=True)
class NullFigure:
    """One attack on one null bank: its figures and their one-sided null p-values."""

    attack: str
    design: str
    variant: str
    seed: int
    auc: float
    auc_p: float  # P(AUC >= auc) under the null
    auc_p_low: float  # P(AUC <= auc): below chance is an artefact too
    tpr: dict[float, float]
    tpr_p: dict[float, float]
    n_members: int
    n_nonmembers: int

    def to_dict(self) -> dict[str, Any]:
        return {"attack": self.attack, "design": self.design, "variant": self.variant,
                "seed": self.seed, "auc": self.auc, "auc_p": self.auc_p,
                "auc_p_low": self.auc_p_low,
                "tpr": {str(k): v for k, v in self.tpr.items()},
                "tpr_p": {str(k): v for k, v in self.tpr_p.items()},
                "n_members": self.n_members, "n_nonmembers": self.n_nonmembers}


def runnable(null: NullBank, names: list[str] | None = None) -> list[str]:
    """The attacks (all registered, or ``names``) whose needs the null bank meets."""
    view = TargetView.of(null.bank, null.target)
    found = []
    for spec in list_attacks():
        if names is not None and spec.name not in names:
            continue
        try:
            spec.needs.check(view, spec.name)
        except AttackError:
            continue
        found.append(spec.name)
    return found


def null_figures(null: NullBank, attacks: list[str] | None = None,
                 params: dict[str, dict[str, Any]] | None = None,
                 fprs: tuple[float, ...] = (0.01, 0.1)) -> list[NullFigure]:
    """Every runnable attack (or those of ``attacks``) scored on the null bank's target, with
    its AUC and TPR at ``fprs`` and their null p-values."""
    bank, params = null.bank, params or {}
    view = TargetView.of(bank, null.target)
    members = bank.membership[null.target][bank.audit]
    n1, n0 = int(members.sum()), int((~members).sum())
    out = []
    for name in runnable(null, attacks):
        defaults = get_attack(name).defaults
        chosen = {k: v for k, v in params.get(name, params.get("*", {})).items()
                  if k in defaults}
        # an attack whose needs the bank meets must run: an AttackError here is a defect
        scores = run_attack(name, view, **chosen).scores[bank.audit]
        fpr, tpr, _ = metrics.roc(scores, members)
        auc = metrics.auc(scores, members)
        at = {f: metrics.tpr_at_fpr(fpr, tpr, f) for f in fprs}
        out.append(NullFigure(
            attack=name, design=null.design, variant=null.variant, seed=null.seed, auc=auc,
            auc_p=metrics.auc_null_p_value(auc, n1, n0),
            auc_p_low=metrics.auc_null_p_value(1.0 - auc, n1, n0),
            tpr=at, tpr_p={f: metrics.tpr_null_p_value(t, n1, n0, f) for f, t in at.items()},
            n_members=n1, n_nonmembers=n0))
    return out

