"""`miaudit run` (RunConfig) and `miaudit audit` (AuditConfig) spell and default the settings
they share alike, so the two front doors cannot drift apart again; the audit's `auto` signals
follow the run's rule; typos are still refused with a suggestion."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from miaudit.config import (
    AUTO,
    RunConfig,
    config_from_dict,
    recipe_fields,
    resolve_grad_norm,
    resolve_queries,
)
from miaudit.config.sections.spec import Spec
from miaudit.errors import ConfigError
from miaudit.external.audit_config import (
    AuditConfig,
    audit_config,
    audit_signals,
    training_augment,
)

# Every setting both config types have, by its dotted key: spelled alike, defaulted alike.
SHARED = (
    "name", "seed", "attack_params", "device", "output", "cache_dir", "data_dir",
    "signals.queries", "signals.grad_norm", "signals.boundary_distance", "signals.batch_size",
    "metrics.fprs", "metrics.bootstrap", "metrics.confidence", "metrics.recalls",
    "metrics.epsilon_delta", "metrics.epsilon_alpha", "metrics.split_check",
    "compute.executor", "compute.address", "compute.cpus_per_model", "compute.gpus_per_model",
    "compute.max_retries", "compute.connect_timeout_s",
)
# Spelled alike, defaulted apart on purpose (the reason is in both fields' docstrings).
DIFFERENT_DEFAULTS = {
    "attacks": "a run scores the attacks it lists, each of which must run (default: the five "
               "threshold attacks); an audit tries every attack and lists those it cannot run",
}


def _defaults(cls: type, prefix: str = "") -> dict[str, Any]:
    """{dotted key: default} of a config model (its ``model_fields``), one section deep."""
    out: dict[str, Any] = {}
    for name, info in cls.model_fields.items():
        value = info.get_default(call_default_factory=True)
        if isinstance(value, Spec) and not prefix:
            out.update(_defaults(type(value), f"{name}."))
        else:
            out[prefix + name] = value
    return out


RUN, AUDIT = _defaults(RunConfig), _defaults(AuditConfig)


def test_the_shared_settings_are_spelled_alike_in_both_configs():
    both = set(RUN) & set(AUDIT)
    # a key both have is in one of the lists (a new one must be classified), and a key of the
    # lists that one config lost (renamed on one side only) fails here too
    assert both == set(SHARED) | set(DIFFERENT_DEFAULTS)


@pytest.mark.parametrize("key", SHARED)
def test_the_shared_settings_default_alike(key):
    assert RUN[key] == AUDIT[key], key


def test_the_documented_differences_still_differ():
    """If they come to agree, drop the entry (and its docstrings' reason)."""
    for key in DIFFERENT_DEFAULTS:
        assert RUN[key] != AUDIT[key], key


def test_signals_default_to_auto_in_both():
    assert RunConfig().signals.queries == AuditConfig().signals.queries == AUTO
    assert RunConfig().signals.grad_norm == AuditConfig().signals.grad_norm == AUTO


def test_the_audit_flags_of_shared_settings_set_the_shared_keys(tmp_path):
    from miaudit.cli.audit import flags_to_dict
    from miaudit.cli.main import build_parser

    args = build_parser().parse_args([
        "audit", "--seed", "3", "--name", "x", "--device", "cpu", "--out", "o",
        "--cache-dir", "c", "--queries", "auto", "--no-grad-norm", "--augment", "crop,mirror",
    ])
    flags = flags_to_dict(args)
    assert {k: flags[k] for k in ("seed", "name", "device", "output", "cache_dir")} == {
        "seed": 3, "name": "x", "device": "cpu", "output": "o", "cache_dir": "c"}
    assert flags["signals"] == {"queries": ["auto"], "grad_norm": False}
    assert flags["model"]["augment"] == ["crop", "mirror"]
    cfg = audit_config({**flags, "model": {"predict": "m:f", "augment": ["crop", "mirror"]},
                        "data": {"dataset": "digits", "members": "m.txt"}})
    assert cfg.signals.queries == AUTO and cfg.signals.grad_norm is False


# --- the `auto` rule, one for both ----------------------------------------------------------

def test_auto_queries_replay_the_training_augmentation():
    lira = ["loss", "lira-offline"]
    assert resolve_queries(AUTO, "image", lira, None) == ["plain"]
    assert resolve_queries(AUTO, "image", lira, []) == ["plain"]
    assert resolve_queries(AUTO, "image", lira, ["crop", "mirror"]) == ["plain", "mirror"]
    rapid = resolve_queries(AUTO, "image", ["rapid"], ["crop", "mirror"])
    assert rapid == ["plain", "mirror"] + [f"crop-flip-{k}" for k in range(1, 7)]  # RAPID's 8
    # only views the model trained on: cutout has none to replay, a mirror-only recipe two
    assert resolve_queries(AUTO, "image", ["rapid"], [{"name": "cutout", "size": 8}]) == [
        "plain"]
    assert resolve_queries(AUTO, "image", ["rapid"], ["mirror"]) == ["plain", "mirror"]
    small = resolve_queries(AUTO, "image", ["rapid"], [{"name": "crop", "padding": 1}, "mirror"])
    assert small == ["plain", "mirror"] + [f"crop1-flip-{k}" for k in range(1, 7)]
    assert resolve_queries(AUTO, "tabular", lira, ["mirror"]) == ["plain"]
    assert resolve_queries(AUTO, "tokens", ["rapid"], None) == ["plain"]  # no text augment
    assert resolve_queries(["plain", "crop-flip-1"], "image", lira, None) == [
        "plain", "crop-flip-1"]  # a list is used as given


def test_a_run_replays_its_recipes_augmentation():
    def queries(data: dict[str, Any]) -> list[str]:
        cfg = config_from_dict(data)
        return resolve_queries(cfg.signals.queries, "image", cfg.attacks,
                               recipe_fields(cfg)[0].get("augment"))

    assert queries({"recipe": {"epochs": 1}}) == ["plain"]
    assert queries({"recipe": {"augment": ["mirror"]}}) == ["plain", "mirror"]
    assert queries({"recipes": {"aug": {"augment": ["crop"]}}, "recipe": "aug"}) == [
        "plain"]  # crop-flip queries mirror at random: a crop-only model never saw that
    assert queries({"recipe": {"augment": ["mirror"]}, "signals": {"queries": ["plain"]}}) == [
        "plain"]


def test_auto_grad_norm_follows_the_attacks():
    assert resolve_grad_norm(AUTO, ["loss", "gradient-norm"])
    assert resolve_grad_norm(AUTO, ["calibrated-gradient-norm"])
    assert not resolve_grad_norm(AUTO, ["loss", "rmia"])
    assert resolve_grad_norm(True, ["loss"]) and not resolve_grad_norm(False, ["gradient-norm"])


def _audit(**sections: Any) -> AuditConfig:
    data = {"model": {"predict": "nets.py:predict_proba"},
            "data": {"dataset": "digits", "members": "members.txt"}}
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return audit_config(data)


def test_an_audit_replays_the_declared_training_augmentation():
    # nothing declared: plain, as before; every attack (none named) reads gradient norms
    assert audit_signals(_audit(), "image", "function") == (["plain"], True)
    declared = _audit(model={"augment": ["crop", "mirror"]}, attacks=["loss", "lira-offline"])
    assert training_augment(declared) == (["crop", "mirror"], "model.augment")
    assert audit_signals(declared, "image", "function") == (["plain", "mirror"], False)
    # every attack (none named) includes RAPID: its 8 views of a crop + mirror model, only
    # the 2 a mirror-only model trained on
    assert len(audit_signals(_audit(model={"augment": ["crop", "mirror"]}), "image",
                             "torch")[0]) == 8
    assert audit_signals(_audit(model={"augment": ["mirror"]}), "image", "torch")[0] == [
        "plain", "mirror"]
    # the recipe the references train with is how the model trained, unless said otherwise
    recipe = {"references": {"recipe": {"augment": ["mirror"], "epochs": 1}},
              "attacks": ["loss"]}
    assert audit_signals(_audit(**recipe), "image", "torch")[0] == ["plain", "mirror"]
    assert audit_signals(_audit(**recipe, model={"augment": []}), "image", "torch")[0] == [
        "plain"]
    # precomputed outputs hold the plain query only; tabular data have no views
    assert audit_signals(declared, "image", "outputs")[0] == ["plain"]
    assert audit_signals(_audit(**recipe), "tabular", "sklearn")[0] == ["plain"]
    with pytest.raises(ConfigError, match="model.augment names image augmentation steps; the "
                                          "audit data are texts"):
        audit_signals(declared, "tokens", "hf")


def test_signals_values_are_checked_in_both():
    for build in (config_from_dict, lambda d: _audit(**d)):
        for auto, grad_auto in ((None, None), ("auto", "auto"), (["auto"], None)):
            cfg = build({"signals": {"queries": auto, "grad_norm": grad_auto}})  # [auto]: flag
            assert (cfg.signals.queries, cfg.signals.grad_norm) == (AUTO, AUTO)
        for bad in ("plain", [], [1], "mirror,plain"):
            with pytest.raises(ConfigError, match="signals.queries must be auto or a non-empty"):
                build({"signals": {"queries": bad}})
        with pytest.raises(ConfigError, match="signals.grad_norm must be auto, true or false"):
            build({"signals": {"grad_norm": "yes"}})
    with pytest.raises(ConfigError, match=r"model.augment: .*unknown augmentation 'flip'"):
        _audit(model={"augment": ["flip"]})


def test_the_audit_precision_is_fp32_or_bf16():
    assert _audit().precision == "fp32" and _audit(precision="bf16").precision == "bf16"
    for bad in ("fp16", "BF16", 16):
        with pytest.raises(ConfigError, match="precision must be one of fp32, bf16"):
            _audit(precision=bad)


# --- typos are still refused ----------------------------------------------------------------

@pytest.mark.parametrize(("data", "match"), [
    ({"signals": {"querys": ["plain"]}}, r"'signals.querys'.*Did you mean 'queries'"),
    ({"model": {"augmnet": ["mirror"]}}, r"'model.augmnet'.*Did you mean 'augment'"),
    ({"data_dri": "d"}, r"unknown key 'data_dri' in the audit config.*Did you mean 'data_dir'"),
    ({"metrics": {"split_chek": False}}, r"'metrics.split_chek'.*Did you mean 'split_check'"),
    ({"dataset": {"name": "digits"}}, r"unknown key 'dataset' in the audit config"),
])
def test_audit_config_typos_are_refused_with_a_suggestion(data, match):
    with pytest.raises(ConfigError, match=match):
        _audit(**data)


# --- end to end: a declared augmentation reaches the bank --------------------------------

def test_audit_with_a_declared_augmentation_queries_its_views(user, tmp_path):
    from miaudit.cli.main import main

    out = tmp_path / "fn"
    assert main(["audit", "--predict", f"{user['nets']}:predict_proba", "--data", "digits",
                 "--members", str(user["members"]), "--nonmembers", str(user["nonmembers"]),
                 "--out", str(out), "--quiet", "--augment", "mirror",
                 "--attacks", "correctness,augmentation-consistency"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    assert summary["queries"] == "plain, mirror" and summary["queries_per_sample"] == 2
    assert set(metrics) == {"correctness", "augmentation-consistency"}
    saved = yaml.safe_load((out / "audit.yaml").read_text())  # reruns as it ran
    assert saved["model"]["augment"] == ["mirror"] and saved["signals"]["queries"] == AUTO


# --- attacks listed explicitly: refused up front when the bank cannot support them ---------

def test_an_audit_refuses_listed_attacks_its_bank_cannot_support_before_any_work(
    user, tmp_path, capsys
):
    """Listed explicitly, an attack the audit could never run is refused before the target is
    queried or a reference model trains; the default (every attack) still lists those it
    cannot run with the reason."""
    from miaudit.cli.main import main

    out = tmp_path / "fn"
    assert main(["audit", "--predict", f"{user['nets']}:predict_proba", "--data", "digits",
                 "--members", str(user["members"]), "--nonmembers", str(user["nonmembers"]),
                 "--public-rows", str(user["public"]), "--out", str(out), "--quiet",
                 "--cache-dir", str(tmp_path / "cache"),
                 "--attacks", "loss,lira-online,gradient-norm,blind"]) == 2
    err = capsys.readouterr().err
    assert ("3 attacks listed in attacks (--attacks) cannot run on this audit (lira-online, "
            "gradient-norm, blind)") in err
    assert ("attack 'lira-online' cannot run: needs at least 1 reference model trained ON the "
            "audit samples (an online attack; its family's offline attacks: lira-offline, "
            "lira-offline-fixed-variance, lira-offline-two-sided): the audit's reference "
            "models train on public data only, so none is IN for an audit sample") in err
    assert "the target is a black-box prediction function: gradients need white-box" in err
    assert ("attack 'blind' cannot run: needs the samples' texts (their sizes, text_zlib_bytes "
            "and text_chars): this audit's data (digits) are images; texts are audited with a "
            "Hugging Face model folder") in err
    assert not out.exists() and not (tmp_path / "cache").exists()


def test_the_audit_plan_holds_what_the_audit_can_know_up_front():
    from miaudit.external.audit_config import audit_plan

    plan = audit_plan(_audit(attacks=["loss"]))  # no public data named: no reference model
    assert (plan.data, plan.references, plan.in_references, plan.population) == (
        "image", 0, 0, False)
    assert plan.channels == frozenset() and plan.queries == ("plain",)
    public = audit_plan(_audit(public={"rows": "public.txt"}, references={"models": 3}))
    assert (public.references, public.out_references, public.in_references) == (3, 3, 0)
    assert public.population is None  # a fraction of rows only loading counts
    lm = audit_plan(_audit(model={"predict": None, "hf_model": "folder"}), causal_lm=True)
    assert lm.data == "sequence" and lm.sequence and lm.texts and not lm.base_model
    assert lm.channels == frozenset()
    # the default list is not checked here: the bank's skip reasons list what cannot run
    from miaudit.external.audit_config import check_listed_attacks

    check_listed_attacks(_audit())
    with pytest.raises(ConfigError, match="attack 'rmia' cannot run: needs at least 1 "
                                          "reference model .*this audit has no public data"):
        check_listed_attacks(_audit(attacks=["loss", "rmia"]))
