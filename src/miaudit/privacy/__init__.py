"""Empirical privacy: ε lower bounds from membership attacks (docs/algorithms.md §16).

- :mod:`~miaudit.privacy.bounds` — the threshold-attack bound with Clopper–Pearson confidence
  (Jagielski et al. 2020; Nasr et al. 2021), τ chosen on samples disjoint from the counted ones;
- :mod:`~miaudit.privacy.one_run` — one-run auditing with randomly included canaries (Steinke,
  Nasr & Jagielski 2023), pure ε and δ-corrected;
- :mod:`~miaudit.privacy.gaussian_dp` — a μ-GDP lower bound and its ε at δ (Nasr et al. 2023,
  "Tight Auditing"), an estimate that assumes a Gaussian trade-off curve;
- :mod:`~miaudit.privacy.fdp_one_run` — one-run auditing of μ-GDP from the canaries' guesses
  (Mahloujifar, Melis & Chaudhuri 2025, "Auditing f-Differential Privacy in One Run").

A pure library: numbers in, dataclasses out (``to_dict()`` for metrics.json); it reads no bank.
"""

from miaudit.privacy.bounds import (
    EpsilonBound,
    choose_threshold,
    clopper_pearson_upper,
    epsilon_array,
    epsilon_from_counts,
    epsilon_lower_bound,
    split_halves,
)
from miaudit.privacy.fdp_one_run import (
    FDPOneRunBound,
    fdp_one_run_mu,
    fdp_one_run_mu_from_counts,
    fdp_one_run_rejects,
)
from miaudit.privacy.gaussian_dp import (
    GaussianDPBound,
    gaussian_delta,
    gaussian_dp_from_counts,
    gaussian_dp_lower_bound,
    gaussian_epsilon,
    mu_array,
    mu_from_rates,
)
from miaudit.privacy.one_run import (
    OneRunBound,
    min_canaries,
    min_guesses,
    one_run_epsilon,
    one_run_epsilon_from_counts,
    one_run_p_value,
)

__all__ = [
    "EpsilonBound",
    "clopper_pearson_upper",
    "epsilon_array",
    "epsilon_from_counts",
    "choose_threshold",
    "epsilon_lower_bound",
    "split_halves",
    "OneRunBound",
    "one_run_p_value",
    "one_run_epsilon_from_counts",
    "one_run_epsilon",
    "min_guesses",
    "min_canaries",
    "GaussianDPBound",
    "gaussian_delta",
    "gaussian_epsilon",
    "mu_array",
    "mu_from_rates",
    "gaussian_dp_from_counts",
    "gaussian_dp_lower_bound",
    "FDPOneRunBound",
    "fdp_one_run_rejects",
    "fdp_one_run_mu_from_counts",
    "fdp_one_run_mu",
]
