"""Configuration: the run config (:mod:`miaudit.config.run`, ``RunConfig``) and the sections
it shares with the audit's config (:mod:`miaudit.config.sections`). Everything public of both
is importable from ``miaudit.config``."""

from miaudit.config.recipes import REFERENCE_KEYWORDS, Recipes, recipe_fields, resolve_recipes
from miaudit.config.run import (
    RUN_RENAMED,
    RunConfig,
    apply_renamed,
    build_config,
    check_attacks_fit,
    check_run,
    check_white_box_target,
    config_from_dict,
    dump_config,
    load_config,
    read_yaml,
)
from miaudit.config.sections import (
    AUTO,
    DEFAULT_ATTACKS,
    GRADIENT_KIND,
    WHITE_BOX_THREAT_MODELS,
    CanariesConfig,
    CheckpointsConfig,
    ComputeConfig,
    DatasetConfig,
    ForgettingConfig,
    MetricsConfig,
    SignalsConfig,
    SplitConfig,
    check_alpha,
    check_delta,
    check_signals,
    compute_section,
    default_queries,
    identity_config,
    resolve_grad_norm,
    resolve_queries,
    split_names,
)

__all__ = [
    "AUTO", "DEFAULT_ATTACKS", "GRADIENT_KIND", "REFERENCE_KEYWORDS", "RUN_RENAMED",
    "WHITE_BOX_THREAT_MODELS", "CanariesConfig", "CheckpointsConfig", "ComputeConfig",
    "DatasetConfig", "ForgettingConfig", "MetricsConfig", "Recipes", "RunConfig",
    "SignalsConfig", "SplitConfig", "apply_renamed", "build_config", "check_alpha",
    "check_attacks_fit", "check_delta", "check_run", "check_signals", "check_white_box_target",
    "compute_section", "config_from_dict", "default_queries", "dump_config", "identity_config",
    "load_config", "read_yaml", "recipe_fields", "resolve_grad_norm", "resolve_queries",
    "resolve_recipes", "split_names",
]
