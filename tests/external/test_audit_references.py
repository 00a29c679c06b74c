"""Reference models' notes: the fewer-rows warning is returned once, for the caller to show."""

import logging
from types import SimpleNamespace

import numpy as np

from miaudit.external.audit_config import audit_config
from miaudit.external.references import reference_rows


def test_the_fewer_rows_warning_is_returned_not_logged(caplog):
    """It used to be logged ("WARNING miaudit...: WARNING: ...") as well as returned (shown as
    a note and a verdict caveat): now only returned, without a "WARNING:" prefix."""
    cfg = audit_config({"model": {"outputs": "o.npz"},
                        "data": {"dataset": "digits", "members": "m.txt"},
                        "references": {"allow_fewer_rows": True}})
    data = SimpleNamespace(members=np.ones(300, bool), n_pool=239, n_population=60)
    with caplog.at_level(logging.DEBUG):
        size, notes = reference_rows(cfg, data)
    assert size == 119 and caplog.records == []
    assert notes == [
        "reference models trained on 119 rows each, the target on 300 (the public pool has "
        "only 239 rows; accepted with references.allow_fewer_rows): reference-based attacks "
        "likely understate the leak."]
