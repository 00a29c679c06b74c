"""Which code makes the cached models: digests that move with it, for the caches' keys.

A cached model is only as good as the code that trained it: a change to the training loop
must not let the cache serve models the old loop trained. So every cache key (and every
entry's json) carries, besides ``miaudit.__version__``, a digest of the modules whose code
decides the stored weights, listed here with why each is in. The digest changes by itself
when that code does: nobody has to remember to bump a constant (``CACHE_FORMAT`` in
:mod:`miaudit.train.model_cache` stays, for the file layout only).

Normalisation: each module's source is parsed, its docstrings (every statement that is a bare
string) and its functions' argument and return annotations (never evaluated: the modules use
``from __future__ import annotations``; dataclass fields are kept) are dropped, and the tree is
written back with :func:`ast.unparse`. Comments, blank lines, formatting and docstrings then do
not move the digest; any change to what the code does does. ``ast.unparse`` rather than
``ast.dump``: the dump names every field of every node, and Python releases add fields (3.12's
``type_params``), so the same code would digest differently under each Python; unparsed source
moves far less between releases (where it does, the cost is one retraining).

A module is listed by name and read through its import spec (the file this process imports).
The sources are read when the code that uses them is imported (:func:`pin_sources`, called by
:mod:`miaudit.train.model_cache` and :mod:`miaudit.external.references`), so a file edited while a
process runs does not relabel the models its old code trains; the digest is computed once per
process, at first use (:func:`trainer_digest`). Leaving a module out that does decide the
weights lets the cache serve stale models; listing one that does not only costs a retraining
when it changes. When in doubt, list it.

Stdlib only: ``miaudit cache info`` uses it without training anything.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import marshal
from collections.abc import Iterable

# The modules whose code decides a torch model's trained weights (the ``ModelCache``: models
# trained from scratch, their checkpoints, forgetting copies, text and language models).
TRAINER_CODE: dict[str, str] = {
    "miaudit.train.trainer": "dispatch: which trainer trains which jobs (stacked groups or "
                             "one by one), worker count, threads",
    "miaudit.train.engine": "the one training loop every trainer runs: batches, shuffling, "
                            "lr per step, augmentation, snapshots",
    "miaudit.train.loop": "the one-model strategy: losses (classification, causal LM), "
                          "optimizer steps, seeding and dispatch to DP-SGD",
    "miaudit.train.stacked": "K models trained as one, with a written-out backward",
    "miaudit.train.stacked_func": "K models of any image/tabular architecture trained as one "
                                  "(torch.func): dropout masks, BatchNorm buffers, augmentation",
    "miaudit.train.parallel": "worker processes: their thread count and how models come back",
    "miaudit.train.common": "optimizers, the learning-rate schedule, seed derivation, RNG "
                          "isolation, snapshots",
    "miaudit.train.dp": "DP-SGD: per-sample clipping, noise, Poisson sampling, accounting",
    "miaudit.train.dp_implementations": "DP-SGD's planted bugs (the correct one changes "
                                         "nothing), which a DP run applies",
    "miaudit.train.dp_optimizers": "Opacus DPOptimizer subclasses: a planted bug's step, the "
                                   "gradient canaries put into each step",
    "miaudit.train.augment": "image augmentation applied to each batch",
    "miaudit.train.rows": "which rows, dtypes and class count training sees",
    "miaudit.train.recipe": "a recipe's defaults and normalisation: what its key means",
    "miaudit.train.checkpoints": "which optimizer step a checkpoint entry holds",
    "miaudit.runtime.devices": "precision: whether a step runs under bf16 autocast",
    "miaudit.train.forgetting": "the fine-tuning that makes forgetting copies",
    "miaudit.models.registry": "how an architecture is built from its name and params",
    "miaudit.models.architectures": "which factory builds each built-in architecture name",
    "miaudit.models.names": "the causal-LM architectures (they pick the training loss)",
    "miaudit.models.mlp": "the mlp architecture and its initialisation",
    "miaudit.models.cnn": "the CNN architectures and their initialisation",
    "miaudit.models.airbench": "airbench94's network and its whitening initialisation",
    "miaudit.train.airbench": "airbench94's trainer: parameter groups, alternating flip, "
                              "lookahead, whitening bias freeze, whole batches",
    "miaudit.models.resnet": "the ResNet architectures and their initialisation",
    "miaudit.models.text": "text classifiers and causal LMs (MiniLM, text-cnn, gpt-small)",
    "miaudit.models.hf": "Hugging Face folder models (from a base, or a config from scratch)",
    "miaudit.models.user": "the user's own module class, imported and instantiated",
    "miaudit.models.pretrained": "base models by name or GGUF: the de-quantised starting "
                                 "weights a fine-tuned model begins from",
    "miaudit.models.lm_parts": "a causal LM's next-token loss from its hidden states and head, "
                               "a chunk of positions at a time",
    "miaudit.models.hf_lm": "hf-causal-lm: the base copied, LoRA put on it, which parameters "
                            "train and what the adapter-only state dict holds",
    "miaudit.train.gradient_canaries": "white-box canaries added to DP-SGD's noisy steps: "
                                       "which, when, and what a run records of them",
    "miaudit.train.gradient_canary_kinds": "the gradient canaries' direction and coordinate "
                                           "choices",
}
# The modules of miaudit.train and miaudit.models, and those the listed modules import, that
# are left out, with why (tests/train/test_cache_versions.py checks that every such module is
# in one of the two lists: a new training module must be placed).
NOT_TRAINER_CODE: dict[str, str] = {
    "miaudit.train": "the package: re-exports",
    "miaudit.models": "the package: the registry and the architectures' declarations, the "
                      "base-model helpers loaded on first use",
    "miaudit.train.model_cache":
        "storage only: a change to what it stores or how bumps CACHE_FORMAT",
    "miaudit.train.ledger": "counts models planned and stored",
    "miaudit.train.gradient_records": "storage only: a gradient-canary run's record beside its "
                                      "cached model, checked by its hash",
    "miaudit.train.cluster": "Ray transport only: ships parallel's group task (trained by "
                             "parallel.train_group, threads chosen in trainer) and the weights "
                             "back losslessly (safetensors); workers check the trainer digest",
    "miaudit.runtime.threads": "sets a thread count; the counts are chosen in trainer and parallel",
    "miaudit.runtime.progress": "progress bars",
    "miaudit.runtime.malloc": "glibc's heap thresholds: whether freed memory is reused, not "
                              "what is computed",
    "miaudit.errors": "exception types",
    "miaudit.io": "atomic writes and the umask: where and how files are written, not what",
    "miaudit.registry": "name lookup: which builder a name means, not what it builds",
    "miaudit.data.dataset": "the Dataset container: the data is in the key (its fingerprint, "
                         "which covers tokenization and preprocessing: they make the features)",
    "miaudit.models.run_tokenizer": "tokenization: the token ids it makes are the dataset's "
                                    "features, in its fingerprint",
    "miaudit.privacy.gradient_canary_scores": "the gradient canaries' scores and one-run "
                                              "bounds: computed from a finished run's record",
}

# The modules whose code decides a fitted scikit-learn reference estimator (``SklearnCache``;
# the fit itself is scikit-learn's, whose version is in the key too).
SKLEARN_FIT_CODE: dict[str, str] = {
    "miaudit.external.references": "the clone, its random_state per reference, the rows and "
                                "columns it is fitted on",
}


class _Normalise(ast.NodeTransformer):
    """Drop what does not change behaviour: bare string statements (docstrings) and function
    annotations."""

    def visit_Expr(self, node: ast.Expr) -> ast.AST | None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None
        return self.generic_visit(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        node.returns = None
        return self.generic_visit(node)

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.annotation = None
        return node


def normalised_source(source: str) -> str:
    """``source`` without comments, docstrings, function annotations and formatting."""
    tree = _Normalise().visit(ast.parse(source))
    for node in ast.walk(tree):  # a body left empty by a dropped docstring
        body = getattr(node, "body", None)
        if isinstance(body, list) and not body:
            body.append(ast.Pass())
    return ast.unparse(tree)


def read_source(name: str) -> str | bytes:
    """The source of module ``name`` as this process would import it; for a module shipped
    without source, its compiled code (which moves with docstrings and line numbers too)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}")
    source = spec.loader.get_source(name)  # type: ignore[attr-defined]
    if source is None:
        return marshal.dumps(spec.loader.get_code(name))  # type: ignore[attr-defined]
    result: str | bytes = source
    return result


# Sources read by pin_sources: what the digests see of these modules from then on.
PINNED: dict[str, str | bytes] = {}


def pin_sources(modules: Iterable[str]) -> None:
    """Read the sources of ``modules`` now, once per process: call it beside the import of the
    code they describe, so that the digests describe the code this process runs."""
    for name in modules:
        if name not in PINNED:
            PINNED[name] = read_source(name)


def module_code(name: str) -> str:
    """What the digest sees of module ``name``: its normalised source (as pinned, if it was)."""
    source = PINNED[name] if name in PINNED else read_source(name)
    return normalised_source(source) if isinstance(source, str) else source.hex()


def code_digest(modules: Iterable[str]) -> str:
    """sha256 over the names and normalised code of ``modules``."""
    digest = hashlib.sha256()
    for name in sorted(modules):
        digest.update(f"{name}\n{module_code(name)}\n".encode())
    return digest.hexdigest()


@functools.cache
def trainer_digest() -> str:
    """Digest of :data:`TRAINER_CODE` (computed once per process)."""
    return code_digest(TRAINER_CODE)


@functools.cache
def sklearn_fit_digest() -> str:
    """Digest of :data:`SKLEARN_FIT_CODE` (computed once per process)."""
    return code_digest(SKLEARN_FIT_CODE)
