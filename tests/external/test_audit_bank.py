import numpy as np
import pytest
from scipy.special import softmax
from sklearn.datasets import load_digits

from miaudit.attacks import list_attacks
from miaudit.errors import DataError
from miaudit.external.audit_bank import build_audit_bank, skip_reasons
from miaudit.external.audit_config import audit_config
from miaudit.external.data import build_audit_data
from miaudit.external.references import SklearnCache, reference_models, torch_recipe
from miaudit.external.sources import load_target


def _outputs_audit(user, tmp_path, public_outputs: bool):
    """A black box given only as precomputed probabilities of a real model (the user's MLP)."""
    import joblib

    mlp = joblib.load(user["mlp"])
    p = mlp.predict_proba(load_digits().data / 16.0)
    np.savez(tmp_path / "out.npz", probabilities=p)
    model = {"outputs": str(tmp_path / "out.npz")}
    if public_outputs:
        model["public_outputs"] = str(tmp_path / "out.npz")  # public = digits rows too
    cfg = audit_config({
        "model": model,
        "data": {"dataset": "digits", "members": str(user["members"]),
                 "nonmembers": str(user["nonmembers"])},
        "public": {"rows": str(user["public"])},
    })
    data = build_audit_data(cfg)
    target = load_target(cfg.model, data.input_shape, data.num_classes, data.features[:64])
    refs = reference_models(cfg, target, data, tmp_path / "cache", "cpu", progress=False)
    return cfg, data, target, refs, p


def test_black_box_outputs_skip_list_follows_the_needs(user, tmp_path):
    cfg, data, target, refs, p = _outputs_audit(user, tmp_path, public_outputs=False)
    assert not refs.modules and "black-box target" in refs.reason
    built = build_audit_bank(cfg, target, refs, data, "cpu", progress=False)
    # the target's logits are the given probabilities, in bank order
    np.testing.assert_allclose(softmax(built.bank.logits[0, :, 0].astype(float), axis=1),
                               p[data.audit_rows], atol=1e-6)
    assert built.bank.n_samples == data.n_audit  # no references, no public outputs
    specs = list_attacks()
    skipped = skip_reasons([s.name for s in specs], built, refs)
    for spec in specs:
        needs = spec.needs
        blocked = bool(needs.channel or needs.out_references or needs.shadows
                       or needs.in_references or needs.population or needs.sequence
                       or needs.text)
        assert (spec.name in skipped) == blocked, spec.name
        reason = skipped.get(spec.name, "")
        if needs.sequence:  # a classifier's bank: no causal LM, no texts
            assert "needs a causal language model's per-token log-probabilities" in reason
        if needs.text:
            assert "needs the samples' texts" in reason
        if needs.channel == "grad_norm":
            assert "white-box access" in reason
        if needs.channel == "boundary_distance":
            assert "precomputed outputs cannot be queried" in reason
        if needs.out_references or needs.shadows:
            assert "needs reference models: black-box target" in reason
        if needs.in_references:
            assert "online design" in reason
    assert "loss" not in skipped and "modified-entropy" not in skipped


def test_black_box_with_public_outputs_and_stand_in_references(user, tmp_path):
    cfg, data, target, _, p = _outputs_audit(user, tmp_path, public_outputs=True)
    cfg.references.recipe = {"architecture": "mlp", "epochs": 3, "batch_size": 64}
    cfg.references.models = 2
    refs = reference_models(cfg, target, data, tmp_path / "cache", "cpu", progress=False)
    assert len(refs.modules) == 2 and "stand-in" in refs.notes[0]
    built = build_audit_bank(cfg, target, refs, data, "cpu", progress=False)
    bank = built.bank
    assert bank.n_models == 3 and bank.population.sum() == data.n_population > 0
    order = np.concatenate([data.audit_rows, data.pool_rows, data.population_rows])
    np.testing.assert_allclose(softmax(bank.logits[0, :, 0].astype(float), axis=1), p[order],
                               atol=1e-6)
    # references: IN on their own half of the pool only, OUT on every audit sample
    assert not bank.membership[1:, bank.audit].any()
    # each trains on as many rows as the target (300), drawn from the pool
    assert (bank.membership[1:].sum(axis=1) == min(300, data.n_pool // 2)).all()
    skipped = skip_reasons(["rmia", "lira-offline", "gradient-norm"], built, refs)
    assert set(skipped) == {"gradient-norm"}


def test_outputs_that_miss_audit_rows_are_refused(user, tmp_path):
    np.savez(tmp_path / "few.npz", probabilities=np.full((10, 10), 0.1),
             index=np.arange(10))
    cfg = audit_config({
        "model": {"outputs": str(tmp_path / "few.npz")},
        "data": {"dataset": "digits", "members": str(user["members"])},
    })
    data = build_audit_data(cfg)
    target = load_target(cfg.model, data.input_shape, 10, data.features[:64])
    refs = reference_models(cfg, target, data, tmp_path, "cpu", progress=False)
    with pytest.raises(DataError, match="lack 1787 of the 1797 rows"):
        build_audit_bank(cfg, target, refs, data, "cpu", progress=False)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_sklearn_references_are_cached_clones(user, tmp_path):
    import joblib

    estimator = joblib.load(user["mlp"])
    digits = load_digits()
    x, y = digits.data[:300] / 16.0, digits.target[:300]
    rows = np.arange(300)
    cache = SklearnCache(tmp_path)
    first, _ = cache.get_or_fit(estimator, x, y, "fp", rows, seed=7)
    again, _ = SklearnCache(tmp_path).get_or_fit(estimator, x, y, "fp", rows, seed=7)
    assert cache.misses == 1 and first.random_state == 7
    np.testing.assert_array_equal(first.predict_proba(x), again.predict_proba(x))
    assert first is not estimator and first.hidden_layer_sizes == estimator.hidden_layer_sizes
    other = estimator.set_params(alpha=0.5)
    assert cache.key(other, "fp", rows, 7) != cache.key(first, "fp", rows, 7)


def test_torch_reference_recipe_is_the_users_class(user):
    cfg = audit_config({"model": {"module": f"{user['nets']}:Net", "weights": "w.pt",
                                  "kwargs": {"hidden": 16}},
                        "data": {"dataset": "digits", "members": "m.txt"}})

    class T:
        kind = "torch"

    recipe, reason = torch_recipe(cfg, T())
    assert recipe is None and "references.recipe" in reason
    cfg.references.recipe = {"epochs": 5, "optimizer": "adam", "lr": 0.001}
    recipe, _ = torch_recipe(cfg, T())
    assert recipe.architecture == "import" and recipe.epochs == 5
    assert recipe.arch_params["path"] == f"{user['nets']}:Net"
    assert recipe.arch_params["kwargs"] == {"hidden": 16}
    assert len(recipe.arch_params["source_sha256"]) == 64
