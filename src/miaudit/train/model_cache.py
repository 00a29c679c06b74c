"""Content-addressed model cache: a model is stored under a hash of what determines it.

Layout: ``ROOT/<key>.safetensors`` (the state dict) and ``ROOT/<key>.json`` (metadata with the
sha256 of the weights file). Both are written atomically, the json last, so an entry counts only
when its json exists and the weights hash matches; anything else is a miss or a corrupt entry,
which is retrained and overwritten.

Every key covers the code that trains (:func:`cache_version`): the file layout
(``CACHE_FORMAT``, bumped by hand when it changes), a digest of the training code
(:func:`miaudit.cache.code_version.trainer_digest`, which moves by itself when that code does) and
miaudit's version. Each entry's json records the three, so ``miaudit cache info`` tells entries
of this code from stale ones (which no key of this code can reach) and ``miaudit cache prune``
removes the stale ones (:mod:`miaudit.cli.cache_admin`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save_file

from miaudit import version
from miaudit.cache import code_version
from miaudit.errors import CacheError, CacheWriteError, describe_os_error, os_error_number
from miaudit.io import atomic_path, write_json
from miaudit.models import build_model
from miaudit.train import dp, trainer
from miaudit.train.checkpoints import (
    CheckpointSpec,
    checkpoint_key,
    steps_per_epoch,
    total_steps,
)
from miaudit.train.cluster import Compute, RayTrainingError
from miaudit.train.ledger import training_ledger
from miaudit.train.recipe import Recipe
from miaudit.train.trainer import ArrayLike, TrainedModel

if TYPE_CHECKING:
    from miaudit.train.gradient_canaries import GradientCanaries, GradientCanaryRecord

log = logging.getLogger(__name__)
# The training code's sources, read as it is imported (see miaudit.cache.code_version).
code_version.pin_sources(code_version.TRAINER_CODE)

CACHE_FORMAT = 1  # the file layout; the training code is versioned by cache_version()


def cache_version() -> dict[str, Any]:
    """What every key covers, and every entry's json records, of the code that trained the
    model: the cache's file layout, the training code's digest (computed once per process)
    and miaudit's version. An entry recording other values was trained by other code."""
    return {
        "format": CACHE_FORMAT,
        "trainer_digest": code_version.trainer_digest(),
        "miaudit_version": version.__version__,
    }


def indices_digest(indices: ArrayLike) -> str:
    """sha256 of the sorted int64 index array (training does not depend on row order)."""
    idx = np.asarray(indices.cpu() if isinstance(indices, torch.Tensor) else indices)
    canonical = np.ascontiguousarray(np.sort(idx.astype("<i8").ravel()))
    return hashlib.sha256(canonical.tobytes()).hexdigest()


def key_for(
    dataset_fingerprint: str,
    indices: ArrayLike,
    recipe: Recipe,
    seed: int,
    num_classes: int | None = None,
) -> str:
    """Cache key: sha256 over dataset fingerprint, index digest, recipe key, seed (and an
    explicit ``num_classes`` when one is given; ``None`` means inferred from the labels), and
    the training code's version (:func:`cache_version`)."""
    payload = {
        **cache_version(),
        "dataset": str(dataset_fingerprint),
        "indices": indices_digest(indices),
        "recipe": recipe.key(),
        "seed": int(seed),
        "num_classes": None if num_classes is None else int(num_classes),
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class CacheStats:
    """Counts since the cache object was made: ``misses`` = models trained."""

    hits: int = 0
    misses: int = 0
    corrupt: int = 0  # entries found broken (also counted in misses)
    stored: int = 0  # of the misses, models stored complete so far (the rest were lost)


def default_cache_dir() -> Path:
    """`$MIAUDIT_CACHE_DIR` if set, else `~/.cache/miaudit/models`."""
    env = os.environ.get("MIAUDIT_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "miaudit" / "models"


class ModelCache:
    """Train-or-load models by content key under ``root``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.stats = CacheStats()

    def weights_path(self, key: str) -> Path:
        return self.root / f"{key}.safetensors"

    def meta_path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def contains(self, key: str) -> bool:
        """True if a complete entry (json present, weights hash matching) exists for ``key``."""
        try:
            self._read_verified(key)
        except (CacheError, FileNotFoundError):
            return False
        return True

    def get_or_train(
        self,
        dataset_fingerprint: str,
        indices: ArrayLike,
        recipe: Recipe,
        seed: int,
        device: str | torch.device = "cpu",
        *,
        features: ArrayLike,
        labels: ArrayLike,
        num_classes: int | None = None,
        progress: bool = True,
        num_threads: int | None = None,
    ) -> TrainedModel:
        """The cached model for these inputs, training (and storing) it on a miss: one job
        of :meth:`get_or_train_many`, trained in this process."""
        return self.get_or_train_many(
            dataset_fingerprint, [(indices, seed)], recipe, device, features=features,
            labels=labels, num_classes=num_classes, progress=progress,
            num_threads=num_threads, workers=1,
        )[0]  # fmt: skip

    def get_or_train_many(
        self,
        dataset_fingerprint: str,
        jobs: Sequence[tuple[ArrayLike, int]],
        recipe: Recipe,
        device: str | torch.device = "cpu",
        *,
        features: ArrayLike,
        labels: ArrayLike,
        num_classes: int | None = None,
        progress: bool = True,
        num_threads: int | None = None,
        workers: int | None = None,
        max_stack: int = trainer.MAX_STACK,
        checkpoints: CheckpointSpec | None = None,
        compute: Compute | None = None,
    ) -> list[TrainedModel]:
        """The cached model of each ``(indices, seed)`` job, training all misses together.

        Hits are loaded; the misses are trained in one ``trainer.train_models`` call (stacked,
        and fanned out over processes on CPU; ``num_threads``, ``workers`` and ``max_stack``
        go to it; ``compute``: on a Ray cluster instead, see :mod:`miaudit.train.cluster`: only
        the misses are sent, and this process stores what comes back; a model that fails
        there raises :class:`~miaudit.train.cluster.RayTrainingError` naming its key) and
        each is stored as it would be by :meth:`get_or_train`, under the same
        key, so either entry point finds the other's models. Each is stored the moment it is
        complete (a stack's models when the stack finishes), so an interrupted call keeps what
        finished (``stats.stored``, :func:`training_ledger`). Jobs with the same key (same
        rows and seed) train once and share one model. Models come back in job order.

        With ``checkpoints``, each model's ``checkpoints`` maps labels (``epoch5``, ...) to the
        models kept along its run, each cached under :func:`checkpoint_key` (the run's key and
        the step); a run whose checkpoints are not all cached is trained again, once.
        """
        n_classes = trainer.infer_num_classes(labels) if num_classes is None else num_classes
        input_shape = tuple(int(d) for d in features.shape[1:])
        keys = [key_for(dataset_fingerprint, idx, recipe, seed, num_classes) for idx, seed in jobs]
        # Checkpoint positions of every job, checked before anything trains.
        sizes = [len(trainer.check_indices(idx, len(features))) for idx, _ in jobs]
        positions = [checkpoints.positions(recipe, n) if checkpoints else {} for n in sizes]
        found: dict[str, TrainedModel] = {}
        missing: dict[str, tuple[ArrayLike, int, int]] = {}
        for j, (key, (indices, seed)) in enumerate(zip(keys, jobs, strict=True)):
            if key in found or key in missing:
                continue
            args = (recipe, seed, input_shape, int(n_classes), device)
            model = self._try_load(key, *args)
            if model is not None and positions[j]:
                total = total_steps(recipe, sizes[j])
                for label, step in positions[j].items():
                    kept = model if step == total else self._try_load(
                        checkpoint_key(key, step), *args
                    )  # fmt: skip
                    if kept is None:  # a checkpoint is missing: train the run again
                        model = None
                        break
                    model.checkpoints[label] = kept
            if model is None:
                missing[key] = (indices, int(seed), j)
            else:
                self.stats.hits += 1
                found[key] = model
        if missing:
            self.stats.misses += len(missing)
            training_ledger().planned += len(missing)
            todo = list(missing.items())

            def store(i: int, model: TrainedModel) -> None:
                key, (indices, _, j) = todo[i]
                self._store_run(key, model, dataset_fingerprint, indices, positions[j], device)
                found[key] = model

            try:
                trainer.train_models(
                    recipe, features, labels, [job[0] for _, job in todo],
                    [job[1] for _, job in todo], device, num_classes=n_classes,
                    progress=progress, num_threads=num_threads, workers=workers,
                    max_stack=max_stack, checkpoints=checkpoints, on_model=store,
                    compute=compute,
                )  # fmt: skip
            except RayTrainingError as exc:
                raise exc.with_keys([key for key, _ in todo]) from exc
        return [found[key] for key in keys]

    def get_or_train_with_canaries(
        self,
        dataset_fingerprint: str,
        indices: ArrayLike,
        recipe: Recipe,
        seed: int,
        canaries: GradientCanaries,
        device: str | torch.device = "cpu",
        *,
        features: ArrayLike,
        labels: ArrayLike,
        num_classes: int | None = None,
        progress: bool = True,
    ) -> tuple[TrainedModel, GradientCanaryRecord]:
        """The DP-SGD model of these inputs trained with white-box ``canaries``
        (:func:`~miaudit.train.dp.train_model_dp`) and the run's record, from the cache or
        trained here and stored. The key is the canary-free one with the canaries' settings
        (:func:`~miaudit.train.gradient_records.canary_key`), so the canary-free model keeps
        its own entry; the record is stored beside the model and verified on every load (a
        missing or altered record makes the entry corrupt: it is retrained)."""
        from miaudit.train import gradient_records

        n_classes = trainer.infer_num_classes(labels) if num_classes is None else num_classes
        input_shape = tuple(int(d) for d in features.shape[1:])
        key = gradient_records.canary_key(
            key_for(dataset_fingerprint, indices, recipe, seed, num_classes), canaries)
        record_path = gradient_records.record_path(self.root, key)
        model = self._try_load(key, recipe, seed, input_shape, int(n_classes), device)
        if model is not None:
            try:
                meta, _ = self._read_verified(key)
                record = gradient_records.load_record(
                    record_path, meta.get(gradient_records.RECORD_SHA256))
            except (CacheError, FileNotFoundError) as exc:
                log.warning("cache entry %s is corrupt (%s); retraining", key, exc)
                self.stats.corrupt += 1
                self.meta_path(key).unlink(missing_ok=True)
            else:
                self.stats.hits += 1
                canaries.record = record
                return model, record
        self.stats.misses += 1
        training_ledger().planned += 1
        with trainer.cpu_threads(1 if torch.device(device).type == "cpu" else None):
            model = dp.train_model_dp(recipe, features, labels, indices, seed, device,
                                      n_classes, progress, gradient_canaries=canaries)
        assert canaries.record is not None  # train_model_dp's finish() left it
        record = canaries.record
        model.node, model.device = "local", torch.device(device).type
        # the record first, the entry's json (naming its hash) last: an entry exists only
        # with its record
        try:
            digest = gradient_records.save_record(record_path, record)
        except OSError as exc:
            raise self._write_error(key, exc) from exc
        self._store(key, model, dataset_fingerprint, indices,
                    extra={gradient_records.RECORD_SHA256: digest})
        self.stats.stored += 1
        training_ledger().stored += 1
        return model, record

    def _store_run(
        self, key: str, model: TrainedModel, dataset_fingerprint: str, indices: ArrayLike,
        positions: dict[str, int], device: str | torch.device,
    ) -> None:  # fmt: skip
        """Store a run's model just trained, with its checkpoints at ``positions``."""
        model.module.to(device)
        # Checkpoints first, the run's own entry last: a run entry (what a rerun looks up
        # first) then exists only once all of its checkpoints do.
        for label, step in positions.items():
            kept = self._checkpoint(model, step, device)
            if kept is not model:
                self._store(checkpoint_key(key, step), kept, dataset_fingerprint, indices,
                            run_key=key)  # fmt: skip
            model.checkpoints[label] = kept
        self._store(key, model, dataset_fingerprint, indices)
        self.stats.stored += 1
        training_ledger().stored += 1
        model.snapshots = {}  # now in the checkpoint models

    @staticmethod
    def _checkpoint(model: TrainedModel, step: int, device: str | torch.device) -> TrainedModel:
        """The checkpoint of ``model``'s run after optimizer step ``step`` (the model itself
        for its last step). Time is the run's, prorated by steps."""
        total = total_steps(model.recipe, model.n_train)
        if step == total:
            return model
        if step not in model.snapshots:
            raise CacheError(f"training kept no snapshot at step {step}")
        recipe = model.recipe
        with trainer.isolated_rng(torch.device("cpu"), 0):
            module = build_model(
                recipe.architecture, model.input_shape, model.num_classes, **recipe.arch_params
            )
        module.load_state_dict(model.snapshots[step], strict=True)
        epochs_done = step // steps_per_epoch(recipe, model.n_train)
        return TrainedModel(
            module=module.to(device).eval(),
            recipe=recipe,
            seed=model.seed,
            train_seconds=model.train_seconds * step / total,
            samples_per_second=model.samples_per_second,
            n_train=model.n_train,
            num_classes=model.num_classes,
            input_shape=model.input_shape,
            losses=model.losses[:epochs_done],
            privacy=dp.privacy_at(model.privacy, step) if model.privacy else None,
            step=step,
        )

    def get_or_make(
        self,
        key: str,
        make: Callable[[], TrainedModel],
        *,
        recipe: Recipe,
        seed: int,
        input_shape: tuple[int, ...],
        num_classes: int,
        device: str | torch.device,
        dataset_fingerprint: str,
        indices: ArrayLike,
    ) -> TrainedModel:
        """The model stored under `key`, else `make()` stored under it: for models that are
        not trained from scratch (e.g. forgetting copies), keyed by the caller."""
        model = self._try_load(key, recipe, seed, input_shape, num_classes, device)
        if model is not None:
            self.stats.hits += 1
            return model
        self.stats.misses += 1
        training_ledger().planned += 1
        model = make()
        self._store(key, model, dataset_fingerprint, indices)
        self.stats.stored += 1
        training_ledger().stored += 1
        return model

    def _try_load(
        self,
        key: str,
        recipe: Recipe,
        seed: int,
        input_shape: tuple[int, ...],
        num_classes: int,
        device: str | torch.device,
    ) -> TrainedModel | None:
        """The stored model of ``key``, or None on a miss (a corrupt entry is dropped)."""
        try:
            return self._load(key, recipe, seed, input_shape, num_classes, device)
        except FileNotFoundError:
            return None
        except CacheError as exc:
            log.warning("cache entry %s is corrupt (%s); retraining", key, exc)
            self.stats.corrupt += 1
            self.meta_path(key).unlink(missing_ok=True)
            return None

    def _read_verified(self, key: str) -> tuple[dict[str, Any], bytes]:
        """Metadata and weight bytes of ``key``; FileNotFoundError if absent (no json),
        CacheError if present but broken."""
        meta_path = self.meta_path(key)
        if not meta_path.exists():
            raise FileNotFoundError(meta_path)
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CacheError(f"metadata unreadable: {exc}") from exc
        if not isinstance(meta, dict) or "weights_sha256" not in meta:
            raise CacheError("metadata lacks weights_sha256")
        try:
            blob = self.weights_path(key).read_bytes()
        except OSError as exc:
            raise CacheError(f"weights unreadable: {exc}") from exc
        if hashlib.sha256(blob).hexdigest() != meta["weights_sha256"]:
            raise CacheError("weights file hash does not match its metadata")
        return meta, blob

    def _load(
        self,
        key: str,
        recipe: Recipe,
        seed: int,
        input_shape: tuple[int, ...],
        num_classes: int,
        device: str | torch.device,
    ) -> TrainedModel:
        meta, blob = self._read_verified(key)
        try:
            state = load_safetensors(blob)
        except Exception as exc:  # safetensors raises its own error types
            raise CacheError(f"weights unreadable: {exc}") from exc
        with trainer.isolated_rng(torch.device("cpu"), 0):  # leave the caller's RNG alone
            module = build_model(
                recipe.architecture, input_shape, num_classes, **recipe.arch_params
            )
        try:
            module.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0]
            raise CacheError(f"weights do not fit the architecture: {first}") from exc
        module.to(device).eval()
        return TrainedModel(
            module=module,
            node="cache",
            device=torch.device(device).type,
            cache_key=key,
            recipe=recipe,
            seed=int(seed),
            train_seconds=float(meta.get("train_seconds", 0.0)),
            samples_per_second=float(meta.get("samples_per_second", 0.0)),
            n_train=int(meta.get("n_train", 0)),
            num_classes=num_classes,
            input_shape=input_shape,
            losses=[float(v) for v in meta.get("losses", [])],
            from_cache=True,
            privacy=meta.get("privacy"),  # DP-SGD models only
            step=meta.get("checkpoint_step"),  # checkpoints only
        )

    def _store(
        self,
        key: str,
        model: TrainedModel,
        dataset_fingerprint: str,
        indices: ArrayLike,
        run_key: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        state = {k: v.detach().cpu().contiguous() for k, v in model.module.state_dict().items()}
        try:
            with atomic_path(self.weights_path(key)) as tmp:
                save_file(state, str(tmp))
                digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
        except Exception as exc:  # OSError, or safetensors' error naming the OS error
            raise self._write_error(key, exc) from exc
        meta = {
            **cache_version(),  # format, trainer_digest, miaudit_version
            "torch_version": torch.__version__,  # for the record: not part of the key
            "key": key,
            "dataset_fingerprint": str(dataset_fingerprint),
            "indices_sha256": indices_digest(indices),
            "recipe": model.recipe.to_dict(),
            "recipe_key": model.recipe.key(),
            "seed": model.seed,
            "n_train": model.n_train,
            "num_classes": model.num_classes,
            "input_shape": list(model.input_shape),
            "train_seconds": model.train_seconds,
            "samples_per_second": model.samples_per_second,
            "losses": model.losses,
            "privacy": model.privacy,
            "weights_sha256": digest,
            "checkpoint_step": model.step,  # None: the run's final model
            "checkpoint_of": run_key,
            "trained_on": {"node": model.node, "device": model.device},  # for the record
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **(extra or {}),  # e.g. the hash of a gradient-canary record stored beside it
        }
        try:
            write_json(self.meta_path(key), meta)
        except OSError as exc:
            with contextlib.suppress(OSError):  # weights without their json never count
                self.weights_path(key).unlink()
            raise self._write_error(key, exc) from exc
        model.cache_key = key

    def _write_error(self, key: str, exc: BaseException) -> BaseException:
        """A :class:`CacheWriteError` for an entry that could not be written (a full disk,
        a read-only or forbidden cache folder); ``exc`` itself when it carries no OS error
        (a bug, not the disk)."""
        number = os_error_number(exc)
        if number is None and not isinstance(exc, OSError):
            return exc
        what, todo = describe_os_error(exc, getattr(exc, "filename", None)
                                       or self.weights_path(key))
        return CacheWriteError(
            f"cannot store model {key} in the model cache {self.root}: {what}. Nothing "
            f"half-written is kept (an entry counts only once complete: a rerun trains this "
            f"model again). To fix: {todo}", number)


def forgetting_key(
    target_key: str, dataset_fingerprint: str, indices: ArrayLike, recipe: Recipe, seed: int
) -> str:
    """Cache key of a forgetting copy: the target's key plus how the copy was fine-tuned."""
    inner = key_for(dataset_fingerprint, indices, recipe, seed)
    return hashlib.sha256(f"forgetting|{target_key}|{inner}".encode()).hexdigest()
