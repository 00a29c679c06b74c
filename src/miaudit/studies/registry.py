"""Study registry: a study declares its cells, the work of one cell, its summary and configs.

A study is one :class:`Study`, registered where it is defined::

    STUDY_CALIBRATION = register_study(Study(
        name="calibration",
        description="Watson et al. (ICLR 2022)",
        configs={"cpu": {...}, "paper": {...}},  # "cpu" finishes here within the hour
        cells=make_cells,                         # config dict -> list[Cell]
        work=run_cell,                            # Cell -> list[dict]; a top-level function
        summarize=write_summary,                  # (table, study_dir) -> None
        run_configs=cell_runs,                    # optional: a cell's params -> its runs
    ))

:func:`run_study` resolves the config (the size's config, then a YAML file's overrides), writes
it to ``study_dir/config.yaml``, runs the sweep and calls ``summarize``.
"""

from __future__ import annotations

import copy
import difflib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from miaudit.io import write_text
from miaudit.registry import Registry
from miaudit.studies.sweep import Cell, StudyError, Work, run_sweep

SIZES = ("cpu", "paper")
CONFIG_FILE = "config.yaml"
# Modules that register the built-in studies; imported on first lookup.
BUILTIN_MODULES = ("miaudit.studies.smoke",
                   "miaudit.studies.calibration",
                   "miaudit.studies.rapid",
                   "miaudit.studies.generalization",
                   "miaudit.studies.text",
                   "miaudit.studies.dp_audit",
                   "miaudit.studies.dp_bugs",
                   "miaudit.studies.power",
                   "miaudit.studies.llm",)


@dataclass(frozen=True)
class Study:
    """A study: its ``name`` (``miaudit study NAME``), a one-line ``description``, its
    ``configs`` (exactly :data:`SIZES`), ``cells`` (config -> cells), ``work`` (a cell -> rows;
    registered, a module-level function, which worker processes import by name) and
    ``summarize`` (the table and the study folder -> the summary files). Optional
    ``run_configs``: a cell's parameters -> the pipeline run configs whose banks its work
    builds; with it, ``miaudit study`` prints the expected time before the first cell runs
    (:mod:`miaudit.studies.estimate`). Checked on construction."""

    name: str
    description: str
    configs: Mapping[str, Mapping[str, Any]]
    cells: Callable[[dict[str, Any]], list[Cell]]
    work: Work
    summarize: Callable[[pd.DataFrame, Path], None]
    run_configs: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise StudyError(f"a study's name must be a non-empty string; got {self.name!r}.")
        if set(self.configs) != set(SIZES):
            raise StudyError(f"study {self.name!r} must declare configs {SIZES}, got "
                             f"{list(self.configs)}.")
        for part in ("cells", "work", "summarize"):
            if not callable(getattr(self, part)):
                raise StudyError(f"study {self.name!r}: {part} must be a function.")
        if self.run_configs is not None and not callable(self.run_configs):
            raise StudyError(f"study {self.name!r}: run_configs must be a function (a cell's "
                             "parameters -> its pipeline run configs) or None.")
        # frozen: each size's config copied once, so a caller's dict cannot change it later
        object.__setattr__(self, "configs", {k: dict(v) for k, v in self.configs.items()})


_STUDIES: Registry[Study] = Registry(
    "study", StudyError, unknown="unknown study {name!r}.{hint} Studies: {known}."
)


def register_study(study: Study) -> Study:
    """Register ``study`` under its name (a name registered twice is refused); returns it.
    Its ``work`` must be a module-level function: worker processes import it by name (a
    test's variant of a study, run serially, may replace it with any function)."""
    if not isinstance(study, Study):
        raise StudyError(f"register_study takes a Study(...); got {type(study).__name__}.")
    if "<locals>" in getattr(study.work, "__qualname__", "<locals>"):
        raise StudyError(f"study {study.name!r}: work must be a module-level function "
                         "(worker processes import it by name).")
    _STUDIES.register(study.name, study)
    return study


def _load_builtins() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(module)


def get_study(name: str) -> Study:
    _load_builtins()
    return _STUDIES.get(name)


def list_studies() -> list[Study]:
    _load_builtins()
    return [_STUDIES[k] for k in _STUDIES.names()]


# Sections whose keys are names the user chooses (a study's datasets): a new key adds an entry
# (each study checks the entries it uses are complete) instead of being a typo.
OPEN_SECTIONS = ("datasets.",)


def merge_config(
    base: Mapping[str, Any], overrides: Mapping[str, Any], where: str = ""
) -> dict[str, Any]:
    """``base`` with ``overrides`` applied recursively; a key ``base`` lacks is an error (so a
    typo never silently does nothing), except below a mapping that is empty in ``base`` and in
    an open section (``datasets``: a new dataset entry)."""
    out = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        path = f"{where}{key}"
        if key not in out:
            if base and where not in OPEN_SECTIONS:
                close = difflib.get_close_matches(str(key), [str(k) for k in out], n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise StudyError(f"unknown study config key {path!r}.{hint} "
                                 f"Valid keys here: {', '.join(map(str, out))}.")
            out[key] = copy.deepcopy(value)
        elif isinstance(out[key], Mapping) and isinstance(value, Mapping):
            out[key] = merge_config(out[key], value, f"{path}.")
        else:
            out[key] = copy.deepcopy(value)
    return out


def resolve_config(study: Study, size: str = "cpu",
                   overrides: str | Path | Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The study's ``size`` config with the overrides (a mapping or a YAML file) applied."""
    if size not in SIZES:
        raise StudyError(f"--size must be one of {', '.join(SIZES)}; got {size!r}.")
    config = dict(study.configs[size])
    if overrides is not None:
        if not isinstance(overrides, Mapping):
            path = Path(overrides)
            if not path.exists():
                raise StudyError(f"study config file {path} does not exist.")
            try:
                overrides = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except yaml.YAMLError as exc:
                raise StudyError(f"study config file {path} is not valid YAML: {exc}") from exc
            if not isinstance(overrides, Mapping):
                raise StudyError(f"study config file {path} must hold a mapping of keys.")
        config = merge_config(config, overrides)
    config.pop("study", None)
    config.pop("size", None)
    return {"study": study.name, "size": size, **config}


def load_study_config(study_dir: str | Path) -> dict[str, Any]:
    """The resolved config a study run wrote into ``study_dir`` (for ``summarize``)."""
    path = Path(study_dir) / CONFIG_FILE
    if not path.exists():
        raise StudyError(f"{path} does not exist: run the study into {study_dir} first.")
    result: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return result


def default_study_dir(name: str, size: str) -> Path:
    return Path("runs") / "studies" / f"{name}-{size}"


def run_study(
    name: str,
    size: str = "cpu",
    overrides: str | Path | Mapping[str, Any] | None = None,
    executor: Any = "local",
    out: str | Path | None = None,
    progress: bool = True,
) -> tuple[pd.DataFrame, Path]:
    """Resolve the config, run the sweep (resumably) and write the summary; the study table
    and the study folder."""
    study = get_study(name)
    config = resolve_config(study, size, overrides)
    study_dir = Path(out) if out else default_study_dir(name, size)
    cells = study.cells(config)
    if not cells:
        raise StudyError(f"study {name!r} made no cells from its config; check the config.")
    study_dir.mkdir(parents=True, exist_ok=True)
    write_text(study_dir / CONFIG_FILE, yaml.safe_dump(config, sort_keys=False))
    table = run_sweep(cells, study.work, study_dir, executor, progress=progress)
    study.summarize(table, study_dir)
    return table, study_dir
