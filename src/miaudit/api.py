"""The Python API: the command line's audits from a notebook, returning typed results.

- :func:`attack` scores attacks on a signal bank (``miaudit attack``, no files written);
- :func:`run` runs a configured audit (``miaudit run``, writes the run directory);
- :func:`audit` audits a model trained elsewhere (``miaudit audit``): the model and data may be
  what the command line takes (files, import paths, dataset names) or objects in memory;
- :func:`strongest` / :func:`ranked`: the attacks in the report's order of strength.

Each returns an :class:`~miaudit.results.AuditResult` (``to_frame()``, per attack
``outcome.summary``). The work is the command line's own (``evaluate_bank``, the pipeline's
``run``, ``run_audit``), so both give the same numbers for the same inputs. Heavy modules
(torch, the pipeline) are imported inside the functions: ``import miaudit`` stays cheap.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from miaudit.config import MetricsConfig, RunConfig
    from miaudit.results import AttackOutcome, AuditResult
    from miaudit.signals import SignalBank

__all__ = ["attack", "run", "audit", "ranked", "strongest"]

# model files by suffix: a pickled estimator, or precomputed outputs (as the CLI names them)
_ESTIMATOR_SUFFIXES = (".joblib", ".pkl", ".pickle")
_OUTPUT_SUFFIXES = (".npz", ".csv", ".parquet", ".pq")
_TABLES = (".csv", ".parquet", ".pq")


@contextlib.contextmanager
def _bars(progress: bool) -> Iterator[None]:
    """progress=False turns off every bar, also those of code without a progress argument
    (as --quiet does); progress=True leaves the process-wide switch as the caller set it."""
    if progress:
        yield
        return
    from miaudit.progress import progress_switch

    with progress_switch(False):
        yield


def _attack_names(attacks: str | Sequence[str] | None) -> list[str] | None:
    if attacks is None:
        return None
    if isinstance(attacks, str):  # "loss,rmia", as the command line takes them
        return [a.strip() for a in attacks.split(",") if a.strip()]
    return list(attacks)


def _metrics_config(metrics: MetricsConfig | Mapping[str, Any] | None) -> MetricsConfig | None:
    from miaudit.config import MetricsConfig, build_config

    if metrics is None or isinstance(metrics, MetricsConfig):
        return metrics
    return build_config(MetricsConfig, dict(metrics), {}, "metrics")


def attack(
    bank: SignalBank | str | os.PathLike,
    target: int = 0,
    attacks: str | Sequence[str] | None = None,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    metrics: MetricsConfig | Mapping[str, Any] | None = None,
    seed: int = 0,
    progress: bool = True,
) -> AuditResult:
    """Score attacks on a signal bank for model ``target``, as ``miaudit attack`` does; no
    file is written.

    ``bank``: a :class:`~miaudit.signals.SignalBank` or the path of a ``bank.npz``.
    ``attacks``: names (or one comma-separated string); default every attack the bank
    supports, those it cannot (no references, no channel) listed in ``meta["skipped"]``.
    ``params``: ``{attack: {param: value}}``. ``metrics``: a MetricsConfig or its fields
    (``{"fprs": [0.001, 0.01], "bootstrap": 200, ...}``).
    """
    from miaudit.attacks import list_attacks
    from miaudit.attacks.base import check_attack_params
    from miaudit.errors import ConfigError
    from miaudit.pipeline import evaluate_bank
    from miaudit.signals import SignalBank

    if params is not None and not isinstance(params, Mapping):
        raise ConfigError("params must be a mapping {attack: {param: value}}.")
    checked = check_attack_params(params, "params")  # before the bank loads
    source = None
    if not isinstance(bank, SignalBank):
        source = os.fspath(bank)
        bank = SignalBank.load(source)
    names = _attack_names(attacks)
    if names is None:  # every attack the bank can support (the command line's rule)
        names = [s.name for s in list_attacks() if s.needs.channel is None
                 or s.needs.channel in bank.channels]
    with _bars(progress):
        result = evaluate_bank(
            bank, target, names, checked,
            _metrics_config(metrics), seed=seed, skip_unsupported=attacks is None,
            progress=progress,
        )
    result.meta.update({"n_models": bank.n_models, "queries": bank.n_queries,
                        "audit_samples": int(bank.audit.sum())})
    if source is not None:
        result.meta["bank"] = source
    return result


def run(
    config: RunConfig | Mapping[str, Any] | str | os.PathLike,
    out: str | os.PathLike | None = None,
    progress: bool = True,
    echo: bool = False,
    *,
    overwrite: bool = False,
) -> AuditResult:
    """Run a configured audit, as ``miaudit run CONFIG [--out OUT]`` does: trains (or loads
    from the model cache) every model, writes the run directory (config.yaml, bank.npz, the
    report) and returns the result; ``result.out`` is the run directory.

    ``config``: a :class:`~miaudit.config.RunConfig` (not modified), a mapping of its fields
    (as in a YAML config) or the path of a YAML config. ``echo`` prints the results table as
    the command does. A run directory holding another run (another command's or config's) is
    refused unless ``overwrite=True`` (``--overwrite``); the same config reruns into its own.
    """
    from miaudit.config import RunConfig, config_from_dict, load_config
    from miaudit.pipeline import run as run_pipeline

    if isinstance(config, RunConfig):
        cfg = copy.deepcopy(config)  # `out` must not change the caller's config
    elif isinstance(config, Mapping):
        cfg = config_from_dict(copy.deepcopy(dict(config)))
    else:
        cfg = load_config(config)
    if out is not None:
        cfg.output = os.fspath(out)
    with _bars(progress):
        result, path = run_pipeline(cfg, progress=progress, echo=echo, overwrite=overwrite)
    result.out = path
    return result


def _class_spec(cls: type) -> str | None:
    """An import path naming ``cls`` ("pkg.module:Class", or "file.py:Class" for a class from
    a file miaudit imported), or None when it cannot be imported by path (defined in
    ``__main__`` or a notebook, or inside a function)."""
    import inspect

    from miaudit.errors import ConfigError
    from miaudit.models.user import resolve_object

    module, name = cls.__module__, cls.__qualname__
    if module == "__main__" or "<locals>" in name:
        return None
    if module.startswith("miaudit_user_"):  # imported from a file: name the file, which any
        # process can import (the module name is private to this one)
        file = inspect.getsourcefile(cls)
        spec = f"{file}:{name}" if file else None
    else:
        spec = f"{module}:{name}"
    try:
        return spec if spec and resolve_object(spec) is cls else None
    except ConfigError:
        return None


def _check_kwargs(model: Any, spec: str, kwargs: Mapping[str, Any]) -> None:
    """Reference models are ``Class(**kwargs)``: refuse kwargs that build another shape than
    ``model`` (a reference of another size would understate the leak silently)."""
    import torch

    from miaudit.errors import ConfigError
    from miaudit.models.user import resolve_object

    with torch.random.fork_rng():  # building draws initial weights: not from the caller's RNG
        try:
            fresh = resolve_object(spec)(**kwargs)
        except Exception as exc:
            raise ConfigError(
                f"reference models are built as {spec}(**{dict(kwargs)!r}), which failed "
                f"({type(exc).__name__}: {exc}): pass the constructor arguments as model_kwargs."
            ) from exc
    ours = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in fresh.state_dict().items()}
    if ours != theirs:
        raise ConfigError(
            f"{spec}(**{dict(kwargs)!r}) builds a model of another shape than the one given "
            "(its state_dict keys or shapes differ): pass the constructor arguments the model "
            "was built with as model_kwargs, so reference models share its architecture."
        )


def _model_section(
    model: Any, weights: str | os.PathLike | None, model_kwargs: Mapping[str, Any] | None,
    references: int, recipe: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The audit config's model section for ``model``: a path or import path as the command
    line takes it, or an in-memory object (``instance``)."""
    from miaudit.audit.config import instance_kind
    from miaudit.errors import ConfigError

    section: dict[str, Any] = {}
    if model_kwargs is not None:
        section["kwargs"] = dict(model_kwargs)
    if weights is not None:
        section["weights"] = os.fspath(weights)
    if isinstance(model, (str, os.PathLike)):
        text = os.fspath(model)
        suffix = Path(text).suffix.lower()
        if Path(text).is_dir():  # a Hugging Face save_pretrained folder
            section["hf_model"] = text
        elif suffix in _ESTIMATOR_SUFFIXES:
            section["estimator"] = text
        elif suffix in _OUTPUT_SUFFIXES:
            section["outputs"] = text
        elif ":" in text:  # a class (with its weights) or a prediction function
            section["module" if weights is not None else "predict"] = text
        else:
            raise ConfigError(
                f"model={text!r}: give an estimator file (.joblib/.pkl), an outputs file "
                "(.npz/.csv/.parquet), a Hugging Face model folder, "
                "'file.py:Class' or 'pkg.module:Class' with weights=..., "
                "'pkg.module:function' (a black box), or the model object itself."
            )
        return section
    if model is None:
        raise ConfigError("model is required: a model object, a file or an import path.")
    section["instance"] = model
    if instance_kind(model) != "torch":
        return section
    stated = recipe or {}
    needs_class = references > 0 and recipe is not None and "architecture" not in stated
    spec = _class_spec(type(model))
    if spec is None and needs_class:
        raise ConfigError(
            f"reference models are built from the model's class, but "
            f"{type(model).__module__}.{type(model).__qualname__} cannot be imported by path "
            "(it is defined in __main__, a notebook or a function). Put the class in a module "
            "(e.g. nets.py beside the notebook, then `from nets import Net`), or audit without "
            "reference models (references=0, or no recipe)."
        )
    if spec is not None:
        section["module"] = spec  # reference models are this class, trained with the recipe
        if needs_class:
            _check_kwargs(model, spec, section.get("kwargs") or {})
    return section


def _rows_file(rows: Any, folder: Path, name: str, what: str) -> str:
    """A file of row indices: a path as given, or indices / a boolean mask written to
    ``folder/name.npy`` (read back as the command line reads a rows file)."""
    import numpy as np

    from miaudit.errors import ConfigError

    if isinstance(rows, (str, os.PathLike)):
        return os.fspath(rows)
    values = np.asarray(rows)
    if values.dtype != bool and values.dtype.kind not in "iu":
        raise ConfigError(f"{what} must be row indices (integers), a boolean mask or a file; "
                          f"got an array of dtype {values.dtype}.")
    path = folder / f"{name}.npy"
    np.save(path, values if values.dtype == bool else values.astype(np.int64))
    return str(path)


def _data_file(data: Any, folder: Path, name: str, what: str) -> str:
    """A dataset name or file as given, or in-memory ``(X, y)`` written to
    ``folder/name.npz`` (loaded as the command line loads an .npz: ``X``, ``y``)."""
    import numpy as np

    from miaudit.errors import ConfigError

    if isinstance(data, (str, os.PathLike)):
        return os.fspath(data)
    if isinstance(data, (tuple, list)) and len(data) == 2:
        path = folder / f"{name}.npz"
        np.savez(path, X=np.asarray(data[0]), y=np.asarray(data[1]))
        return str(path)
    raise ConfigError(f"{what} must be a dataset name (miaudit data list), a data file, or "
                      f"arrays (X, y); got {type(data).__name__}.")


def audit(
    model: Any,
    data: Any,
    members: Any = None,
    nonmembers: Any = None,
    public: Any = None,
    public_rows: Any = None,
    references: int = 4,
    recipe: Mapping[str, Any] | None = None,
    attacks: str | Sequence[str] | None = None,
    out: str | os.PathLike | None = None,
    *,
    weights: str | os.PathLike | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
    output_kind: str | None = None,
    public_outputs: str | os.PathLike | None = None,
    preprocessing: str | None = None,
    label_column: str | None = None,
    text_column: str | None = None,
    membership_column: str | None = None,
    population: float | None = None,
    allow_fewer_reference_rows: bool = False,
    max_length: int | None = None,
    reference_base: str | os.PathLike | None = None,
    progress: bool = True,
    echo: bool = False,
    overwrite: bool = False,
    **options: Any,
) -> AuditResult:
    """Audit a model trained elsewhere, as ``miaudit audit`` does: writes the run directory
    (``runs/<name>/`` or ``out``: report, verdict, exposed.csv, bank.npz, audit.yaml) and
    returns the result (``result.out`` the directory, ``result.meta["verdict"]`` the release
    statement).

    ``model``: what the command line takes — an estimator file (``.joblib``/``.pkl``), an
    outputs file (``.npz``/``.csv``/``.parquet``), a Hugging Face ``save_pretrained`` folder
    (texts tokenized to ``max_length``; references fine-tuned from ``reference_base``, the
    checkpoint it was fine-tuned from), ``"file.py:Class"`` / ``"pkg.mod:Class"``
    with ``weights=`` (and ``model_kwargs=``), ``"pkg.mod:function"`` (a black box) — or an
    object: a fitted scikit-learn estimator (references are clones of it), a torch
    ``nn.Module`` (references are its class with ``recipe``, built with ``model_kwargs``; the
    class must be importable by path for that) or a function ``X -> [n, classes]`` outputs.
    The object itself is queried (a torch module through a copy); audit.yaml records it as
    "in memory", so such a run is not rerun from that file.

    ``data``: a dataset name, a data file, or arrays ``(X, y)``; ``members`` /
    ``nonmembers`` / ``public_rows``: row indices, a boolean mask over the rows, or a file
    (``membership_column=`` instead of ``members`` for a 0/1 column of the data file);
    ``public``: the attacker's own data (name, file or ``(X, y)``), or ``public_rows`` of
    ``data``. Arrays are written to a temporary folder for the audit and removed after it
    (audit.yaml names those files); ``text_column=`` / ``label_column=`` name the columns of
    table files (texts for a model folder). ``preprocessing``: ``"standard"`` or ``"raw"``,
    the values the model was trained on (README, "Datasets and their preprocessing").

    ``options``: any other audit-config key, as in audit.yaml (``seed=``, ``name=``,
    ``metrics={"bootstrap": 100}``, ``signals={"grad_norm": False}``, ``attack_params=``,
    ``exposed=``, ``device=``, ``cache_dir=``, ``data_dir=``); a section given here is merged
    over what the named arguments set. Relative paths are read from the current directory.

    A run directory holding another run (another command's or config's) is refused unless
    ``overwrite=True`` (``--overwrite``); the same audit reruns into its own.
    """
    import tempfile

    from miaudit.audit.config import absolute_paths, audit_config, merge
    from miaudit.audit.run import run_audit
    from miaudit.io import API_TEMP_PREFIX

    # the run's identity names files in this folder alike every time (miaudit.io): arrays given
    # anew to the same audit rerun into its folder
    with tempfile.TemporaryDirectory(prefix=API_TEMP_PREFIX) as tmp:
        folder = Path(tmp)
        model_sec = _model_section(model, weights, model_kwargs, references, recipe)
        if output_kind is not None:
            model_sec["output_kind"] = output_kind
        if public_outputs is not None:
            model_sec["public_outputs"] = os.fspath(public_outputs)
        if max_length is not None:
            model_sec["max_length"] = max_length
        dataset = _data_file(data, folder, "data", "data")
        data_sec: dict[str, Any] = {"dataset": dataset}
        if members is not None:
            data_sec["members"] = _rows_file(members, folder, "members", "members")
        if membership_column is not None:
            data_sec["membership_column"] = membership_column
        if nonmembers is not None:
            data_sec["nonmembers"] = _rows_file(nonmembers, folder, "nonmembers", "nonmembers")
        public_sec: dict[str, Any] = {}
        if public is not None:
            public_sec["dataset"] = _data_file(public, folder, "public", "public")
        if public_rows is not None:
            public_sec["rows"] = _rows_file(public_rows, folder, "public_rows", "public_rows")
        if population is not None:
            public_sec["population"] = population
        # loader options as the command line sets them: a label column for every table file,
        # the preprocessing for the audit data and a public dataset named by registry name
        for key, value in (("label_column", label_column), ("text_column", text_column)):
            for section in (data_sec, public_sec) if value is not None else ():
                name = section.get("dataset")
                if name and Path(name).suffix.lower() in (*_TABLES, ".jsonl"):
                    section.setdefault("options", {})[key] = value
        if preprocessing is not None:
            data_sec.setdefault("options", {})["preprocessing"] = preprocessing
            name = public_sec.get("dataset")
            if name and Path(name).suffix.lower() not in (".npz", *_TABLES):
                public_sec.setdefault("options", {})["preprocessing"] = preprocessing
        refs: dict[str, Any] = {"models": references}
        if recipe is not None:
            refs["recipe"] = dict(recipe)
        if allow_fewer_reference_rows:
            refs["allow_fewer_rows"] = True
        if reference_base is not None:
            refs["base"] = os.fspath(reference_base)
        mapping: dict[str, Any] = {"model": model_sec, "data": data_sec, "references": refs}
        if public_sec:
            mapping["public"] = public_sec
        names = _attack_names(attacks)
        if names is not None:
            mapping["attacks"] = names
        if out is not None:
            mapping["output"] = os.fspath(out)
        mapping = absolute_paths(merge(mapping, options), Path.cwd())
        cfg = audit_config(mapping)
        with _bars(progress):
            result, path = run_audit(cfg, progress=progress, echo=echo, overwrite=overwrite)
    result.out = path
    return result


def ranked(result: AuditResult) -> list[AttackOutcome]:
    """The attacks strongest first, in the report's order (TPR at the headline FPR, the
    lowest one with at least ten expected false positives; then AUC)."""
    # the report's own ranking (here, not as an AuditResult method: report.strength imports
    # miaudit.results, which must not import it back)
    from miaudit.report.strength import ranked as report_ranked

    return report_ranked(result)[0]


def strongest(result: AuditResult) -> AttackOutcome | None:
    """The strongest attack: the one the report stars and the verdict names (None when the
    result has no attack)."""
    order = ranked(result)
    return order[0] if order else None
