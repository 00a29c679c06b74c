"""The content cache of trained models: keys that move with the code and the records kept
beside them (what a cache holds and its pruning: :mod:`miaudit.cli.cache_admin`, the `miaudit
cache` command's, which reads every layer's caches)."""
