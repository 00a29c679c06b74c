"""The attack registry, what an attack needs of the bank, and what it returns.

An attack is a pure function `fn(view: TargetView, **params) -> np.ndarray` returning one
float64 score per bank sample (higher = more likely a member; NaN = cannot score). It never
touches a model. `TargetView` exposes everything in the bank except the target's membership,
so no attack can peek at the answer. An attack that scores public rows of known membership on
its way (a scorer's held-out shadow rows) may return `Scored(scores, ThresholdRows(...))`
instead: the pipeline then picks its public-data threshold on those rows rather than running
the attack again with a reference as target (`run_attack` checks that they are public).

Each attack declares its parameters (`Param`: type, default, valid values, meaning), from
which its pydantic model is built (`AttackSpec.model`); `check_params` validates through it,
refusing an unknown name or an invalid value in our words, and every entry point calls it
before any work: run and audit configs, `miaudit attack --params`, the Python API, and
`run_attack` itself.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from miaudit.attacks.params import Param, params_model, problem, refusal
from miaudit.attacks.view import TargetView
from miaudit.errors import AttackError, ParamError
from miaudit.registry import Registry
from miaudit.signals.bank import QUERIES_SUFFIX


@dataclass(frozen=True)
class Needs:
    """What an attack requires of the bank; checked before it runs."""

    out_references: int = 0  # at least this many references OUT for a typical audit sample
    in_references: int = 0  # at least this many IN references (online attacks)
    population: bool = False  # attacker-owned samples no model trained on
    channel: str | None = None  # a white-box channel such as "grad_norm"
    shadows: int = 0  # references whose membership is used to train a scorer
    sequence: bool = False  # per-token log-probs of causal LMs (seq_token_logprob, seq_lengths)
    next_token_moments: bool = False  # seq_mean_logprob and seq_std_logprob (Min-K%++)
    text: bool = False  # text_zlib_bytes and text_chars (zlib, the blind baseline)
    # at least this many queries per sample beyond the plain one (query 0): on a one-query
    # bank an augmentation attack only repeats a plain-query one
    augmented_queries: int = 0
    # the calibrated LM attacks' optional sequence arrays
    base_model: bool = False  # seq_base_token_logprob: the pretrained base model's log-probs
    prefix_conditioned: bool = False  # seq_prefix_token_logprob (ReCaLL's prefix P)
    token_ids: bool = False  # seq_token_ids and seq_vocab_size (DC-PDD's token frequencies)
    # seq_top1_correct: whether each model's argmax next-token prediction is right (EZ-MIA)
    top1_correct: bool = False
    # a classifier's own logits: a sequence bank's are a derived two-class view of the
    # likelihood, on which e.g. a temperature has no faithful meaning (rmia-paper's T = 2)
    classifier: bool = False

    def check(self, view: TargetView, attack: str) -> None:
        problems = []
        in_counts, out_counts = (counts[view.audit] for counts in view.side_counts())
        if self.out_references and (out_counts.size == 0 or out_counts.max() < self.out_references):
            problems.append(
                f"needs at least {self.out_references} reference model(s) that did not train on "
                f"the audit samples; the bank has {view.n_references} reference(s) and at most "
                f"{int(out_counts.max()) if out_counts.size else 0} are OUT for any audit sample. "
                "Train reference models (offline: on public data; online: the balanced design)."
            )
        if self.in_references and (in_counts.size == 0 or in_counts.max() < self.in_references):
            problems.append(
                f"needs at least {self.in_references} reference model(s) trained ON the audit "
                "samples (the online design: each audit sample IN for half the models); "
                "use the online protocol or an offline attack."
            )
        if self.population and not view.population.any():
            problems.append(
                "needs population samples (attacker data no model trained on): add a "
                "'population' mask to the bank or give the run a public pool."
            )
        if self.channel and not view.has_channel(self.channel):
            problems.append(
                f"needs the channel '{self.channel}', which the bank lacks; compute it "
                f"at signal time (signals.{self.channel}: true in the run config)."
            )
        if self.shadows and view.n_references < self.shadows:
            problems.append(
                f"needs at least {self.shadows} shadow/reference models with known membership; "
                f"the bank has {view.n_references}."
            )
        elif self.shadows:
            problem = _shadow_problem(view, bool(self.out_references))
            if problem:
                problems.append(problem)
        if self.sequence and not view.has_sequences:
            problems.append(
                "needs the sequence signals of a causal language model (seq_token_logprob "
                "[M,N,T] and seq_lengths [N]), which the bank lacks; build a sequence bank "
                "(signals.sequence.sequence_signals on the model's logits)."
            )
        if self.next_token_moments and not view.has_min_k_plus_plus:
            problems.append(
                "needs seq_mean_logprob and seq_std_logprob [M,N,T] (the mean and std of "
                "log p(v) under each next-token distribution), which the bank lacks; export "
                "them with signals.sequence.sequence_signals."
            )
        if self.text and not view.has_text:
            problems.append(
                "needs the samples' text sizes text_zlib_bytes and text_chars [N], which the "
                "bank lacks; compute them with signals.sequence.text_sizes."
            )
        if self.augmented_queries and view.n_queries - 1 < self.augmented_queries:
            problems.append(augmented_queries_problem(self.augmented_queries, view.n_queries))
        if self.base_model and view.seq_base_token_logprob is None:
            problems.append(
                f"attack '{attack}' needs the pretrained base model's token log-probabilities "
                "(seq_base_token_logprob [N,T]), which the bank lacks: this bank has no base "
                "model; signal the base model (lm_signals(..., base=module)) into the bank."
            )
        if self.prefix_conditioned and view.target_prefix_token_logprob() is None:
            problems.append(
                f"attack '{attack}' needs the models' token log-probabilities conditioned on a "
                "fixed non-member prefix (seq_prefix_token_logprob [M,N,T]), which the bank "
                "lacks; compute them with lm_signals(..., prefix_ids=draw_prefix(...))."
            )
        if self.token_ids and view.seq_token_ids is None:
            problems.append(
                f"attack '{attack}' needs the scored token ids and the vocabulary size "
                "(seq_token_ids [N,T], seq_vocab_size), which the bank lacks; signal with "
                "SignalSpec(token_ids=True)."
            )
        # on a classifier's bank the missing sequence signals (above) say it all
        if self.top1_correct and not view.has_top1_correct and (
                view.has_sequences or not self.sequence):
            problems.append(
                f"attack '{attack}' needs, per token, whether each model's top-1 next-token "
                "prediction is the actual token (seq_top1_correct [M,N,T]), which the bank "
                "lacks: signal the causal LM again with a miaudit that stores it (lm_signals "
                "computes it in the same forward pass as the token log-probabilities; banks "
                "built before it have none)."
            )
        if self.classifier and view.has_sequences:
            problems.append(
                "needs a classifier's own logits; this is a causal language model's sequence "
                "bank, whose logits are a derived two-class view of the sequence likelihood "
                "(use the language-model attacks, e.g. lm-rmia)."
            )
        if problems:
            raise AttackError(f"attack '{attack}' cannot run: " + " ".join(problems))


def _shadow_problem(view: TargetView, with_references: bool) -> str | None:
    """Why no reference can serve as a shadow to learn a scorer from (None when one can):
    it needs members and non-members among the samples available to the view, outside the
    population, and with ``with_references`` (features calibrated by the shadow's own
    references) an OUT reference of its own on some of them."""
    usable = ~view.population
    learnable = False
    for r in range(view.n_references):
        rows = usable & view.reference_available[r]
        known = view.reference_membership[r][rows]
        if not known.any() or known.all():
            continue
        learnable = True
        if not with_references or (view.as_shadow(r).side_counts()[1][rows] > 0).any():
            return None
    balanced = (" In a balanced design (online, paired-halves) every view sets one reference "
                "per sample aside so that the references say nothing of the target's "
                "membership (docs/algorithms.md §11): with 3 models no reference is left a "
                "member, with 4 no shadow keeps a reference of its own. Train at least 5 "
                "models (more for a useful scorer), or use the offline design."
                if view.set_aside.any() else "")
    if not learnable:
        return ("trains its scorer on shadow models, and no reference has both members and "
                "non-members among the samples it may learn from." + balanced)
    return ("trains its scorer on shadow models whose features need references of their "
            "own, and no shadow has a reference OUT for any sample it could learn from." +
            balanced)


def augmented_queries_problem(needed: int, n_queries: int) -> str:
    """Why an attack needing ``needed`` augmented queries cannot run on a bank of
    ``n_queries`` (for `Needs.check` and `miaudit audit`'s skip reasons)."""
    return (
        f"needs at least {needed} augmented quer{'y' if needed == 1 else 'ies'} per sample "
        f"beyond the plain one; the bank has {n_queries} quer{'y' if n_queries == 1 else 'ies'}"
        f"{' (plain only)' if n_queries == 1 else ''}, on which it would only repeat a "
        "plain-query attack (correctness). Build the bank with augmented queries "
        "(signals.queries: [plain, mirror] for images, [plain, token-dropout-1] for texts; "
        "tabular data has none)."
    )


@dataclass(frozen=True)
class AttackSpec:
    name: str
    fn: Callable[..., np.ndarray | Scored]
    needs: Needs
    description: str
    params: tuple[Param, ...] = ()  # declared parameters, overridable per run
    family: str = ""
    first_query_only: bool = False  # reads query 0 of the logits only (e.g. correctness)
    image_queries: int = 2  # its paper's number of augmented queries on images (RAPID: 8)
    model_free: bool = False  # never reads a model (the blind baseline): costs no query

    def queries_per_sample(self, view: TargetView) -> float:
        """Queries this attack makes to the target per audit sample: every query of the bank
        for an attack on logits, one for a query-0 attack, and for a channel attack the count
        the bank records in channel `<channel>_queries` (HopSkipJump's label queries), else
        one (a white-box channel: one forward and backward pass on the plain query); none for
        a model-free attack."""
        if self.model_free:
            return 0.0
        if self.needs.channel:
            recorded = f"{self.needs.channel}{QUERIES_SUFFIX}"
            if view.has_channel(recorded):
                return float(view.target_channel(recorded)[view.audit].mean())
            return 1.0
        return 1.0 if self.first_query_only else float(view.n_queries)

    @property
    def null_checked(self) -> bool:
        """Whether the suite's null calibration covers this attack (tests/null: every design
        structure and data kind it runs on, a target with nothing to find): every attack
        miaudit registers does; one registered elsewhere (a plugin) does not, and the verdict
        shows its figures without resting a leak on them."""
        return self.fn.__module__.startswith("miaudit.")

    @property
    def defaults(self) -> dict[str, Any]:
        """{parameter: default}: what the attack runs with unless overridden."""
        return {p.name: p.default for p in self.params}

    @cached_property
    def model(self) -> type[BaseModel]:
        """The pydantic model of its parameters (`params_model`), built once."""
        return params_model(self.name, self.params)


_REGISTRY: Registry[AttackSpec] = Registry(
    "attack", AttackError, unknown="unknown attack '{name}'.{hint} Known attacks: {known}.",
    suggestions=3, quote=False,
)


def register_attack(
    name: str,
    *,
    needs: Needs = Needs(),
    description: str = "",
    family: str = "",
    first_query_only: bool = False,
    image_queries: int = 2,
    model_free: bool = False,
    params: Sequence[Param] = (),
) -> Callable[[Callable[..., np.ndarray | Scored]], Callable[..., np.ndarray | Scored]]:
    """Register `fn` under `name`; `params` declares its keyword parameters, exactly those of
    its signature after `view` (variants re-register the same function under another name,
    with other defaults: `Param.with_default`). `first_query_only`: the attack reads query 0
    only, so it costs one query per sample whatever the bank holds.
    `image_queries`: how many augmented queries its paper makes on images; a run on image
    data that does not list its queries uses the largest of its attacks' (default 2: plain
    and mirror). `model_free`: it never reads a model (the blind baseline), so its cost is no
    model and no query."""

    def spec(fn: Callable[..., np.ndarray | Scored]) -> AttackSpec:
        _check_declared(name, fn, params)
        made = AttackSpec(name, fn, needs, description, tuple(params), family,
                          first_query_only, image_queries, model_free)
        _check_defaults(made)
        return made

    return _REGISTRY.decorator(name, spec)


def _check_declared(name: str, fn: Callable[..., Any], params: Sequence[Param]) -> None:
    """A registration's declared parameters are its function's keyword parameters (after
    `view`), each declared once."""
    declared = [p.name for p in params]
    signature = list(inspect.signature(fn).parameters.values())[1:]
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    taken = [p.name for p in signature if p.kind in kinds]
    if len(set(declared)) != len(declared) or set(declared) != set(taken) or any(
        p.kind not in kinds for p in signature
    ):
        raise ValueError(
            f"attack '{name}' declares the parameters {sorted(declared)}, but its function "
            f"takes {[str(p) for p in signature]}: name every parameter in its signature "
            "(no **kwargs) and declare each once."
        )


def _check_defaults(spec: AttackSpec) -> None:
    """Each declared default is valid, by the attack's model (a bug in the attack otherwise);
    a list of attacks is not checked, as the attacks it names may register later."""
    if not spec.params:
        return
    defaults = {p.name: p.default for p in spec.params if p.type != "list[attack]"}
    try:
        spec.model.model_validate(defaults)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        param = next(p for p in spec.params if p.name == error["loc"][0])
        raise ValueError(f"attack '{spec.name}': the default {param.default!r} of "
                         f"'{param.name}' is invalid "
                         f"({problem(param, error, param.default)}).") from None


def list_attacks() -> list[AttackSpec]:
    return [_REGISTRY[k] for k in _REGISTRY.names()]


def get_attack(name: str) -> AttackSpec:
    return _REGISTRY.get(name)


def check_params(attack: str, overrides: Any, where: str = "") -> dict[str, Any]:
    """Parameter overrides `{parameter: value}` for `attack`, validated by the attack's
    pydantic model (`AttackSpec.model`): the one validation every entry point uses (run and
    audit configs, `miaudit attack --params`, the Python API, `run_attack`). An unknown name
    is refused with the closest declared one; a value of the wrong type, out of bounds, not
    among the choices or NaN, with what is valid. `where` names the place in the caller's
    input ("attack_params.rmia", "--params"). Returns a copy, each value as given."""
    spec = get_attack(attack)
    prefix = f"{where}: " if where else ""
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise ParamError(f"{prefix}the parameters of attack '{attack}' must be a mapping "
                         f"{{parameter: value}}; got {overrides!r}.")
    given = dict(overrides)
    # the attacks a list of attacks may name: an attack never lists itself (recursion)
    others = [n for n in _REGISTRY if n != attack]
    try:
        checked = spec.model.model_validate(given, context={"attacks": others})
    except ValidationError as exc:
        raise ParamError(prefix + refusal(attack, spec.params, exc, given)) from None
    fields = {info.alias or name: name for name, info in type(checked).model_fields.items()}
    return {key: getattr(checked, fields[key]) for key in given}


def check_attack_params(
    attack_params: Any, where: str = "attack_params", selected: Collection[str] | None = None,
    selected_where: str = "attacks",
) -> dict[str, dict[str, Any]]:
    """`{attack: {parameter: value}}` checked by `check_params` (an unknown attack name is
    refused with the closest registered one), before any model trains or any bank loads.
    With ``selected`` (the attacks chosen; None: all), parameters of an attack not chosen are
    refused too (they would be ignored); ``where`` and ``selected_where`` name the two as
    the caller's input spells them (``--params``, ``--attacks``). Returns a copy."""
    if attack_params is None:
        return {}
    if not isinstance(attack_params, Mapping):
        raise ParamError(f"{where} must map attack names to mappings {{parameter: value}}, "
                         f"e.g. {{rmia: {{gamma: 2}}}}; got {attack_params!r}.")
    if selected is not None:
        for name in attack_params:
            if name not in selected:
                raise ParamError(f"{where} names '{name}', which is not in {selected_where}.")
    return {name: check_params(str(name), params, f"{where}.{name}")
            for name, params in attack_params.items()}


@dataclass(frozen=True)
class ThresholdRows:
    """Scores of public rows whose membership the attacker knows (e.g. a scorer's held-out
    shadow rows), from which Watson et al.'s accuracy threshold is chosen (docs/algorithms.md
    §12). A sample may appear once per shadow model, labelled by that model's membership."""

    scores: np.ndarray  # float64 [k]; NaN rows are ignored
    members: np.ndarray  # bool [k]: a member of the model that produced the row
    samples: np.ndarray  # int [k]: bank index of each row's sample (must be public)


@dataclass(frozen=True)
class Scored:
    """What an attack may return instead of its scores alone."""

    scores: np.ndarray  # float64 [N]
    threshold_rows: ThresholdRows | None = None  # None: the pipeline reruns the attack


@dataclass
class AttackRun:
    name: str
    scores: np.ndarray  # float64 [N]; NaN where the attack could not score
    seconds: float
    n_unscorable: int  # among audit samples
    threshold_rows: ThresholdRows | None = None  # the attack's own public rows, if it has any


def run_attack(name: str, view: TargetView, **overrides: Any) -> AttackRun:
    """Check needs, run the attack, validate its output."""
    spec = get_attack(name)
    overrides = check_params(name, overrides)
    spec.needs.check(view, name)
    start = time.perf_counter()
    returned = spec.fn(view, **{**spec.defaults, **overrides})
    seconds = time.perf_counter() - start
    rows = returned.threshold_rows if isinstance(returned, Scored) else None
    scores = np.asarray(scores_of(returned), dtype=np.float64)
    if scores.shape != (view.n_samples,):
        raise AttackError(
            f"attack '{name}' returned shape {scores.shape}; expected [{view.n_samples}]."
        )
    if np.isinf(scores).any():
        raise AttackError(f"attack '{name}' returned infinite scores; this is a bug in it.")
    if rows is not None:
        _check_public(name, view, rows)
    n_unscorable = int(np.isnan(scores[view.audit]).sum())
    return AttackRun(name, scores, seconds, n_unscorable, rows)


def scores_of(returned: np.ndarray | Scored) -> np.ndarray:
    """An attack function's scores, whether it returned them alone or as `Scored`."""
    return returned.scores if isinstance(returned, Scored) else returned


def _check_public(name: str, view: TargetView, rows: ThresholdRows) -> None:
    samples = np.asarray(rows.samples)
    if not (len(rows.scores) == len(rows.members) == samples.size):
        raise AttackError(f"attack '{name}' returned threshold rows of unequal lengths.")
    if samples.size and not view.public[samples].all():
        raise AttackError(
            f"attack '{name}' returned threshold rows on audited, population or canary "
            "samples; a threshold is chosen on public data only. This is a bug in it."
        )
