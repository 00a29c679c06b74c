"""Reference models for the audit: the target's own architecture, trained on public data.

- PyTorch: the user's module class (model kind ``import``) with the recipe the user states,
  trained by miaudit's trainer and cached by content like every other model.
- Hugging Face folder: the ``hf`` architecture with that recipe, fine-tuned from
  ``references.base`` or the model's config from scratch
  (:func:`miaudit.external.hf_folder.hf_recipe`).
- scikit-learn: ``sklearn.base.clone`` of the estimator (its own hyper-parameters, a fresh
  ``random_state`` per reference) fitted on each reference's rows, cached by content in
  ``<cache>/sklearn`` as :mod:`skops.io` files that load only scikit-learn, numpy and scipy
  types (:class:`SklearnCache`): nothing the cache holds is a pickle.
- black box: a stand-in architecture if the recipe names one (e.g. ``mlp``), else none.

Each reference trains on its own random subset of the public reference pool, as many rows as
the target's training set (the offline design of :mod:`miaudit.protocol`), so every reference
is OUT for every audit sample. A pool no larger than the target's training set is refused
before anything trains, unless ``references.allow_fewer_rows`` accepts references on half the
pool (then the report and the verdict say so).
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from miaudit import version
from miaudit.cache import code_version
from miaudit.config import compute_section
from miaudit.config.sections.spec import required
from miaudit.errors import CacheError, ConfigError
from miaudit.external.audit_config import AuditConfig
from miaudit.external.data import AuditData
from miaudit.external.sources import OutputModule, Target, sklearn_predict
from miaudit.io import atomic_path, write_json
from miaudit.models.user import source_digest
from miaudit.train import ModelCache, Recipe, TrainedModel, indices_digest

log = logging.getLogger(__name__)
code_version.pin_sources(code_version.SKLEARN_FIT_CODE)  # this module's code, as imported

RECIPE_HINT = ("{optimizer: adam, lr: 0.001, epochs: 10, batch_size: 64} (the recipe your model "
               "was trained with)")


@dataclass
class References:
    """Reference models (possibly none, with the reason) and their public-pool membership."""

    modules: list[nn.Module] = field(default_factory=list)
    membership: np.ndarray | None = None  # bool [R, n_pool]
    train_seconds: list[float] = field(default_factory=list)
    recipe: dict[str, Any] | None = None  # what they were trained with, for the report
    trained: int = 0
    reused: int = 0
    reason: str | None = None  # why there are none
    notes: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)  # for the verdict's reference note
    # the torch references as trained (or loaded): where each trained, for training.json
    # (none for scikit-learn clones, which are fitted here, and without references)
    trained_models: list[TrainedModel] = field(default_factory=list)


def torch_recipe(cfg: AuditConfig, target: Target) -> tuple[Recipe | None, str | None]:
    """The reference recipe, or None and why there is none."""
    if target.kind == "hf":
        from miaudit.external.hf_folder import hf_recipe  # transformers only for model folders

        return hf_recipe(cfg, target)
    stated = cfg.references.recipe
    if target.kind == "torch":
        if stated is None:
            return None, ("no training recipe was stated for reference models of the user's "
                          f"architecture: give references.recipe, e.g. {RECIPE_HINT}")
        fields = dict(stated)
        if "architecture" not in fields:  # the user's own class, pinned to its source file
            fields["architecture"] = "import"
            fields["arch_params"] = {
                "path": cfg.model.module, "kwargs": cfg.model.kwargs,
                "source_sha256": source_digest(required(cfg.model.module, "model.module")),
            }
        return Recipe.from_dict(fields), None
    if stated is None or "architecture" not in stated:
        return None, ("black-box target (no architecture to train reference models with); "
                      "a stand-in is possible: references.recipe with an architecture, e.g. "
                      "{architecture: mlp, epochs: 20}")
    return Recipe.from_dict(stated), None


def _describe(obj: Any) -> Any:
    """A JSON-able description of an estimator's parameters, for its cache key (never a
    truncated repr: two estimators must not share a key)."""
    if hasattr(obj, "get_params") and not isinstance(obj, type):
        params = obj.get_params(deep=False)
        return {"class": f"{type(obj).__module__}.{type(obj).__qualname__}",
                "params": {k: _describe(v) for k, v in sorted(params.items())}}
    if isinstance(obj, (list, tuple)):
        return [_describe(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): _describe(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, np.ndarray):
        return {"array": hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest(),
                "shape": list(obj.shape), "dtype": str(obj.dtype)}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return repr(obj)


# The file layout of SklearnCache entries. 2: ``<key>.skops`` files (skops.io, which loads only
# the types it is told to trust); 1 was joblib pickles (``<key>.joblib``), which no key of this
# code reaches: they are never read again (``miaudit cache info`` lists them stale, ``prune``
# removes them).
SKLEARN_CACHE_FORMAT = 2
SKLEARN_SUFFIX = ".skops"
# The libraries whose types a cached reference may hold beyond what skops trusts by default
_LIBRARIES = ("sklearn", "numpy", "scipy")
# skops loaders that build an object without calling its class with values from the file
_NO_CALL_LOADERS = frozenset({"ObjectNode", "TypeNode"})
# parts of a module path never trusted, library or not (test helpers, a package's __main__)
_NEVER = frozenset({"tests", "testing", "_testing", "conftest", "__main__"})


def _loaders(blob: bytes) -> dict[str, set[str]]:
    """Each type a skops file names ("module.Class") and the skops loaders it is read by,
    from the file's schema (read as JSON: nothing is imported or built)."""
    import zipfile

    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        schema = json.loads(archive.read("schema.json"))
    found: dict[str, set[str]] = {}
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "__loader__" in node:
                name = f"{node.get('__module__')}.{node.get('__class__')}"
                found.setdefault(name, set()).add(str(node["__loader__"]))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _library_type(name: str, loaders: set[str]) -> bool:
    """Whether the type ``name`` ("module.Class"), read by ``loaders``, is one a cached
    reference may hold: a class (or, scikit-learn's only, a function) defined in
    scikit-learn, numpy or scipy, in a module this process has already imported (so trusting
    it imports nothing). numpy and scipy classes only where skops builds them without calling
    the class on values from the file."""
    module, _, attr = name.rpartition(".")
    parts = module.split(".")
    if parts[0] not in _LIBRARIES or not attr or _NEVER & set(parts) or attr.startswith("__"):
        return False
    loaded = sys.modules.get(module)
    obj = getattr(loaded, attr, None) if loaded is not None else None
    home = str(getattr(obj, "__module__", "") or "").split(".")
    if obj is None or home[0] not in _LIBRARIES or _NEVER & set(home):
        return False  # e.g. a name a library module imported from elsewhere
    if inspect.isclass(obj):
        return home[0] == "sklearn" or loaders <= _NO_CALL_LOADERS
    return home[0] == "sklearn" and callable(obj) and loaders <= {"FunctionNode"}


def skops_types(blob: bytes) -> tuple[list[str], list[str]]:
    """(trusted, refused): the types of the skops file ``blob`` that skops does not trust by
    default (:func:`skops.io.get_untrusted_types`), split into those a cached reference may
    hold (:func:`_library_type`) and the rest. Nothing is imported or built."""
    import skops.io as sio

    loaders = _loaders(blob)
    trusted: list[str] = []
    refused: list[str] = []
    for name in sio.get_untrusted_types(data=blob):
        (trusted if _library_type(name, loaders.get(name, set())) else refused).append(name)
    return trusted, refused


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


class SklearnCache:
    """Fitted estimators by content key: ``<root>/<key>.skops`` + ``<key>.json`` (the
    file's sha256 and fit time), json written last, so an entry counts only when complete.

    Entries are :mod:`skops.io` files, never pickles: loading one builds only scikit-learn,
    numpy and scipy types (:func:`skops_types`, the trusted list computed from the file, never
    ``trusted=True``), so a file someone replaced cannot run code. An entry that holds other
    types, fails its sha256, does not load or is not a fitted estimator of the expected class
    is not used: a warning names its path and the reference is refitted. An estimator whose
    fitted state holds other types (a class of your own, a function of yours) is not cached:
    the note says so and its references are fitted every audit.

    The key covers the estimator (class and parameters), the rows, the seed and the code that
    fits (:meth:`version`: scikit-learn's version, the digest of miaudit's fitting code,
    miaudit's version and the file format), all recorded in the json for
    ``miaudit cache info``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.hits = 0
        self.misses = 0
        self.corrupt = 0  # entries found broken or foreign (also counted in misses)
        self.notes: list[str] = []  # for the report: estimators not cached, and why

    @staticmethod
    def version() -> dict[str, Any]:
        """The code an entry was fitted by: what its key covers and its json records."""
        import sklearn

        return {"format": SKLEARN_CACHE_FORMAT, "fit_digest": code_version.sklearn_fit_digest(),
                "miaudit_version": version.__version__, "sklearn_version": sklearn.__version__}

    def key(self, estimator: Any, fingerprint: str, rows: np.ndarray, seed: int) -> str:
        payload = {**self.version(), "dataset": fingerprint, "indices": indices_digest(rows),
                   "estimator": _describe(estimator), "seed": int(seed)}
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def _load(self, key: str, expected: type) -> tuple[Any, float] | None:
        """The fitted estimator of entry ``key`` and its fit time; None when there is none,
        or when it is broken or foreign (then a warning, and the json is removed: refit)."""
        meta_path, path = self.root / f"{key}.json", self.root / f"{key}{SKLEARN_SUFFIX}"
        if not meta_path.exists():
            return None
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if not isinstance(meta, dict):
                raise CacheError("metadata is not a JSON object")
            blob = path.read_bytes()
            if hashlib.sha256(blob).hexdigest() != meta["weights_sha256"]:
                raise CacheError("estimator file hash does not match its metadata")
            model = self._read(blob, expected)
            return model, float(meta["fit_seconds"])
        except Exception as exc:  # whatever the file holds, it is refitted, never a crash
            why = (f"metadata lacks {exc}" if isinstance(exc, KeyError)
                   else exc if isinstance(exc, CacheError)
                   else f"not a skops file of a fitted estimator: {type(exc).__name__}: "
                        f"{str(exc).strip()[:200]}")
            log.warning("scikit-learn cache entry %s is corrupt or not miaudit's (%s); not "
                        "loaded, refitting it", path, why)
            self.corrupt += 1
            meta_path.unlink(missing_ok=True)  # refit and overwrite
            return None

    @staticmethod
    def _read(blob: bytes, expected: type) -> Any:
        """The estimator in the skops file ``blob``, built only if every type it names is
        trusted (skops' defaults and :func:`skops_types`); it must be a fitted ``expected``."""
        import skops.io as sio
        from sklearn.exceptions import NotFittedError
        from sklearn.utils.validation import check_is_fitted

        trusted, refused = skops_types(blob)
        if refused:
            raise CacheError(f"it holds types that are not scikit-learn's, numpy's or "
                             f"scipy's ({_shown(refused)})")
        model = sio.loads(blob, trusted=trusted)
        if type(model) is not expected:
            raise CacheError(f"it holds a {type(model).__module__}.{type(model).__qualname__}"
                             f", not a {expected.__module__}.{expected.__qualname__}")
        try:
            check_is_fitted(model)
        except NotFittedError as exc:
            raise CacheError(f"its {expected.__qualname__} is not fitted") from exc
        if not hasattr(model, "predict_proba"):
            raise CacheError(f"its {expected.__qualname__} has no predict_proba")
        return model

    def _dump(self, model: Any) -> bytes | None:
        """``model`` as a skops file, or None (and a note) when the cache could not load it
        back: it holds types other than scikit-learn's, numpy's and scipy's."""
        import skops.io as sio

        name = f"{type(model).__module__}.{type(model).__qualname__}"
        try:
            blob = sio.dumps(model)
            refused = skops_types(blob)[1]
        except Exception as exc:  # skops cannot write every object (e.g. a lambda)
            refused = [f"{type(exc).__name__}: {str(exc).strip()[:120]}"]
        if not refused:
            result: bytes | None = blob
            return result
        note = (f"scikit-learn references of {name} are not cached: the fitted estimator "
                f"holds types the cache loads only from scikit-learn, numpy and scipy "
                f"({_shown(refused)}), so they are fitted anew every audit")
        if note not in self.notes:
            self.notes.append(note)
        return None

    def get_or_fit(
        self, estimator: Any, x: np.ndarray, y: np.ndarray, fingerprint: str, rows: np.ndarray,
        seed: int,
    ) -> tuple[Any, float]:
        """The clone of `estimator` fitted on `x`, `y` (rows `rows` of the dataset `fingerprint`)
        with random_state `seed`, from the cache or fitted now; and its fit time."""
        from sklearn.base import clone

        model = clone(estimator)
        seeds = {k: seed for k in model.get_params(deep=True)
                 if k == "random_state" or k.endswith("__random_state")}
        model.set_params(**seeds)
        key = self.key(model, fingerprint, rows, seed)
        found = self._load(key, type(model))
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        names = getattr(estimator, "feature_names_in_", None)
        if names is not None:
            import pandas as pd

            x = pd.DataFrame(x, columns=names)
        start = time.perf_counter()
        model.fit(x, y)
        seconds = time.perf_counter() - start
        blob = self._dump(model)
        if blob is None:
            return model, seconds
        with atomic_path(self.root / f"{key}{SKLEARN_SUFFIX}") as tmp:
            tmp.write_bytes(blob)
        write_json(self.root / f"{key}.json", {
            **self.version(), "key": key, "estimator": type(model).__name__, "seed": int(seed),
            "indices_sha256": indices_digest(rows), "dataset_fingerprint": fingerprint,
            "fit_seconds": seconds, "weights_sha256": hashlib.sha256(blob).hexdigest(),
        })
        return model, seconds


def reference_rows(cfg: AuditConfig, data: AuditData) -> tuple[int, list[str]]:
    """Rows each reference trains on: as many as the target's training set when the public
    pool has more rows than that; else a ConfigError with the numbers and the fixes, or, with
    ``references.allow_fewer_rows``, half the pool and a warning (returned as notes)."""
    n_target = int(data.members.sum())
    if data.n_pool > n_target:
        return n_target, []
    fewer = data.n_pool // 2
    if not cfg.references.allow_fewer_rows:
        raise ConfigError(
            f"reference models must train on as many rows as the target ({n_target}), but the "
            f"public pool has only {data.n_pool} rows (besides {data.n_population} population "
            "rows kept out of every reference). Give more public data (public.dataset / "
            "public.rows; --public / --public-rows), audit fewer members, lower "
            "public.population (--population), or accept references on "
            f"{fewer} rows with references.allow_fewer_rows: true "
            "(--allow-fewer-reference-rows): they understate the leak."
        )
    # returned, not logged: the caller shows it once, in the notes and the verdict's caveats
    note = (f"reference models trained on {fewer} rows each, the target on {n_target} "
            f"(the public pool has only {data.n_pool} rows; accepted with "
            "references.allow_fewer_rows): reference-based attacks likely understate the leak.")
    return fewer, [note]


def check_reference_inputs(cfg: AuditConfig, data: AuditData) -> None:
    """What :func:`reference_models` refuses without the model, checked before the user's code
    (``model.module``, ``model.predict``) is imported: a public pool too small for references
    of the target's size and a recipe that cannot train (unknown keys, impossible values,
    augmentation of data that are not images). Raises ConfigError."""
    if cfg.references.models == 0 or data.public is None or data.n_pool < 2:
        return  # no references: nothing to check
    reference_rows(cfg, data)
    stated = cfg.references.recipe
    if stated is None or not (cfg.model.module or "architecture" in stated):
        return  # no recipe, or the target's class is not imported for references
    fields = dict(stated)
    if "architecture" not in fields:  # the user's class: its path, never imported here
        fields["architecture"] = "import"
        fields["arch_params"] = {"path": cfg.model.module, "kwargs": cfg.model.kwargs}
    recipe = Recipe.from_dict(fields)
    if data.kind != "image" and recipe.augment:
        raise ConfigError("references.recipe.augment needs image data.")


def reference_models(
    cfg: AuditConfig, target: Target, data: AuditData, cache_root: Path, device: str,
    progress: bool = True,
) -> References:
    """Train (or load) `cfg.references.models` reference models on random subsets of the
    public pool, each as large as the target's training set (see `reference_rows`); torch
    references train where ``cfg.compute`` says (this machine or a Ray cluster)."""
    n = cfg.references.models
    if n == 0:
        return References(reason="references.models is 0 (threshold attacks only)")
    if data.public is None or data.n_pool < 2:
        return References(reason="no public data was given (public.dataset / public.rows), "
                                 "so no reference model can be trained")
    recipe, reason = (None, None) if target.kind == "sklearn" else torch_recipe(cfg, target)
    if target.kind != "sklearn" and recipe is None:
        return References(reason=reason)
    # Each reference trains on as many rows as the target did (refused before any training
    # when the pool is too small); drawn as protocol.random_halves draws, so a pool of at
    # least twice the target's rows gives the same rows (and cache keys) as before.
    size, caveats = reference_rows(cfg, data)
    rng = np.random.default_rng([cfg.seed, 2])
    membership = np.zeros((n, data.n_pool), dtype=bool)
    for r in range(n):
        membership[r, rng.permutation(data.n_pool)[:size]] = True
    jobs = [(data.pool_rows[membership[r]], cfg.seed * 10_000 + 1 + r) for r in range(n)]
    public = data.public
    if target.kind == "sklearn":
        notes = list(caveats)
        if cfg.references.recipe is not None:
            notes.append("references.recipe is unused for a scikit-learn estimator: references "
                         "are clones of it (same hyper-parameters, own random_state)")
        fits = SklearnCache(cache_root / "sklearn")
        modules, seconds = [], []
        for rows, seed in jobs:
            x = public.features[rows].reshape(len(rows), -1)
            model, fit_seconds = fits.get_or_fit(target.estimator, x, public.labels[rows],
                                                  public.fingerprint(), rows, seed)
            modules.append(OutputModule(sklearn_predict(model), data.num_classes,
                                        "probabilities", cfg.model.tolerance,
                                        f"reference {type(model).__name__}", flatten=True))
            seconds.append(fit_seconds)
        notes += fits.notes
        clone = {"clone_of": type(target.estimator).__name__,
                 "params": _describe(target.estimator)["params"]}
        return References(modules, membership, seconds, clone, fits.misses, fits.hits,
                          notes=notes, caveats=caveats)
    assert recipe is not None  # no recipe returned above
    if data.kind != "image" and recipe.augment:
        raise ConfigError("references.recipe.augment needs image data.")
    cache = ModelCache(cache_root)
    models = cache.get_or_train_many(
        public.fingerprint(), jobs, recipe, device, features=public.features,
        labels=public.labels, num_classes=data.num_classes, progress=progress,
        compute=compute_section(cfg.compute).to_compute(),
    )
    notes = list(caveats)
    if target.kind not in ("torch", "hf") or (target.kind == "hf" and recipe.architecture != "hf"):
        notes.append(f"reference models use a stand-in architecture ({recipe.architecture}), "
                     "not the black-box target's own; reference attacks may understate the leak")
    return References(
        [m.module.eval() for m in models], membership, [m.train_seconds for m in models],
        recipe.to_dict(), cache.stats.misses, cache.stats.hits, notes=notes, caveats=caveats,
        trained_models=models,
    )
