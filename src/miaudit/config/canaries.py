"""The run config's ``canaries`` section checked (:func:`check_canaries_section`): canary
rows (black-box, kinds mislabelled, natural, secret) or white-box gradient canaries (kind
gradient, a DP-SGD target's; :mod:`miaudit.train.gradient_canaries`), each with its own
options. Whether the target's recipe has the DP-SGD that gradient canaries need is checked
with the recipes (:mod:`miaudit.config.run`)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from miaudit.config.sections import (
    MAX_GRADIENT_CANARIES,
    WHITE_BOX_NOISE,
    WHITE_BOX_SCORES,
    WHITE_BOX_THREAT_MODELS,
    CanariesConfig,
)
from miaudit.errors import ConfigError


def _suggest(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" Did you mean '{close[0]}'?" if close else ""


def check_canaries_section(canaries: CanariesConfig | None, design: str) -> CanariesConfig:
    """``canaries``: a count >= 0, a registered kind, guesses that fit the count, and a design
    that supports them (whether m can certify ε > 0 at all is checked with the recipe's δ in
    miaudit.pipeline.canaries, before training)."""
    from miaudit.privacy.canaries import canary_kind, canary_kind_names, resolve_guesses
    from miaudit.privacy.secrets import secret_format_names
    from miaudit.protocol import supports_canaries

    if canaries is None:  # `canaries:` left empty in the YAML
        canaries = CanariesConfig()
    count = canaries.count
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ConfigError(f"canaries.count must be an integer >= 0 (0: no canaries); "
                          f"got {count!r}.")
    names = {"kind": canary_kind_names, "secret_format": secret_format_names}
    for key, listed in names.items():  # registry names (a list or mapping: unhashable there)
        if not isinstance(getattr(canaries, key), str):
            raise ConfigError(f"canaries.{key} must be one of {', '.join(listed())}; got "
                              f"{getattr(canaries, key)!r}.")
    kind = canary_kind(canaries.kind)
    if kind.secret_texts:
        from miaudit.privacy.secrets import secret_format

        try:
            space = secret_format(canaries.secret_format).space_size
        except ConfigError as exc:  # the registry's message, with the key it came from
            raise ConfigError(f"canaries.secret_format: {exc}") from exc
        if count > space:
            raise ConfigError(f"canaries.count {count} exceeds the {space:,} distinct secrets "
                              f"of canaries.secret_format {canaries.secret_format!r}.")
        n = canaries.exposure_candidates
        if isinstance(n, bool) or not isinstance(n, int) or n < 20:
            raise ConfigError(f"canaries.exposure_candidates must be an integer >= 20 (the "
                              f"sample exposure is estimated from); got {n!r}.")
    _check_gradient_options(canaries, kind.white_box)
    if kind.white_box:
        _check_gradient_count(count)
    elif count == 0 and canaries.kind != CanariesConfig().kind:
        raise ConfigError(f"canaries.kind {canaries.kind} with canaries.count 0 adds no canaries: "
                          f"set canaries.count >= 1, or remove the canaries section.")
    if count == 0:
        return canaries
    resolve_guesses(canaries.guesses, count)
    if kind.white_box:  # no rows: any design (the recipe's DP is checked with the recipes)
        return canaries
    if not supports_canaries(design):
        raise ConfigError(
            f"canaries need design: offline (the target alone trains on a random half of "
            f"them; references never do); the {design} design is not supported yet."
        )
    return canaries


def _check_gradient_count(count: int) -> None:
    """Gradient canaries: at least one (none would be a white-box audit that silently never
    runs), and no more than :data:`~miaudit.config.sections.MAX_GRADIENT_CANARIES` (the target
    model's own limit, one parameter per Dirac canary, is checked as it is built)."""
    if count < 1:
        raise ConfigError(
            "gradient canaries need canaries.count >= 1: the number of white-box canaries in the "
            "target's DP-SGD steps (examples/dp-whitebox.yaml uses 10,000 of its MLP's 19,210 "
            "weights); without it no white-box audit runs. Set the count, or remove the "
            "canaries section."
        )
    if count > MAX_GRADIENT_CANARIES:
        raise ConfigError(
            f"canaries.count {count:,} is more gradient canaries than a run takes (at most "
            f"{MAX_GRADIENT_CANARIES:,}): each needs its own parameter of the target model (no "
            f"model has more canaries than parameters), the run records 24 bytes per canary "
            f"per DP-SGD step, and the one-run bound's test slows with the count. The papers' "
            f"white-box audits use 1,000 to 50,000; lower canaries.count."
        )


def _check_gradient_options(c: CanariesConfig, white_box: bool) -> None:
    """The gradient canaries' own keys: given only with ``kind: gradient``, each one of its
    choices (those of :class:`~miaudit.train.gradient_canaries.GradientCanaries` and of
    :func:`~miaudit.privacy.gradient_canary_scores.canary_scores`)."""
    defaults = CanariesConfig()
    keys = ("direction", "coordinates", "probe_rows", "score", "threat_models", "known_data",
            "noise")
    if not white_box:
        given = [k for k in keys if getattr(c, k) != getattr(defaults, k)]
        if given:
            raise ConfigError(f"canaries.{given[0]} is an option of gradient canaries: set "
                              f"canaries.kind: gradient (a DP-SGD target) or remove it.")
        return
    from miaudit.train.gradient_canaries import COORDINATES, KINDS  # torch: gradient only

    choices = {"direction": KINDS, "coordinates": COORDINATES, "score": WHITE_BOX_SCORES,
               "noise": WHITE_BOX_NOISE}
    for key, allowed in choices.items():
        value = getattr(c, key)
        if value not in allowed:
            raise ConfigError(f"canaries.{key} must be one of {', '.join(allowed)}; got "
                              f"{value!r}.{_suggest(str(value), allowed)}")
    if not isinstance(c.known_data, bool):  # YAML's `yes`/`no` are bools; "false" is not
        raise ConfigError(f"canaries.known_data must be true (the every-iterate auditor knows "
                          f"the other rows' clipped gradients, as DP's adversary does) or "
                          f"false; got {c.known_data!r}.")
    if c.delta == 0:
        raise ConfigError("canaries.delta must be > 0 with kind gradient: the f-DP bound's ε "
                          "needs δ > 0 (leave it out for the target's DP-SGD δ).")
    rows = c.probe_rows
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ConfigError(f"canaries.probe_rows must be an integer >= 1 (training rows whose "
                          f"clipped gradients rank the quiet coordinates); got {rows!r}.")
    models = c.threat_models
    if isinstance(models, str):
        models = c.threat_models = [models]
    if (not isinstance(models, list) or not models or len(set(models)) < len(models)
            or any(m not in WHITE_BOX_THREAT_MODELS for m in models)):
        raise ConfigError(f"canaries.threat_models must be a non-empty list of distinct threat "
                          f"models from {', '.join(WHITE_BOX_THREAT_MODELS)} (the auditor sees "
                          f"every iterate, or the final model only); got {models!r}.")
