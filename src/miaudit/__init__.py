"""miaudit: measure how much a trained model leaks about its training data."""

__version__ = "0.1.0"
