"""The architectures' registry and the names a config check reads are torch-free (#36): the
built-in architectures are declared by name and parameters (miaudit.models.architectures) and
each one's module loads when a model of it is built. The torch-free checks run in a fresh
interpreter, where nothing else loaded torch."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import pytest
import torch

from miaudit.errors import ConfigError
from miaudit.models import build_model, list_models, model_params, register_model, registry

HEAVY = ("torch", "transformers")


def _loaded_after(code: str) -> list[str]:
    """The heavy modules, and the architecture modules, loaded by ``code`` in a fresh
    interpreter."""
    script = textwrap.dedent(code) + textwrap.dedent(f"""
        import sys
        print(sorted(m for m in sys.modules
                     if m in {HEAVY!r} or m.startswith("miaudit.models.")
                     and m not in ("miaudit.models.registry", "miaudit.models.names",
                                   "miaudit.models.architectures")))
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    return eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 - our own print


def test_what_a_config_check_reads_loads_no_torch():
    code = """
        from miaudit.errors import ConfigError
        from miaudit.models import check_model_params as from_package
        from miaudit.models.names import CAUSAL_LM_ARCHITECTURES, TOKENIZERS
        from miaudit.models.registry import check_model_params, list_models, model_params
        from miaudit.protocol import design_spec
        from miaudit.signals.recall_texts import RECALL_PREFIX_TEXTS
        from miaudit.train.checkpoints import CheckpointSpec
        from miaudit.train.cluster import Compute
        from miaudit.train.recipe import Recipe

        assert from_package is check_model_params
        assert "gpt-small" in CAUSAL_LM_ARCHITECTURES and "bpe" in TOKENIZERS
        assert RECALL_PREFIX_TEXTS >= 1
        Recipe.from_dict({"epochs": 2, "augment": ["crop"]}, "recipe")
        Recipe.from_dict({"architecture": "gpt-small", "arch_params": {"n_layer": 1}}, "recipe")
        for name in list_models():
            check_model_params(name, {p: None for p in model_params(name)})
        try:
            check_model_params("mlp", {"hiden": 3})
            raise AssertionError("a misspelt parameter passed")
        except ConfigError as exc:
            assert "Did you mean 'hidden'?" in str(exc)
        CheckpointSpec([1, 2], [])
        design_spec("online")
        assert Compute.from_dict({"executor": "ray", "cpus_per_model": 2}).uses_ray
        """
    assert _loaded_after(code) == []


def test_building_a_model_imports_its_module_then():
    code = """
        from miaudit.models import build_model
        build_model("mlp", (4,), 3, hidden=8)
        """
    loaded = set(_loaded_after(code))
    assert {"torch", "miaudit.models.mlp"} <= loaded
    assert not loaded & {"transformers", "miaudit.models.text", "miaudit.models.hf",
                         "miaudit.models.pretrained", "miaudit.models.airbench"}


@pytest.mark.parametrize("name", list_models())
def test_each_declaration_is_its_factorys_signature(name):
    """The declared parameters are the factory's keyword parameters, in order: checking a
    recipe without the factory accepts and refuses what checking it with the factory did."""
    entry = registry._REGISTRY.get(name)
    assert isinstance(entry.factory, str)  # declared, not imported
    sig = list(inspect.signature(entry.load()).parameters.values())
    assert [p.name for p in sig[:2]] == ["input_shape", "num_classes"]
    from_signature = [p.name for p in sig[2:]
                      if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert model_params(name) == from_signature
    assert len(from_signature) == len(sig) - 2  # no *args or **kwargs the check would miss


def test_the_modules_name_constants_are_the_declared_names():
    from miaudit.models import airbench, hf_lm, names

    assert {airbench.ARCH, hf_lm.ARCHITECTURE, *names.CAUSAL_LM_ARCHITECTURES} <= set(
        list_models())


def test_the_old_homes_re_export_the_names():
    from miaudit import models
    from miaudit.models import names, pretrained, text
    from miaudit.signals import recall_texts, sequence
    from miaudit.train import cluster

    assert text.TOKENIZERS is names.TOKENIZERS
    assert text.CAUSAL_LM_ARCHITECTURES is names.CAUSAL_LM_ARCHITECTURES
    assert sequence.RECALL_PREFIX_TEXTS == recall_texts.RECALL_PREFIX_TEXTS
    assert models.list_base_models is pretrained.list_base_models
    assert models.resolve_base_model is pretrained.resolve_base_model
    assert cluster.RETRYABLE == (OSError, MemoryError, torch.cuda.OutOfMemoryError)
    with pytest.raises(AttributeError):
        models.no_such_name  # noqa: B018


def test_a_factory_registers_by_decorator(monkeypatch):
    """``register_model`` as before: the parameters from the signature, the same factory
    registered again is kept, another one under a taken name is refused."""
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())

    def tiny(input_shape, num_classes, width=2, *, bias=True):
        return torch.nn.Linear(input_shape[0], num_classes, bias=bias)

    assert register_model("tiny")(tiny) is tiny
    register_model("tiny")(tiny)
    assert model_params("tiny") == ["width", "bias"]
    assert build_model("tiny", (3,), 2, bias=False).bias is None
    with pytest.raises(ConfigError, match="'tiny' has no parameter 'widht'. Did you mean"):
        build_model("tiny", (3,), 2, widht=3)
    with pytest.raises(ValueError, match="already registered"):
        register_model("tiny")(lambda input_shape, num_classes: None)
    with pytest.raises(ValueError, match="already registered"):
        register_model("mlp")(tiny)
    with pytest.raises(ValueError, match="package.module:function"):
        registry.declare_model("other", "miaudit.models.mlp.mlp", ())
