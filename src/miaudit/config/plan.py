"""The bank a run config will build, planned from the config alone
(:class:`~miaudit.attacks.fit.BankPlan`), so that an attack the run could never score is
refused before any model trains (:func:`miaudit.config.run.check_attacks_fit`).

What each part of the plan follows (it must match what the pipeline builds, or an attack it
accepts would fail `Needs.check` on the bank after training; tests/attacks/test_fit.py holds
them together):

- the data kind: the dataset registry's for a registered dataset; a user file's from its
  loader options (``text_column`` or ``kind``) or its suffix (tables load as tabular rows, a
  ``.txt`` as texts); a
  ``.npz`` without ``kind`` is images or tabular rows, known once it loads (None here: the run
  checks again once it has loaded it). Texts with a causal-LM recipe (``gpt-small``,
  ``hf-causal-lm``) make a sequence bank, texts with a classifier a classifier's bank; both
  hold the texts' sizes (``blind``, ``zlib``);
- references: ``models - 1``, IN and OUT for an audit sample as the design draws them and the
  target's view sets one aside (:func:`~miaudit.attacks.fit.reference_sides`);
- population: ``split.population`` > 0;
- channels: ``grad_norm`` (:func:`~miaudit.config.sections.resolve_grad_norm`) and
  ``boundary_distance`` (``signals.boundary_distance``), classifiers only;
- queries: :func:`~miaudit.config.sections.resolve_queries` (token ids: plain unless listed);
- a causal LM's extras, each kept when an attack listed reads it: the base model (a recipe's
  ``arch_params.base_model``), ReCaLL's prefix (drawn from the population rows) and the
  scored token ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from miaudit.attacks.fit import (
    DATA_WORDS,
    BankPlan,
    PlanData,
    models_for,
    reference_sides,
    references_serve,
)
from miaudit.attacks.registry import Needs, get_attack
from miaudit.config.sections import AUTO, resolve_grad_norm, resolve_queries

if TYPE_CHECKING:  # miaudit.data loads its loaders: the config checks stay light
    from miaudit.data.dataset import DataKind

# Table files a user gives: without `text_column` (or `kind: text`) they load as tabular rows.
_TABLE_SUFFIXES = (".csv", ".jsonl", ".parquet", ".pq")


def dataset_kind(name: str, options: dict[str, Any] | None = None,
                 data_dir: str | None = None) -> DataKind | None:
    """The kind (image, tabular, text) of dataset ``name`` with its loader ``options``,
    without loading it: a registered dataset's, or a user file's as its loader will read it;
    None for a ``.npz`` without ``kind`` (images or a table, known once it loads)."""
    from miaudit.data import list_datasets

    options = options or {}
    for info in list_datasets(data_dir):
        if info.name == name:
            return info.kind
    path = str(options.get("path") or name)
    if (options.get("text_column") is not None or options.get("kind") == "text"
            or Path(path).suffix.lower() == ".txt"):  # a .txt: texts, one a line
        return "text"
    given = options.get("kind")  # the loader's other kinds (it checks the value)
    if given == "image":
        return "image"
    if given == "tabular":
        return "tabular"
    if Path(path).suffix.lower() in _TABLE_SUFFIXES:
        return "tabular"
    return None


def _count(value: Any) -> int | None:
    """A split size as a row count: a count as given, None for a fraction (known once the
    dataset's size is)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _given(value: Any) -> bool:
    """A split size gives rows: a count > 0 or a fraction > 0."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def run_plan(cfg: Any, target: Any, reference: Any, augment: Any = None,
             kind: DataKind | None = None) -> BankPlan:
    """The bank the run config ``cfg`` will build, from its target and reference recipes
    (:class:`~miaudit.train.recipe.Recipe`, as the pipeline resolves them), the target
    recipe's ``augment`` as the config gives it (what ``signals.queries: auto`` replays) and,
    when known, the loaded dataset's ``kind`` (default: :func:`dataset_kind`)."""
    from miaudit.models.names import CAUSAL_LM_ARCHITECTURES

    if kind is None:
        kind = dataset_kind(cfg.dataset.name, cfg.dataset.options, cfg.data_dir)
    seen: PlanData | None = "text" if kind == "tokens" else kind  # tokens: texts, tokenized
    attacks = list(cfg.attacks)
    wanted = [get_attack(a).needs for a in attacks]
    lm = target.architecture in CAUSAL_LM_ARCHITECTURES
    recall_texts = 0  # ReCaLL's prefix texts: a causal LM's only (signals.sequence: torch)
    if lm:
        from miaudit.signals.recall_texts import RECALL_PREFIX_TEXTS

        recall_texts = RECALL_PREFIX_TEXTS
    data = "sequence" if lm and seen in ("text", None) else seen
    bases = {r.arch_params.get("base_model") for r in (target, reference)}
    base = bases.pop() if len(bases) == 1 else None
    population = _count(cfg.split.population)
    prefix: bool | None = lm and any(n.prefix_conditioned for n in wanted)
    if prefix and population is None:
        prefix = None  # a fraction: its count is known with the dataset's size
    elif prefix:
        prefix = population is not None and population >= recall_texts
    channels: frozenset[str] = frozenset()
    if not lm:
        on = {"grad_norm": resolve_grad_norm(cfg.signals.grad_norm, attacks),
              "boundary_distance": bool(cfg.signals.boundary_distance)}
        channels = frozenset(name for name, value in on.items() if value)
    queries: tuple[str, ...] | None
    if seen is None and cfg.signals.queries == AUTO and augment:
        queries = None  # images are queried on the views of the augmentation, tables not
    else:
        queries = tuple(resolve_queries(cfg.signals.queries,
                                        "tokens" if seen == "text" else str(seen), attacks,
                                        augment))
    public, pool = _given(cfg.split.public), _given(cfg.split.population)
    sides = reference_sides(cfg.design, cfg.models, cfg.target, public)
    shadows = [references_serve(cfg.design, cfg.models, needs, cfg.target, public, pool)
               for needs in (Needs(shadows=1), Needs(shadows=1, out_references=1))]
    plan = BankPlan(
        data=data, dataset=Path(str(cfg.dataset.name)).name, where="this run",
        references=cfg.models - 1,
        in_references=None if sides is None else sides[0],
        out_references=None if sides is None else sides[1],
        shadow_scorer=shadows[0], shadow_references=shadows[1],
        population=pool,
        channels=channels, queries=queries,
        sequence=None if data is None else data == "sequence",
        texts=None if seen is None else seen == "text",
        base_model=lm and base is not None and any(n.base_model for n in wanted),
        prefix=prefix,
        token_ids=lm and any(n.token_ids for n in wanted),
    )
    return _with_explain(plan, cfg, target, bool(augment), lm, base, population,
                         recall_texts)


def _with_explain(plan: BankPlan, cfg: Any, target: Any, augmented: bool, lm: bool,
                  base: str | None, population: int | None, recall_texts: int) -> BankPlan:
    """``plan`` with the run's explanations: what the run's bank lacks, in its config keys,
    and how to give it."""
    import dataclasses

    models, design = cfg.models, cfg.design
    refs = models - 1
    public, pool = _given(cfg.split.public), _given(cfg.split.population)
    arch = target.architecture

    def more_models(attack: str) -> str:
        needs = get_attack(attack).needs
        enough = models_for(design, needs, models + 1, cfg.target, public, pool)
        if enough is not None:
            return f"raise models to at least {enough}"
        online = models_for("online", needs, 2, cfg.target, True, pool)
        how = f" with models >= {online}" if online else ""
        return f"use design: online{how} (every audit sample IN for half of the models)"

    def references(need: str, attack: str) -> str:
        sides = reference_sides(design, models, cfg.target, public) or (0, 0)
        if refs == 0:
            state = "this run trains the target alone (models: 1)"
        elif need == "in_references" and not sides[0] and design == "offline":
            state = ("design offline trains every reference model on the public pool, none "
                     "on an audit sample")
        else:
            count = sides[0] if need == "in_references" else sides[1]
            side = "IN" if need == "in_references" else "OUT"
            aside = ("; each audit sample is IN for half of the models, and the target's view "
                     "sets one reference aside per sample so that the references' membership "
                     "says nothing of the target's" if design != "offline" else "")
            are = "is" if count == 1 else "are"
            state = (f"with design {design} and models: {models}, at most {count} of its "
                     f"{refs} reference model{'s' if refs != 1 else ''} {are} {side} for an "
                     f"audit sample{aside}")
        return f"{state}; {more_models(attack)}"

    def not_lm() -> str:
        if plan.data in ("image", "tabular"):
            return (f"{plan.data_words}, and its models classifiers ({arch}): train causal "
                    "LMs on texts (a text dataset, recipe.architecture gpt-small or "
                    "hf-causal-lm)")
        return (f"this run's models are text classifiers ({arch}), not causal LMs: set "
                "recipe.architecture to gpt-small or hf-causal-lm")

    def unlisted(what: str) -> str:
        return f"this run keeps {what} only when an attack listed in attacks reads it"

    def explain(need: str, value: Any, attack: str) -> str:
        if need in ("out_references", "in_references"):
            return references(need, attack)
        if need == "shadows" and refs >= value:
            return (f"with design {design} and models: {models}, no reference can serve as a "
                    "shadow it learns from (each view sets one reference aside per sample, so "
                    "that the references say nothing of the target's membership, and too few "
                    f"are left); {more_models(attack)}")
        if need == "shadows":
            return (f"this run has {refs} reference model{'s' if refs != 1 else ''} "
                    f"(models: {models}); {more_models(attack)}")
        if need == "population":
            return (f"split.population is {cfg.split.population!r}: no row is kept out of "
                    "every model; give it rows (a count, or a fraction such as 0.2)")
        if need == "channel":
            if lm:
                what = ("the gradient of its loss on a label" if value == "grad_norm" else
                        "the distance to its decision boundary")
                return f"causal LMs have no '{value}' channel (a classifier's: {what})"
            if value == "grad_norm":
                return "signals.grad_norm is false: set it to true (or auto)"
            if value == "boundary_distance":
                return ("signals.boundary_distance is off (its HopSkipJump search costs about "
                        "1,100 queries per sample and model): set signals.boundary_distance: "
                        "true")
            return f"this run computes no channel '{value}'"
        if need in ("sequence", "next_token_moments"):
            return not_lm()
        if need == "text":
            return (f"{plan.data_words}, which have no text; run it on a text dataset (e.g. "
                    "spam, or a .csv with dataset.options.text_column)")
        if need == "augmented_queries":
            if cfg.signals.queries != AUTO:
                how = "as signals.queries lists them"
            elif lm or plan.data == "text":
                how = "signals.queries: auto queries token ids on the plain texts"
            else:
                how = ("signals.queries: auto replays the recipe's augmentation, and "
                       + ("it has none" if not augmented else "these are its views"))
            return (f"this run queries {list(plan.queries or ())} ({how}): list augmented "
                    "views in signals.queries ([plain, mirror] for images, [plain, "
                    "token-dropout-1] for texts; tabular data have none)")
        if need == "base_model":
            if not lm:
                return not_lm()
            if base is None:
                return ("this run's LMs fine-tune no pretrained base model: use "
                        "recipe.architecture hf-causal-lm with arch_params.base_model")
            return unlisted("the base model's log-probabilities")
        if need == "prefix_conditioned":
            if not lm:
                return not_lm()
            if population is not None and population < recall_texts:
                return (f"its prefix is drawn from {recall_texts} population texts (no model "
                        f"trains on them), and split.population is {population}: raise it to "
                        f"at least {recall_texts}")
            return unlisted("the prefix-conditioned log-probabilities")
        if need == "token_ids":
            return not_lm() if not lm else unlisted("the token ids")
        return f"this run's bank will not have it ({plan.data_words})"

    return dataclasses.replace(plan, explain=explain)


__all__ = ["DATA_WORDS", "dataset_kind", "run_plan"]
