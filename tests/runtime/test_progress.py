"""Progress bars: drawn only on a terminal with progress on; --quiet silences every one."""

import io
import sys

import numpy as np
import pytest
import yaml
from sklearn.datasets import load_digits

from miaudit import metrics
from miaudit.attacks.shadow import train_scorer
from miaudit.cli.main import main
from miaudit.runtime import progress
from miaudit.runtime.progress import progress_bar, progress_on, progress_switch, quiet, set_progress
from miaudit.signals.statistics import StatisticCache
from miaudit.train import Recipe, train_models


class FakeTTY(io.StringIO):
    """A stderr that says it is a terminal and keeps what is written to it."""

    def isatty(self) -> bool:
        return True


def fake_stderr(monkeypatch, stream):
    """Make ``stream`` sys.stderr. Called in the test body: pytest's output capture resets
    sys.stderr between a fixture's setup and the test."""
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.delenv(progress.NESTED_ENV, raising=False)
    monkeypatch.setattr(progress, "QUICK_DELAY", 0.0)  # show quick bars at once
    monkeypatch.setattr(progress, "MIN_INTERVAL", 0.0)  # and every update
    return stream


@pytest.fixture
def tty(monkeypatch):
    return lambda: fake_stderr(monkeypatch, FakeTTY())


@pytest.fixture
def pipe(monkeypatch):
    return lambda: fake_stderr(monkeypatch, io.StringIO())  # not a terminal: a log, a pipe


def use(bar, steps=3):
    with bar:
        for _ in range(steps):
            bar.update(1)


def test_bar_draws_on_a_terminal(tty):
    err = tty()
    use(progress_bar(3, "counting things", "thing"))
    text = err.getvalue()
    assert "counting things" in text and "3/3" in text and "thing" in text


def test_no_bar_when_stderr_is_not_a_terminal(pipe):
    err = pipe()
    bar = progress_bar(3, "counting things")
    assert bar.disable
    use(bar)
    assert err.getvalue() == ""


def test_switch_and_argument_turn_bars_off(tty):
    err = tty()
    with quiet():
        assert not progress_on()
        use(progress_bar(3, "quiet block"))
    assert progress_on()  # restored after the block
    use(progress_bar(3, "not asked for", enabled=False))
    previous = set_progress(False)
    try:
        use(progress_bar(3, "switched off"))
    finally:
        set_progress(previous)
    assert err.getvalue() == ""
    with progress_switch(True):
        use(progress_bar(3, "back on"))
    assert "back on" in err.getvalue()


def test_no_bar_in_a_nested_worker(tty, monkeypatch):
    err = tty()
    monkeypatch.setenv(progress.NESTED_ENV, "1")
    use(progress_bar(3, "in a worker"))
    assert err.getvalue() == ""


def test_quick_bar_waits_until_the_work_is_slow(tty, monkeypatch):
    err = tty()
    monkeypatch.setattr(progress, "QUICK_DELAY", 3600.0)
    use(progress_bar(3, "fast work", quick=True))
    assert err.getvalue() == ""


def test_parallel_trainer_uses_the_same_marker():
    from miaudit.train import parallel

    assert parallel.NESTED_ENV == progress.NESTED_ENV


def _digits(n=300):
    data = load_digits()
    return (data.data[:n] / 16.0).astype(np.float32), data.target[:n].astype(np.int64)


MLP = Recipe(architecture="mlp", arch_params={"hidden": 16}, epochs=2, batch_size=64)
SETS = [np.arange(0, 100), np.arange(100, 200), np.arange(50, 150)]


def test_stacked_training_shows_the_stack_and_its_epochs(tty):
    err = tty()
    x, y = _digits()
    train_models(MLP, x, y, SETS, [0, 1, 2], workers=1)
    text = err.getvalue()
    assert "training 3 models (stacked)" in text and "/2 [" in text and "epoch" in text


def test_several_stacks_show_models_done(tty):
    err = tty()
    x, y = _digits()
    train_models(MLP, x, y, SETS, [0, 1, 2], workers=1, max_stack=2)
    text = err.getvalue()
    assert "training 3 models:" in text and "/3 [" in text and "model/s" in text
    assert "training 2 models (stacked)" in text and "training 1 model (stacked)" in text


def test_one_by_one_training_shows_each_models_epochs(tty):
    err = tty()
    x, y = _digits()
    dropout = MLP.replace(arch_params={"hidden": 16, "dropout": 0.1})  # cannot stack
    train_models(dropout, x, y, SETS[:2], [0, 1], workers=1)
    text = err.getvalue()
    assert "training 2 models" in text and "model 1/2" in text and "model 2/2" in text


def test_deep_bars_follow_the_switch_and_change_no_number(tty):
    err = tty()
    rng = np.random.default_rng(0)
    scores, members = rng.normal(size=2000), rng.random(2000) < 0.5
    shown = metrics.evaluate(scores, members, n_bootstrap=50)  # too quick for a bar of its own
    features, labels = rng.normal(size=(200, 3)), (rng.random(200) < 0.5).astype(float)
    scorer = train_scorer(features, labels, hidden=(8,), dropout=(), epochs=3, desc="my scorer")
    assert "my scorer" in err.getvalue()
    logits = rng.normal(size=(2, 50, 1, 10)).astype(np.float32)
    StatisticCache(logits, rng.integers(0, 10, 50)).get("loss")
    assert "statistics of 2 models" in err.getvalue()
    err.seek(0)
    err.truncate()
    with quiet():
        hidden = metrics.evaluate(scores, members, n_bootstrap=50)
        again = train_scorer(features, labels, hidden=(8,), dropout=(), epochs=3)
        StatisticCache(logits, rng.integers(0, 10, 50)).get("loss")
    assert err.getvalue() == ""
    assert shown == hidden  # the bar is display only
    np.testing.assert_array_equal(scorer.logit(features), again.logit(features))


def _run_config(tmp_path, cache):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tiny", "seed": 1, "dataset": {"name": "digits"},
        "split": {"audit": 200, "public": 200, "population": 100},
        "design": "offline", "models": 3,
        "recipe": {"architecture": "mlp", "epochs": 3, "batch_size": 64},
        "signals": {"queries": ["plain"], "grad_norm": False},
        "attacks": ["loss", "calibrated-loss"], "metrics": {"bootstrap": 20},
        "output": str(tmp_path / "run"), "cache_dir": str(cache),
    }))
    return str(path)


def test_quiet_cli_run_draws_no_bar_on_a_terminal(tmp_path, tty, capsys):
    err = tty()
    assert main(["run", _run_config(tmp_path, tmp_path / "quiet"), "--quiet"]) == 0
    assert err.getvalue() == ""
    assert progress_on()  # main restores the switch
    # The same run without --quiet on the same terminal does draw bars: the check above means
    # something.
    assert main(["run", _run_config(tmp_path, tmp_path / "loud")]) == 0
    text = err.getvalue()
    assert "training 3 models (stacked)" in text and "attacks" in text
