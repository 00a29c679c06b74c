"""miaudit: measure how much a trained model leaks about its training data.

The Python API (:mod:`miaudit.api`; each returns an
:class:`~miaudit.records.outcomes.AuditResult`)::

    miaudit.attack(bank, target=0, attacks=None)           # score attacks on a bank.npz
    miaudit.run(config, out=None)                          # a configured audit (miaudit run)
    miaudit.audit(model=..., data=..., members=...)        # audit your own model (miaudit audit)
    miaudit.strongest(result)                              # the attack the report stars

They are plain functions, typed (the package ships ``py.typed``). The code behind
``miaudit audit`` is the subpackage :mod:`miaudit.external` (a model trained outside miaudit).
Importing miaudit is cheap: torch, the pipeline and pandas load when a function runs.
"""

from miaudit.api import attack, audit, ranked, run, strongest
from miaudit.version import __version__

__all__ = ["__version__", "attack", "audit", "ranked", "run", "strongest"]
