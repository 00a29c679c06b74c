"""The Python API: the README's example runs as written, and miaudit.attack / run / audit give
the same numbers as the command line (and evaluate_bank) for the same inputs."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import joblib
import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import save_file
from sklearn.datasets import load_digits

import miaudit
from miaudit.cli.main import main
from miaudit.config import MetricsConfig, config_from_dict, read_yaml
from miaudit.errors import ConfigError
from miaudit.external.audit_config import audit_config
from miaudit.models.user import resolve_object
from miaudit.pipeline import evaluate_bank
from miaudit.records.outcomes import AuditResult
from miaudit.report.write import scores_csv
from miaudit.verdict.strength import ranked

README = Path(__file__).resolve().parents[1] / "README.md"
ATTACKS = ["loss", "lira-offline", "rmia"]  # the README example's


def _readme_example() -> str:
    """The first python block of the README's "## Python API" section."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _without_seconds(doc: dict) -> dict:
    """metrics.json less the cost's wall-clock seconds (the only figures that vary)."""
    return {name: {**entry, "cost": {k: v for k, v in entry["cost"].items()
                                     if not k.endswith("_seconds")}}
            for name, entry in doc.items()}


def _document(result: AuditResult) -> dict:
    return {o.name: o.metrics_entry() for o in result.outcomes}


@pytest.fixture(scope="module")
def readme(tmp_path_factory) -> dict:
    """The README example run as written, in a fresh folder (it writes runs/audit there)."""
    cwd = tmp_path_factory.mktemp("readme")
    before = os.getcwd()
    printed = io.StringIO()
    namespace: dict = {"__name__": "readme_example"}
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(_readme_example(), str(README), "exec"), namespace)
    finally:
        os.chdir(before)
    return {**namespace, "cwd": cwd, "printed": printed.getvalue()}


def test_the_readme_example_runs(readme):
    result = readme["result"]
    assert isinstance(result, AuditResult)
    assert [o.name for o in result.outcomes] == ATTACKS
    assert result.out == Path("runs/audit")
    run_dir = readme["cwd"] / result.out
    written = json.loads((run_dir / "metrics.json").read_text())
    assert written == json.loads(json.dumps(_document(result)))  # the files hold the result
    assert (run_dir / "verdict.txt").is_file() and (run_dir / "report.html").is_file()
    frame = readme["tpr"]
    assert list(frame.attack) == ATTACKS
    for _, row in frame.iterrows():
        assert row.value == result.outcome(row.attack).metrics.tpr_at(0.01).tpr
    printed = readme["printed"]
    assert all(name in printed for name in ATTACKS)
    assert f"strongest: {miaudit.strongest(result).name}" in printed
    # the in-memory arrays went to a temporary folder, removed after the audit
    saved = read_yaml(run_dir / "audit.yaml")
    assert saved["model"]["instance"].startswith("in memory: ")
    assert not Path(saved["data"]["members"]).exists()


def test_the_cli_gives_the_same_numbers_as_the_api(readme, tmp_path):
    """The README's audit again through `miaudit audit`, from files and with an empty model
    cache: the same bank, scores and metrics."""
    joblib.dump(readme["clf"], tmp_path / "clf.joblib")
    np.savetxt(tmp_path / "members.txt", readme["train"], fmt="%d")
    np.savetxt(tmp_path / "public.txt", readme["public"], fmt="%d")
    out = tmp_path / "cli"
    assert main(["audit", "--estimator", str(tmp_path / "clf.joblib"), "--data", "digits",
                 "--members", str(tmp_path / "members.txt"),
                 "--public-rows", str(tmp_path / "public.txt"), "--preprocessing", "raw",
                 "--references", "2", "--attacks", ",".join(ATTACKS), "--out", str(out),
                 "--cache-dir", str(tmp_path / "cache"), "--quiet"]) == 0
    api_dir = readme["cwd"] / readme["result"].out
    assert "instance" not in read_yaml(out / "audit.yaml")["model"]  # the CLI's file as before
    for name in ("scores.csv", "exposed.csv", "verdict.txt"):
        assert (out / name).read_bytes() == (api_dir / name).read_bytes(), name
    cli = json.loads((out / "metrics.json").read_text())
    assert _without_seconds(cli) == _without_seconds(json.loads((api_dir / "metrics.json")
                                                                .read_text()))
    with np.load(out / "bank.npz") as a, np.load(api_dir / "bank.npz") as b:
        assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)


def test_an_in_memory_audit_config_cannot_be_rerun_from_its_file(readme):
    saved = read_yaml(readme["cwd"] / readme["result"].out / "audit.yaml")
    with pytest.raises(ConfigError, match="in memory"):
        audit_config(saved)


def test_strongest_and_ranked_follow_the_reports_ranking(readme):
    result = readme["result"]
    order, _ = ranked(result)
    assert [o.name for o in miaudit.ranked(result)] == [o.name for o in order]
    assert miaudit.strongest(result) is order[0]
    # the attack the verdict names is the strongest
    assert miaudit.strongest(result).name == result.meta["verdict"].attack
    assert miaudit.strongest(AuditResult(result.indices, result.members, [])) is None


def test_attack_on_a_bank_matches_evaluate_bank(digits_bank):
    names = ["loss", "calibrated-loss", "lira-offline"]
    result = miaudit.attack(digits_bank, target=2, attacks=names, metrics={"bootstrap": 20},
                            seed=1, progress=False)
    expected = evaluate_bank(digits_bank, 2, names, metric_cfg=MetricsConfig(bootstrap=20),
                             seed=1, progress=False)
    assert [o.name for o in result.outcomes] == names
    for got, want in zip(result.outcomes, expected.outcomes, strict=True):
        assert np.array_equal(got.scores, want.scores, equal_nan=True)
        assert got.metrics == want.metrics
    assert result.meta["n_models"] == digits_bank.n_models and "bank" not in result.meta
    with pytest.raises(ConfigError, match="unknown key 'metrics.bootstrp'|unknown key 'bootstrp'"):
        miaudit.attack(digits_bank, attacks=names, metrics={"bootstrp": 20})


def test_attack_on_a_bank_file_matches_the_cli(digits_bank, tmp_path):
    """Default attacks: every one the bank supports, as `miaudit attack` chooses them. A bank
    of the target alone keeps it quick: reference attacks are skipped, with the reason."""
    alone = digits_bank.replace(logits=digits_bank.logits[:1],
                                membership=digits_bank.membership[:1],
                                channels={k: v[:1] for k, v in digits_bank.channels.items()})
    path = alone.save(tmp_path / "bank.npz")
    result = miaudit.attack(path, progress=False)
    assert main(["attack", str(path), "--target", "0", "--out", str(tmp_path / "cli")]) == 0
    cli = json.loads((tmp_path / "cli" / "metrics.json").read_text())
    assert [o.name for o in result.outcomes] == list(cli)
    assert "gradient-norm" in cli and "lira-offline" in result.meta["skipped"]
    assert _without_seconds(cli) == _without_seconds(json.loads(json.dumps(_document(result))))
    assert scores_csv(result) == (tmp_path / "cli" / "scores.csv").read_text()
    assert result.meta["bank"] == str(path)


def _tiny_run(tmp_path: Path) -> dict:
    return {"name": "tiny-api", "seed": 1, "dataset": {"name": "digits"},
            "split": {"audit": 200, "public": 200, "population": 100}, "models": 2,
            "recipe": {"architecture": "mlp", "epochs": 2, "batch_size": 64},
            "signals": {"queries": ["plain"]}, "attacks": ["loss", "calibrated-loss"],
            "metrics": {"bootstrap": 20}, "cache_dir": str(tmp_path / "cache")}


def test_run_writes_the_run_directory_and_returns_the_result(tmp_path):
    mapping = _tiny_run(tmp_path)
    result = miaudit.run(mapping, out=tmp_path / "run", progress=False)
    assert result.out == tmp_path / "run"
    for name in ("config.yaml", "bank.npz", "metrics.json", "scores.csv", "report.html"):
        assert (result.out / name).is_file(), name
    written = json.loads((result.out / "metrics.json").read_text())
    assert written == json.loads(json.dumps(_document(result)))
    assert result.meta["models_trained"] == 2 and "output" not in mapping  # mapping untouched
    # the same config as a YAML file and as a RunConfig: the same scores, from the cache
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(mapping))
    again = miaudit.run(tmp_path / "tiny.yaml", out=tmp_path / "again", progress=False)
    cfg = config_from_dict(mapping)
    third = miaudit.run(cfg, out=tmp_path / "third", progress=False)
    assert cfg.output is None  # the caller's RunConfig is not changed by `out`
    assert again.meta["models_trained"] == 0 and third.meta["models_trained"] == 0
    for other in (again, third):
        for a, b in zip(result.outcomes, other.outcomes, strict=True):
            assert np.array_equal(a.scores, b.scores) and a.metrics == b.metrics


NETS = '''
from torch import nn


class Net(nn.Module):
    def __init__(self, hidden: int = 32):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(),
                                  nn.Linear(hidden, 10))

    def forward(self, x):
        return self.body(x)


def predict_proba(x):
    import numpy as np
    z = x.reshape(len(x), -1) @ np.random.default_rng(0).normal(size=(64, 10))
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
'''


@pytest.fixture(scope="module")
def torch_user(tmp_path_factory) -> dict:
    """A torch model of a class from the user's file, trained on 300 digits rows."""
    root = tmp_path_factory.mktemp("torch-user")
    (root / "nets.py").write_text(NETS)
    members = np.sort(np.random.default_rng(0).permutation(1797)[:300])
    digits = load_digits()
    x = torch.tensor(digits.images[:, None] / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    torch.manual_seed(0)
    net = resolve_object(f"{root / 'nets.py'}:Net")(hidden=16)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    rows = torch.from_numpy(members)
    for _ in range(60):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x[rows]), y[rows]).backward()
        opt.step()
    save_file({k: v.contiguous() for k, v in net.state_dict().items()},
              str(root / "net.safetensors"))
    np.savetxt(root / "members.txt", members, fmt="%d")
    return {"root": root, "net": net, "members": members}


def test_an_in_memory_torch_module_audits_as_its_class_and_weights_do(torch_user, tmp_path):
    root, net = torch_user["root"], torch_user["net"]
    net.train()
    result = miaudit.audit(model=net, data="digits", members=torch_user["members"],
                           references=0, attacks=["loss", "gradient-norm"],
                           out=tmp_path / "api", progress=False)
    assert net.training  # the caller's module is not switched to eval mode (a copy is)
    assert main(["audit", "--model", f"{root / 'nets.py'}:Net", "--model-kwargs", "{hidden: 16}",
                 "--weights", str(root / "net.safetensors"), "--data", "digits",
                 "--members", str(root / "members.txt"), "--references", "0",
                 "--attacks", "loss,gradient-norm", "--out", str(tmp_path / "cli"),
                 "--quiet"]) == 0
    assert (tmp_path / "cli" / "scores.csv").read_text() == scores_csv(result)
    assert result.meta["target_kind"] == "torch"


def test_reference_models_need_the_class_and_its_arguments(torch_user):
    recipe = {"optimizer": "adam", "lr": 0.01, "epochs": 1, "batch_size": 64}

    class Local(torch.nn.Module):  # defined here: not importable by path
        def forward(self, x):
            return x.reshape(len(x), -1)[:, :10]

    with pytest.raises(ConfigError, match="Put the class in a module"):
        miaudit.audit(model=Local(), data="digits", members=torch_user["members"],
                      recipe=recipe, references=2)
    with pytest.raises(ConfigError, match="model_kwargs"):  # Net() is 32 wide, the model 16
        miaudit.audit(model=torch_user["net"], data="digits", members=torch_user["members"],
                      recipe=recipe, references=2)


def test_an_in_memory_function_audits_as_its_import_path_does(torch_user, tmp_path):
    root = torch_user["root"]
    fn = resolve_object(f"{root / 'nets.py'}:predict_proba")
    result = miaudit.audit(model=fn, data="digits", members=root / "members.txt",
                           attacks="loss,confidence", out=tmp_path / "api", progress=False)
    assert main(["audit", "--predict", f"{root / 'nets.py'}:predict_proba", "--data", "digits",
                 "--members", str(root / "members.txt"), "--attacks", "loss,confidence",
                 "--out", str(tmp_path / "cli"), "--quiet"]) == 0
    assert (tmp_path / "cli" / "scores.csv").read_text() == scores_csv(result)
    assert result.meta["target_kind"] == "function"


def test_the_api_names_are_plain_functions():
    """miaudit.audit is the function, not a module made callable: its own signature and
    docstring, and importing the package behind `miaudit audit` does not rebind it."""
    import inspect

    import miaudit.external.run  # noqa: F401  (the package behind `miaudit audit`)
    from miaudit import api

    for name in ("attack", "audit", "run", "strongest", "ranked"):
        assert getattr(miaudit, name) is getattr(api, name)
        assert inspect.isfunction(getattr(miaudit, name))
    assert miaudit.audit.__doc__.startswith("Audit a model trained elsewhere")
    assert list(inspect.signature(miaudit.audit).parameters)[:3] == ["model", "data", "members"]
    assert (Path(miaudit.__file__).parent / "py.typed").is_file()


def test_ambiguous_model_strings_are_refused_with_both_readings(torch_user, tmp_path):
    """"nets.py:Net" without weights= reads as a class missing its weights or a prediction
    function: refused, before any work, naming both; so is a weights file or a class given as
    the model. The command line's --predict refuses a class alike."""
    root = torch_user["root"]
    args = {"data": "digits", "members": torch_user["members"], "out": tmp_path / "run"}
    with pytest.raises(ConfigError) as refused:
        miaudit.audit(model=f"{root / 'nets.py'}:Net", **args)
    message = str(refused.value)
    assert "names an nn.Module class, Net" in message
    assert "needs its trained weights" in message and ":Net', weights='FILE'" in message
    assert "'file.py:function'" in message
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match=r"is a weights file.*weights='.*net\.safetensors'"):
        miaudit.audit(model=str(root / "net.safetensors"), **args)
    with pytest.raises(ConfigError, match="the class Net itself, not a trained model"):
        miaudit.audit(model=type(torch_user["net"]), **args)
    # the two readings given as such still work: the class with its weights, the function
    cls = miaudit.audit(model=f"{root / 'nets.py'}:Net", weights=root / "net.safetensors",
                        model_kwargs={"hidden": 16}, references=0, attacks="loss",
                        data="digits", members=torch_user["members"], out=tmp_path / "cls",
                        progress=False)
    assert cls.meta["target_kind"] == "torch"
    fn = miaudit.audit(model=f"{root / 'nets.py'}:predict_proba", references=0,
                       attacks="loss", data="digits", members=torch_user["members"],
                       out=tmp_path / "fn", progress=False)
    assert fn.meta["target_kind"] == "function"


def test_the_command_line_refuses_a_class_as_a_prediction_function(torch_user, tmp_path,
                                                                   capsys):
    root = torch_user["root"]
    assert main(["audit", "--predict", f"{root / 'nets.py'}:Net", "--data", "digits",
                 "--members", str(root / "members.txt"), "--out", str(tmp_path / "cli"),
                 "--quiet"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "model.predict (--predict)" in err and "names an nn.Module class, Net" in err
    assert f"--model {root / 'nets.py'}:Net --weights FILE" in err
    assert "'file.py:function'" in err


def test_attack_refuses_parameters_of_an_attack_not_chosen(digits_bank):
    """As `miaudit attack --params` (and attack_params in a config) do: they would be
    ignored."""
    with pytest.raises(ConfigError, match="params names 'rmia', which is not in attacks"):
        miaudit.attack(digits_bank, attacks=["loss"], params={"rmia": {"gamma": 2}})
