"""The `preprocessing` option every loader takes: standard (the default, unchanged)
or raw (the values as the source ships them), stated in the registry and on the dataset."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from miaudit.cli.main import main
from miaudit.data import Dataset, list_datasets, load_dataset, registry
from miaudit.errors import DataError

# load_dataset("digits").fingerprint() before the option existed: model cache keys hash it, so
# the default must keep it or every cached model would be trained again
DIGITS_FINGERPRINT = "26e045f9ab88a290876e3bf65e6f1731ced24533bb656d2a2bda2adff9a97c89"


def test_digits_raw_and_standard_values():
    source = load_digits().images.astype(np.float32)[:, None]
    standard = load_dataset("digits")
    raw = load_dataset("digits", preprocessing="raw")
    np.testing.assert_array_equal(raw.features, source)  # 0..16, as sklearn ships them
    assert raw.features.max() == 16.0 and np.array_equal(raw.features, np.round(raw.features))
    np.testing.assert_array_equal(standard.features, source / 16.0)
    np.testing.assert_array_equal(raw.labels, standard.labels)
    assert standard.preprocessing == "standard: pixels / 16 -> [0, 1]"
    assert raw.preprocessing.startswith("raw: integer pixels 0..16")
    assert raw.notes == "raw pixels 0..16 (not scaled)"


def test_default_preprocessing_keeps_the_fingerprint():
    default = load_dataset("digits")
    explicit = load_dataset("digits", preprocessing="standard")
    assert default.fingerprint() == explicit.fingerprint() == DIGITS_FINGERPRINT
    assert load_dataset("digits", preprocessing="raw").fingerprint() != DIGITS_FINGERPRINT


def test_unknown_preprocessing_names_the_valid_values():
    with pytest.raises(DataError, match=r"preprocessing must be one of 'standard', 'raw', "
                                        r"got 'scaled'"):
        load_dataset("digits", preprocessing="scaled")


def test_absent_dataset_checks_the_value_before_the_files(tmp_path):
    with pytest.raises(DataError, match="must be one of"):
        load_dataset("mnist", data_dir=tmp_path, preprocessing="Raw")


@pytest.fixture
def private_registry(monkeypatch):
    """Registrations made in a test vanish after it."""
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())


def _toy(folder, **_options) -> Dataset:
    return Dataset("toy", np.ones((4, 2)), np.array([0, 1, 0, 1]), 2, "tabular")


def test_raw_refused_with_the_reason(private_registry):
    registry.register_dataset(
        "toy-refuses", kind="tabular", description="toy", listed=False,
        preprocessing={"standard": "columns scaled by a fitted pipeline"},
        refused={"raw": "the source values were not kept"},
    )(_toy)
    with pytest.raises(DataError) as err:
        load_dataset("toy-refuses", preprocessing="raw")
    message = str(err.value)
    assert "cannot offer preprocessing 'raw': the source values were not kept" in message
    assert "'standard': columns scaled by a fitted pipeline" in message
    assert load_dataset("toy-refuses").preprocessing == (
        "standard: columns scaled by a fitted pipeline")


def test_a_loader_declaring_nothing_accepts_only_standard(private_registry):
    seen = []

    def legacy(folder):  # takes no preprocessing argument: it must never receive one
        seen.append(folder)
        return _toy(folder)

    registry.register_dataset("toy-legacy", kind="tabular", description="toy",
                              listed=False)(legacy)
    assert load_dataset("toy-legacy", preprocessing="standard").preprocessing.startswith(
        "standard: the loader's own")
    with pytest.raises(DataError, match="cannot offer preprocessing 'raw': its loader does not "
                                        "declare a raw form"):
        load_dataset("toy-legacy", preprocessing="raw")
    assert len(seen) == 1


def test_registration_needs_a_standard_description(private_registry):
    with pytest.raises(ValueError, match="must describe 'standard'"):
        registry.register_dataset("toy-bad", kind="tabular", description="toy",
                                  preprocessing={"raw": "as shipped"})


def test_every_dataset_states_both_forms(tmp_path):
    infos = list_datasets(tmp_path)
    for info in infos:
        assert set(info.preprocessing) == {"standard", "raw"}, info.name
        assert all(info.preprocessing.values()) and info.refused == {}
        assert info.options["preprocessing"] == "standard"
    words = {i.name: i.preprocessing for i in infos}
    assert words["digits"]["standard"] == "pixels / 16 -> [0, 1]"
    assert words["mnist"]["standard"].startswith("pixels / 255")
    assert "z-scored" in words["adult"]["standard"] and "unscaled" in words["adult"]["raw"]


def test_data_list_prints_preprocessing_and_options(tmp_path, capsys):
    assert main(["data", "list", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    block = out[out.index("digits "):].split("\n")[:6]
    assert "    preprocessing standard (default): pixels / 16 -> [0, 1]" in block
    assert any(line.startswith("    preprocessing raw: integer pixels 0..16") for line in block)
    assert "    options: preprocessing='standard'" in block
    assert "options: label='fine', preprocessing='standard'" in out  # cifar100
    assert "--preprocessing standard|raw" in out and "fed as given" in out
