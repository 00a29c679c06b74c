"""Error types. Every error says what is wrong and how to fix it."""


class MiauditError(Exception):
    """Base class for every error miaudit raises on purpose (bad input, bad config, ...)."""


class ConfigError(MiauditError):
    """A run configuration is invalid (unknown key, wrong type, impossible value)."""


class DataError(MiauditError):
    """A dataset cannot be loaded or is malformed."""


class BankError(MiauditError):
    """A signal bank is malformed (shapes, NaN logits, labels out of range, ...)."""


class AttackError(MiauditError):
    """An attack cannot run on the given bank (missing references, channel, ...)."""


class ParamError(ConfigError, AttackError):
    """An attack parameter is unknown or has an invalid value (a config error, found before
    any work; also an AttackError, as `run_attack` raised for unknown parameters before)."""


class CacheError(MiauditError):
    """A cache entry is corrupt or unreadable."""
