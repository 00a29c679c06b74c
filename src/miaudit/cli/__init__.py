"""The `miaudit` command line: thin parsers over the Python API (:mod:`miaudit.api`).

``main`` is in :mod:`miaudit.cli.main`; one module per command family beside it.
"""

from miaudit.cli.main import main

__all__ = ["main"]
