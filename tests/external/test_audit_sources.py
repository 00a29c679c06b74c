import joblib
import numpy as np
import pandas as pd
import pytest
import torch
from scipy.special import softmax
from sklearn.datasets import load_digits
from sklearn.svm import LinearSVC

from miaudit.errors import ConfigError, DataError
from miaudit.external.audit_config import ModelSection
from miaudit.external.sources import load_outputs, load_state, load_target, to_logits

SHAPE = (1, 8, 8)


@pytest.fixture(scope="module")
def probe():
    return (load_digits().images[:64, None] / 16.0).astype(np.float32)


def test_safetensors_and_torch_save_load_the_same_model(user, probe):
    models = [load_target(ModelSection(module=f"{user['nets']}:Net", weights=str(user[w])),
                          SHAPE, 10, probe) for w in ("safetensors", "pt")]
    assert all(m.kind == "torch" and m.white_box and m.queryable for m in models)
    x = torch.from_numpy(probe)
    with torch.no_grad():
        a, b = (m.module(x).numpy() for m in models)
    np.testing.assert_array_equal(a, b)
    # the weights are the trained ones: it fits its members far better than chance
    assert (a.argmax(1) == load_digits().target[:64]).mean() > 0.8


def test_weights_that_do_not_fit_name_every_bad_key(user, probe):
    spec = ModelSection(module=f"{user['nets']}:Net", kwargs={"hidden": 16},
                        weights=str(user["safetensors"]))
    with pytest.raises(ConfigError, match="do not fit") as err:
        load_target(spec, SHAPE, 10, probe)
    assert "body.1.weight: file (32, 64) vs model (16, 64)" in str(err.value)
    state = load_state(user["safetensors"])
    state["extra.bias"] = torch.zeros(3)
    del state["body.3.bias"]
    path = user["root"] / "odd.pt"
    torch.save(state, path)
    with pytest.raises(ConfigError) as err:
        load_target(ModelSection(module=f"{user['nets']}:Net", weights=str(path)),
                    SHAPE, 10, probe)
    assert "missing from the file: body.3.bias" in str(err.value)
    assert "not in the model: extra.bias" in str(err.value)


def test_a_pickled_whole_model_is_refused_by_weights_only(user, tmp_path):
    torch.save(torch.nn.Linear(2, 2), tmp_path / "whole.pt")  # a module, not a state dict
    with pytest.raises(DataError, match="weights_only=True"):
        load_state(tmp_path / "whole.pt")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(DataError, match="not a readable .safetensors"):
        load_state(tmp_path / "junk.safetensors")


def test_output_width_must_match_the_labels(user, probe):
    spec = ModelSection(module=f"{user['nets']}:Net", kwargs={"classes": 5},
                        weights=str(user["safetensors"]))
    with pytest.raises(ConfigError, match=r"outputs shape \(2, 5\).*labels have 10 classes"):
        load_target(spec, SHAPE, 10, probe)
    with pytest.raises(DataError, match="3 columns but the labels have 10 classes"):
        to_logits(np.full((4, 3), 1 / 3), 10, "auto", 1e-3, "outputs.npz")


def test_sklearn_estimator_loads_and_is_checked(user, probe, tmp_path):
    target = load_target(ModelSection(estimator=str(user["mlp"])), (64,), 10, probe)
    assert target.kind == "sklearn" and not target.white_box
    with torch.no_grad():
        logits = target.module(torch.from_numpy(probe)).numpy()
    expected = target.estimator.predict_proba(probe.reshape(64, -1))
    np.testing.assert_allclose(softmax(logits.astype(np.float64), axis=1), expected, atol=1e-6)
    digits = load_digits()
    svm = LinearSVC().fit(digits.data[:200], digits.target[:200])
    joblib.dump(svm, tmp_path / "svm.joblib")
    with pytest.raises(ConfigError, match="no predict_proba"):
        load_target(ModelSection(estimator=str(tmp_path / "svm.joblib")), (64,), 10, probe)
    with pytest.raises(ConfigError, match="predicts classes"):
        load_target(ModelSection(estimator=str(user["mlp"])), (64,), 12, probe)
    with pytest.raises(ConfigError, match="fitted on 64 features"):
        load_target(ModelSection(estimator=str(user["mlp"])), (32,), 10, probe)


def test_probabilities_must_sum_to_one():
    p = softmax(np.random.default_rng(0).normal(size=(20, 4)), axis=1)
    logits, kind = to_logits(p, 4, "auto", 1e-3, "x")
    assert kind == "probabilities"
    np.testing.assert_allclose(softmax(logits.astype(np.float64), axis=1), p, atol=1e-6)
    bad = p.copy()
    bad[3] *= 0.9
    with pytest.raises(DataError, match="must sum to 1 per row") as err:
        to_logits(bad, 4, "probabilities", 1e-3, "x")
    assert "row 3 sums to 0.9" in str(err.value)
    with pytest.raises(DataError, match="1 row does not sum to 1"):  # auto: looks like p, is not
        to_logits(bad, 4, "auto", 1e-3, "x")
    raw = np.random.default_rng(1).normal(size=(5, 4))
    logits, kind = to_logits(raw, 4, "auto", 1e-3, "x")
    assert kind == "logits"
    np.testing.assert_allclose(logits, raw.astype(np.float32))
    zero = np.array([[1.0, 0.0, 0.0, 0.0]])  # a released 0 stays finite
    assert np.isfinite(to_logits(zero, 4, "probabilities", 1e-3, "x")[0]).all()


def test_outputs_files_npz_csv_parquet(tmp_path):
    p = softmax(np.random.default_rng(0).normal(size=(6, 3)), axis=1)
    np.savez(tmp_path / "a.npz", probabilities=p, index=np.arange(10, 16))
    index, logits, kind = load_outputs(tmp_path / "a.npz", 3, "auto", 1e-3)
    assert kind == "probabilities" and index.tolist() == list(range(10, 16))
    np.testing.assert_allclose(softmax(logits.astype(np.float64), axis=1), p, atol=1e-6)
    df = pd.DataFrame(np.log(p), columns=["logit_0", "logit_1", "logit_2"])
    df.to_csv(tmp_path / "b.csv", index=False)
    df.to_parquet(tmp_path / "b.parquet")
    for name in ("b.csv", "b.parquet"):
        index, logits, kind = load_outputs(tmp_path / name, 3, "auto", 1e-3)
        assert index is None and kind == "logits"
        np.testing.assert_allclose(logits, np.log(p), rtol=1e-6)
    np.savez(tmp_path / "c.npz", scores=p)
    with pytest.raises(DataError, match="exactly one of 'logits' or 'probabilities'"):
        load_outputs(tmp_path / "c.npz", 3, "auto", 1e-3)


def test_prediction_function_and_import_errors(user, probe):
    target = load_target(ModelSection(predict=f"{user['nets']}:predict_proba"), SHAPE, 10,
                         probe)
    assert target.kind == "function" and target.queryable and not target.white_box
    assert "read as probabilities" in target.notes[0]
    with pytest.raises(ConfigError, match="must look like 'package.module:Name'"):
        load_target(ModelSection(predict="nocolon"), SHAPE, 10, probe)
    with pytest.raises(ConfigError, match="cannot import module 'no_such_mod'"):
        load_target(ModelSection(predict="no_such_mod:f"), SHAPE, 10, probe)
    with pytest.raises(ConfigError, match="has no attribute 'Nope'"):
        load_target(ModelSection(module=f"{user['nets']}:Nope",
                                 weights=str(user["pt"])), SHAPE, 10, probe)
