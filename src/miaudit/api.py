"""The Python API: the command line's audits from a notebook, returning typed results.

- :func:`attack` scores attacks on a signal bank (``miaudit attack``, no files written);
- :func:`run` runs a configured audit (``miaudit run``, writes the run directory);
- :func:`audit` audits a model trained elsewhere (``miaudit audit``): the model and data may be
  what the command line takes (files, import paths, dataset names) or objects in memory;
- :func:`strongest` / :func:`ranked`: the attacks in the report's order of strength;
- :func:`evaluate_attacks` (with :class:`EvaluationOptions`): attacks scored and evaluated on
  a bank in memory, the typed entry point the studies call (re-exported from
  :mod:`miaudit.pipeline.evaluate`).

Each returns an :class:`~miaudit.records.outcomes.AuditResult` (``to_frame()``, per attack
``outcome.metrics`` and ``outcome.cost``, typed and frozen). The command line is a parser over
these functions: ``miaudit run`` and ``miaudit demo`` call :func:`run`, ``miaudit attack``
calls :func:`attack` (then writes the report), and ``miaudit audit`` builds its config with the
functions :func:`audit` uses (:func:`miaudit.external.audit_config.options_mapping` and
:func:`~miaudit.external.audit_config.resolve`) before ``run_audit``; so both give the same
numbers for the same inputs. Heavy modules (torch, the pipeline) are imported inside the
functions: ``import miaudit`` stays cheap.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from miaudit.runtime.lazy import lazy_exports

if TYPE_CHECKING:
    from miaudit.config import MetricsConfig, RunConfig
    from miaudit.pipeline.evaluate import EvaluationOptions as EvaluationOptions
    from miaudit.pipeline.evaluate import evaluate_attacks as evaluate_attacks
    from miaudit.records.outcomes import AttackOutcome, AuditResult
    from miaudit.signals import SignalBank
    from miaudit.train.cluster import Compute

__all__ = ["attack", "run", "audit", "ranked", "strongest", "evaluate_attacks",
           "EvaluationOptions"]

# the pipeline's typed evaluation entry point (what studies call), re-exported here and
# loaded on first use (PEP 562): `import miaudit` stays cheap
_LAZY = {"evaluate_attacks": "miaudit.pipeline.evaluate",
         "EvaluationOptions": "miaudit.pipeline.evaluate"}


__getattr__ = lazy_exports(__name__, globals(), _LAZY)

# model files by suffix: a pickled estimator, or precomputed outputs (as the CLI names them)
_ESTIMATOR_SUFFIXES = (".joblib", ".pkl", ".pickle")
_OUTPUT_SUFFIXES = (".npz", ".csv", ".parquet", ".pq")
# files of weights, which are not a model without their class
_WEIGHTS_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".ckpt")
# how miaudit.audit spells the two readings of "file.py:Name" (sources.prediction_function)
_API_WORDS = {"given": "model={spec!r}", "weights": "model={spec!r}, weights='FILE'"}


@contextlib.contextmanager
def _bars(progress: bool) -> Iterator[None]:
    """progress=False turns off every bar, also those of code without a progress argument
    (as --quiet does); progress=True leaves the process-wide switch as the caller set it."""
    if progress:
        yield
        return
    from miaudit.runtime.progress import progress_switch

    with progress_switch(False):
        yield


def _metrics_config(metrics: MetricsConfig | Mapping[str, Any] | None) -> MetricsConfig | None:
    from miaudit.config import MetricsConfig, build_config

    if metrics is None or isinstance(metrics, MetricsConfig):
        return metrics
    built: MetricsConfig = build_config(MetricsConfig, dict(metrics), {}, "metrics")
    return built


def attack(
    bank: SignalBank | str | os.PathLike[str],
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
    ``miaudit attack`` is this function and a report written from its result.
    """
    from miaudit.attacks import list_attacks
    from miaudit.attacks.registry import check_attack_params
    from miaudit.config import split_names
    from miaudit.pipeline.evaluate import EvaluationOptions, evaluate_attacks
    from miaudit.signals import SignalBank

    given = split_names(attacks)
    # names and values before the bank loads (the command line has checked them already, in
    # its own words: --params, --attacks)
    checked = check_attack_params(params, "params", selected=given)
    source = None
    if not isinstance(bank, SignalBank):
        source = os.fspath(bank)
        bank = SignalBank.load(source)  # logits mapped from the file, not copied
    names = given
    if names is None:  # every attack the bank can support
        names = [s.name for s in list_attacks() if s.needs.channel is None
                 or s.needs.channel in bank.channels]
    with _bars(progress):
        result = evaluate_attacks(bank, target, names, EvaluationOptions(
            params=checked, metrics=_metrics_config(metrics), seed=seed,
            skip_unsupported=given is None, progress=progress))
    if source is not None:
        result.meta["bank"] = source
    audit = bank.audit  # set by the bank (None only as a constructor argument)
    result.meta.update({"n_models": bank.n_models, "queries": bank.n_queries,
                        "audit_samples": 0 if audit is None else int(audit.sum())})
    return result


def _compute_mapping(compute: Any) -> Any:
    """``compute=`` of the API as a config mapping: a mapping of its keys as given, a
    :class:`~miaudit.train.cluster.Compute` or a ``ComputeConfig`` as its keys (anything else
    is left for the config to refuse)."""
    from miaudit.config import ComputeConfig

    if isinstance(compute, ComputeConfig):
        return compute.to_dict()
    if dataclasses.is_dataclass(compute) and not isinstance(compute, type):  # a Compute
        return dataclasses.asdict(compute)
    return dict(compute) if isinstance(compute, Mapping) else compute


def run(
    config: RunConfig | Mapping[str, Any] | str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    progress: bool = True,
    echo: bool = False,
    *,
    overwrite: bool = False,
    compute: Compute | Mapping[str, Any] | None = None,
    device: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> AuditResult:
    """Run a configured audit, as ``miaudit run CONFIG [--out OUT]`` does: trains (or loads
    from the model cache) every model, writes the run directory (config.yaml, training.json,
    bank.npz, verdict.txt, verdict.json, the report) and returns the result; ``result.out``
    is the run directory, ``result.meta["verdict"]`` the release statement.

    ``config``: a :class:`~miaudit.config.RunConfig` (not modified), a mapping of its fields
    (as in a YAML config) or the path of a YAML config. ``compute``: where the models train,
    laid over the config's ``compute`` section (``--executor``, ``--ray-address``): a mapping
    of its keys (``{"executor": "ray", "address": "auto"}``) or a
    :class:`~miaudit.train.cluster.Compute`; None keeps the config's. ``echo`` prints the
    results table as the command does. A run directory holding another run (another
    command's or config's) is refused unless ``overwrite=True`` (``--overwrite``); the same
    config reruns into its own, wherever its models train. ``device``, ``cache_dir`` and
    ``data_dir`` (``--device``, ``--cache-dir``, ``--data-dir``) replace the config's: where
    the run computes and reads, not what it measures, so they leave the run's identity as
    it is.
    """
    from miaudit.config import (
        ComputeConfig,
        RunConfig,
        build_config,
        compute_section,
        config_from_dict,
        load_config,
    )

    if isinstance(config, RunConfig):
        cfg = copy.deepcopy(config)  # `out` must not change the caller's config
    elif isinstance(config, Mapping):
        cfg = config_from_dict(copy.deepcopy(dict(config)))
    else:
        cfg = load_config(config)
    if out is not None:
        cfg.output = os.fspath(out)
    if device is not None:
        cfg.device = device
    if cache_dir is not None:
        cfg.cache_dir = os.fspath(cache_dir)
    if data_dir is not None:
        cfg.data_dir = os.fspath(data_dir)
    if compute is not None:  # laid over the config's section, checked as it is
        given = _compute_mapping(compute)
        if not isinstance(given, dict):
            from miaudit.errors import ConfigError

            raise ConfigError(f"compute must be a mapping of compute keys or a Compute; got "
                              f"{type(compute).__name__}.")
        base = compute_section(cfg.compute).to_dict()
        if given.get("executor") == "local" and "address" not in given:
            base["address"] = None  # a cluster's address means nothing to local training
        cfg.compute = build_config(ComputeConfig, {**base, **given}, {}, "compute")
    cfg.compute = compute_section(cfg.compute)
    # a bad config has failed by now, before the pipeline's imports (torch)
    from miaudit.pipeline.runner import run as run_pipeline

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


def _model_key(text: str, weights: str | os.PathLike[str] | None) -> str:
    """The model-section key a model given as a string fills: what the command line's flag
    for it would be (``--hf-model``, ``--estimator``, ``--outputs``, ``--model`` with
    ``--weights``, ``--predict``). "file.py:Name" without weights must name a function: a
    class is refused (by the audit, which imports it only after the other inputs' checks),
    as a weights file given as the model is (here)."""
    from miaudit.errors import ConfigError

    suffix = Path(text).suffix.lower()
    if Path(text).is_dir():  # a Hugging Face save_pretrained folder
        return "hf_model"
    if suffix in _ESTIMATOR_SUFFIXES:
        return "estimator"
    if suffix in _OUTPUT_SUFFIXES:
        return "outputs"
    if ":" in text:  # a class (with its weights) or a prediction function
        # not imported here: the audit imports it once every other input is checked, and
        # refuses a class there, both readings named (run_audit's predict_words)
        return "module" if weights is not None else "predict"
    if suffix in _WEIGHTS_SUFFIXES:
        raise ConfigError(
            f"model={text!r} is a weights file, which is no model without its class: give "
            f"the class as model='file.py:Class' (or 'pkg.module:Class') and the file as "
            f"weights={text!r}. A whole model saved with torch.save: load it and pass the "
            "nn.Module itself as model=."
        )
    raise ConfigError(
        f"model={text!r}: give an estimator file (.joblib/.pkl), an outputs file "
        "(.npz/.csv/.parquet), a Hugging Face model folder, "
        "'file.py:Class' or 'pkg.module:Class' with weights=..., "
        "'file.py:function' or 'pkg.module:function' (a black box), or the model object "
        "itself."
    )


def _model_section(
    model: Any, weights: str | os.PathLike[str] | None, model_kwargs: Mapping[str, Any] | None,
    references: int, recipe: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The audit config's model section for ``model``: a path or import path as the command
    line takes it, or an in-memory object (``instance``)."""
    from miaudit.errors import ConfigError
    from miaudit.external.audit_config import instance_kind

    section: dict[str, Any] = {}
    if model_kwargs is not None:
        section["kwargs"] = dict(model_kwargs)
    if weights is not None:
        section["weights"] = os.fspath(weights)
    if isinstance(model, (str, os.PathLike)):
        text = os.fspath(model)
        section[_model_key(text, weights)] = text
        return section
    if model is None:
        raise ConfigError("model is required: a model object, a file or an import path.")
    if isinstance(model, type):  # the class, not a trained model
        raise ConfigError(
            f"model is the class {model.__qualname__} itself, not a trained model: pass the "
            "trained object (an nn.Module with its weights loaded, a fitted estimator), or "
            f"model='file.py:{model.__qualname__}' with weights= (its state_dict file)."
        )
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
    out: str | os.PathLike[str] | None = None,
    *,
    weights: str | os.PathLike[str] | None = None,
    model_kwargs: Mapping[str, Any] | None = None,
    output_kind: str | None = None,
    public_outputs: str | os.PathLike[str] | None = None,
    preprocessing: str | None = None,
    label_column: str | None = None,
    text_column: str | None = None,
    membership_column: str | None = None,
    population: float | None = None,
    allow_fewer_reference_rows: bool = False,
    max_length: int | None = None,
    reference_base: str | os.PathLike[str] | None = None,
    base_model: str | os.PathLike[str] | None = None,
    augment: str | Sequence[str] | None = None,
    compute: Compute | Mapping[str, Any] | None = None,
    progress: bool = True,
    echo: bool = False,
    overwrite: bool = False,
    **options: Any,
) -> AuditResult:
    """Audit a model trained elsewhere, as ``miaudit audit`` does: writes the run directory
    (``runs/<name>/`` or ``out``: report, verdict, exposed.csv, bank.npz, audit.yaml,
    training.json) and
    returns the result (``result.out`` the directory, ``result.meta["verdict"]`` the release
    statement, a :class:`~miaudit.verdict.records.ReleaseVerdict`).

    ``model``: what the command line takes — an estimator file (``.joblib``/``.pkl``), an
    outputs file (``.npz``/``.csv``/``.parquet``), a Hugging Face ``save_pretrained`` folder
    (texts tokenized to ``max_length``; references fine-tuned from ``reference_base``, the
    checkpoint it was fine-tuned from; a causal LM's ``base_model``, the pretrained model it was
    fine-tuned from, is lm-base-reference's reference), ``"file.py:Class"`` / ``"pkg.mod:Class"``
    with ``weights=`` (and ``model_kwargs=``), ``"file.py:function"`` /
    ``"pkg.mod:function"`` (a black box) — or an object: a fitted scikit-learn estimator
    (references are clones of it), a torch ``nn.Module`` (references are its class with
    ``recipe``, built with ``model_kwargs``; the class must be importable by path for that) or
    a function ``X -> [n, classes]`` outputs. The object itself is queried (a torch module
    through a copy); audit.yaml records it as "in memory", so such a run is not rerun from that
    file. What reads two ways is refused, both readings named: a weights file as ``model`` and
    a class instead of a trained object before any work; a ``"module:Name"`` naming a class
    without ``weights=`` (not a prediction function) once the data and rows are checked, as
    naming it imports (runs) the module, which is done only after every other input passed.

    ``data``: a dataset name, a data file, or arrays ``(X, y)``; ``members`` /
    ``nonmembers`` / ``public_rows``: row indices, a boolean mask over the rows, or a file
    (``membership_column=`` instead of ``members`` for a 0/1 column of the data file);
    ``public``: the attacker's own data (name, file or ``(X, y)``), or ``public_rows`` of
    ``data``. Arrays are written to a temporary folder for the audit and removed after it
    (audit.yaml names those files); ``text_column=`` / ``label_column=`` name the columns of
    table files (texts for a model folder). ``preprocessing``: ``"standard"`` or ``"raw"``,
    the values the model was trained on (README, "Datasets and their preprocessing").
    ``augment``: how the model was trained, its augmentation steps (``["crop", "mirror"]``,
    ``--augment``): images are then queried with the attacks' augmented views. ``compute``:
    where the reference models train (``--executor ray``, ``--ray-address``), the config's
    ``compute`` section: a mapping of its keys (``{"executor": "ray", "address": "auto"}``)
    or a :class:`~miaudit.train.cluster.Compute`; default on this machine.

    ``options``: any other audit-config key, as in audit.yaml (``seed=``, ``name=``,
    ``metrics={"bootstrap": 100}``, ``signals={"grad_norm": False}``, ``attack_params=``,
    ``exposed=``, ``device=``, ``cache_dir=``, ``data_dir=``); a section given here is merged
    over what the named arguments set. Relative paths are read from the current directory.

    A run directory holding another run (another command's or config's) is refused unless
    ``overwrite=True`` (``--overwrite``); the same audit reruns into its own.
    """
    import tempfile

    from miaudit.config import split_names
    from miaudit.external.audit_config import options_mapping, resolve
    from miaudit.external.run import run_audit
    from miaudit.records.run_dir import API_TEMP_PREFIX

    if compute is not None:  # as the config's mapping (a Compute's keys)
        options["compute"] = _compute_mapping(compute)
    # the run's identity names files in this folder alike every time (miaudit.io): arrays given
    # anew to the same audit rerun into its folder
    with tempfile.TemporaryDirectory(prefix=API_TEMP_PREFIX) as tmp:
        folder = Path(tmp)
        model_sec = _model_section(model, weights, model_kwargs, references, recipe)
        model_sec.update({"output_kind": output_kind, "max_length": max_length,
                          "public_outputs": _path(public_outputs),
                          "base_model": _path(base_model),
                          "augment": split_names(augment)})
        given = options_mapping(  # what miaudit audit's flags of the same names set
            model_sec,
            dataset=_data_file(data, folder, "data", "data"),
            members=_rows(members, folder, "members"),
            membership_column=membership_column,
            nonmembers=_rows(nonmembers, folder, "nonmembers"),
            public=None if public is None else _data_file(public, folder, "public", "public"),
            public_rows=_rows(public_rows, folder, "public_rows"),
            population=population, label_column=label_column, text_column=text_column,
            preprocessing=preprocessing, references=references, recipe=recipe,
            allow_fewer_reference_rows=allow_fewer_reference_rows,
            reference_base=_path(reference_base), attacks=split_names(attacks),
            output=_path(out),
        )
        # relative paths are read from the current directory, as the command line's flags
        cfg = resolve((given, Path.cwd()), (options, Path.cwd()))
        with _bars(progress):
            result, path = run_audit(cfg, progress=progress, echo=echo, overwrite=overwrite,
                                     predict_words=_API_WORDS)
    result.out = path
    return result


def _path(value: str | os.PathLike[str] | None) -> str | None:
    return None if value is None else os.fspath(value)


def _rows(rows: Any, folder: Path, name: str) -> str | None:
    return None if rows is None else _rows_file(rows, folder, name, name)


def ranked(result: AuditResult) -> list[AttackOutcome]:
    """The attacks strongest first, in the report's order (TPR at the headline FPR, the
    lowest one with at least ten expected false positives; then AUC)."""
    # the report's own ranking (here, not as an AuditResult method: report.strength imports
    # miaudit.records.outcomes, which must not import it back)
    from miaudit.verdict.strength import ranked as report_ranked

    return report_ranked(result)[0]


def strongest(result: AuditResult) -> AttackOutcome | None:
    """The strongest attack: the one the report stars and the verdict names (None when the
    result has no attack)."""
    order = ranked(result)
    return order[0] if order else None
