"""Stage 1 of a run: the design's models trained or loaded, then queried into a signal bank
(with the extra channels and output defences the config asks for)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from miaudit.attacks import get_attack
from miaudit.attacks.registry import augmented_queries_problem
from miaudit.config import (
    RunConfig,
    recipe_fields,
    resolve_grad_norm,
    resolve_queries,
)
from miaudit.data import Dataset, load_dataset
from miaudit.data.dataset import DataKind
from miaudit.errors import ConfigError
from miaudit.pipeline.canaries import canary_secrets, check_canaries, target_dataset
from miaudit.pipeline.models import Recipes, forgetting_models, resolve_recipes, train_design
from miaudit.privacy.secrets import CanarySecret
from miaudit.protocol import Design, make_design, make_split
from miaudit.runtime.devices import check_precision, resolve_device
from miaudit.signals import SignalBank
from miaudit.signals.assemble import (
    SignalSpec,
    assemble_bank,
    query_signals,
    require_channels,
)
from miaudit.train import ModelCache, TrainedModel
from miaudit.train.gradient_canaries import GradientCanaryRecord
from miaudit.train.model_cache import default_cache_dir


@dataclass(frozen=True)
class BuildInfo:
    """How a bank's models were obtained: the ``device`` they trained and are queried on, the
    wall-clock seconds of training (or loading from the cache) and of querying, the notes for
    the report (e.g. texts cut to the recipe's length) and, with secret canaries, what the
    target gives away about each (:func:`secret_exposures`; None without them)."""

    device: str
    train_wall_seconds: float = 0.0
    notes: tuple[str, ...] = ()
    query_seconds: float = 0.0
    canary_secrets: list[dict[str, Any]] | None = None


@dataclass
class BuiltBank:
    """A bank with the models behind it and how they were obtained."""

    bank: SignalBank | None  # None: models trained or loaded, not yet queried (query=False)
    design: Design
    dataset: Dataset  # as the target trained on it (with the canaries' labels) and the bank
    models: list[TrainedModel]
    queries: list[str]
    info: BuildInfo  # the device, the seconds, the notes
    trained: int = 0
    reused: int = 0
    forgetting: list[TrainedModel] = field(default_factory=list)
    forgetting_bank: SignalBank | None = None  # the target + its forgetting copies
    texts: np.ndarray | None = None  # a text dataset's texts (the bank records their sizes)
    original: Dataset | None = None  # the dataset as loaded, when canaries relabelled it
    tokenizer: Any = None  # a text dataset's tokenizer (None: MiniLM's WordPiece, or no text)
    secrets: list[CanarySecret] = field(default_factory=list)  # secret canaries' texts
    # the target's white-box gradient canaries' record (canaries.kind: gradient)
    gradient_canaries: GradientCanaryRecord | None = None


def build_bank(cfg: RunConfig, progress: bool = True, query: bool = True,
               recipes: Recipes | None = None) -> BuiltBank:
    """Train or load every model of the design and query them into a bank (``query=False``:
    the models only, e.g. to query checkpoints of one's choosing with :func:`query_bank`).
    ``recipes``: the run's, resolved by its plan (:func:`resolve_recipes`); a study that
    builds from its config alone leaves them out: resolved here, once, for every step."""
    device = resolve_device(cfg.device)
    if recipes is None:
        recipes = resolve_recipes(cfg)
    for recipe in (recipes.target, recipes.reference):  # bf16 not native: before the data loads
        check_precision(recipe.precision, device)
    check_canaries(cfg, recipes)  # a design that can never certify ε > 0 fails before any work
    dataset = load_dataset(cfg.dataset.name, cfg.data_dir, **cfg.dataset.options)
    notes, texts, tokenizer = [], None, None
    secrets: list[CanarySecret] = []
    canary_features = None
    check_lm_recipes(cfg, recipes, dataset.kind)
    split = make_split(
        len(dataset), cfg.split.audit, cfg.split.public, cfg.split.population, cfg.seed,
        canaries=cfg.canaries.rows,  # gradient canaries take no rows
    )
    if dataset.kind == "text":  # text models train and are queried on token ids
        from miaudit.models.run_tokenizer import run_tokenizer, tokenized_dataset
        from miaudit.models.text import check_vocabulary

        texts = dataset.features
        tokenizer, described = run_tokenizer(cfg.dataset.tokenizer, texts[split.public],
                                             cfg.dataset.bpe_vocab_size, base_model(recipes))
        text_dataset = dataset
        dataset, cut = tokenized_dataset(dataset, cfg.dataset.max_length, tokenizer, described)
        notes += [cut] if cut else []
        secrets = canary_secrets(cfg)
        if secrets:  # the target trains on these texts in the canary rows (tokenized alike)
            texts = texts.copy()
            texts[split.canaries] = [c.text for c in secrets]
            secret_set = dataclasses.replace(
                text_dataset, features=np.array([c.text for c in secrets], dtype=object),
                labels=text_dataset.labels[split.canaries])
            canary_features = tokenized_dataset(secret_set, cfg.dataset.max_length, tokenizer,
                                                described)[0].features
        check_vocabulary(dataset.features, [recipes.target, recipes.reference])
    queries = resolve_queries(cfg.signals.queries, dataset.kind, cfg.attacks,
                              recipe_fields(cfg)[0].get("augment"))  # auto: the recipe's
    check_query_needs(cfg.attacks, queries)  # before any model trains
    design = make_design(split, cfg.models, cfg.design, cfg.seed, cfg.target, cfg.split.members)
    cache = ModelCache(Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir())
    original, dataset = dataset, target_dataset(dataset, design, cfg, canary_features)
    start = time.perf_counter()
    models, record = train_design(cfg, recipes, original, design, cache, device, progress,
                                  target_dataset=dataset)
    copies = forgetting_models(cfg, dataset, design, models[design.target], cache, device)
    train_wall = time.perf_counter() - start
    built = BuiltBank(
        bank=None, design=design, dataset=dataset, models=models, queries=list(queries),
        trained=cache.stats.misses, reused=cache.stats.hits, forgetting=copies, texts=texts,
        original=original if original is not dataset else None, tokenizer=tokenizer,
        secrets=secrets, gradient_canaries=record,
        info=BuildInfo(device=device, train_wall_seconds=train_wall, notes=tuple(notes)),
    )
    if not query:
        return built
    if secrets:
        built.info = dataclasses.replace(built.info, canary_secrets=secret_exposures(
            cfg, secrets, tokenizer, models[design.target].module, device))
    start = time.perf_counter()
    built.bank, built.forgetting_bank = query_bank(cfg, dataset, design, models, copies,
                                                   queries, device, progress, texts=texts)
    built.info = dataclasses.replace(built.info, query_seconds=time.perf_counter() - start)
    return built


def check_query_needs(attacks: list[str], queries: list[str]) -> None:
    """A run's attacks that need augmented queries its bank will not have fail here, before
    training (a run scores every attack it lists; `miaudit audit` skips them instead)."""
    for name in attacks:
        needed = get_attack(name).needs.augmented_queries
        if needed and len(queries) - 1 < needed:
            raise ConfigError(f"attack '{name}' cannot run on this run's queries "
                              f"{list(queries)}: {augmented_queries_problem(needed, len(queries))}"
                              " Or drop it from attacks.")


def base_model(recipes: Recipes) -> str | None:
    """The pretrained base model the run's LMs fine-tune (``hf-causal-lm``'s
    ``arch_params.base_model``; None for other recipes): the texts' tokenizer, and the
    reference of ``lm-base-reference``. Target and references must share it."""
    bases = {r.arch_params.get("base_model") for r in (recipes.target, recipes.reference)}
    if len(bases) > 1:
        raise ConfigError(
            f"the target and the reference recipes fine-tune different base models "
            f"({', '.join(sorted(map(str, bases)))}): they must share one (one tokenizer, one "
            "base model for lm-base-reference)."
        )
    found = bases.pop()
    return str(found) if found else None


def check_lm_recipes(cfg: RunConfig, recipes: Recipes, kind: DataKind) -> None:
    """A causal-LM recipe (gpt-small) trains on a text dataset's MiniLM WordPiece ids (its
    ``vocab_size``/``pad_id`` defaults), and the target and references are LMs together: their
    sequence bank has no logits to mix with a classifier's."""
    from miaudit.models.text import CAUSAL_LM_ARCHITECTURES

    lms = [r.architecture in CAUSAL_LM_ARCHITECTURES for r in (recipes.target, recipes.reference)]
    if any(lms) and not all(lms):
        raise ConfigError(
            "the target and the reference recipes must both be causal LMs (gpt-small) or "
            f"both classifiers; got {recipes.target.architecture!r} and "
            f"{recipes.reference.architecture!r}."
        )
    if base_model(recipes) and cfg.dataset.tokenizer not in ("auto", "base"):
        raise ConfigError(
            f"hf-causal-lm fine-tunes a pretrained model, which reads its own tokenizer's ids: "
            f"dataset.tokenizer {cfg.dataset.tokenizer!r} would feed it ids it never learnt. "
            "Set dataset.tokenizer: base (or leave it out)."
        )
    if any(lms) and kind != "text":
        raise ConfigError(
            f"recipe.architecture {recipes.target.architecture!r} is a causal LM: it trains on "
            f"texts (a text dataset, e.g. a .csv with text_column), not on {kind} data."
        )


def signal_spec(cfg: RunConfig, queries: list[str]) -> SignalSpec:
    """The run config's signals section as the assembly's spec."""
    return SignalSpec(queries=tuple(queries),
                      grad_norm=resolve_grad_norm(cfg.signals.grad_norm, cfg.attacks),
                      boundary_distance=cfg.signals.boundary_distance,
                      defence=cfg.signals.defence, batch_size=cfg.signals.batch_size,
                      seed=cfg.seed,
                      # token ids (DC-PDD's frequencies) kept when an attack to run reads them
                      token_ids=any(get_attack(a).needs.token_ids for a in cfg.attacks))


def query_bank(
    cfg: RunConfig, dataset: Dataset, design: Design, models: list[TrainedModel],
    copies: list[TrainedModel], queries: list[str], device: str, progress: bool,
    texts: np.ndarray | None = None,
) -> tuple[SignalBank, SignalBank | None]:  # fmt: skip
    """Query the design's ``models`` (and forgetting ``copies``) on every sample of the split:
    the bank, and the forgetting bank (None without copies)."""
    everyone = models + copies
    base, prefix = lm_extras(cfg, dataset, design, models[design.target])
    signals = query_signals(
        [tm.module for tm in everyone], dataset.features, dataset.labels, design.split.rows,
        dataset.kind, signal_spec(cfg, queries), device, progress,
        precision=[tm.recipe.precision for tm in everyone], base=base, prefix_ids=prefix,
    )
    require_channels(signals, signal_spec(cfg, queries))
    n = design.n_models
    bank = design.bank(signals.take(range(n)), dataset.labels, texts)
    forgetting_bank = None
    if copies:
        # target first, then its copies: OUT for every audit sample, IN on the public pool
        public = design.public_mask()
        membership = np.vstack([design.membership[[design.target]],
                                np.repeat(public[None], len(copies), axis=0)])
        assert bank.labels is not None and bank.audit is not None  # set by SignalBank
        assert bank.population is not None
        forgetting_bank = assemble_bank(
            signals.take([design.target, *range(n, len(everyone))]), bank.labels, membership,
            bank.audit, bank.population, canary=bank.canary,
        )
    return bank, forgetting_bank


def lm_extras(cfg: RunConfig, dataset: Dataset, design: Design, trained: TrainedModel
              ) -> tuple[Any, np.ndarray | None]:  # fmt: skip
    """What a causal LM's bank needs beyond the models, when an attack to run reads it: the
    base model (``lm-base-reference``; the run's ``hf-causal-lm`` base, not trained) and
    ReCaLL's prefix, drawn from the population rows (no model trains on them). A ConfigError
    when an attack listed cannot have them (a run scores every attack it lists)."""
    target = trained.module
    if dataset.kind != "tokens" or not getattr(target, "causal_lm", False):
        return None, None
    wanted = [get_attack(a) for a in cfg.attacks]
    base = prefix = None
    # the target's own recipe names the run's base (check_lm_recipes: the references share it)
    found = trained.recipe.arch_params.get("base_model")
    name = str(found) if found else None
    if any(a.needs.base_model for a in wanted):
        if name is None:
            raise ConfigError(
                "lm-base-reference reads the pretrained base model's log-probabilities; this "
                "run's LMs have none (recipe.architecture hf-causal-lm with "
                "arch_params.base_model has one). Drop it from attacks.")
        from miaudit.models.hf_lm import base_module

        base = base_module(name)
    if any(a.needs.prefix_conditioned for a in wanted):
        from miaudit.models.hf import max_positions
        from miaudit.signals.sequence import RECALL_PREFIX_TEXTS, fitted_prefix

        rows = design.split.population
        if rows.size < RECALL_PREFIX_TEXTS:
            raise ConfigError(f"recall's prefix is drawn from {RECALL_PREFIX_TEXTS} population "
                              "texts (no model trains on them): raise split.population.")
        prefix, why = fitted_prefix(dataset.features, rows, int(target.pad_id), cfg.seed,
                                    max_positions(target), "dataset.max_length")
        if why:
            raise ConfigError(f"recall cannot run: {why}.")
        assert prefix is not None  # fitted_prefix returns a prefix or why not
        # at most half a text's length (its end, which joins the text): each prefixed
        # forward costs P + L positions, so 1.5 plain forwards at most
        prefix = prefix[-max(1, int(dataset.features.shape[1]) // 2):]
    return base, prefix


def secret_exposures(cfg: RunConfig, secrets: list[CanarySecret], tokenizer: Any,
                     target: Any, device: str) -> list[dict[str, Any]]:  # fmt: skip
    """Per secret canary, what the target gives away about its secret (Carlini et al. 2019):
    exposure against ``canaries.exposure_candidates`` secrets sampled from the format's space
    (sampled and skew-normal extrapolated), and whether greedy decoding from the prefix
    writes the secret out. Needs the run's tokenizer as a ``tokenizers.Tokenizer`` (the base
    model's, or a BPE); MiniLM's WordPiece ids are refused with why."""
    from miaudit.models.run_tokenizer import BaseTokenizer
    from miaudit.privacy.exposure import exposure, feature_codec, greedy_extractions

    if isinstance(tokenizer, BaseTokenizer):
        encode, decode = feature_codec(tokenizer.tokenizer, tokenizer.pad)
    elif tokenizer is not None:  # a BPE of the run: its pad id is 0 already
        encode, decode = feature_codec(tokenizer, 0)
    else:
        raise ConfigError("secret canaries' exposure decodes and re-encodes candidate "
                          "secrets: use dataset.tokenizer bpe (or an hf-causal-lm's base), "
                          "not MiniLM's WordPiece.")
    found = exposure(target, encode, secrets, cfg.canaries.secret_format,
                     n_candidates=cfg.canaries.exposure_candidates, seed=cfg.seed,
                     device=device)
    extracted = greedy_extractions(target, encode, decode, [c.prefix for c in secrets],
                                   [c.secret for c in secrets], device=device)
    return [{"text": c.text, "log_likelihood": round(e.log_likelihood, 4),
             "exposure": round(e.exposure, 3),
             "exposure_extrapolated": round(e.exposure_extrapolated, 3),
             "max_sampled_exposure": round(e.max_sampled_exposure, 3),
             "extracted": int(bool(x))}
            for c, e, x in zip(secrets, found, extracted, strict=True)]
