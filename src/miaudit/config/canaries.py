"""The run config's ``canaries`` section checked (:func:`check_canaries_section`): canary
rows (black-box, kinds mislabelled, natural, secret) or white-box gradient canaries (kind
gradient, a DP-SGD target's; :mod:`miaudit.train.gradient_canaries`), each with its own
options. Whether the target's recipe has the DP-SGD that gradient canaries need is checked
with the recipes (:mod:`miaudit.config.run`)."""

from __future__ import annotations

from miaudit.config.sections import CanariesConfig
from miaudit.config.sections.canary_spec import CanaryVariant, as_kind
from miaudit.config.sections.spec import suggest
from miaudit.errors import ConfigError


def check_canaries_section(canaries: CanariesConfig | None, design: str) -> CanaryVariant:
    """``canaries`` against the registries and the design (its own rules hold on
    construction: :mod:`miaudit.config.sections.canary_spec`): a registered kind, guesses that
    fit the count, a secret format whose space holds the count, the gradient canaries'
    directions, and a design that supports canary rows (whether m can certify ε > 0 at all is
    checked with the recipe's δ in miaudit.pipeline.canaries, before training)."""
    from miaudit.privacy.canaries import canary_kind, canary_kind_names, resolve_guesses
    from miaudit.privacy.secrets import secret_format_names
    from miaudit.protocol import supports_canaries

    # `canaries:` left empty in the YAML: the defaults; built in Python: its variant's rules
    section = as_kind(CanariesConfig() if canaries is None else canaries)
    count = section.count
    names = {"kind": canary_kind_names, "secret_format": secret_format_names}
    for key, listed in names.items():  # registry names (a list or mapping: unhashable there)
        if not isinstance(getattr(section, key), str):
            raise ConfigError(f"canaries.{key} must be one of {', '.join(listed())}; got "
                              f"{getattr(section, key)!r}.")
    kind = canary_kind(section.kind)
    if kind.secret_texts:
        from miaudit.privacy.secrets import secret_format

        try:
            space = secret_format(section.secret_format).space_size
        except ConfigError as exc:  # the registry's message, with the key it came from
            raise ConfigError(f"canaries.secret_format: {exc}") from exc
        if count > space:
            raise ConfigError(f"canaries.count {count} exceeds the {space:,} distinct secrets "
                              f"of canaries.secret_format {section.secret_format!r}.")
    if kind.white_box:
        _check_directions(section)
    if count == 0:
        return section
    resolve_guesses(section.guesses, count)
    if kind.white_box:  # no rows: any design (the recipe's DP is checked with the recipes)
        return section
    if not supports_canaries(design):
        raise ConfigError(
            f"canaries need design: offline (the target alone trains on a random half of "
            f"them; references never do); the {design} design is not supported yet."
        )
    return section


def _check_directions(c: CanariesConfig) -> None:
    """The gradient canaries' direction and coordinates: each one of the choices of
    :class:`~miaudit.train.gradient_canaries.GradientCanaries`, checked with kind gradient
    only (their torch-free home: :mod:`miaudit.train.gradient_canary_kinds`)."""
    from miaudit.train.gradient_canary_kinds import COORDINATES, KINDS

    for key, allowed in {"direction": KINDS, "coordinates": COORDINATES}.items():
        value = getattr(c, key)
        if value not in allowed:
            raise ConfigError(f"canaries.{key} must be one of {', '.join(allowed)}; got "
                              f"{value!r}.{suggest(str(value), allowed)}")
