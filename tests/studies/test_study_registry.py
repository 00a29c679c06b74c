"""A study is one `Study(...)`, checked when it is made and registered under its name."""

from __future__ import annotations

import pytest

from miaudit.studies.registry import SIZES, Study, list_studies, register_study
from miaudit.studies.sweep import Cell, StudyError


def _cells(config: dict) -> list[Cell]:
    return [Cell("one", {})]


def _work(cell: Cell) -> list[dict]:
    return [{}]


def _summarize(table, study_dir) -> None:
    return None


def _study(**changes) -> Study:
    fields = dict(name="registry-test", description="d",
                  configs={"cpu": {"x": 1}, "paper": {"x": 2}}, cells=_cells, work=_work,
                  summarize=_summarize)  # fmt: skip
    return Study(**{**fields, **changes})


def test_every_built_in_study_is_a_study_with_both_sizes_and_a_description():
    studies = list_studies()
    assert len(studies) == 9
    for study in studies:
        assert isinstance(study, Study) and study.description
        assert set(study.configs) == set(SIZES)


@pytest.mark.parametrize(("changes", "match"), [
    ({"configs": {"cpu": {}}}, r"must declare configs \('cpu', 'paper'\), got \['cpu'\]"),
    ({"name": ""}, "name must be a non-empty string"),
    ({"cells": None}, "cells must be a function"),
    ({"summarize": "write"}, "summarize must be a function"),
])
def test_a_malformed_study_is_refused_on_construction(changes, match):
    with pytest.raises(StudyError, match=match):
        _study(**changes)


def test_work_must_be_importable_by_worker_processes():
    def local(cell):
        return []

    with pytest.raises(StudyError, match="work must be a module-level function"):
        register_study(_study(name="registry-test-local", work=local))


def test_a_study_keeps_its_own_copy_of_the_configs():
    configs = {"cpu": {"x": 1}, "paper": {"x": 2}}
    study = _study(configs=configs)
    configs["cpu"]["x"] = 99
    assert study.configs["cpu"] == {"x": 1}


def test_registering_twice_or_a_non_study_is_refused():
    study = _study(name="registry-test-once")
    assert register_study(study) is study
    with pytest.raises(ValueError, match="study 'registry-test-once' is already registered"):
        register_study(_study(name="registry-test-once"))
    with pytest.raises(StudyError, match="register_study takes a Study"):
        register_study(type("Old", (), {}))
