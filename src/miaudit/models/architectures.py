"""The built-in architectures, declared by name without importing torch: each one's keyword
parameters (what a recipe's ``arch_params`` may hold) and the factory that builds it, whose
module loads when a model of it is first built (:func:`~miaudit.models.registry.build_model`).

A config check reads these (``check_model_params``) and so stays torch-free.
``tests/models/test_registry_torch_free.py`` checks each declaration against its factory's
signature. An architecture of your own needs no entry here: decorate its factory with
:func:`~miaudit.models.registry.register_model`.
"""

from __future__ import annotations

from miaudit.models.registry import declare_model

declare_model("airbench94", "miaudit.models.airbench:airbench94",
              ("widths", "batchnorm_momentum", "scaling_factor", "mean", "std"))
declare_model("mnist-cnn", "miaudit.models.cnn:mnist_cnn",
              ("padding", "conv_dropout", "fc_dropout"))
declare_model("cifar-cnn", "miaudit.models.cnn:cifar_cnn", ("channels", "dropout"))
declare_model("hf", "miaudit.models.hf:hf", ("folder", "folder_sha256", "init", "pad_id", "task"))
declare_model("hf-causal-lm", "miaudit.models.hf_lm:hf_causal_lm", ("base_model", "lora"))
declare_model("mlp", "miaudit.models.mlp:mlp", ("hidden", "activation", "dropout"))
declare_model("resnet18", "miaudit.models.resnet:resnet18", ("width",))
declare_model("text-cnn", "miaudit.models.text:text_cnn",
              ("vocab_size", "embed_dim", "channels", "kernel_size", "pad_id", "dropout"))
declare_model("minilm", "miaudit.models.text:minilm", ("train_layers", "pool", "lora"))
declare_model("gpt-small", "miaudit.models.text:gpt_small",
              ("n_layer", "n_embd", "n_head", "n_positions", "vocab_size", "pad_id", "dropout"))
declare_model("import", "miaudit.models.user:import_model", ("path", "kwargs", "source_sha256"))
