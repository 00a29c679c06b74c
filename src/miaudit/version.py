"""The package version, in a module of its own so that any layer can record it (cache
entries, reference-model records) without importing the package's API."""

__version__ = "0.1.0"
