"""DP-SGD recipes (miaudit.train.dp): accounting checked against Opacus's own accountants."""

import numpy as np
import pytest
import torch
from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

from miaudit.errors import ConfigError
from miaudit.models import build_model
from miaudit.train import ModelCache, Recipe, dp, engine, stacked, train_model

N = 256
DP_RECIPE = Recipe(epochs=2, batch_size=64, lr=0.1, dp={"epsilon": 8.0, "accountant": "rdp"})


def _accountant_epsilon(accountant, privacy):
    accountant.history = [(privacy["noise_multiplier"], privacy["sample_rate"], privacy["steps"])]
    return accountant.get_epsilon(delta=privacy["delta"])


@pytest.fixture(scope="module")
def data():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data[:N] / 16.0).astype(np.float32), d.target[:N].astype(np.int64)


@pytest.fixture(scope="module")
def rdp_model(data):
    torch.set_num_threads(1)
    x, y = data
    return train_model(DP_RECIPE, x, y, np.arange(N), seed=3, progress=False)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_noise_and_epsilon_match_opacus_rdp_accountant(rdp_model):
    p = rdp_model.privacy
    assert p["accountant"] == "rdp" and p["delta"] == 1e-5 and p["max_grad_norm"] == 1.0
    assert p["sample_rate"] == 0.25 and p["steps"] == 2 * 4
    # The noise is the least get_noise_multiplier finds (binary search to 0.01 in epsilon) ...
    assert dp.noise_multiplier(8.0, 1e-5, 0.25, 2, "rdp") == p["noise_multiplier"]
    assert 8.0 - 0.011 <= p["epsilon_spent"] <= 8.0
    # ... and a fresh accountant stepped like the training run spends what was recorded.
    assert p["epsilon_spent"] == pytest.approx(_accountant_epsilon(RDPAccountant(), p), rel=1e-9)
    bigger = dict(p, noise_multiplier=p["noise_multiplier"] * 0.95)
    assert _accountant_epsilon(RDPAccountant(), bigger) > 8.0


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_noise_search_is_opacus_get_noise_multiplier(monkeypatch):
    # Same question as DP_RECIPE's (memoised there): Opacus's own search gives the same noise.
    kwargs = {"target_epsilon": 8.0, "target_delta": 1e-5, "sample_rate": 0.25, "epochs": 2}
    expected = get_noise_multiplier(**kwargs, accountant="rdp")
    assert dp.noise_multiplier(8.0, 1e-5, 0.25, 2, "rdp") == pytest.approx(expected)

    def too_low(**kwargs):
        raise ValueError("The privacy budget is too low.")

    monkeypatch.setattr("opacus.accountants.utils.get_noise_multiplier", too_low)
    with pytest.raises(ConfigError, match="no noise multiplier.*too low"):
        dp.noise_multiplier(0.01, 1e-9, 0.5, 3, "rdp")


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_prv_accountant_records_what_a_fresh_prv_accountant_computes(data, monkeypatch):
    # The PRV noise search takes ~10 s here; the search is the same code as for RDP (tested
    # above), so fix the noise and check the PRV accounting of the training run.
    monkeypatch.setattr(dp, "find_noise", lambda *args: dp.NoiseSearch(1.0))
    x, y = data
    recipe = Recipe(epochs=1, batch_size=128, dp={"epsilon": 4.0, "delta": 1e-4})
    model = train_model(recipe, x, y, np.arange(N), seed=0, progress=False)
    p = model.privacy
    assert p["accountant"] == "prv" and p["delta"] == 1e-4 and p["steps"] == 2
    assert p["noise_multiplier"] == 1.0 and p["search_bounded"] is False
    fresh = _accountant_epsilon(PRVAccountant(), p)
    assert p["epsilon_spent"] == pytest.approx(fresh, abs=0.02)


def test_same_seed_same_weights_and_plain_module(data, rdp_model):
    x, y = data
    again = train_model(DP_RECIPE, x, y, np.arange(N), seed=3, progress=False)
    a, b = rdp_model.module.state_dict(), again.module.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert again.privacy == rdp_model.privacy
    plain = build_model("mlp", (64,), 10)
    assert list(a) == list(plain.state_dict())
    assert type(rdp_model.module) is type(plain) and not rdp_model.module.training
    other = train_model(DP_RECIPE, x, y, np.arange(N), seed=4, progress=False)
    assert not torch.equal(other.module.state_dict()["head.weight"], a["head.weight"])


def test_dp_sgd_steps_through_the_one_loop(data, rdp_model, monkeypatch):
    x, y = data
    seen = []
    real = engine.run_epoch

    def spy(strategy, batches, *args, **kwargs):
        seen.append((type(strategy).__name__, type(batches).__name__))
        return real(strategy, batches, *args, **kwargs)

    monkeypatch.setattr(engine, "run_epoch", spy)
    again = train_model(DP_RECIPE, x, y, np.arange(N), seed=3, progress=False)
    assert seen == [("DPStrategy", "DPDataLoader")] * DP_RECIPE.epochs  # Poisson sampling
    assert again.privacy == rdp_model.privacy


def test_dp_model_round_trips_through_cache_with_privacy(tmp_path, data, rdp_model, monkeypatch):
    x, y = data
    cache = ModelCache(tmp_path)
    first = cache.get_or_train("fp", np.arange(N), DP_RECIPE, 3, features=x, labels=y,
                               progress=False)  # fmt: skip
    monkeypatch.setattr(dp, "train_model_dp", lambda *a, **k: pytest.fail("retrained"))
    second = cache.get_or_train("fp", np.arange(N), DP_RECIPE, 3, features=x, labels=y,
                                progress=False)  # fmt: skip
    assert second.from_cache and cache.stats.hits == 1
    assert second.privacy == first.privacy == rdp_model.privacy
    for k, v in first.module.state_dict().items():
        assert torch.equal(second.module.state_dict()[k], v)


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"epsilon": 8.0, "sigma": 1.0}, "valid keys: epsilon, delta, max_grad_norm"),
        ({"delta": 1e-5}, "epsilon"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": 8.0, "delta": 1.0}, "delta"),
        ({"epsilon": 8.0, "delta": 0.0}, "delta"),
        ({"epsilon": 8.0, "max_grad_norm": 0}, "max_grad_norm"),
        ({"epsilon": 8.0, "accountant": "gdp"}, "accountant"),
        ({"epsilon": "8"}, "epsilon"),
        (8.0, "mapping"),
    ],
)
def test_bad_dp_config_is_rejected(bad, match):
    with pytest.raises(ConfigError, match=match):
        Recipe(dp=bad)


def test_batchnorm_architecture_is_rejected(data):
    x = np.zeros((8, 3, 8, 8), np.float32)
    recipe = Recipe(architecture="resnet18", epochs=1, batch_size=4, dp={"epsilon": 8.0})
    with pytest.raises(ConfigError, match="BatchNorm"):
        train_model(recipe, x, np.arange(8) % 2, np.arange(8), seed=0, progress=False)


def test_keys_defaults_and_stacking():
    assert "dp" not in Recipe().canonical_json()
    assert Recipe(dp=None).key() == Recipe().key()
    spelled = {"epsilon": 8, "delta": 1e-5, "max_grad_norm": 1.0, "accountant": "prv"}
    assert Recipe(dp={"epsilon": 8.0}).key() == Recipe(dp=spelled).key()
    assert Recipe(dp={"epsilon": 8.0}).key() != Recipe(dp={"epsilon": 4.0}).key()
    assert Recipe.from_dict(DP_RECIPE.to_dict()) == DP_RECIPE
    assert stacked.can_stack(Recipe()) and not stacked.can_stack(DP_RECIPE)
    with pytest.raises(ConfigError, match="epochs"):
        Recipe(epochs=0, dp={"epsilon": 8.0})


class FakeAccountant:
    """A monotone epsilon(sigma) standing in for PRV: lets the search logic be compared with
    Opacus's own get_noise_multiplier in milliseconds. Raises past a grid bound if given."""

    def __init__(self, bound_sigma=None):
        self.history, self.bound_sigma = [], bound_sigma

    def get_epsilon(self, delta, **kwargs):
        sigma = self.history[0][0]
        if self.bound_sigma is not None and sigma < self.bound_sigma:
            raise dp.PRVGridTooLarge("too many points")
        return 3.0 / sigma**2


def test_prv_search_is_opacus_search_step_for_step(monkeypatch):
    import opacus.accountants.utils as utils

    dp.find_noise.cache_clear()
    monkeypatch.setattr(utils, "create_accountant", lambda mechanism: FakeAccountant())
    monkeypatch.setattr(dp, "bounded_prv_accountant", lambda points: FakeAccountant())
    for eps in (0.5, 8.0, 1000.0):
        expected = utils.get_noise_multiplier(target_epsilon=eps, target_delta=1e-5,
                                              sample_rate=0.1, epochs=3, accountant="prv")
        assert dp._prv_search(eps, 1e-5, 0.1, 3) == (expected, False)
    # Past the grid bound sigmas count as "too little noise": a larger sigma, flagged.
    monkeypatch.setattr(dp, "bounded_prv_accountant", lambda points: FakeAccountant(0.1))
    sigma, bounded = dp._prv_search(1000.0, 1e-5, 0.1, 3)
    assert bounded and 0.1 <= sigma <= 0.1001 and 3.0 / sigma**2 < 1000.0
    with pytest.raises(ValueError, match="too low"):
        monkeypatch.setattr(dp, "bounded_prv_accountant", lambda points: FakeAccountant(1e7))
        dp._prv_search(1.0, 1e-5, 0.1, 3)
    dp.find_noise.cache_clear()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_bounded_prv_accountant_is_opacus_prv_below_the_bound():
    history = [(1.0, 0.25, 8)]
    plain, bounded = PRVAccountant(), dp.bounded_prv_accountant(1e9)
    plain.history, bounded.history = list(history), list(history)
    assert bounded.get_epsilon(delta=1e-5) == plain.get_epsilon(delta=1e-5)
    tight = dp.bounded_prv_accountant(1000)
    tight.history = list(history)
    with pytest.raises(dp.PRVGridTooLarge):
        tight.get_epsilon(delta=1e-5)


def test_auto_accountant_is_prv_up_to_100_and_rdp_above(caplog):
    from miaudit.train import recipe

    recipe._warn_rdp_chosen.cache_clear()  # once per epsilon and process: a config may have
    assert Recipe(dp={"epsilon": 100}).dp["accountant"] == "prv"  # warned already
    with caplog.at_level("WARNING"):
        big = Recipe(dp={"epsilon": 1000.0})
    assert big.dp["accountant"] == "rdp" and "RDP accountant" in caplog.text
    assert Recipe(dp={"epsilon": 1000.0, "accountant": "auto"}) == big
    assert Recipe(dp={"epsilon": 1000.0, "accountant": "prv"}).dp["accountant"] == "prv"
    # the resolved name is what the key holds, so the old PRV default keeps its keys
    assert Recipe(dp={"epsilon": 8.0, "accountant": "auto"}).key() == Recipe(
        dp={"epsilon": 8.0, "accountant": "prv"}).key()  # fmt: skip


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_epsilon_1000_trains_with_rdp_and_checkpoints_carry_their_epsilon(tmp_path, data):
    from miaudit.train import CheckpointSpec

    x, y = data
    recipe = Recipe(epochs=2, batch_size=64, lr=0.1, label_smoothing=0.1,
                    arch_params={"dropout": 0.2}, dp={"epsilon": 1000.0})  # fmt: skip
    cache = ModelCache(tmp_path)
    (model,) = cache.get_or_train_many("fp", [(np.arange(N), 0)], recipe, features=x,
                                       labels=y, progress=False,
                                       checkpoints=CheckpointSpec(epochs=[1]))  # fmt: skip
    p = model.privacy
    assert p["accountant"] == "rdp" and not p["search_bounded"]
    assert 1000.0 - 0.011 <= p["epsilon_spent"] <= 1000.0
    assert p["epsilon_spent"] == pytest.approx(_accountant_epsilon(RDPAccountant(), p), rel=1e-9)
    half = model.checkpoints["epoch1"]
    assert half.step == 4 and half.privacy["steps"] == 4
    assert half.privacy["noise_multiplier"] == p["noise_multiplier"]
    fresh = _accountant_epsilon(RDPAccountant(), half.privacy)
    assert half.privacy["epsilon_spent"] == pytest.approx(fresh) and fresh < p["epsilon_spent"]
    again = ModelCache(tmp_path).get_or_train_many(
        "fp", [(np.arange(N), 0)], recipe, features=x, labels=y, progress=False,
        checkpoints=CheckpointSpec(epochs=[1]),
    )[0]  # fmt: skip
    assert again.checkpoints["epoch1"].privacy == half.privacy
