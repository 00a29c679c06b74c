"""`miaudit audit`: flags and/or a short YAML config (flags win)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from miaudit.errors import ConfigError

_EPILOG = """examples:
  miaudit audit --model nets.py:SmallCNN --weights model.safetensors --data fashion-mnist \\
      --members members.txt --nonmembers nonmembers.txt --public-rows public.txt \\
      --recipe '{optimizer: adam, lr: 0.001, epochs: 15, batch_size: 64}'
  miaudit audit --estimator model.joblib --data audit.parquet --membership-column member \\
      --label-column income --public public.parquet
  miaudit audit --outputs outputs.npz --data digits --members members.txt
  miaudit audit --hf-model my-bert/ --data mails.csv --text-column text --label-column spam \\
      --members members.txt --public public.csv --reference-base bert-base-uncased/ \\
      --recipe '{optimizer: adam, lr: 0.00005, epochs: 3, batch_size: 16}'
  miaudit audit --hf-model my-lora-adapter/ --base-model smollm2-135m --data texts.jsonl \
      --text-column text --members members.txt --public-rows public.txt
  miaudit audit --config audit.yaml

what runs code: --estimator unpickles its file, which runs any code stored in it (the one
pickle miaudit loads; every audit warns before it): audit only files you made or trust, or
give --outputs instead. --model FILE.py:Class and --predict FILE.py:function import that
module, which runs its code, as would a config's model.module / model.predict: a config
naming code is as trusted as that code. Every other input (weights, data, rows, public
data, recipe) is checked first, so a bad one is refused before the code runs."""


def _mapping(text: str, flag: str) -> dict[str, Any]:
    """A YAML mapping given inline or as a file name."""
    path = Path(text)
    if path.suffix in (".yaml", ".yml", ".json") and path.is_file():
        from miaudit.config import read_yaml

        return read_yaml(path, flag)
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{flag} is not valid YAML: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"{flag} must be a mapping like '{{epochs: 10}}', got {text!r}.")
    return value


def flags_to_dict(args: argparse.Namespace) -> dict[str, Any]:
    """The given flags as a nested config mapping (flags not given are left out).

    The options :func:`miaudit.audit` takes as arguments go through the function it uses,
    :func:`~miaudit.external.audit_config.options_mapping`; the rest (signals, seed, name, ...) are
    what the API takes as ``options``."""
    from miaudit.cli.compute import compute_flags
    from miaudit.config import split_names
    from miaudit.external.audit_config import merge, options_mapping

    model = {"module": args.model, "weights": args.weights,
             "kwargs": args.model_kwargs and _mapping(args.model_kwargs, "--model-kwargs"),
             "estimator": args.estimator, "predict": args.predict, "outputs": args.outputs,
             "public_outputs": args.public_outputs, "output_kind": args.output_kind,
             "hf_model": args.hf_model, "max_length": args.max_length,
             "base_model": args.base_model,
             "dp_epsilon": args.dp_epsilon, "dp_delta": args.dp_delta,
             "augment": split_names(args.augment)}
    mapping = options_mapping(
        model, dataset=args.data,
        data_options=args.data_options and _mapping(args.data_options, "--data-options"),
        members=args.members, membership_column=args.membership_column,
        nonmembers=args.nonmembers, public=args.public, public_rows=args.public_rows,
        population=args.population, label_column=args.label_column,
        text_column=args.text_column, preprocessing=args.preprocessing,
        references=args.references, recipe=args.recipe and _mapping(args.recipe, "--recipe"),
        allow_fewer_reference_rows=args.allow_fewer_reference_rows,
        reference_base=args.reference_base, attacks=split_names(args.attacks),
        output=args.out,
    )
    signals = {"queries": split_names(args.queries),
               "grad_norm": False if args.no_grad_norm else None,
               "boundary_distance": True if args.boundary_distance else None}
    rest = {"signals": {k: v for k, v in signals.items() if v is not None},
            "exposed": args.exposed, "seed": args.seed, "name": args.name,
            "device": args.device, "precision": args.precision, "cache_dir": args.cache_dir,
            "data_dir": args.data_dir,
            "compute": compute_flags(args)}
    return merge(mapping, {k: v for k, v in rest.items() if v is not None and v != {}})


def cmd_audit(args: argparse.Namespace) -> int:
    from miaudit.cli.compute import compute_flags

    compute_flags(args)  # a misplaced --ray-address fails before anything loads
    from miaudit.config import read_yaml
    from miaudit.external.audit_config import resolve
    from miaudit.external.run import run_audit

    layers = []
    if args.config:  # the file's relative paths are relative to the file, wherever it is run
        layers.append((read_yaml(args.config, "audit config"),
                       Path(args.config).absolute().parent))
    layers.append((flags_to_dict(args), Path.cwd()))
    run_audit(resolve(*layers), progress=not args.quiet, overwrite=args.overwrite)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `audit` subcommand."""
    p = subparsers.add_parser(
        "audit", help="audit your own trained model (PyTorch, Hugging Face, scikit-learn or a "
        "black box)",
        description="Membership inference audit of a model trained outside miaudit.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", help="YAML audit config (flags override it); its model.module "
                   "or model.predict is imported (runs) like --model / --predict")
    g = p.add_argument_group(
        "the model (one of --model, --hf-model, --estimator, --predict, --outputs)")
    g.add_argument("--model", help="PyTorch nn.Module: 'package.module:Class' or 'file.py:Class'"
                   " (imported, so its code runs, after every other input is checked)")
    g.add_argument("--model-kwargs", help="its constructor arguments, YAML: '{width: 64}'")
    g.add_argument("--weights", help=".safetensors or torch.save state dict (weights_only)")
    g.add_argument("--hf-model", metavar="DIR", help="Hugging Face save_pretrained folder "
                   "(config.json, weights, tokenizer.json): a sequence classifier or causal LM")
    g.add_argument("--max-length", type=int,
                   help="--hf-model: tokens per text (default: the model's positions, <= 512)")
    g.add_argument("--base-model", metavar="NAME|DIR",
                   help="--hf-model causal LM: the pretrained model it was fine-tuned from "
                   "(a name such as smollm2-135m, a folder or a .gguf file), the reference of "
                   "lm-base-reference")
    g.add_argument("--dp-epsilon", type=float,
                   help="the model's DP claim: ε (with --dp-delta); the audit's empirical ε "
                        "lower bounds are set beside it")
    g.add_argument("--dp-delta", type=float, help="the model's DP claim: δ (with --dp-epsilon)")
    g.add_argument("--augment", help="how the model was trained: its augmentation, comma-"
                   "separated recipe steps (crop,mirror); --queries auto replays it")
    g.add_argument("--estimator", help="scikit-learn estimator with predict_proba (joblib/"
                   "pickle: loading it runs code stored in the file; your own files only)")
    g.add_argument("--predict", help="black box: 'package.module:function' or "
                   "'file.py:function', X -> [n, classes] (imported, so its code runs)")
    g.add_argument("--outputs", help="black box: .npz/.csv/.parquet of logits or probabilities")
    g.add_argument("--public-outputs",
                   help="black box: its outputs on the public rows (--public / "
                   "--public-rows), the population samples RMIA compares against; RMIA also "
                   "needs reference models (a stand-in: --recipe with an architecture), "
                   "else it is skipped")
    g.add_argument("--output-kind", choices=("auto", "logits", "probabilities"))
    d = p.add_argument_group("the data")
    d.add_argument("--data", help="dataset name (miaudit data list) or .npz/.csv/.jsonl/"
                   ".parquet file, or a .txt of texts (one a line)")
    d.add_argument("--data-options", help="loader options, YAML: '{label_column: y}'")
    d.add_argument("--label-column", help="label column of .csv/.jsonl/.parquet files "
                   "(default label); texts without one load unlabelled, which only a causal "
                   "LM (--hf-model) is audited on")
    d.add_argument("--text-column", help="text column of .csv/.jsonl/.parquet files (texts; "
                   "a .txt holds one text a line, no column to name)")
    d.add_argument("--preprocessing", choices=("standard", "raw"),
                   help="feed the values the model was trained on: standard (default: the "
                   "library's scaling, see miaudit data list) or raw (as the source ships them)")
    d.add_argument("--members", help="file of the training row indices")
    d.add_argument("--membership-column", help="or: 0/1 column of the data file")
    d.add_argument("--nonmembers", help="file of row indices not trained on (default: the rest)")
    d.add_argument("--public", help="the attacker's data: dataset name or file")
    d.add_argument("--public-rows", help="file of row indices of the public data")
    d.add_argument("--population", type=float, help="public fraction no reference trains on")
    r = p.add_argument_group("reference models and signals")
    r.add_argument("--references", type=int, help="how many reference models (0: none)")
    r.add_argument("--recipe", help="reference training recipe, YAML mapping or file")
    r.add_argument("--reference-base", metavar="DIR",
                   help="--hf-model: the pretrained folder it was fine-tuned from (references "
                   "are fine-tuned from it; default: its config trained from scratch)")
    r.add_argument("--allow-fewer-reference-rows", action="store_true",
                   help="train references on fewer rows than the target when the public "
                        "data is too small (refused otherwise; the report warns)")
    r.add_argument("--queries", help="comma-separated: plain, mirror, crop-flip-K (images), "
                   "token-dropout-K, adjacent-swap-K (texts); default auto: plain, or with "
                   "--augment (or a --recipe augment) the attacks' augmented views")
    r.add_argument("--no-grad-norm", action="store_true", help="skip per-sample gradients")
    r.add_argument("--boundary-distance", action="store_true", help="HopSkipJump (slow)")
    r.add_argument("--attacks", help="comma-separated attack names (default: all)")
    o = p.add_argument_group("run")
    o.add_argument("--exposed", type=int, help="training samples in the ranking (default 20)")
    o.add_argument("--seed", type=int)
    o.add_argument("--name", help="run name (default audit)")
    o.add_argument("--device", help="auto, cpu or cuda[:N]")
    o.add_argument("--precision", choices=["fp32", "bf16"],
                   help="the target's query precision (default fp32); bf16: bfloat16 "
                        "autocast, on CUDA or a CPU with AVX-512 BF16 / AMX")
    o.add_argument("--out", help="run directory (default runs/NAME)")
    o.add_argument("--cache-dir", help="model cache (default ~/.cache/miaudit/models)")
    o.add_argument("--data-dir", help="datasets folder for --data and --public names "
                   "(default $MIAUDIT_DATA_DIR or ~/.cache/miaudit/data)")
    from miaudit.cli.compute import add_compute_flags  # argparse only

    add_compute_flags(o)
    o.add_argument("--quiet", action="store_true", help="no progress bars")
    o.add_argument("--overwrite", action="store_true",
                   help="replace the run in the output folder even if another command or "
                   "config made it (refused otherwise; rerunning the same config needs no flag)")
    p.set_defaults(fn=cmd_audit)
