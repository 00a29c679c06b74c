"""miaudit: measure how much a trained model leaks about its training data.

The Python API (:mod:`miaudit.api`; each returns an :class:`~miaudit.results.AuditResult`)::

    miaudit.attack(bank, target=0, attacks=None)           # score attacks on a bank.npz
    miaudit.run(config, out=None)                          # a configured audit (miaudit run)
    miaudit.audit(model=..., data=..., members=...)        # audit your own model (miaudit audit)
    miaudit.strongest(result)                              # the attack the report stars

Importing miaudit is cheap: torch, the pipeline and pandas load when a function runs.
"""

import types as _types

from miaudit import audit as _audit_package  # noqa: E402  (a docstring: cheap)
from miaudit.api import attack, ranked, run, strongest  # noqa: E402
from miaudit.api import audit as _audit_function  # noqa: E402
from miaudit.version import __version__  # noqa: E402


class _CallableAuditPackage(_types.ModuleType):
    """``miaudit.audit`` is both the subpackage behind ``miaudit audit`` and the API function.

    Binding a function to the name would not last: importing any ``miaudit.audit.*`` module
    sets the package back as the attribute, and ``import miaudit.audit.run as r`` would find
    the function instead of the package. So the package itself is made callable."""

    def __call__(self, *args: object, **kwargs: object) -> object:
        return _audit_function(*args, **kwargs)

    @property
    def __signature__(self) -> object:  # help() and notebooks show the function's signature
        import inspect

        return inspect.signature(_audit_function)


_audit_package.__class__ = _CallableAuditPackage
audit = _audit_package

__all__ = ["__version__", "attack", "audit", "ranked", "run", "strongest"]
