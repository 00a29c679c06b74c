"""Stage 1 of a run: the design's models trained or loaded, then queried into a signal bank
(with the extra channels and output defences the config asks for)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from miaudit.attacks import get_attack
from miaudit.config import RunConfig
from miaudit.data import Dataset, load_dataset
from miaudit.devices import resolve_device
from miaudit.pipeline.models import forgetting_models, train_design
from miaudit.protocol import Design, make_design, make_split
from miaudit.signals import SignalBank
from miaudit.signals.boundary import boundary_channels
from miaudit.signals.defences import apply_defence
from miaudit.signals.query import augmented_queries, per_sample_grad_norms, query_logits
from miaudit.train import ModelCache, TrainedModel
from miaudit.train.cache import default_cache_dir


def default_queries(kind: str, attacks: list[str]) -> list[str]:
    """Queries of a run that does not list them: plain for tabular data; for images, the
    largest number of augmented queries any of the run's attacks' papers makes (plain and
    mirror; 8 with RAPID: plain, mirror and 6 crop + flip draws)."""
    if kind != "image":
        return ["plain"]
    return augmented_queries(max([get_attack(a).image_queries for a in attacks] + [2]))


@dataclass
class BuiltBank:
    """A bank with the models behind it and how they were obtained."""

    bank: SignalBank
    design: Design
    dataset: Dataset
    models: list[TrainedModel]
    queries: list[str]
    trained: int = 0
    reused: int = 0
    forgetting: list[TrainedModel] = field(default_factory=list)
    forgetting_bank: SignalBank | None = None  # the target + its forgetting copies
    info: dict[str, Any] = field(default_factory=dict)


def build_bank(cfg: RunConfig, progress: bool = True) -> BuiltBank:
    """Train or load every model of the design and query them into a bank."""
    device = resolve_device(cfg.device)
    dataset = load_dataset(cfg.dataset.name, cfg.dataset.data_dir, **cfg.dataset.options)
    split = make_split(
        len(dataset), cfg.split.audit, cfg.split.public, cfg.split.population, cfg.seed
    )
    design = make_design(split, cfg.models, cfg.design, cfg.seed, cfg.target, cfg.split.members)
    cache = ModelCache(Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir())
    start = time.perf_counter()
    models = train_design(cfg, dataset, design, cache, device, progress)
    copies = forgetting_models(cfg, dataset, design, models[design.target], cache, device)
    train_wall = time.perf_counter() - start
    queries = cfg.signals.queries or default_queries(dataset.kind, cfg.attacks)
    start = time.perf_counter()
    bank, forgetting_bank = query_bank(cfg, dataset, design, models, copies, queries, device,
                                       progress)  # fmt: skip
    return BuiltBank(
        bank=bank, design=design, dataset=dataset, models=models, queries=list(queries),
        trained=cache.stats.misses, reused=cache.stats.hits, forgetting=copies,
        forgetting_bank=forgetting_bank,
        info={"query_seconds": time.perf_counter() - start, "device": device,
              "train_wall_seconds": train_wall},
    )


def query_bank(
    cfg: RunConfig, dataset: Dataset, design: Design, models: list[TrainedModel],
    copies: list[TrainedModel], queries: list[str], device: str, progress: bool,
) -> tuple[SignalBank, SignalBank | None]:  # fmt: skip
    """Query the design's ``models`` (and forgetting ``copies``) on every sample of the split:
    the bank, and the forgetting bank (None without copies)."""
    rows = design.split.rows
    everyone = models + copies
    logits = query_logits(
        [tm.module for tm in everyone], dataset.features, rows, queries, dataset.kind, device,
        cfg.signals.batch_size, progress,
    )
    # The attacker sees the defended outputs; white-box channels come from the model itself.
    logits = apply_defence(logits, cfg.signals.defence)
    channels = {}
    if cfg.signals.boundary_distance:
        channels.update(boundary_channels(
            [tm.module for tm in everyone], dataset.features, dataset.labels, rows,
            seed=cfg.seed, device=device,
        ))
    if cfg.signals.grad_norm:
        channels["grad_norm"] = np.stack(
            [per_sample_grad_norms(tm.module, dataset.features, dataset.labels, rows, device)
             for tm in everyone]
        )
    n = design.n_models
    bank = SignalBank(
        logits=logits[:n],
        labels=dataset.labels[rows],
        membership=design.membership,
        population=design.population_mask(),
        audit=design.audit_mask(),
        channels={k: v[:n] for k, v in channels.items()},
    )
    forgetting_bank = None
    if copies:
        # target first, then its copies: OUT for every audit sample, IN on the public pool
        public = ~design.audit_mask() & ~design.population_mask()
        forgetting_bank = SignalBank(
            logits=np.concatenate([logits[[design.target]], logits[n:]]),
            labels=bank.labels,
            membership=np.vstack([design.membership[[design.target]],
                                  np.repeat(public[None], len(copies), axis=0)]),
            population=bank.population,
            audit=bank.audit,
            channels={k: np.concatenate([v[[design.target]], v[n:]])
                      for k, v in channels.items()},
        )
    return bank, forgetting_bank
