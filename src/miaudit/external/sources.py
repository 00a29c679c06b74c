"""Load the audited model: a PyTorch module + weights, a scikit-learn estimator, a prediction
function, or precomputed outputs.

Everything that can be queried becomes an ``nn.Module`` returning logits, so the signal code
(queries, label-only boundary search) treats every model alike. Probabilities become
log-probabilities: ``softmax(log p) = p``, so they are valid logits for every statistic of the
bank; a released 0 becomes ``log(FLOOR)``, as for output defences.

Two forms run code that the user names, and nothing else here does:

- ``model.estimator`` (``--estimator``): unpickling a scikit-learn estimator runs code stored
  in the file. It is the one pickle miaudit loads (weights are read with safetensors or
  ``torch.load(weights_only=True)``, outputs and data with ``allow_pickle=False``), so each
  audit warns before loading it (:data:`PICKLE_WARNING`): audit only files you made or trust.
- ``model.module`` (``--model``) and ``model.predict`` (``--predict``) import the module they
  name, which runs its top-level code, as a script would: a config naming code is as trusted
  as that code. Every other input is checked first (:func:`check_model_files` here, then the
  data, rows and references in :mod:`miaudit.external.run`), so a bad input is refused
  before any of it runs.
"""

from __future__ import annotations

import copy
import inspect
import logging
import pickle
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from miaudit.config.sections.spec import required
from miaudit.data.user_files import numpy_file_problem
from miaudit.errors import ConfigError, DataError
from miaudit.external.audit_config import ModelSection
from miaudit.formatting import plural
from miaudit.models import build_model
from miaudit.models.user import check_output_width, resolve_object
from miaudit.signals.defences import FLOOR

_PROBE_ROWS = 64  # rows used to check a black box's output once at load time
log = logging.getLogger(__name__)

# Said (stderr, and in the report's notes) before an estimator file is unpickled
PICKLE_WARNING = (
    "loading {path} unpickles it, which runs any code stored in the file with your "
    "permissions: audit only estimator files you made or trust. To audit a model without "
    "loading a pickle, give its outputs (--outputs / model.outputs) or a prediction function "
    "of your own (--predict / model.predict)."
)


@dataclass
class Target:
    """The audited model as the audit can use it."""

    kind: str  # torch | hf | sklearn | function | outputs
    name: str  # what was loaded, for the report
    module: nn.Module | None = None  # queryable model returning logits (None: outputs only)
    estimator: Any = None  # scikit-learn only (cloned for reference models)
    outputs: dict[str, tuple[np.ndarray | None, np.ndarray]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    hf: Any = None  # a Hugging Face folder's details (miaudit.external.hf_folder.HFTarget)

    @property
    def white_box(self) -> bool:
        """Gradients are available (a PyTorch module with its weights, or a model folder)."""
        return self.kind in ("torch", "hf")

    @property
    def causal_lm(self) -> bool:
        """The model is a causal LM (answers sequence signals, not logits)."""
        return bool(getattr(self.hf, "causal_lm", False))

    @property
    def queryable(self) -> bool:
        """New inputs can be sent to the model (not only precomputed outputs)."""
        return self.module is not None


def to_logits(
    values: Any, num_classes: int, kind: str, tolerance: float, where: str
) -> tuple[np.ndarray, str]:
    """Model outputs [n, C] as float32 logits, and the kind they were read as.

    ``kind`` is logits, probabilities or auto (probabilities iff every value lies in [0, 1]
    and every row sums to 1 within ``tolerance``).
    """
    out = np.asarray(values)
    if out.dtype.kind not in "biuf":
        raise DataError(f"{where}: outputs must be numeric, got dtype {out.dtype}.")
    out = out.astype(np.float64)
    if out.ndim != 2:
        raise DataError(f"{where}: outputs must be [samples, classes], got shape {out.shape}.")
    if out.shape[1] != num_classes:
        raise DataError(
            f"{where}: outputs have {out.shape[1]} columns but the labels have {num_classes} "
            f"classes: a model must give one value per class (output width {num_classes}). "
            "Check the model's output layer or the label column of the data."
        )
    if not np.isfinite(out).all():
        bad = np.flatnonzero(~np.isfinite(out).all(axis=1))
        raise DataError(f"{where}: {plural(bad.size, 'row')} {'holds' if bad.size == 1 else 'hold'}"
                        f" NaN or inf (first {bad[:5].tolist()}).")
    in_unit = bool(((out >= 0) & (out <= 1)).all())
    sums = out.sum(axis=1)
    off = np.abs(sums - 1) > tolerance
    if kind == "auto":
        if in_unit and off.any():
            raise DataError(
                f"{where}: the outputs lie in [0, 1] like probabilities but "
                f"{plural(int(off.sum()), 'row')} {'does' if off.sum() == 1 else 'do'} not sum "
                f"to 1 (e.g. row {int(np.argmax(off))} sums to "
                f"{sums[np.argmax(off)]:.6g}); if they are probabilities, fix or renormalise "
                "them; if they are logits, say so with output_kind: logits."
            )
        kind = "probabilities" if in_unit else "logits"
    if kind == "logits":
        return out.astype(np.float32), kind
    if (out < 0).any() or (out > 1 + tolerance).any():
        raise DataError(
            f"{where}: probabilities must lie in [0, 1]; found {out.min():.6g}..{out.max():.6g}."
            " If these are logits, set output_kind: logits."
        )
    if off.any():
        row = int(np.argmax(off))
        raise DataError(
            f"{where}: probabilities must sum to 1 per row (tolerance {tolerance:g}); "
            f"{int(off.sum())} of {plural(len(out), 'row')} {'does' if off.sum() == 1 else 'do'}"
            f" not (row {row} sums to {sums[row]:.6g}). "
            "Export the full softmax output, renormalise, or pass logits (output_kind: logits)."
        )
    return np.log(np.maximum(out, FLOOR)).astype(np.float32), kind


class OutputModule(nn.Module):
    """A black box (numpy in, [n, C] outputs out) as a module returning logits."""

    def __init__(
        self, fn: Callable[[np.ndarray], Any], num_classes: int, kind: str, tolerance: float,
        name: str, flatten: bool = False,
    ) -> None:
        super().__init__()
        self.fn, self.num_classes, self.kind = fn, num_classes, kind
        self.tolerance, self.name, self.flatten = tolerance, name, flatten

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        arr = x.detach().cpu().numpy()
        if self.flatten:
            arr = arr.reshape(len(arr), -1)
        logits, _ = to_logits(self.fn(arr), self.num_classes, self.kind, self.tolerance,
                              self.name)
        return torch.from_numpy(logits).to(x.device)


def load_state(path: str | Path) -> dict[str, torch.Tensor]:
    """A state dict from .safetensors, or from a torch.save file with weights_only=True."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"weights file {path} does not exist; check the path.")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state = load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise DataError(f"{path} is not a readable .safetensors file: {exc}") from exc
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            raise DataError(
                f"{path} cannot be loaded with torch.load(weights_only=True) (it holds more "
                "than tensors, e.g. a whole pickled model): save model.state_dict() with "
                "torch.save or safetensors.torch.save_file instead. "
                f"({str(exc).splitlines()[0]})"
            ) from exc
        except (RuntimeError, OSError, EOFError) as exc:
            raise DataError(f"{path} is not a torch.save file: {exc}") from exc
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        keys = list(state)[:8] if isinstance(state, dict) else type(state).__name__
        raise DataError(
            f"{path} holds {keys!r}, not a state dict of tensors; save model.state_dict() "
            "(for a checkpoint dict, save its model entry)."
        )
    return state


def fit_weights(module: nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    """load_state_dict(strict=True), with every missing, unexpected or mismatched key named."""
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [f"{k}: file {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
              for k in own if k in state and state[k].shape != own[k].shape]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing from the file: {', '.join(missing[:10])}")
        if unexpected:
            parts.append(f"not in the model: {', '.join(unexpected[:10])}")
        if shapes:
            parts.append(f"shape mismatches: {'; '.join(shapes[:10])}")
        raise ConfigError(
            f"the weights {where} do not fit the architecture ({'; '.join(parts)}). Check "
            "model.module and model.kwargs (the constructor arguments the model was trained "
            "with), and that the file is this model's state_dict()."
        )
    module.load_state_dict(state, strict=True)


def _check_readable(path: Path, what: str, hint: str) -> None:
    """DataError unless ``path`` is a file this process can read (a byte of it is read)."""
    if not path.is_file():
        raise DataError(f"{what} {path} does not exist; {hint}")
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise DataError(f"{what} {path} cannot be read: {exc.strerror or exc}.") from exc


def check_model_files(spec: ModelSection) -> None:
    """The model's own files, checked before anything is loaded or imported: the weights of
    ``model.module`` and the file ``model.estimator``, ``model.module`` or ``model.predict``
    names (a .py file must exist). Raises DataError or ConfigError; imports nothing. An
    in-memory model (the Python API's) has no files: its ``module`` only names its class."""
    if spec.instance is not None:
        return
    if spec.module:
        if not spec.weights:
            raise ConfigError(f"model.module {spec.module!r} needs model.weights (--weights): "
                              "the trained state_dict of the class.")
        _check_readable(Path(spec.weights), "weights file", "check the path.")
    if spec.estimator:
        _check_readable(Path(spec.estimator), "estimator file", "check the path.")
    for flag, name in (("--model", spec.module), ("--predict", spec.predict)):
        where = str(name).split(":")[0] if name and str(name).count(":") == 1 else ""
        if where.endswith(".py"):
            _check_readable(Path(where).expanduser(), f"{flag} {name!r}: module file",
                            "check the path.")


def load_estimator(
    path: str | Path, n_features: int, num_classes: int, notes: list[str] | None = None
) -> Any:
    """A fitted scikit-learn classifier with predict_proba, checked against the data.

    Unpickling runs code stored in the file: :data:`PICKLE_WARNING` is logged first (shown
    by the command line without -v) and added to ``notes`` (the report's)."""
    import joblib

    path = Path(path)
    _check_readable(path, "estimator file", "check the path.")
    warning = PICKLE_WARNING.format(path=path)
    log.warning(warning)
    if notes is not None:
        notes.append(warning)
    try:
        estimator = joblib.load(path)  # reads joblib dumps and plain pickles
    except Exception as exc:  # unpickling can fail in many ways
        raise DataError(
            f"{path} cannot be unpickled ({type(exc).__name__}: {exc}); save the fitted "
            "estimator with joblib.dump(model, path) in the same scikit-learn version."
        ) from exc
    return check_estimator(estimator, f"the estimator in {path}", n_features, num_classes)


def check_estimator(estimator: Any, where: str, n_features: int, num_classes: int) -> Any:
    """``estimator`` if it is a fitted classifier with predict_proba that fits the data;
    ``where`` names it in messages ("the estimator in model.joblib")."""
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    name = type(estimator).__name__
    if not hasattr(estimator, "predict_proba"):
        raise ConfigError(
            f"{where} ({name}) has no predict_proba: membership inference "
            "needs per-class scores. Use a classifier that has it (e.g. SVC(probability=True))"
            ", wrap it in sklearn.calibration.CalibratedClassifierCV, or audit precomputed "
            "outputs (model.outputs)."
        )
    try:
        check_is_fitted(estimator)
    except NotFittedError as exc:
        raise ConfigError(f"{where} ({name}) is not fitted: {exc}") from exc
    except TypeError:
        pass  # not a scikit-learn estimator, but it has predict_proba
    classes = np.asarray(getattr(estimator, "classes_", np.arange(num_classes)))
    if classes.shape != (num_classes,) or not np.array_equal(classes, np.arange(num_classes)):
        raise ConfigError(
            f"{where} predicts classes {classes.tolist()[:20]}, but the audit "
            f"data's labels are 0..{num_classes - 1} ({num_classes} classes; files have their "
            "labels mapped to 0..K-1 in sorted order): its output width must match the labels. "
            "Train it on the same label encoding as the data file."
        )
    expected = getattr(estimator, "n_features_in_", n_features)
    if expected != n_features:
        raise ConfigError(
            f"{where} was fitted on {expected} features; the audit data has "
            f"{n_features} per sample. Give the data in the feature layout it was trained on."
        )
    return estimator


def sklearn_predict(estimator: Any) -> Callable[[np.ndarray], np.ndarray]:
    """predict_proba on 2-D arrays (as a DataFrame when it was fitted on named columns)."""
    names = getattr(estimator, "feature_names_in_", None)

    def predict(x: np.ndarray) -> np.ndarray:
        if names is not None:
            import pandas as pd

            result: np.ndarray = estimator.predict_proba(pd.DataFrame(x, columns=names))
            return result
        result = estimator.predict_proba(x)
        return result

    return predict


def load_outputs(
    path: str | Path, num_classes: int, kind: str, tolerance: float
) -> tuple[np.ndarray | None, np.ndarray, str]:
    """(row index or None, logits [n, C], kind read) from a .npz/.csv/.parquet of outputs.

    .npz: one array `logits` or `probabilities` [n, C], optional `index` [n] (rows of the data;
    default: row i is data row i). Tables: optional `index` column, the rest one column per
    class; columns all named logit* or prob* say which they are.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"outputs file {path} does not exist; check the path.")
    suffix = path.suffix.lower()
    index = None
    if suffix == ".npz":
        problem = numpy_file_problem(path, "npz")
        if problem:
            raise DataError(f"{problem}: an outputs .npz holds 'logits' or 'probabilities' "
                            "[n, classes], saved with np.savez(path, logits=...); a table of "
                            "outputs needs its own suffix (.csv or .parquet).")
        try:
            with np.load(path, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise DataError(
                f"cannot read outputs file {path} ({exc}); object arrays are refused (never "
                "unpickled): save numeric arrays with np.savez(path, logits=...)."
            ) from exc
        found = [k for k in ("logits", "probabilities") if k in arrays]
        extra = sorted(set(arrays) - {"logits", "probabilities", "index"})
        if len(found) != 1 or extra:
            raise DataError(
                f"{path} holds {sorted(arrays)}; it needs exactly one of 'logits' or "
                "'probabilities' [n, classes] and optionally 'index' [n] (data rows)."
            )
        values, index = arrays[found[0]], arrays.get("index")
        hinted = found[0]
    elif suffix in (".csv", ".parquet", ".pq"):
        import pandas as pd

        try:
            df = pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
        except (OSError, ValueError, ImportError, pd.errors.ParserError) as exc:
            raise DataError(f"cannot read outputs file {path}: {exc}") from exc
        if "index" in df.columns:
            index = df.pop("index").to_numpy()
        cols = [str(c).lower() for c in df.columns]
        hinted = ("logits" if all(c.startswith("logit") for c in cols) else
                  "probabilities" if all(c.startswith("prob") for c in cols) else "auto")
        values = df.to_numpy()
    else:
        raise DataError(f"{path}: outputs must be .npz, .csv or .parquet, not {suffix!r}.")
    if kind == "auto":
        kind = hinted
    elif hinted != "auto" and hinted != kind:
        raise ConfigError(f"{path} names its outputs {hinted} but output_kind says {kind}.")
    logits, kind = to_logits(values, num_classes, kind, tolerance, str(path))
    if index is not None:
        index = np.asarray(index)
        if index.shape != (len(logits),) or index.dtype.kind not in "iu" or (index < 0).any():
            raise DataError(f"{path}: 'index' must be {len(logits)} non-negative integers.")
        if np.unique(index).size != index.size:
            raise DataError(f"{path}: 'index' repeats rows; give each data row once.")
    return index, logits, kind


def load_target(
    spec: ModelSection, input_shape: tuple[int, ...], num_classes: int, probe: np.ndarray,
    words: Mapping[str, str] | None = None,
) -> Target:
    """The model named by ``spec``; ``probe`` (a few audit rows) checks a black box's output;
    ``words``: how the caller names ``model.predict`` (:func:`prediction_function`)."""
    if spec.instance is not None:
        return _in_memory_target(spec, input_shape, num_classes, probe)
    if spec.module:
        if not spec.weights:
            check_model_files(spec)  # the weights' error, before the class is imported
        # read (never unpickled) before the class's import
        state = load_state(required(spec.weights, "model.weights"))
        with torch.random.fork_rng():  # building the module must not move the caller's RNG
            module = build_model("import", input_shape, num_classes, path=spec.module,
                                 kwargs=spec.kwargs)
        fit_weights(module, state, f"in {spec.weights}")
        return Target("torch", f"{spec.module} + {spec.weights}", module=module.eval())
    if spec.estimator:
        n_features = int(np.prod(input_shape))
        notes: list[str] = []
        estimator = load_estimator(spec.estimator, n_features, num_classes, notes)
        module = OutputModule(sklearn_predict(estimator), num_classes, "probabilities",
                              spec.tolerance, f"{type(estimator).__name__}.predict_proba",
                              flatten=True)
        module(torch.from_numpy(probe[:_PROBE_ROWS]))  # probabilities checked here
        return Target("sklearn", f"{type(estimator).__name__} from {spec.estimator}",
                      module=module, estimator=estimator, notes=notes)
    if spec.predict:
        fn = prediction_function(spec.predict, words or CONFIG_WORDS)
        return _function_target(fn, spec.predict, spec, num_classes, probe)
    outputs, notes = {}, []
    for part, path in (("data", spec.outputs), ("public", spec.public_outputs)):
        if path:
            index, logits, kind = load_outputs(path, num_classes, spec.output_kind,
                                               spec.tolerance)
            outputs[part] = (index, logits)
            notes.append(f"{path}: outputs read as {kind}")
    return Target("outputs", spec.outputs or "", outputs=outputs, notes=notes)



# How the audit config and `miaudit audit` name the two readings of "module:Name"
# (prediction_function); {spec} is the name given
CONFIG_WORDS = {"given": "model.predict (--predict) {spec!r}",
                "weights": "model.module + model.weights (--model {spec} --weights FILE)"}


def prediction_function(
    spec: str, words: Mapping[str, str] = CONFIG_WORDS
) -> Callable[[np.ndarray], Any]:
    """The black-box function ``spec`` ("file.py:name" or "pkg.module:name") names.

    A class is refused: "nets.py:Net" reads two ways, a model class missing its trained
    weights or a prediction function, and calling a class on the audit data would build
    objects, not predict. ``words`` names the two readings as the caller's front door spells
    them (``given``: where the name came from; ``weights``: how a class is given), each a
    format string of ``spec``."""
    obj = resolve_object(spec)
    given = words["given"].format(spec=spec)
    if inspect.isclass(obj):
        what = "an nn.Module class" if issubclass(obj, nn.Module) else "a class"
        raise ConfigError(
            f"{given} names {what}, {obj.__qualname__}, not a prediction function. A class "
            f"needs its trained weights (a state_dict file): give it as "
            f"{words['weights'].format(spec=spec)}. A black box is a prediction function, "
            "'file.py:function' or 'pkg.module:function', taking X and returning "
            "[n, classes] outputs."
        )
    if not callable(obj):
        raise ConfigError(f"{given} is a {type(obj).__name__}, not a function: name a "
                          "function X -> [n, classes] outputs.")
    result: Callable[[np.ndarray], Any] = obj
    return result


def _function_target(
    fn: Callable[[np.ndarray], Any], name: str, spec: ModelSection, num_classes: int,
    probe: np.ndarray,
) -> Target:
    """A black-box function as a target, its outputs checked (and their kind read) on
    ``probe``."""
    try:
        sample = fn(probe[:_PROBE_ROWS])
    except Exception as exc:
        raise ConfigError(
            f"{name} fails on a batch of {len(probe[:_PROBE_ROWS])} audit samples "
            f"of shape {tuple(probe.shape[1:])}: {type(exc).__name__}: {exc}"
        ) from exc
    _, kind = to_logits(sample, num_classes, spec.output_kind, spec.tolerance, name)
    module = OutputModule(fn, num_classes, kind, spec.tolerance, name)
    return Target("function", name, module=module, notes=[f"{name} outputs read as {kind}"])


def _in_memory_target(
    spec: ModelSection, input_shape: tuple[int, ...], num_classes: int, probe: np.ndarray
) -> Target:
    """``spec.instance`` (the Python API's in-memory model) as a target, checked as the
    file-based forms are: an nn.Module, a fitted estimator or a function."""
    obj = spec.instance
    if isinstance(obj, nn.Module):
        name = f"{type(obj).__qualname__} (in memory)"
        # a copy: querying moves the module to the device and into eval mode, and the
        # caller's object must come back as it was
        module = copy.deepcopy(obj)
        with torch.random.fork_rng():
            check_output_width(module, input_shape, num_classes, name)
        return Target("torch", name, module=module.eval())
    if hasattr(obj, "predict_proba"):
        estimator = check_estimator(obj, "the estimator given", int(np.prod(input_shape)),
                                    num_classes)
        module = OutputModule(sklearn_predict(estimator), num_classes, "probabilities",
                              spec.tolerance, f"{type(estimator).__name__}.predict_proba",
                              flatten=True)
        module(torch.from_numpy(probe[:_PROBE_ROWS]))  # probabilities checked here
        return Target("sklearn", f"{type(estimator).__name__} (in memory)", module=module,
                      estimator=estimator)
    if callable(obj):
        name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
        return _function_target(obj, name, spec, num_classes, probe)
    raise ConfigError(
        f"the model given is a {type(obj).__name__}: give a torch nn.Module, a fitted "
        "estimator with predict_proba, or a function X -> [n, classes] outputs."
    )
