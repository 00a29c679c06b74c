"""The content cache of trained models: keys that move with the code (the entries and the
records beside them: :mod:`miaudit.train.model_cache`, :mod:`miaudit.train.gradient_records`;
what a cache holds and its pruning: :mod:`miaudit.cli.cache_admin`, the `miaudit cache`
command's, which reads every layer's caches)."""
