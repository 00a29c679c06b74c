"""Which attacks a bank will not support, known before the bank exists (before any model
trains).

Each attack declares what it needs of the bank (:class:`~miaudit.attacks.registry.Needs`), and
`Needs.check` holds it against a bank once there is one. A run or an audit knows most of what
its bank will hold before it loads anything heavy: the kind of data (images, tabular rows,
texts for a classifier, texts for causal LMs), its reference models and whether any trains on
the audit samples, its population rows, the white-box channels and the queries its signals
section computes, and a causal LM's extras. :class:`BankPlan` records that, and
:func:`unfit_attacks` holds every attack's `Needs` against it, field by field, so that a run
refuses an attack it could never score before a model trains (and an audit one listed
explicitly).

A plan is the bank as it will be: an attack the plan accepts passes `Needs.check` on the bank
built from the same config, and one it refuses would fail it (tests/attacks/test_fit.py holds
the two together on real runs, for every registered attack). Where a front door cannot know
a need before loading (an audit's public rows, the kind of a user's ``.npz``), the plan says
None there, and nothing is refused on it: `Needs.check` decides on the bank.

Messages say what is wrong and how to fix it in the front door's own keys: each plan carries
an ``explain`` function from the front door (``models``, ``split.population`` for a run;
``references.models``, ``--public`` for an audit).

Torch-free: the config checks import this module.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from miaudit.attacks.registry import Needs, get_attack, list_attacks
from miaudit.errors import AttackError, ConfigError

# What a planned bank holds: a dataset's kind (miaudit.data.dataset.DataKind) as the attacks
# see it, tokens as text, and "sequence" for texts that causal LMs read
PlanData = Literal["image", "tabular", "text", "sequence"]
# What each kind of planned bank holds, in words for messages.
DATA_WORDS: dict[PlanData, str] = {
    "image": "images",
    "tabular": "tabular rows",
    "text": "texts (for a text classifier)",
    "sequence": "texts (for causal language models)",
}
# The data kinds a plan knows (`BankPlan.data`).
DATA_KINDS: tuple[PlanData, ...] = get_args(PlanData)

# explain(need, value, attack): what the front door's bank lacks for this need, and how to
# give it to the attack (`need` is a field of `Needs`; `value` the attack's value of it).
Explain = Callable[[str, Any, str], str]


@dataclass(frozen=True)
class BankPlan:
    """What a bank will hold, before it is built.

    ``data``: ``image``, ``tabular``, ``text`` (texts for a classifier: a classifier's bank
    with the texts' sizes) or ``sequence`` (texts for causal LMs: a sequence bank with the
    texts' sizes); None when not known yet. ``dataset`` names the data for messages, ``where``
    the front door ("this run", "this audit").

    Counts are the most the bank will hold (a run's: exactly what it holds): ``references``
    (models other than the target), ``in_references`` and ``out_references`` (the most
    references IN, and OUT, for an audit sample as the target's view sees them, after it set
    one aside per sample in a balanced design: :mod:`miaudit.attacks.independence`). A flag
    says whether the bank will hold the thing: ``shadow_scorer`` (a reference can serve as a
    shadow that learns a scorer: members and non-members among the rows it may learn from)
    and ``shadow_references`` (such a shadow keeps a reference OUT of its own on some of
    them, for scorers on calibrated features), ``population`` (rows no model trains on),
    ``sequence`` (a causal LM's per-token arrays, with the next-token moments), ``texts`` (the
    texts' sizes), ``base_model``, ``prefix`` (ReCaLL's prefix-conditioned log-probs),
    ``token_ids``. ``channels``: the white-box channels it will hold; ``queries``: the views
    every sample is queried on (plain first). None anywhere: not known before the bank is
    built, so nothing is refused on it.
    """

    data: PlanData | None
    dataset: str = ""
    where: str = "this run"
    references: int | None = 0
    in_references: int | None = 0
    out_references: int | None = 0
    shadow_scorer: bool | None = False
    shadow_references: bool | None = False
    population: bool | None = False
    channels: frozenset[str] | None = frozenset()
    queries: tuple[str, ...] | None = ("plain",)
    sequence: bool | None = False
    texts: bool | None = False
    base_model: bool | None = False
    prefix: bool | None = False
    token_ids: bool | None = False
    explain: Explain | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.data is not None and self.data not in DATA_KINDS:
            raise ValueError(f"BankPlan.data must be one of {DATA_KINDS} or None; got "
                             f"{self.data!r}.")

    @property
    def data_words(self) -> str:
        """The data as messages name it: "this run's data (digits) are images"."""
        what = (DATA_WORDS[self.data] if self.data in DATA_WORDS
                else "data of a kind not known yet")
        return f"{self.where}'s data{f' ({self.dataset})' if self.dataset else ''} are {what}"


def _lacks_count(have: int | None, need: int) -> bool:
    return have is not None and have < need


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"


# Per field of `Needs`: (whether the plan lacks it, what the attack needs, in words). Every
# field of `Needs` has an entry (tests/attacks/test_fit.py checks it); one added to `Needs`
# without an entry is not planned (never refused here: `Needs.check` decides on the bank).
_CHECKS: dict[str, tuple[Callable[[BankPlan, Any, Needs], bool], Callable[[Any], str]]] = {
    "out_references": (
        lambda plan, n, _: _lacks_count(plan.out_references, n),
        lambda n: f"needs at least {_plural(n, 'reference model')} that did not train on the "
                  "audit samples (OUT)",
    ),
    "in_references": (
        lambda plan, n, _: _lacks_count(plan.in_references, n),
        lambda n: f"needs at least {_plural(n, 'reference model')} trained ON the audit "
                  "samples (an online attack)",
    ),
    "population": (
        lambda plan, _, __: plan.population is False,
        lambda _: "needs population samples (attacker data no model trains on)",
    ),
    "channel": (
        lambda plan, name, _: plan.channels is not None and name not in plan.channels,
        lambda name: f"needs the white-box channel '{name}'",
    ),
    "shadows": (
        lambda plan, n, needs: (_lacks_count(plan.references, n) or plan.shadow_scorer is False
                                or (bool(needs.out_references)
                                    and plan.shadow_references is False)),
        lambda n: f"needs at least {_plural(n, 'shadow/reference model')} with known "
                  "membership that can train its scorer",
    ),
    "sequence": (
        lambda plan, _, __: plan.sequence is False,
        lambda _: "needs a causal language model's per-token log-probabilities (a sequence "
                  "bank)",
    ),
    "next_token_moments": (
        lambda plan, _, __: plan.sequence is False,
        lambda _: "needs the mean and std of log p(v) under each next-token distribution "
                  "(a causal language model's sequence bank)",
    ),
    "text": (
        lambda plan, _, __: plan.texts is False,
        lambda _: "needs the samples' texts (their sizes, text_zlib_bytes and text_chars)",
    ),
    "augmented_queries": (
        lambda plan, n, _: plan.queries is not None and len(plan.queries) - 1 < n,
        lambda n: f"needs at least {_plural(n, 'augmented query', 'augmented queries')} per "
                  "sample beyond the plain one (on the plain query alone it would only "
                  "repeat a plain-query attack such as correctness)",
    ),
    "base_model": (
        lambda plan, _, __: plan.base_model is False,
        lambda _: "needs the pretrained base model's token log-probabilities",
    ),
    "prefix_conditioned": (
        lambda plan, _, __: plan.prefix is False,
        lambda _: "needs the models' token log-probabilities conditioned on a fixed non-member "
                  "prefix (ReCaLL)",
    ),
    "classifier": (
        lambda plan, _, __: plan.sequence is True,
        lambda _: "needs a classifier's own logits (a causal language model's sequence bank "
                  "has only a derived two-class view of its likelihood; use the language-model "
                  "attacks, e.g. lm-rmia)",
    ),
    "token_ids": (
        lambda plan, _, __: plan.token_ids is False,
        lambda _: "needs the scored token ids and the vocabulary size (token frequencies)",
    ),
    # every sequence bank miaudit builds holds it (lm_signals, the same forward pass)
    "top1_correct": (
        lambda plan, _, __: plan.sequence is False,
        lambda _: "needs whether the model's top-1 next-token prediction is right, per token "
                  "(a causal language model's sequence bank)",
    ),
}


def planned_needs() -> frozenset[str]:
    """The fields of `Needs` a plan is checked on."""
    return frozenset(_CHECKS)


def problems(needs: Needs, plan: BankPlan, attack: str = "") -> list[str]:
    """What ``plan`` lacks of ``needs``, each as "needs X: what the bank lacks; how to fix
    it" (empty: the plan supports them). Needs with one explanation (a classifier's bank
    lacks every causal-LM array for one reason) are named together."""
    found: dict[str, list[str]] = {}  # explanation -> the needs it explains, in order
    for spec in dataclasses.fields(Needs):
        value = getattr(needs, spec.name)
        check = _CHECKS.get(spec.name)
        if not value or check is None:
            continue
        lacks, needed = check
        if lacks(plan, value, needs):
            why = (plan.explain or _fallback(plan))(spec.name, value, attack)
            found.setdefault(why, []).append(_with_alternatives(needed(value), spec.name,
                                                                attack, plan))
    return [" and ".join([first, *(n.removeprefix("needs ") for n in rest)]) + f": {why}"
            for why, (first, *rest) in found.items()]


def unfit_attacks(names: Iterable[str], plan: BankPlan) -> dict[str, str]:
    """{attack: why} for each of ``names`` whose `Needs` the planned bank cannot meet, in the
    order given; the reason names every need it lacks, what the bank lacks and how to fix it.
    An unknown name is refused by the registry (did you mean ...)."""
    unfit = {}
    for name in names:
        found = problems(get_attack(name).needs, plan, name)
        if found:
            unfit[name] = ". Also, it ".join(found) + "."
    return unfit


def refusal(unfit: dict[str, str], where: str, listed: str = "attacks") -> str:
    """The message refusing the attacks of ``unfit`` (:func:`unfit_attacks`), one line
    each: ``where`` names the front door ("this run"), ``listed`` the key that lists them."""
    names = ", ".join(unfit)
    head = (f"{_plural(len(unfit), 'attack')} listed in {listed} cannot run on {where} "
            f"({names}), found before any model trains: drop "
            f"{'it' if len(unfit) == 1 else 'them'} from {listed}, or change {where} as said.")
    return "\n".join([head, *(f"  attack '{n}' cannot run: {why}" for n, why in unfit.items())])


def check_fit(names: Iterable[str], plan: BankPlan, listed: str = "attacks") -> None:
    """ConfigError naming every attack of ``names`` the plan cannot support, and why."""
    unfit = unfit_attacks(names, plan)
    if unfit:
        raise ConfigError(refusal(unfit, plan.where, listed))


def _with_alternatives(needed: str, need: str, attack: str, plan: BankPlan) -> str:
    """``needed`` with, for an online attack on a plan without IN references, its family's
    attacks that need none and that the plan supports (its offline variants)."""
    if need != "in_references" or not attack:
        return needed
    family = get_attack(attack).family
    fits = [s.name for s in list_attacks()
            if family and s.family == family and s.name != attack and not s.needs.in_references
            and not problems(s.needs, plan, s.name)]
    if not fits:
        return needed
    return f"{needed.removesuffix(')')}; its family's offline attacks: {', '.join(fits)})"


def _fallback(plan: BankPlan) -> Explain:
    def explain(need: str, value: Any, attack: str) -> str:
        return f"{plan.where}'s bank will not have it ({plan.data_words})"

    return explain


# --- reference models, as the target's view will see them -------------------------------

_NOMINAL_POOL = 64  # rows of each pool of the nominal bank a design is drawn on


@functools.lru_cache(maxsize=256)
def nominal_view(design: str, models: int, target: int = 0, public: bool = True,
                 population: bool = False) -> Any:
    """The target's `TargetView` of a nominal bank: ``models`` models (target included)
    whose membership the registered ``design`` draws (:mod:`miaudit.protocol`) over 64 audit
    rows, 64 public rows (``public`` False: none) and, with ``population``, 16 population
    rows, with seeded random outputs. What the view makes of the references (one set aside per
    sample in a balanced design, :mod:`miaudit.attacks.independence`) is the real bank's: the
    registered designs' structure does not depend on the pools' sizes. None when the design
    cannot draw these models (the run refuses them itself)."""
    from miaudit.attacks.view import TargetView
    from miaudit.protocol import Split, design_spec
    from miaudit.signals.bank import SignalBank

    if models < 1 or not 0 <= target < models:
        return None
    n = _NOMINAL_POOL
    ends = np.cumsum([n, n if public else 0, n // 4 if population else 0])
    split = Split(audit=np.arange(ends[0]), public=np.arange(ends[0], ends[1]),
                  population=np.arange(ends[1], ends[2]))
    try:
        membership, _ = design_spec(design).draw(split, models, target, None, 0)
    except ConfigError:
        return None
    rows = int(ends[2])
    audit, pool = np.zeros(rows, dtype=bool), np.zeros(rows, dtype=bool)
    audit[: ends[0]], pool[ends[1]:] = True, True
    logits = np.random.default_rng(0).normal(size=(models, rows, 1, 2)).astype(np.float32)
    bank = SignalBank(logits=logits, labels=np.zeros(rows, dtype=np.int64),
                      membership=np.asarray(membership, dtype=bool), population=pool,
                      audit=audit)
    return TargetView.of(bank, target)


def reference_sides(design: str, models: int, target: int = 0, public: bool = True
                    ) -> tuple[int, int] | None:  # fmt: skip
    """(IN, OUT): the most reference models IN, and OUT, for an audit sample as the target's
    view sees them (:func:`nominal_view`); None when the design cannot draw the models."""
    view = nominal_view(design, models, target, public)
    if view is None:
        return None
    n_in, n_out = (counts[view.audit] for counts in view.side_counts())
    return int(n_in.max(initial=0)), int(n_out.max(initial=0))


def references_serve(design: str, models: int, needs: Needs, target: int = 0,
                     public: bool = True, population: bool = False) -> bool | None:
    """Whether the references ``design`` draws for ``models`` models meet what ``needs``
    asks of them (IN and OUT references, shadows that can learn a scorer), by the bank's own
    check (`Needs.check`) on :func:`nominal_view`; None when the design cannot draw them."""
    view = nominal_view(design, models, target, public, population)
    if view is None:
        return None
    wanted = Needs(out_references=needs.out_references, in_references=needs.in_references,
                   shadows=needs.shadows)
    try:
        wanted.check(view, "")
    except AttackError:
        return False
    return True


def models_for(design: str, needs: Needs, start: int = 1, target: int = 0,
               public: bool = True, population: bool = False, most: int = 64) -> int | None:
    """The fewest models (target included, from ``start``) with which ``design`` gives the
    references ``needs`` asks for (:func:`references_serve`); None when none up to
    ``start + most`` does (e.g. IN references of the offline design)."""
    for models in range(max(1, start), max(1, start) + most):
        if references_serve(design, models, needs, min(target, models - 1), public,
                            population):
            return models
    return None
