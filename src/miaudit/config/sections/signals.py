"""The ``signals`` section of either config (what every model is queried on) and the one
``auto`` rule of both for queries (:func:`resolve_queries`) and gradient norms
(:func:`resolve_grad_norm`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, field_validator

from miaudit.config.sections.spec import (
    Bool,
    Int,
    Spec,
    Typed,
)
from miaudit.errors import ConfigError

# The value of a signals setting that follows the rule of resolve_queries / resolve_grad_norm.
AUTO = "auto"


def check_signals(queries: Any, grad_norm: Any) -> tuple[list[str] | str, bool | str]:
    """``signals.queries`` and ``signals.grad_norm`` of either config, checked: ``auto`` (also
    spelled null, or ``--queries auto``) or a non-empty list of query names; ``auto`` or true
    or false."""
    return _queries(queries), _grad_norm(grad_norm)


def _queries(queries: Any) -> list[str] | str:
    if queries is None or (isinstance(queries, list) and queries == [AUTO]):
        queries = AUTO
    if queries != AUTO and not (isinstance(queries, list) and queries
                                and all(isinstance(q, str) and q for q in queries)):
        raise ConfigError(f"signals.queries must be auto or a non-empty list of query names, "
                          f"e.g. [plain, mirror]; got {queries!r}.")
    return queries  # type: ignore[no-any-return]


def _grad_norm(grad_norm: Any) -> bool | str:
    if grad_norm is None:
        grad_norm = AUTO
    if isinstance(grad_norm, bool) or type(grad_norm).__name__ == "bool_":
        return bool(grad_norm)
    if grad_norm != AUTO:
        raise ConfigError(f"signals.grad_norm must be auto, true or false; got {grad_norm!r}.")
    return AUTO


class SignalsConfig(Spec):
    """What every model is queried on, and the channels computed besides its outputs."""

    key = "signals"

    queries: Typed[list[str] | str] = Field(AUTO, description=(
        "The views every model is queried on (plain, mirror, crop-flip-K for images; "
        "token-dropout-K, adjacent-swap-K for token ids), or auto: replay the training "
        "augmentation. A model answers the views of its training augmentation differently "
        "for members (LiRA and RAPID query with it); views it never trained on are not what "
        "those papers query, and each costs a query of every model. So images whose target "
        "trained with augmentation (a run: its recipe's augment; an audit: the declared "
        "model.augment, else references.recipe's) get the views the attacks' papers query "
        "with (plain + mirror; RAPID's 8 with rapid or rapid-hybrid), anything else plain "
        "only (resolve_queries). The same rule and default in `miaudit run` and `miaudit "
        "audit`; null is auto."),
        json_schema_extra={"must": "be auto or a non-empty list of query names"})
    grad_norm: Typed[bool | str] = Field(AUTO, description=(
        "Per-sample gradient norms (a white-box channel: a backward pass per sample per "
        "model), or auto: computed when an attack to run reads them (gradient-norm, "
        "calibrated-gradient-norm; in an audit without attacks, every attack, so on for "
        "white-box models), so no run pays for a channel nothing reads (resolve_grad_norm). "
        "The same rule and default in `miaudit run` and `miaudit audit`; null is auto."),
        json_schema_extra={"must": "be auto, true or false"})
    boundary_distance: Bool = Field(False, description=(
        "The label-only HopSkipJump distance channel (slow: about 1,100 queries per sample "
        "and model)."))
    defence: Typed[str | dict[str, Any] | None] = Field(None, description=(
        "An output defence applied to every query: a registered name, or a mapping with "
        "its name and options."))
    batch_size: Int = Field(1024, ge=1, description="Samples per query batch.",
                            json_schema_extra={"why": "samples per query batch"})

    @field_validator("queries", mode="before")
    @classmethod
    def _auto_queries(cls, value: Any) -> Any:
        return _queries(value)

    @field_validator("grad_norm", mode="before")
    @classmethod
    def _auto_grad_norm(cls, value: Any) -> Any:
        return _grad_norm(value)


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
    from miaudit.signals.query_names import augmented_queries, replay_queries, text_queries

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
