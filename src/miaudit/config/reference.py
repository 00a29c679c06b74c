"""The reference of a config, generated from its models (:class:`~miaudit.config.sections.
spec.Spec`): every key with its type, default, bounds and description, so the docs are
never written twice. ``docs/config-reference.md`` is written by ``python -m
miaudit.external.audit_spec_docs`` (both configs; the audit's lives in a higher layer) and a
test holds the committed file to the generated text."""

from __future__ import annotations

import typing
from typing import Any

from pydantic.fields import FieldInfo

from miaudit.config.sections.spec import Spec, describe, members, must


def _sections(annotation: Any) -> list[type[Spec]]:
    """The Spec classes of a section's annotation (each variant of a union)."""
    out = []
    for t in members(annotation):
        while typing.get_origin(t) is typing.Annotated:
            t = typing.get_args(t)[0]
        out += [m for m in members(t) if isinstance(m, type) and issubclass(m, Spec)]
        if isinstance(t, type) and issubclass(t, Spec) and t not in out:
            out.append(t)
    return list(dict.fromkeys(out))


def _default(info: FieldInfo) -> str:
    value = info.get_default(call_default_factory=True)
    if isinstance(value, Spec):
        return "(section)"
    return f"`{value!r}`" if value is not None else "null"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rows(cls: type[Spec], prefix: str = "") -> list[str]:
    """One Markdown table row per key of ``cls`` (nested sections walked; a union's variants
    named in the section's row)."""
    out = []
    for name, info in cls.model_fields.items():
        key = prefix + name
        variants = _sections(info.annotation)
        if variants:
            kinds = ", ".join(v.__name__ for v in variants)
            out.append(f"| `{key}` | section ({kinds}) | | | {_cell(info.description or '')} |")
            out += rows(variants[0], f"{key}.")
            continue
        kind = describe(info.annotation)
        rule = must(info).removeprefix("be ")
        rule = "" if rule == kind else rule  # nothing beyond the type
        out.append(f"| `{key}` | {_cell(kind)} | {_cell(_default(info))} | {_cell(rule)} | "
                   f"{_cell(info.description or '')} |")
    return out


def reference(configs: dict[str, type[Spec]]) -> str:
    """The Markdown reference of ``configs`` ({title: root config class})."""
    parts = ["# Configuration reference", "",
             "Generated from the config models (`python -m miaudit.external.audit_spec_docs`);"
             " do not edit by hand. Each key's *must* says what a valid value is, as the "
             "error for an invalid one says it.", ""]
    for title, cls in configs.items():
        parts += [f"## {title}", "", " ".join((cls.__doc__ or "").split("\n\n")[0].split()),
                  "", "| key | type | default | must | description |", "|---|---|---|---|---|",
                  *rows(cls), ""]
    return "\n".join(parts)
