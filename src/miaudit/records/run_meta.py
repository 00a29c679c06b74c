"""What a run or an audit records about itself (summary.json's meta), as one typed record.

`miaudit run` and `miaudit audit` record the same facts: the run's name and seed, the
dataset, the queries, the audit samples, how many models were trained and how many came from
the model cache, the device, the seconds and the config, beside facts of their own (a run's
recipes and design, an audit's target and public data). :class:`RunMeta` holds the shared
ones typed and the others as the command's ``facts``; :meth:`RunMeta.to_dict` lays them out
as ``AuditResult.meta`` and summary.json have always held them: each command's keys in its
order, and the model counts under each command's spelling (``models_trained`` for a run,
whose count covers every model of its design; ``references_trained`` for an audit, which
trains only references). :meth:`ModelCounts.of_meta` reads those counts back from a meta
dict, whichever command wrote it: the one place that knows both spellings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Command = Literal["run", "audit"]

# the meta keys of the model counts, by command: what summary.json has always called them
_COUNT_KEYS: dict[str, tuple[str, str]] = {
    "run": ("models_trained", "models_from_cache"),
    "audit": ("references_trained", "references_from_cache"),
}
_COUNTED = {"run": "models", "audit": "reference models"}

# where a command's own facts not named in its layout go
_REST = "..."
# Each command's meta keys in the order it has always written them (summary.json is compared
# byte for byte across versions); a key without a value is left out.
_LAYOUTS: dict[str, tuple[str, ...]] = {
    "run": (
        "recipes", "run", "seed", "dataset", "dataset_source", "dataset_notes",
        "dataset_preprocessing", "dataset_labels", "design", "n_models", "forgetting_models",
        "queries", "audit_samples", *_COUNT_KEYS["run"], "train_wall_seconds",
        "train_seconds_original", "target_privacy", _REST, "device", "seconds", "config",
    ),
    "audit": (
        "run", "seed", "target", "target_kind", "dataset", "dataset_source",
        "dataset_preprocessing", "dataset_labels", "public_dataset", "audit_samples", "members",
        "nonmembers", "public_pool", "population", "references", "reference_train_rows",
        "reference_recipe", *_COUNT_KEYS["audit"], "queries", _REST, "device", "seconds",
        "config",
    ),
}


@dataclass(frozen=True)
class ModelCounts:
    """How many models the command trained and how many it loaded from the model cache;
    ``counted``: what they are (``"models"``: every model of a run's design, the target
    included; ``"reference models"``: an audit's references, the target being the user's)."""

    trained: int
    from_cache: int
    counted: str = "models"

    @classmethod
    def of_meta(cls, meta: Mapping[str, Any]) -> ModelCounts | None:
        """The counts a meta dict (or summary.json) records, None when it records none."""
        for command, (trained, cached) in _COUNT_KEYS.items():
            if trained in meta or cached in meta:
                return cls(int(meta.get(trained) or 0), int(meta.get(cached) or 0),
                           _COUNTED[command])
        return None


@dataclass(frozen=True)
class DatasetFacts:
    """The audited dataset as the report names it."""

    name: str
    source: str
    preprocessing: str
    labelled: bool

    @classmethod
    def of(cls, dataset: Any) -> DatasetFacts:
        """From a :class:`miaudit.data.Dataset` (any object with its fields)."""
        return cls(dataset.name, dataset.source, dataset.preprocessing, bool(dataset.labelled))


@dataclass(frozen=True)
class RunMeta:
    """What a run or an audit records about itself (module docstring).

    ``facts``: the command's own entries, keyed as in meta (a run's ``recipes``, ``design``,
    ...; an audit's ``target``, ``public_dataset``, ...), placed where its layout names them
    (any other where it keeps room for them); ``after``: entries that follow the config
    (an audit's bank summary, a run's checkpoints, the warnings)."""

    command: Command
    run: str
    seed: int
    dataset: DatasetFacts
    queries: str
    audit_samples: int
    trained: int
    from_cache: int
    device: str
    seconds: float
    config: Mapping[str, Any]
    facts: Mapping[str, Any] = field(default_factory=dict)
    after: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.command not in _LAYOUTS:
            raise ValueError(f"RunMeta.command must be one of {sorted(_LAYOUTS)}, "
                             f"not {self.command!r}")
        clash = sorted(set(self.facts) & set(self._fields()))
        if clash:
            raise ValueError(f"RunMeta.facts may not replace the record's own fields: {clash}")

    @property
    def models(self) -> ModelCounts:
        """The model counts, with what they count."""
        return ModelCounts(self.trained, self.from_cache, _COUNTED[self.command])

    def _fields(self) -> dict[str, Any]:
        trained, cached = _COUNT_KEYS[self.command]
        return {
            "run": self.run, "seed": self.seed, "dataset": self.dataset.name,
            "dataset_source": self.dataset.source,
            "dataset_preprocessing": self.dataset.preprocessing,
            "dataset_labels": "labelled" if self.dataset.labelled else "unlabelled",
            "queries": self.queries, "audit_samples": self.audit_samples,
            trained: self.trained, cached: self.from_cache, "device": self.device,
            "seconds": self.seconds, "config": self.config,
        }

    def to_dict(self) -> dict[str, Any]:
        """The record as meta holds it: the command's keys in its order (module docstring),
        then ``after``."""
        values = {**self._fields(), **self.facts}
        layout = _LAYOUTS[self.command]
        out: dict[str, Any] = {}
        for key in layout:
            if key == _REST:
                out.update({k: v for k, v in self.facts.items() if k not in layout})
            elif key in values:
                out[key] = values[key]
        out.update(self.after)
        return out
