"""Banks of the generalization study ("Generalization and Membership Inference Attack: a
Practical Perspective"): one fixed pool, M models on exact halves of it.

Its banks come from the one assembly every run uses (the ``paired-halves`` design of
:mod:`miaudit.protocol`, :mod:`miaudit.signals.assemble`); what the study does beyond a
pipeline run is which models it trains and which it puts together in a bank:

- *Exact halves.* The online design makes every sample IN for half of the models, but a
  model's training-set size then varies (2,027 vs 1,981 rows of a 4,000 pool), and the stacked
  trainer only stacks equal sizes. The ``paired-halves`` design
  (:func:`miaudit.protocol.paired_membership`) pairs the samples and gives each model exactly
  one of every pair: every sample is IN for exactly M/2 models and every model trains on
  exactly P/2 rows, so the M models of a recipe train stacked (~2x faster for the many-model
  study's MLPs).
- *Fixed training sets.* Model ``m`` trains on the same rows, with the same seed, under every
  recipe: across the study's cells, the models with index ``m`` form one fixed training set
  trained under varied recipes (the paper's §IV-C control), and the M models of a bank are each
  other's LiRA references (online design, leave-one-out), so every model is attacked.
- *Mixed banks.* Attacker knowledge (§IV-B) attacks model ``m`` trained with the target recipe
  using references trained with another recipe: the target's logits from one bank, the
  references' from another (:func:`mixed_bank`); the models are the same cached models a
  pipeline run with ``reference_recipe`` would train (same rows, seeds and recipes).
- *Checkpoints.* The early-stopping table keeps every model at chosen epochs of one run
  (:class:`miaudit.train.CheckpointSpec` through the model cache): a bank per checkpoint.

Models go to the default content-addressed cache, so cells sharing a recipe share models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from miaudit.config import MetricsConfig
from miaudit.data import Dataset, load_dataset
from miaudit.pipeline.evaluate import EvaluationOptions, evaluate_attacks
from miaudit.protocol import make_design, make_split
from miaudit.runtime.devices import resolve_device
from miaudit.signals import SignalBank
from miaudit.signals.assemble import Signals, SignalSpec, assemble_bank, query_signals
from miaudit.train import CheckpointSpec, ModelCache, Recipe, TrainedModel
from miaudit.train.model_cache import default_cache_dir

# TPR is recorded at these FPRs (the ROC curves of the knowledge figures are drawn through them).
ROC_FPRS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)



@dataclass(frozen=True)
class Pool:
    """The study's fixed setting: dataset, pool rows, membership of the M models."""

    dataset: Dataset
    rows: np.ndarray  # dataset rows of the pool, in bank order
    membership: np.ndarray  # bool [M, P]
    seeds: tuple[int, ...]  # training seed of each model
    queries: tuple[str, ...]
    device: str

    @property
    def n_models(self) -> int:
        return int(self.membership.shape[0])

    def training_rows(self, model: int) -> np.ndarray:
        return np.sort(self.rows[self.membership[model]])


def make_pool(params: Mapping[str, Any]) -> Pool:
    """The pool of a cell's params (``dataset``, ``pool``, ``models``, ``seed``, ``queries``,
    ``device``): the same rows and membership for every cell with the same values."""
    dataset = load_dataset(params["dataset"])
    seed = int(params["seed"])
    split = make_split(len(dataset), int(params["pool"]), 0, 0, seed)
    membership = make_design(split, int(params["models"]), "paired-halves", seed).membership
    queries = params.get("queries") or (["plain", "mirror"] if dataset.kind == "image"
                                        else ["plain"])
    return Pool(
        dataset=dataset,
        rows=split.audit,
        membership=membership,
        seeds=tuple(seed * 10_000 + m for m in range(membership.shape[0])),
        queries=tuple(queries),
        device=resolve_device(str(params.get("device", "cpu"))),
    )


def train_pool(
    pool: Pool, recipe: Recipe, checkpoints: CheckpointSpec | None = None
) -> list[TrainedModel]:
    """The pool's M models under ``recipe`` (from the cache, or trained stacked together)."""
    cache = ModelCache(default_cache_dir())
    data = pool.dataset
    return cache.get_or_train_many(
        data.fingerprint(),
        [(pool.training_rows(m), pool.seeds[m]) for m in range(pool.n_models)],
        recipe,
        pool.device,
        features=data.features,
        labels=data.labels,
        num_classes=data.num_classes,
        progress=False,
        workers=1,  # a study cell is one process; the sweep runs cells side by side
        checkpoints=checkpoints,
    )


def query_pool(pool: Pool, models: Sequence[TrainedModel]) -> np.ndarray:
    """Logits float32 [M, P, Q, C] of the models on the pool."""
    spec = SignalSpec(queries=pool.queries)
    logits = query_signals([tm.module for tm in models], pool.dataset.features,
                           pool.dataset.labels, pool.rows, pool.dataset.kind, spec, pool.device,
                           progress=False).logits
    assert logits is not None  # a classifier's signals hold its logits
    return logits


def make_bank(pool: Pool, logits: np.ndarray) -> SignalBank:
    """The bank of the pool: every sample audited, no population."""
    n = len(pool.rows)
    return assemble_bank(Signals(logits), pool.dataset.labels[pool.rows], pool.membership,
                         audit=np.ones(n, dtype=bool), population=np.zeros(n, dtype=bool))


def mixed_bank(target_logits: np.ndarray, reference_logits: np.ndarray, target: int,
               pool: Pool) -> SignalBank:
    """Model ``target`` from the target-recipe logits, every other model from the references'
    (how ``reference_recipe`` builds a bank, for any target of the pool)."""
    logits = reference_logits.copy()
    logits[target] = target_logits[target]
    return make_bank(pool, logits)


def model_stats(bank: SignalBank) -> list[dict[str, float]]:
    """Per model: accuracy and mean cross-entropy on its members (train) and on the pool's
    other half (test), from the plain query; the gaps are train - test accuracy and
    test - train loss (the generalization paper's eq. 3-4)."""
    assert bank.logits is not None and bank.labels is not None  # set by SignalBank
    logits = bank.logits[:, :, 0, :].astype(np.float64)
    top = logits.max(axis=-1, keepdims=True)
    log_norm = np.log(np.exp(logits - top).sum(axis=-1)) + top[..., 0]
    true = np.take_along_axis(logits, bank.labels[None, :, None], axis=-1)[..., 0]
    loss = log_norm - true  # [M, N]
    correct = logits.argmax(axis=-1) == bank.labels[None, :]
    out = []
    for m in range(bank.n_models):
        inn = bank.membership[m] & bank.audit
        out_ = ~bank.membership[m] & bank.audit
        train_acc, test_acc = float(correct[m, inn].mean()), float(correct[m, out_].mean())
        train_loss, test_loss = float(loss[m, inn].mean()), float(loss[m, out_].mean())
        out.append({"train_acc": train_acc, "test_acc": test_acc,
                    "acc_gap": train_acc - test_acc, "train_loss": train_loss,
                    "test_loss": test_loss, "loss_gap": test_loss - train_loss})
    return out


def attack_rows(bank: SignalBank, target: int, attacks: Sequence[str],
                stats: Mapping[str, float], extra: Mapping[str, Any] | None = None
                ) -> list[dict[str, Any]]:
    """One row per attack on ``target`` (the bank's other models its references): AUC and
    TPR at every FPR of :data:`ROC_FPRS`, with the target's accuracy/loss figures."""
    result = evaluate_attacks(bank, target, list(attacks), EvaluationOptions(
        metrics=MetricsConfig(fprs=list(ROC_FPRS), bootstrap=0, recalls=[0.5]),
        thresholds=False))
    rows = []
    for outcome in result.outcomes:
        met = outcome.metrics
        rows.append({**(extra or {}), "model": target, "attack": outcome.name, **stats,
                     **met.auc_columns(), **met.counts(),
                     **met.tpr_columns(ROC_FPRS)})
    return rows


def evaluate_all(bank: SignalBank, attacks: Sequence[str],
                 extra: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every model of the bank attacked in turn, the others its references."""
    stats = model_stats(bank)
    return [row for m in range(bank.n_models)
            for row in attack_rows(bank, m, attacks, stats[m], extra)]
