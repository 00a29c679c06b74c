"""The sections of a configuration that `miaudit run` and `miaudit audit` share or a run
has, each a dataclass with its checks: dataset, split, signals (with the one ``auto`` rule of
both for queries and gradient norms), forgetting, checkpoints, metrics, canaries, compute.
:class:`~miaudit.config.run.RunConfig` assembles them; the audit's config reuses ``signals``,
``metrics`` and ``compute``.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from miaudit.errors import ConfigError

DEFAULT_ATTACKS = ("loss", "confidence", "entropy", "modified-entropy", "correctness")
# The value of a signals setting that follows the rule of resolve_queries / resolve_grad_norm.
AUTO = "auto"
# canaries.kind of white-box gradient canaries, and the threat models they are scored under
# (miaudit.privacy.gradient_canary_scores.canary_scores): the auditor sees every iterate
# θ_0 … θ_T, or the final model θ_T only (θ_0 known either way)
GRADIENT_KIND = "gradient"
WHITE_BOX_THREAT_MODELS = ("every-iterate", "final-model")
# canaries.noise: the σ of the every-iterate likelihood score (canary_scores' noise): each
# step's own estimate, one estimate over the whole run, or the accountant's σ
WHITE_BOX_NOISE = ("per-step", "estimated", "claimed")
# canaries.score: the every-iterate score (canary_scores' score): the sum over steps of each
# step's log likelihood ratio, or the plain sum of the projections
WHITE_BOX_SCORES = ("likelihood", "sum")
# The most gradient canaries one run takes (canaries.count with kind gradient). Each needs its
# own coordinate of the model's weights (a Dirac canary) or a dense direction over all of them
# (random: count x parameters floats), so no model holds more than it has parameters (checked
# on the target as it is built, before its first step); and the run's record keeps 24 bytes
# per canary per DP-SGD step (1,000,000 canaries: 24 MB a step, 2.4 GB over 100 steps), while
# the one-run bound's test slows with the count (~2 s at this limit). The papers' white-box
# audits use 1,000 to 50,000.
MAX_GRADIENT_CANARIES = 1_000_000


@dataclass
class DatasetConfig:
    name: str = "digits"
    options: dict[str, Any] = field(default_factory=dict)
    max_length: int = 64  # text datasets: tokens per text, longer ones cut
    # text datasets: MiniLM's WordPiece (fixed, 30,522 ids), a byte-level BPE of
    # bpe_vocab_size ids trained on the public pool's texts only (never on audit rows), or the
    # base model's own (hf-causal-lm); auto: base for hf-causal-lm, else wordpiece
    tokenizer: str = "auto"
    bpe_vocab_size: int = 4096


@dataclass
class SplitConfig:
    audit: float | int = 0.4  # count, or fraction of the dataset
    public: float | int = 0.4
    population: float | int = 0.2
    # offline design: audit rows the target trains on (count, or fraction of the audit pool);
    # None: a random half. Fewer members than non-members puts low-FPR figures on more
    # non-members; each reference then trains on as many public rows.
    members: float | int | None = None


@dataclass
class SignalsConfig:
    queries: list[str] | str = AUTO
    """The views every model is queried on (plain, mirror, crop-flip-K for images;
    token-dropout-K, adjacent-swap-K for token ids), or ``auto``: replay the training
    augmentation. A model answers the views of its training augmentation differently for
    members (LiRA and RAPID query with it); views it never trained on are not what those
    papers query, and each costs a query of every model. So images
    whose target trained with augmentation (a run: its recipe's ``augment``; an audit: the
    declared ``model.augment``, else ``references.recipe``'s) get the views the attacks' papers
    query with (plain + mirror; RAPID's 8 with rapid or rapid-hybrid), anything else plain only
    (:func:`resolve_queries`). The same rule and default in `miaudit run` and `miaudit
    audit`."""
    grad_norm: bool | str = AUTO
    """Per-sample gradient norms (a white-box channel: a backward pass per sample per model),
    or ``auto``: computed when an attack to run reads them (gradient-norm,
    calibrated-gradient-norm; in an audit without ``attacks``, every attack, so on for
    white-box models), so no run pays for a channel nothing reads (:func:`resolve_grad_norm`).
    The same rule and default in `miaudit run` and `miaudit audit`."""
    boundary_distance: bool = False  # label-only HopSkipJump distance channel (slow)
    defence: str | dict[str, Any] | None = None  # output defence applied to every query
    batch_size: int = 1024

    def __post_init__(self) -> None:
        self.queries, self.grad_norm = check_signals(self.queries, self.grad_norm)


def check_signals(queries: Any, grad_norm: Any) -> tuple[list[str] | str, bool | str]:
    """``signals.queries`` and ``signals.grad_norm`` of either config, checked: ``auto`` (also
    spelled null, or ``--queries auto``) or a non-empty list of query names; ``auto`` or true
    or false."""
    if queries is None or (isinstance(queries, list) and queries == [AUTO]):
        queries = AUTO
    if queries != AUTO and not (isinstance(queries, list) and queries
                                and all(isinstance(q, str) for q in queries)):
        raise ConfigError(f"signals.queries must be auto or a non-empty list of query names, "
                          f"e.g. [plain, mirror]; got {queries!r}.")
    if grad_norm is None:
        grad_norm = AUTO
    if grad_norm != AUTO and not isinstance(grad_norm, bool):
        raise ConfigError(f"signals.grad_norm must be auto, true or false; got {grad_norm!r}.")
    return queries, grad_norm


def resolve_queries(queries: list[str] | str, kind: str, attacks: Sequence[str],
                    augment: Any) -> list[str]:
    """The queries of ``signals.queries`` (:class:`SignalsConfig`) on data of ``kind``: a list
    as given; ``auto``: replay the training augmentation ``augment`` (recipe steps; empty or
    None: none) -- image data trained with augmentation get the views the papers of
    ``attacks`` query with (plain + mirror; RAPID's 8: :func:`default_queries`),
    anything else (no augmentation; tabular data; token ids, for which no recipe augments)
    plain only."""
    if queries != AUTO:
        return list(queries)
    if kind != "image" or not augment:
        return ["plain"]
    return default_queries(kind, list(attacks), augment)


def default_queries(kind: str, attacks: list[str], augment: Any = None) -> list[str]:
    """The views the attacks' papers query with (`signals.queries: auto` of a target trained
    with augmentation, config.resolve_queries): plain for tabular data; for images, the
    largest number of augmented queries any of the run's attacks' papers makes (plain and
    mirror; 8 with RAPID), drawn from the training augmentation ``augment`` so that every
    query replays it, as the papers' queries do (RAPID: plain, mirror and 6 crop + flip draws
    of the recipe's crop padding), and fewer when it allows fewer (a mirror-only recipe: plain
    and mirror); ``augment`` None: the papers' crop (4-pixel padding) + mirror. For token ids
    (text), plain, or RAPID's count of seeded token perturbations (token dropout, adjacent
    swaps) when an attack's paper makes more than the image pair."""
    from miaudit.attacks import get_attack
    from miaudit.signals.query import augmented_queries, replay_queries, text_queries

    wanted = [get_attack(a).image_queries for a in attacks]
    if kind == "tokens":
        return text_queries(max([q for q in wanted if q > 2] + [1]))
    if kind != "image":
        return ["plain"]
    if augment is None:
        return augmented_queries(max(wanted + [2]))
    return replay_queries(augment, max(wanted + [2]))


def resolve_grad_norm(grad_norm: bool | str, attacks: Sequence[str]) -> bool:
    """Whether ``signals.grad_norm`` (:class:`SignalsConfig`) computes gradient norms for
    ``attacks``: as given, or for ``auto`` when one of them reads the channel."""
    if grad_norm != AUTO:
        return bool(grad_norm)
    from miaudit.attacks import get_attack

    return any(get_attack(name).needs.channel == "grad_norm" for name in attacks)


@dataclass
class ForgettingConfig:
    """Calibration via forgetting: copies of the target trained further on public data."""

    models: int = 0  # how many copies (0: off)
    epochs: int = 5
    lr: float | None = None  # default: the target recipe's
    batch_size: int | None = None  # default: the target recipe's


@dataclass
class CheckpointsConfig:
    """Models kept along training ("Generalization and Membership Inference Attack: a
    Practical Perspective", §IV-A2): every model of the design is kept after these epochs
    and/or optimizer steps, and each checkpoint is audited as its own bank."""

    epochs: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)


@dataclass
class MetricsConfig:
    fprs: list[float] = field(default_factory=lambda: [0.001, 0.01])
    bootstrap: int = 200
    confidence: float = 0.95
    recalls: list[float] = field(default_factory=lambda: [0.5, 0.9])
    # ε lower bounds (docs/algorithms.md §16): δ when the target makes no DP claim of its own
    # (a DP-SGD target is audited at its recipe's δ), and α = 1 - the bounds' confidence
    epsilon_delta: float = 1e-5
    epsilon_alpha: float = 0.05
    # the model-free split check (docs/algorithms.md §20): can members be told from
    # non-members without the model? A few seconds; false only to save them
    split_check: bool = True

    def __post_init__(self) -> None:
        # checked here, not in _check_types: `miaudit audit` and the Python API build this
        # section without a RunConfig
        check_delta(self.epsilon_delta, "metrics.epsilon_delta")
        check_alpha(self.epsilon_alpha, "metrics.epsilon_alpha")
        self.fprs = _rates(self.fprs, "metrics.fprs", "false-positive rates, e.g. [0.001, 0.01]")
        self.recalls = _rates(self.recalls, "metrics.recalls", "recalls, e.g. [0.5, 0.9]")
        if (isinstance(self.bootstrap, bool) or not isinstance(self.bootstrap, numbers.Integral)
                or self.bootstrap < 0):
            raise ConfigError(f"metrics.bootstrap must be an integer >= 0 (bootstrap "
                              f"resamples of each interval; 0: none); got {self.bootstrap!r}.")
        if not 0.0 < _real(self.confidence, "metrics.confidence") < 1.0:
            raise ConfigError(f"metrics.confidence must lie in (0, 1) (0.95 for 95% "
                              f"intervals); got {self.confidence!r}.")
        if not isinstance(self.split_check, bool):
            raise ConfigError(f"metrics.split_check must be true or false; got "
                              f"{self.split_check!r}.")


@dataclass
class CanariesConfig:
    """One-run auditing (Steinke, Nasr & Jagielski 2023): ``count`` canary rows outside the
    audit, public and population pools, each in the target's training set with probability ½
    (offline design only; references never train on them); or, with ``kind: gradient``,
    ``count`` white-box gradient canaries in a DP-SGD target's steps (no rows, any design;
    checked by :func:`miaudit.config.canaries.check_canaries_section`)."""

    count: int = 0  # m canaries; 0: off
    # mislabelled | natural | secret (rows, black-box) | gradient (white-box; below)
    kind: str = "mislabelled"
    # kind secret: the secrets' format (miaudit.privacy.secrets), and how many candidates
    # sampled from its space estimate each canary's exposure
    secret_format: str = "account-number"
    exposure_candidates: int = 1000
    # {k_plus, k_minus} (counts or fractions of count), or a list of such candidates, each
    # evaluated at alpha / len(list); None: a tenth of the canaries each way
    guesses: dict[str, Any] | list[dict[str, Any]] | None = None
    alpha: float = 0.05
    delta: float | None = None  # None: the target's DP δ, else metrics.epsilon_delta
    # kind gradient (white-box, a DP-SGD target; miaudit.train.gradient_canaries): each canary
    # a vector of norm max_grad_norm in parameter space, not a dataset row. direction: dirac
    # (one coordinate) or random (a seeded unit direction); coordinates (dirac): quiet (those
    # the data's clipped gradients hardly touch) or random; probe_rows: the training rows
    # that rank them; score: the every-iterate score (likelihood or sum); threat_models: the
    # white-box auditors reported, each its own family of bounds
    direction: str = "dirac"
    coordinates: str = "quiet"
    probe_rows: int = 1024
    score: str = "likelihood"
    threat_models: list[str] = field(default_factory=lambda: list(WHITE_BOX_THREAT_MODELS))
    # The every-iterate score's two scoring-only options (they change no training, so the
    # cached target serves either; miaudit.privacy.gradient_canary_scores.canary_scores).
    # known_data: score x − d, the privatised gradient minus the other rows' clipped sum on
    # the canary's coordinate (recorded in training): DP's own adversary knows every other
    # row, and their sampling is independent of the canaries' coins, so the bound stays a
    # sound lower bound of the claim while the data's gradients stop hiding the canary.
    # noise (the likelihood score's σ; score sum ignores it): per-step (each step's σ read
    # off its m projections), estimated (one σ for the run) or claimed (the accountant's).
    # Any σ is sound (a function of the output); a wrong one only costs power, and per-step
    # lets steps with missing noise weigh as much as they reveal (how dp-bugs' every-iterate
    # audit refutes noise added once per epoch). Defaults: the dp-bugs study's choices, made
    # on its development seeds 100-102 (EXPERIMENTS.md); both sound, and neither costs a
    # correct run more than ~0.01 of its bound (examples/dp-whitebox.yaml: quiet coordinates,
    # where d is tiny), while known_data adds ~0.15 with random coordinates. false /
    # estimated: the auditor of miaudit before them.
    known_data: bool = True
    noise: str = "per-step"

    def __post_init__(self) -> None:
        check_alpha(self.alpha, "canaries.alpha")
        if self.delta is not None:
            check_delta(self.delta, "canaries.delta")

    @property
    def white_box(self) -> bool:
        """Gradient canaries (white-box, in DP-SGD's steps) rather than canary rows."""
        return self.kind == GRADIENT_KIND and self.count > 0

    @property
    def rows(self) -> int:
        """How many dataset rows the canaries take (none for gradient canaries)."""
        return 0 if self.kind == GRADIENT_KIND else self.count


@dataclass
class ComputeConfig:
    """Where the models train: :class:`miaudit.train.cluster.Compute`'s keys and defaults (a
    test holds them alike), checked by it when the config loads, before anything trains.

    ``executor``: ``local`` (this machine) or ``ray`` (a Ray cluster; ``--executor ray``).
    ``address``: ``None`` starts a local Ray instance bound to loopback; ``auto`` or
    ``ray://host:port`` joins a running cluster (``--ray-address``). Each Ray task asks for
    ``cpus_per_model`` CPUs and ``gpus_per_model`` GPUs, and is retried up to ``max_retries``
    times when its worker dies. ``connect_timeout_s``: how long to wait for the cluster at
    ``address`` to answer (``--ray-timeout``); a refused, unreachable or silent address is
    refused with its name and the fix, before anything trains. Where a model trains is not in
    its cache key, and on CPU it changes neither the weights nor the scores: it is not part of
    the run's identity either (rerunning with ``--executor ray`` replaces the same run)."""

    executor: str = "local"
    address: str | None = None
    cpus_per_model: float = 1.0
    gpus_per_model: float = 0.0
    max_retries: int = 3
    connect_timeout_s: float = 30.0

    def to_compute(self) -> Any:
        """The checked :class:`~miaudit.train.cluster.Compute` (ConfigError naming the key)."""
        from miaudit.train.cluster import Compute

        return Compute.from_dict(dataclasses.asdict(self))


def compute_section(value: Any) -> ComputeConfig:
    """``compute`` of either config, checked (ConfigError naming the bad key or value): a
    ComputeConfig, left empty in the YAML (None: local), or a Compute from the Python API."""
    if value is None:
        value = ComputeConfig()
    if not isinstance(value, ComputeConfig):  # a miaudit.train.cluster.Compute
        to_dict = getattr(value, "to_dict", None)
        if not callable(to_dict):
            raise ConfigError(f"compute must be a mapping (executor, address, ...); "
                              f"got {type(value).__name__}.")
        value = ComputeConfig(**to_dict())
    if value != ComputeConfig():  # the defaults are Compute's (a test holds them alike): only
        value.to_compute()  # other values need its check, which imports torch
    return value


def identity_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config mapping (a run's or an audit's) as it makes the run's identity
    (:class:`miaudit.records.run_dir.RunIdentity`): less ``compute``, which says where the
    models train, not what the run measures (no cache key holds it either), so a rerun on a
    Ray cluster replaces the same run made locally."""
    return {k: v for k, v in config.items() if k != "compute"}


@overload
def split_names(value: None) -> None: ...


@overload
def split_names(value: str | Sequence[str]) -> list[str]: ...


def split_names(value: str | Sequence[str] | None) -> list[str] | None:
    """Names as a list: ``"loss, rmia"`` (comma-separated, as the command line takes attack
    and query names) or a sequence of names; None stays None (not given)."""
    if value is None:
        return None
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    return list(value)


def _real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        # YAML 1.1 reads 1e-5 (no dot) as a string
        hint = " (YAML reads 1e-5 as text: write 1.0e-5)" if isinstance(value, str) else ""
        raise ConfigError(f"{name} must be a number; got {value!r}{hint}.")
    return float(value)


def _rates(value: Any, name: str, what: str) -> list[float]:
    """A non-empty list of numbers in (0, 1] (a lone number is not a list: said so)."""
    listed = hasattr(value, "__len__") and hasattr(value, "__iter__")
    if isinstance(value, (str, bytes, Mapping)) or not listed or len(value) == 0:
        raise ConfigError(f"{name} must be a non-empty list of {what}; got {value!r}"
                          + (f" (write [{value}])" if isinstance(value, (int, float))
                             and not isinstance(value, bool) else "") + ".")
    rates = [_real(v, name) for v in value]
    # (0, 1]: a study's curve may end at 1; a run's config is held to (0, 1) (config/run.py)
    if not all(0.0 < r <= 1.0 for r in rates):
        raise ConfigError(f"{name} must lie in (0, 1); got {list(value)!r}.")
    return rates


def check_delta(value: Any, name: str) -> float:
    """δ of an ε lower bound: a number in [0, 1)."""
    if not 0.0 <= _real(value, name) < 1.0:
        raise ConfigError(f"{name} must lie in [0, 1) (the δ of the (ε, δ)-DP claim audited, "
                          f"e.g. 1e-5; 0 for pure ε-DP); got {value!r}.")
    return float(value)


def check_alpha(value: Any, name: str) -> float:
    """α of an ε lower bound (it holds with probability 1 - α): a number in (0, 1)."""
    if not 0.0 < _real(value, name) < 1.0:
        raise ConfigError(f"{name} must lie in (0, 1): one minus the bounds' confidence "
                          f"(0.05 for 95 %); got {value!r}.")
    return float(value)
