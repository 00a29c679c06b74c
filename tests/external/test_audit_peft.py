"""`miaudit audit --hf-model ADAPTER_DIR`: a PEFT LoRA adapter folder (what
``peft_model.save_pretrained`` writes: adapter_config.json + adapter_model.safetensors, no
config.json) audited as its base model with the adapter merged in.

The user's files: a LoRA adapter (r 4 on q_proj/v_proj) trained with peft for a few steps on
32 member texts over the session's tiny random Llama (``base_folder``), saved without a
tokenizer (the base's is used); texts.csv (the docstring texts) with members, non-members and
public rows as row files. The audited log-probabilities must be the in-memory merged model's.
"""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from lm_users import lora_model, write_split

import miaudit
from miaudit.cli.main import main
from miaudit.errors import ConfigError
from miaudit.models.hf import adapter_digest

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
MAX_LENGTH = 32
RECIPE = "{optimizer: adam, lr: 0.003, epochs: 1, batch_size: 16, schedule: constant}"


@pytest.fixture(scope="module")
def peft_user(tmp_path_factory, docstring_texts, base_folder):
    root = tmp_path_factory.mktemp("peft-user")
    texts, labels = docstring_texts
    pd.DataFrame({"text": texts, "label": labels}).to_csv(root / "texts.csv", index=False)
    rows = write_split(root, len(texts))
    model, tokenizer = lora_model(base_folder)
    batch = dict(tokenizer([texts[i] for i in rows["members"]], truncation=True,
                           max_length=MAX_LENGTH, padding="max_length", return_tensors="pt"))
    targets = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(15):  # the adapter moves off its zero-initialised lora_B
        optimizer.zero_grad()
        model(**batch, labels=targets).loss.backward()
        optimizer.step()
    model.eval()
    model.save_pretrained(root / "adapter")  # names base_folder as base_model_name_or_path
    merged = copy.deepcopy(model).merge_and_unload().eval()
    return {"root": root, "csv": root / "texts.csv", "adapter": root / "adapter",
            "merged": merged, "tokenizer": tokenizer, "texts": texts, "rows": rows,
            **{name: root / f"{name}.txt" for name in rows}}


def _audit(user, model, tmp_path, **options):
    defaults = {"members": user["members"], "nonmembers": user["nonmembers"],
                "public_rows": user["public"], "references": 0, "out": tmp_path / "run",
                "text_column": "text", "label_column": "label", "progress": False,
                "cache_dir": str(tmp_path / "cache"), "max_length": MAX_LENGTH,
                "attacks": ["lm-loss", "lm-base-reference"]}
    return miaudit.audit(str(model), str(user["csv"]), **{**defaults, **options})


def _naive_logprobs(model, tokenizer, text: str) -> np.ndarray:
    """log p(token t+1 | tokens <= t) of the merged model, one text, no padding."""
    ids = tokenizer(text, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
    with torch.no_grad():
        logits = model(input_ids=ids["input_ids"]).logits[0, :-1].double()
    picked = logits.log_softmax(-1).gather(-1, ids["input_ids"][0, 1:, None])[:, 0]
    return picked.numpy()


def test_api_audits_an_adapter_on_its_base(peft_user, base_folder, tmp_path):
    result = _audit(peft_user, peft_user["adapter"], tmp_path, base_model=base_folder)
    assert {o.name for o in result.outcomes} == {"lm-loss", "lm-base-reference"}
    assert not result.meta["skipped"]
    assert np.isfinite(result.outcome("lm-base-reference").scores).all()
    meta = result.meta
    described = (f"a LoRA adapter (r=4, targets q_proj, v_proj) on {base_folder}")
    assert meta["hf_model"] == described and meta["target"].startswith(described)
    adapter = meta["hf_adapter"]
    assert adapter["adapter_sha256"] == adapter_digest(peft_user["adapter"])
    assert adapter["base_from"] == "model.base_model" and adapter["r"] == 4
    assert meta["hf_task"] == "causal-lm" and meta["hf_architecture"] == "LlamaForCausalLM"
    assert meta["base_model"] == str(base_folder)
    # the audited log-probs are the merged model's, text by text
    with np.load(result.out / "bank.npz") as bank:
        logprob, lengths = bank["seq_token_logprob"][0], bank["seq_lengths"]
        base_logprob = bank["seq_base_token_logprob"]
    for i, row in enumerate(result.rows[:16]):
        naive = _naive_logprobs(peft_user["merged"], peft_user["tokenizer"],
                                peft_user["texts"][int(row)])
        assert lengths[i] == len(naive)
        np.testing.assert_allclose(logprob[i, : len(naive)], naive, atol=2e-4)
    assert not np.allclose(logprob, base_logprob, atol=1e-3)  # the adapter changed the model
    summary = json.loads((result.out / "summary.json").read_text())
    assert summary["hf_adapter"]["adapter_sha256"] == adapter["adapter_sha256"]
    assert described in (result.out / "report.html").read_text()


def test_cli_takes_the_base_named_in_adapter_config(peft_user, base_folder, tmp_path, capsys):
    """No --base-model: adapter_config.json's base_model_name_or_path is a local folder, so it
    is the base (lm-base-reference's, and the references' starting point), and the report
    says so."""
    out = tmp_path / "run"
    assert main(["audit", "--hf-model", str(peft_user["adapter"]), "--data",
                 str(peft_user["csv"]), "--text-column", "text", "--label-column", "label",
                 "--members", str(peft_user["members"]), "--nonmembers",
                 str(peft_user["nonmembers"]), "--public-rows", str(peft_user["public"]),
                 "--references", "1", "--recipe", RECIPE, "--max-length", str(MAX_LENGTH),
                 "--attacks", "lm-loss,lm-base-reference,lm-calibrated", "--out", str(out),
                 "--cache-dir",
                 str(tmp_path / "cache"), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["base_model"] == str(base_folder.resolve())
    assert summary["hf_adapter"]["base_from"] == "adapter_config.json"
    assert {"lm-base-reference", "lm-calibrated"} <= set(json.loads(
        (out / "metrics.json").read_text()))
    assert any("named by its adapter_config.json" in w for w in summary["warnings"])
    params = summary["reference_recipe"]["arch_params"]  # fine-tuned from the adapter's base
    assert params["init"] == "pretrained" and params["folder"] == str(base_folder.resolve())
    verdict = json.loads((out / "verdict.json").read_text())
    assert any("from the adapter's base model" in c for c in verdict["caveats"])


@pytest.fixture
def broken(peft_user, base_folder, tmp_path):
    """Copies of the adapter, each wrong in one way, and a base of other shapes."""
    made = {}
    for name, change in (("no_base", {"base_model_name_or_path": None}),
                         ("hub_id", {"base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M"}),
                         ("classifier", {"task_type": "SEQ_CLS"})):
        folder = shutil.copytree(peft_user["adapter"], tmp_path / name)
        config = json.loads((folder / "adapter_config.json").read_text())
        (folder / "adapter_config.json").write_text(json.dumps({**config, **change}))
        made[name] = folder
    wide = tmp_path / "wide-base"  # the same vocabulary, hidden size 48 instead of 32
    config = transformers.AutoConfig.from_pretrained(base_folder)
    config.hidden_size, config.intermediate_size = 48, 96
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(wide)
    peft_user["tokenizer"].save_pretrained(wide)
    made["wide"] = wide
    deep = tmp_path / "deep-base"  # one more layer: an adapted module the file has no weight for
    config = transformers.AutoConfig.from_pretrained(base_folder)
    config.num_hidden_layers = 3
    transformers.LlamaForCausalLM(config).save_pretrained(deep)
    peft_user["tokenizer"].save_pretrained(deep)
    made["deep"] = deep
    return made


@pytest.mark.parametrize("case, match", [
    ("no_base", r"names no base model \(base_model_name_or_path\); miaudit never downloads a "
                r"model: give the base model it was trained on with --base-model"),
    ("hub_id", r"names the base model 'HuggingFaceTB/SmolLM2-135M', not a local folder; .* "
               r"--base-model"),
    ("classifier", r"task_type SEQ_CLS .* causal LMs \(task_type CAUSAL_LM\) only"),
    ("wide", r"the adapter in .*adapter does not fit the base model .*wide-base "
             r"\(LlamaForCausalLM\): RuntimeError: .*size mismatch"),
    ("deep", r"does not fit the base model .*deep-base \(LlamaForCausalLM\): 4 of the base's "
             r"adapted modules have no weights in the file \(e.g. base_model.model.model."
             r"layers.2.self_attn"),
])
def test_adapter_refusals_name_the_fix(peft_user, broken, tmp_path, case, match):
    other_base = case in ("wide", "deep")
    model = peft_user["adapter"] if other_base else broken[case]
    options = {"base_model": broken[case]} if other_base else {}
    with pytest.raises(ConfigError, match=match):
        _audit(peft_user, model, tmp_path, **options)


def test_cli_refuses_an_adapter_without_a_base(peft_user, broken, tmp_path, capsys):
    assert main(["audit", "--hf-model", str(broken["hub_id"]), "--data", str(peft_user["csv"]),
                 "--text-column", "text", "--members", str(peft_user["members"]), "--out",
                 str(tmp_path / "run"), "--quiet"]) == 2
    assert "give the base model it was trained on with --base-model" in capsys.readouterr().err
