"""Null calibration: every attack, design and entry point on audits with nothing to find.

Not run in CI (tests/null is the fast version). Usage, from the repository root:

    nice -n 5 .venv/bin/python bench/null_calibration.py run      # every part, then the report
    .venv/bin/python bench/null_calibration.py run --quick         # a 1-2 minute smoke
    .venv/bin/python bench/null_calibration.py run --parts synthetic sequence --seeds 4
    .venv/bin/python bench/null_calibration.py report              # the tables, from records

Each audit is one JSON line of ``records.jsonl`` (written as soon as it is done; a rerun skips
the audits already there, so an interrupted run resumes). The parts:

- ``synthetic``: classifier null banks (:mod:`miaudit.null_calibration`) of every design in
  ``DESIGNS`` x ``VARIANTS`` x seeds (each variant its own bank seeds, seed + 1000 k, so no
  two audits share a draw; models 6..16 with the seed; 600 audit rows, so about
  300 non-members and 3 expected false positives at 1% FPR, 0.3 at 0.1%), each evaluated by
  ``evaluate_bank`` (metrics with bootstrap CIs, eps/mu bounds, the checks) with every
  attack that can run, at its default parameters (scorers included: rapid and rapid-hybrid
  60 epochs, shokri 50, qmia 100 boosting rounds);
- ``sequence``: causal-LM null banks, designs offline/online/independent x
  ``SEQUENCE_VARIANTS`` (untrained, unseen-members, base-as-target) x seeds, the same way;
- ``runs``: ``miaudit.run`` on digits with a target that learnt nothing (lr 1e-9, one epoch),
  online with 4/8/16 models, paired-halves with 6, offline with 4;
- ``audits``: ``miaudit.audit`` of a torch MLP (2-4 references) and of a scikit-learn MLP
  (the estimator file with 2-4 reference clones trained on the 897 other rows, the same file
  with no references, and its outputs as an .npz), each model trained here on 300 digits
  rows and audited with "members" a random half of 600 rows it never saw (8 seeds: the four
  audits of one seed share the model and the split);
- ``attack``: ``miaudit.attack`` on saved LiRA-keep null banks (the target the last model);
- ``study``: the generalization study's many-model bank (paired halves, 8 models, every model
  in turn the target, the paper config's attacks) as ``evaluate_bank`` on untrained null
  banks (no model learnt anything, so every model is a null target);
- ``design-check``: the design check alone (no attack) on 150 independent untrained banks
  per design with references on the audit rows (online, paired-halves, lira-keep,
  independent; 8 models): its false alarms on independent draws;
- ``shuffled``: a trained digits bank (the demo config, offline) and one online (8 models),
  the target's membership shuffled within the audit rows (member count kept), every attack
  the bank supports (``miaudit.attack``). Where the attacks' scores do not depend on the
  target's membership (checked on the first two shuffles: every attack's scores identical,
  and the second shuffle's record the same with cached attack runs as without), the attack
  runs are cached and only metrics, bounds and verdict are recomputed per shuffle.

The report (``report``) gives, per attack and design, the null false-positive rate at 1% and
0.1% FPR: the share of audits whose TPR there is significant at one-sided 0.05 by its exact
null p-value (``metrics.tpr_null_p_value``; uncorrected, per attack: a calibrated attack
gives <= 5%, less where the law is discrete), with its Clopper-Pearson 95% interval; the AUC
z-scores' mean and sd per attack; per entry point and design the rate of verdicts measuring
a leak (``assess(result).measured`` exposed / average-case: "Exposed" / "Warning sign" before
the checks) and of best eps > 0 / mu > 0; the shuffled banks' rates. It writes summary.md.

Threads: OMP_NUM_THREADS defaults to 1 here (set before numpy, scikit-learn and torch load;
``--threads`` changes it). On this 2-core machine scikit-learn's OpenMP boosting (qmia, and
rapid-hybrid's QMIA feature in every shadow view) took 5-7x longer with 2 threads while
another job ran, for the same scores.
"""

from __future__ import annotations

import argparse
import os
import sys

if __name__ == "__main__":  # before numpy, scikit-learn or torch load (see the docstring)
    _threads = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--threads"),
                    "1")
    os.environ.setdefault("OMP_NUM_THREADS", _threads)
    os.environ.setdefault("MKL_NUM_THREADS", _threads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", _threads)

import contextlib
import datetime as dt
import json
import math
import shlex
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "null_calibration"
WORK = ROOT / "runs" / "null_calibration"
PARTS = ("synthetic", "sequence", "runs", "audits", "attack", "study", "shuffled",
         "design-check")
DESIGN_CHECK_DESIGNS = ("online", "paired-halves", "lira-keep", "independent")
FPRS = ("0.01", "0.001")
ALPHA = 0.05  # the per-attack, one-sided level of the null false-positive rate
LEAK_LEVELS = ("exposed", "average-case")
SEQUENCE_DESIGNS = ("offline", "online", "independent")
# synthetic banks: 600 audit rows (about 300 non-members: 3 expected false positives at 1%)
AUDIT, PUBLIC, POPULATION = 600, 600, 200
RUN_ATTACKS = ("lira-online", "lira-offline", "rmia", "rmia-online", "rapid", "rapid-hybrid",
               "shokri", "qmia", "attack-r", "calibrated-loss")
RUN_SPLIT = {"audit": 800, "public": 700, "population": 297}  # digits: 1,797 rows
RECIPE_NULL = {"architecture": "mlp", "lr": 1.0e-9, "epochs": 1, "batch_size": 64}
VERIFY_EVERY = 10  # shuffled banks: with cached attack runs, every 10th shuffle runs them anew
STUDY_ATTACKS = ("lira-online", "lira-online-fixed-variance", "lira-offline-fixed-variance",
                 "loss")

NETS = '''
from torch import nn


class Net(nn.Module):
    """A small MLP on 1x8x8 digits (as tests/user_model_fixtures.py)."""

    def __init__(self, hidden: int = 32, classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(),
                                  nn.Linear(hidden, classes))

    def forward(self, x):
        return self.body(x)
'''


# --- small helpers -----------------------------------------------------------------------


def load1() -> float:
    """The 1-minute load average."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def now() -> str:
    return dt.datetime.now().isoformat(timespec="seconds")


def clean(value: Any) -> Any:
    """JSON-safe: numpy scalars and arrays as Python values (floats to 6 significant
    digits), NaN and inf as None."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return clean(value.tolist())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)  # 6 significant digits: the records stay a few MB
        return float(f"{value:.6g}") if math.isfinite(value) else None
    return value


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact two-sided interval of a binomial rate k / n."""
    from scipy.stats import beta

    if n == 0:
        return (float("nan"), float("nan"))
    a = (1 - level) / 2
    low = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return low, high


class Records:
    """records.jsonl: one audit a line, written when done; ``done`` the keys already there."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.done: set[str] = set()
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    self.done.add(json.loads(line)["key"])

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(clean(record)) + "\n")
        self.done.add(record["key"])


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- one audit's record --------------------------------------------------------------------


def outcome_record(outcome: Any) -> dict[str, Any]:
    """One attack: AUC (its z and one-sided null p-values), TPR at 1% and 0.1% FPR with their
    exact null p-values, and its own eps / mu lower bounds (each at the run's alpha)."""
    from miaudit import metrics

    met = outcome.metrics
    n1, n0 = int(met.n_members or 0), int(met.n_nonmembers or 0)
    auc = met.auc
    sd = math.sqrt((n1 + n0 + 1) / (12.0 * n1 * n0)) if n1 and n0 else float("nan")
    out: dict[str, Any] = {
        "auc": auc, "auc_ci": met.auc_ci, "n1": n1, "n0": n0, "unscorable": met.n_unscorable,
        "z": None if auc is None else (auc - 0.5) / sd,
        "auc_p": None if auc is None else metrics.auc_null_p_value(auc, n1, n0),
        "auc_p_low": None if auc is None else metrics.auc_null_p_value(1 - auc, n1, n0),
        "tpr": {}, "tpr_ci": {}, "tpr_p": {},
    }
    for key in FPRS:
        figure = met.find_tpr(key)
        if figure is None:
            continue
        out["tpr"][key] = figure.tpr
        out["tpr_ci"][key] = figure.ci
        out["tpr_p"][key] = metrics.tpr_null_p_value(figure.tpr, n1, n0, float(key))
    for name, record in (("eps", met.epsilon_lower_bound), ("mu", met.gaussian_dp_lower_bound),
                         ("canary_eps", met.canary_epsilon_lower_bound),
                         ("canary_mu", met.canary_gaussian_dp_lower_bound)):
        if record is not None and record.bound is not None:
            out[name] = record.value
            alpha = getattr(record.bound, "alpha", None)
            if alpha is not None and abs(alpha - ALPHA) > 1e-12:  # else the run's 0.05
                out[f"{name}_alpha"] = alpha
    if met.one_run is not None and met.one_run.bound is not None:
        out["one_run_eps"] = met.one_run.epsilon
    return out


def audit_rows_audit(result: Any) -> Any:
    """The run's privacy audit over its bounds on the audit rows only (the canary and
    one-run bounds left out), Bonferroni over those: the null's figure where a bank has
    canaries, whose membership is not the null's (in ``unseen-members`` the target learnt
    its canaries, a real leak the canary bounds rightly certify)."""
    import dataclasses

    from miaudit.privacy.best_bound import privacy_audit

    privacy = (result.meta or {}).get("privacy_audit")
    if privacy is None:
        return None
    stripped = [dataclasses.replace(o, metrics=dataclasses.replace(
        o.metrics, canary_epsilon_lower_bound=None, canary_gaussian_dp_lower_bound=None,
        one_run=None)) for o in result.outcomes]
    return privacy_audit(stripped, privacy)


def audit_record(result: Any, **ident: Any) -> dict[str, Any]:
    """One audit: every attack's figures, the verdict (measured level before the checks and
    the level), the best (Bonferroni) eps and mu bounds, the design check."""
    from miaudit.verdict.strength import assess

    found = assess(result)
    meta = result.meta or {}
    privacy = meta.get("privacy_audit")
    best = None if privacy is None else privacy.best
    best_mu = None if privacy is None else privacy.best_mu
    checks = meta.get("checks") or {}
    members = np.asarray(result.members, dtype=bool)
    verdict = meta.get("verdict")
    rows = audit_rows_audit(result) if any(
        o.metrics.canary_epsilon_lower_bound is not None or o.metrics.one_run is not None
        for o in result.outcomes) else privacy
    rows_best = None if rows is None else rows.best
    rows_mu = None if rows is None else rows.best_mu
    return {
        **ident,
        "n_members": int(members.sum()), "n_nonmembers": int((~members).sum()),
        "attacks": {o.name: outcome_record(o) for o in result.outcomes},
        "skipped": sorted(meta.get("skipped") or {}),  # names (what they lack: --help)
        "measured": found.measured, "level": found.level,
        "reasons": [r.code for r in found.reasons], "verdict_attack": found.attack,
        "verdict_key": found.key, "verdict_p": found.p_value,
        "release_level": getattr(verdict, "level", None),
        "best_eps": None if best is None else best.epsilon,
        "best_eps_attack": None if best is None else best.attack,
        "best_eps_kind": None if best is None else best.kind,
        "bounds_compared": None if privacy is None else privacy.bounds_compared,
        "best_mu": None if best_mu is None else best_mu.mu,
        "best_mu_attack": None if best_mu is None else best_mu.attack,
        "mu_bounds_compared": None if privacy is None else privacy.mu_bounds_compared,
        "audit_rows_best_eps": None if rows_best is None else rows_best.epsilon,
        "audit_rows_best_mu": None if rows_mu is None else rows_mu.mu,
        "has_canaries": rows is not privacy,
        "design_check": checks.get("design"),
        "target_fit": checks.get("target_fit"),
    }


@contextlib.contextmanager
def timed(record: dict[str, Any]) -> Iterator[None]:
    record["load_before"] = load1()
    record["started"] = now()
    start = time.perf_counter()
    yield
    record["seconds"] = round(time.perf_counter() - start, 2)
    record["load_after"] = load1()


# --- evaluate_bank on a null bank, every attack that can run -------------------------------


def evaluate_null(bank: Any, target: int, names: list[str], seed: int
                  ) -> tuple[Any, dict[str, str]]:  # fmt: skip
    """``evaluate_bank`` with ``names``, minus those that refuse this bank at run time
    (AttackError: e.g. RMIA's temperature on a sequence bank's derived logits): the cheap
    ones are tried first, a scorer only if the evaluation fails. Returns (result, skipped)."""
    from miaudit.attacks import TargetView, get_attack, run_attack
    from miaudit.errors import AttackError
    from miaudit.pipeline.evaluate import evaluate_bank

    view = TargetView.of(bank, target)
    skipped: dict[str, str] = {}
    for name in names:
        if "epochs" in get_attack(name).defaults:
            continue
        try:
            run_attack(name, view)
        except AttackError as exc:
            skipped[name] = str(exc)[:300]
    kept = [n for n in names if n not in skipped]
    try:
        result = evaluate_bank(bank, target, kept, progress=False, seed=seed)
    except AttackError:
        for name in [n for n in kept if "epochs" in get_attack(n).defaults]:
            try:
                run_attack(name, view)
            except AttackError as exc:
                skipped[name] = str(exc)[:300]
        kept = [n for n in names if n not in skipped]
        result = evaluate_bank(bank, target, kept, progress=False, seed=seed)
    return result, skipped


def bank_seed(seed: int, variant: str, variants: tuple[str, ...]) -> int:
    """The bank's seed: the replicate ``seed`` for the first variant, ``seed + 1000 k`` for
    the k-th, so that no two variants share a membership draw or noise (the same seed in both
    would make their audits correlated replicates)."""
    return seed + 1000 * variants.index(variant)


def models_for(design: str, seed: int) -> int:
    """6..16 models with the seed (seeds 0-9: 6, 7, ..., 14, 16); even for paired halves."""
    m = 6 + (seed * 10) // 9 if seed < 10 else 6 + seed % 11
    if design == "paired-halves" and m % 2:
        m += 1 if m < 16 else -1
    return m


# --- the parts -----------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.quick = args.quick
        self.out = Path(args.out)
        self.work = Path(args.work)
        self.records = Records(self.out / "records.jsonl")
        self.counts: dict[str, int] = {}

    def log(self, text: str) -> None:
        print(f"[{now()} load {load1():.2f}] {text}", flush=True)

    def do(self, key: str, part: str, fn: Callable[[], dict[str, Any]]) -> None:
        """Run one audit unless its key is in the records; write its record."""
        if key in self.records.done:
            return
        record: dict[str, Any] = {}
        with timed(record):
            body = fn()
        record = {"key": key, "part": part, **body, **record}
        self.records.write(record)
        self.counts[part] = self.counts.get(part, 0) + 1
        worst = min((min(a["tpr_p"].values()) for a in record["attacks"].values()
                     if a.get("tpr_p")), default=1.0)
        self.log(f"{key}: {record['measured']} / {record['level']}, best eps "
                 f"{record['best_eps']}, min TPR p {worst:.3g}, {record['seconds']} s")

    @property
    def seeds(self) -> range:
        return range(1 if self.quick else self.args.seeds)

    # synthetic banks

    def synthetic(self) -> None:
        from miaudit.null_calibration import DESIGNS, VARIANTS, classifier_bank, runnable

        designs = ("offline", "online") if self.quick else DESIGNS
        variants = ("unseen-members",) if self.quick else VARIANTS
        for seed in self.seeds:
            for design in designs:
                for variant in variants:
                    models = models_for(design, seed)
                    seed_v = bank_seed(seed, variant, VARIANTS)
                    key = f"synthetic|{design}|{variant}|{seed_v}|{models}"

                    def one(design=design, variant=variant, seed=seed_v, models=models):
                        null = classifier_bank(design, variant, n_models=models, seed=seed,
                                               audit=AUDIT, public=PUBLIC,
                                               population=POPULATION)
                        result, skipped = evaluate_null(null.bank, null.target,
                                                        runnable(null), seed)
                        return audit_record(result, entry="evaluate_bank", bank="classifier",
                                            design=design, variant=variant, seed=seed,
                                            models=models, target=null.target,
                                            runtime_skipped=skipped)

                    self.do(key, "synthetic", one)

    def sequence(self) -> None:
        from miaudit.null_calibration import SEQUENCE_VARIANTS, runnable, sequence_bank

        designs = ("online",) if self.quick else SEQUENCE_DESIGNS
        variants = ("base-as-target",) if self.quick else SEQUENCE_VARIANTS
        for seed in self.seeds:
            for design in designs:
                for variant in variants:
                    models = models_for(design, seed)
                    seed_v = bank_seed(seed, variant, SEQUENCE_VARIANTS)
                    key = f"sequence|{design}|{variant}|{seed_v}|{models}"

                    def one(design=design, variant=variant, seed=seed_v, models=models):
                        null = sequence_bank(design, variant, n_models=models, seed=seed,
                                             audit=AUDIT, public=PUBLIC,
                                             population=POPULATION)
                        result, skipped = evaluate_null(null.bank, null.target,
                                                        runnable(null), seed)
                        return audit_record(result, entry="evaluate_bank", bank="sequence",
                                            design=design, variant=variant, seed=seed,
                                            models=models, target=null.target,
                                            runtime_skipped=skipped)

                    self.do(key, "sequence", one)

    # entry points on real models

    def runs(self) -> None:
        import miaudit
        from miaudit.config.sections import DEFAULT_ATTACKS
        from miaudit.null_calibration import classifier_bank, runnable

        plan = ([("online", 4, 0)] if self.quick else
                [("online", 4, s) for s in range(3)] + [("online", 8, s) for s in range(3)]
                + [("online", 16, s) for s in range(2)]
                + [("paired-halves", 6, s) for s in range(3)]
                + [("offline", 4, s) for s in range(3)])
        for design, models, seed in plan:
            key = f"runs|{design}|untrained|{seed}|{models}"

            def one(design=design, models=models, seed=seed, key=key):
                wanted = list(DEFAULT_ATTACKS) + [a for a in RUN_ATTACKS
                                                  if a not in DEFAULT_ATTACKS]
                if self.quick:
                    wanted = [a for a in wanted if a not in ("rapid", "rapid-hybrid", "shokri")]
                # what the design allows: Needs on a bank of the same membership
                shape = classifier_bank(design, "untrained", n_models=models, seed=seed,
                                        audit=RUN_SPLIT["audit"], public=RUN_SPLIT["public"],
                                        population=RUN_SPLIT["population"])
                attacks = runnable(shape, wanted)
                config = {"name": f"null-{design}-{models}-{seed}", "seed": seed,
                          "dataset": {"name": "digits"}, "split": dict(RUN_SPLIT),
                          "design": design, "models": models, "recipe": dict(RECIPE_NULL),
                          "attacks": attacks, "cache_dir": str(self.work / "cache")}
                result = miaudit.run(config, out=self.work / "runs" / key.replace("|", "_"),
                                     progress=False, overwrite=True)
                return audit_record(result, entry="run", bank="digits", design=design,
                                    variant="untrained (lr 1e-9)", seed=seed, models=models,
                                    target=result.meta.get("target"),
                                    not_allowed=[a for a in wanted if a not in attacks])

            self.do(key, "runs", one)

    def _user_models(self, seed: int) -> dict[str, Any]:
        """A torch MLP (safetensors) and a scikit-learn MLP (joblib) trained on 300 digits
        rows, and the 600 rows neither saw split at random into "members" / non-members."""
        import joblib
        import torch
        from safetensors.torch import save_file
        from sklearn.datasets import load_digits
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.neural_network import MLPClassifier
        from torch import nn

        folder = self.work / "user" / f"seed{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        (self.work / "user" / "nets.py").write_text(NETS)
        digits = load_digits()
        order = np.random.default_rng([seed, 33]).permutation(len(digits.target))
        train, unseen, public = order[:300], order[300:900], order[900:]
        members, nonmembers = np.sort(unseen[:300]), np.sort(unseen[300:])
        x = torch.tensor(digits.images[:, None] / 16.0, dtype=torch.float32)
        y = torch.tensor(digits.target)
        torch.manual_seed(seed)
        net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
        rows = torch.from_numpy(np.sort(train))
        for _ in range(150):  # full batch: it overfits its 300 rows
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[rows]), y[rows]).backward()
            opt.step()
        state = {f"body.{k}": v.contiguous() for k, v in net.state_dict().items()}
        save_file(state, str(folder / "model.safetensors"))
        flat = digits.data / 16.0
        mlp = MLPClassifier(hidden_layer_sizes=(32,), max_iter=300, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            mlp.fit(flat[np.sort(train)], digits.target[np.sort(train)])
        joblib.dump(mlp, folder / "mlp.joblib")
        with torch.no_grad():
            train_acc = float((net(x[rows]).argmax(1) == y[rows]).float().mean())
        return {"folder": folder, "members": members, "nonmembers": nonmembers,
                "public": np.sort(public), "flat": flat, "labels": digits.target,
                "mlp": mlp, "train_accuracy_torch": train_acc,
                "train_accuracy_sklearn": float(mlp.score(flat[train], digits.target[train]))}

    def audits(self) -> None:
        from sklearn.exceptions import ConvergenceWarning

        import miaudit

        # the user's estimator and its reference clones stop before converging (as intended)
        warnings.simplefilter("ignore", ConvergenceWarning)

        for seed in range(1 if self.quick else self.args.audit_seeds):
            cache: dict[str, Any] = {}

            def user(seed=seed, cache=cache):
                if "user" not in cache:
                    cache["user"] = self._user_models(seed)
                return cache["user"]

            references = 2 + seed % 3

            def torch_audit(seed=seed, references=references):
                u = user()
                name = f"audit-torch-{seed}"
                result = miaudit.audit(
                    f"{self.work / 'user' / 'nets.py'}:Net", "digits", members=u["members"],
                    nonmembers=u["nonmembers"], public_rows=u["public"],
                    references=references, weights=str(u["folder"] / "model.safetensors"),
                    recipe={"optimizer": "adam", "lr": 0.01, "epochs": 20, "batch_size": 64},
                    out=self.work / "audits" / name, progress=False, overwrite=True,
                    seed=seed, cache_dir=str(self.work / "cache"))
                return audit_record(result, entry="audit (torch module)", bank="digits",
                                    design=f"offline (audit, {references} references)",
                                    variant="unseen-members",
                                    seed=seed, models=references + 1, target=0,
                                    target_train_accuracy=u["train_accuracy_torch"])

            def estimator_audit(seed=seed, references=0):
                u = user()
                rows = np.union1d(u["members"], u["nonmembers"])
                data = u["folder"] / "audit.npz"
                np.savez(data, X=u["flat"][rows], y=u["labels"][rows],
                         member=np.isin(rows, u["members"]))
                # with references: clones of the estimator trained on the attacker's own
                # data, the 897 rows neither model saw nor the audit holds
                public = ((u["flat"][u["public"]], u["labels"][u["public"]]) if references
                          else None)
                result = miaudit.audit(
                    str(u["folder"] / "mlp.joblib"), str(data), public=public,
                    references=references, membership_column="member",
                    out=self.work / "audits" / f"audit-sk-{references}-{seed}",
                    progress=False, overwrite=True, seed=seed)
                return audit_record(result, entry="audit (sklearn estimator)", bank="digits",
                                    design=(f"offline (audit, {references} references)"
                                            if references else "no references (audit)"),
                                    variant="unseen-members", seed=seed,
                                    models=references + 1, target=0,
                                    target_train_accuracy=u["train_accuracy_sklearn"])

            def outputs_audit(seed=seed):
                u = user()
                rows = np.union1d(u["members"], u["nonmembers"])
                path = u["folder"] / "outputs.npz"
                np.savez(path, probabilities=u["mlp"].predict_proba(u["flat"][rows]),
                         index=rows)
                result = miaudit.audit(
                    str(path), "digits", members=u["members"], nonmembers=u["nonmembers"],
                    references=0, out=self.work / "audits" / f"audit-outputs-{seed}",
                    progress=False, overwrite=True, seed=seed)
                return audit_record(result, entry="audit (outputs .npz)", bank="digits",
                                    design="no references (audit)", variant="unseen-members",
                                    seed=seed, models=1, target=0,
                                    target_train_accuracy=u["train_accuracy_sklearn"])

            self.do(f"audits|torch|{seed}|{references}", "audits", torch_audit)
            self.do(f"audits|sklearn|{seed}|0", "audits", estimator_audit)
            self.do(f"audits|sklearn|{seed}|{references}", "audits",
                    lambda seed=seed, references=references: estimator_audit(seed, references))
            self.do(f"audits|outputs|{seed}", "audits", outputs_audit)

    def attack(self) -> None:
        import miaudit
        from miaudit.null_calibration import VARIANTS, classifier_bank

        plan = ([("unseen-members", 0)] if self.quick else
                [(v, s) for s in range(self.args.attack_seeds) for v in VARIANTS])
        for variant, replicate in plan:
            models = 8 + 2 * (replicate % 3)
            seed = bank_seed(replicate, variant, VARIANTS)
            key = f"attack|lira-keep|{variant}|{seed}|{models}"

            def one(variant=variant, seed=seed, models=models):
                null = classifier_bank("lira-keep", variant, n_models=models, seed=seed,
                                       audit=AUDIT, public=PUBLIC, population=POPULATION)
                path = self.work / "banks" / f"lira-keep-{variant}-{seed}.npz"
                path.parent.mkdir(parents=True, exist_ok=True)
                null.bank.save(path)
                result = miaudit.attack(path, target=null.target, progress=False, seed=seed)
                return audit_record(result, entry="attack (bank file)", bank="classifier",
                                    design="lira-keep", variant=variant, seed=seed,
                                    models=models, target=null.target)

            self.do(key, "attack", one)

    def study(self) -> None:
        from miaudit.null_calibration import classifier_bank
        from miaudit.pipeline.evaluate import evaluate_bank

        # untrained only: every model of the bank learnt nothing, so each is a null target
        # (in unseen-members only the bank's own target is; the others learnt their rows)
        variant = "untrained"
        for seed in range(1 if self.quick else self.args.study_seeds):
            null = None
            for target in range(2 if self.quick else 8):
                key = f"study|paired-halves|{variant}|{seed}|8|target{target}"
                if key in self.records.done:
                    continue
                if null is None:
                    null = classifier_bank("paired-halves", variant, n_models=8, seed=seed,
                                           audit=AUDIT, public=PUBLIC, population=POPULATION)

                def one(seed=seed, target=target, null=null):
                    result = evaluate_bank(null.bank, target, list(STUDY_ATTACKS),
                                           progress=False, seed=seed)
                    return audit_record(result, entry="study cell (many-model bank)",
                                        bank="classifier", design="paired-halves",
                                        variant=variant, seed=seed, models=8, target=target)

                self.do(key, "study", one)

    # shuffled-membership banks

    def _trained_bank(self, design: str) -> tuple[Any, int, dict[str, Any]]:
        from importlib import resources

        import miaudit
        from miaudit.signals import SignalBank

        try:
            import yaml
        except ImportError:  # pragma: no cover
            raise SystemExit("PyYAML is needed to read the demo config") from None
        demo = yaml.safe_load((resources.files("miaudit.experiments") / "configs"
                               / "demo.yaml").read_text())
        config = dict(demo)
        if design == "online":
            config.update(name="demo-online", design="online", models=8)
            config["split"] = {k: v for k, v in demo["split"].items() if k != "members"}
        if self.quick:
            config["recipe"] = {**config["recipe"], "epochs": 5}
            config["models"] = 6 if design == "online" else config["models"]
            config["name"] = config["name"] + "-quick"
        config["cache_dir"] = str(self.work / "cache")
        out = self.work / "shuffled" / config["name"]
        if not (out / "bank.npz").exists():
            result = miaudit.run(config, out=out, progress=False, overwrite=True)
            target = int(result.meta["target"])
        else:
            target = int(json.loads((out / "summary.json").read_text())["target"])
        return SignalBank.load(out / "bank.npz"), target, config

    def design_check(self) -> None:
        """The design check alone (no attack), on independent untrained null banks of the
        designs with references on the audit rows, 8 models, the bank's own target: its
        p-value should be uniform or larger (a study cell's 8 targets of one bank are not
        independent draws: the pair (t, r) is tested for target t and for target r)."""
        from miaudit.attacks import TargetView
        from miaudit.null_calibration import classifier_bank
        from miaudit.pipeline.design_check import design_check

        path = self.out / "design_check.jsonl"
        done = {r["key"] for r in read_jsonl(path)}
        n = 3 if self.quick else self.args.design_check_banks
        for design in DESIGN_CHECK_DESIGNS:
            rows = []
            for i in range(n):
                key = f"design-check|{design}|untrained|{5000 + i}|8"
                if key in done:
                    continue
                null = classifier_bank(design, "untrained", n_models=8, seed=5000 + i,
                                       audit=AUDIT, public=PUBLIC, population=POPULATION)
                view = TargetView.of(null.bank, null.target)
                members = null.bank.membership[null.target][null.bank.audit]
                rows.append({"key": key, "design": design, "seed": 5000 + i,
                             **design_check(view, members)})
            with path.open("a") as f:
                for row in rows:
                    f.write(json.dumps(clean(row)) + "\n")
            self.counts["design-check"] = self.counts.get("design-check", 0) + len(rows)
            self.log(f"design check on {design}: {len(rows)} banks")

    def shuffled(self) -> None:
        total = {"offline": 3 if self.quick else self.args.shuffles,
                 "online": 3 if self.quick else self.args.online_shuffles}
        for design in ("offline", "online"):
            self._shuffled(design, total[design])

    def _shuffled(self, design: str, total: int) -> None:
        """``total`` shuffles of the target's membership on the trained ``design`` bank."""
        import miaudit
        import miaudit.pipeline.evaluate as evaluate_module

        bank, target, config = self._trained_bank(design)
        name = config["name"]
        prefix = f"shuffled|{design}|{name}"
        todo = [i for i in range(total) if f"{prefix}|{i}" not in self.records.done]
        if not todo:
            return
        audit_rows = np.flatnonzero(bank.audit)
        original = bank.membership[target, audit_rows]

        def shuffled_bank(i: int) -> Any:
            rng = np.random.default_rng([int(i), 4242])
            membership = bank.membership.copy()
            membership[target, audit_rows] = rng.permutation(original)
            return bank.replace(membership=membership)

        def evaluate(i: int, mode: str, cache: dict | None) -> Any:
            """miaudit.attack on shuffle i (every attack the bank supports). ``mode``
            "record" fills ``cache`` with the result of every run_attack call the evaluation
            makes (keyed by attack, view and parameters), "replay" answers them from it."""
            original_run = evaluate_module.run_attack

            def wrapped(attack: str, view: Any, **params: Any) -> Any:
                key = (attack, tuple(view._seed), tuple(sorted(params.items())))
                if mode == "replay":
                    return cache[key]
                found = original_run(attack, view, **params)
                if cache is not None:
                    cache[key] = found
                return found

            evaluate_module.run_attack = wrapped
            try:
                return miaudit.attack(shuffled_bank(i), target=target, progress=False)
            finally:
                evaluate_module.run_attack = original_run

        def record(result: Any, variant: str, seed: int, cached: bool) -> dict[str, Any]:
            return audit_record(result, entry="attack (shuffled bank)", bank=name,
                                design=design, variant=variant, seed=seed,
                                models=bank.n_models, target=target, cached=cached)

        self.log(f"shuffled {design}: bank {name}, {bank.n_models} models, target {target}, "
                 f"{len(todo)} shuffles to do")
        self.do(f"{prefix}|unshuffled", "shuffled-reference", lambda: record(
            miaudit.attack(bank, target=target, progress=False),
            "unshuffled (real membership)", -1, False))
        # are the attack runs the same whatever the shuffle? (shuffles 0 and 1)
        cache0: dict = {}
        cache1: dict = {}
        started, load_before = time.perf_counter(), load1()
        first = {0: evaluate(0, "record", cache0), 1: evaluate(1, "record", cache1)}
        identical = cache0.keys() == cache1.keys() and all(
            np.array_equal(np.asarray(cache0[k].scores), np.asarray(cache1[k].scores),
                           equal_nan=True) for k in cache0)
        replay_same = False
        if identical:
            a = record(first[1], "", 1, False)
            b = record(evaluate(1, "replay", cache0), "", 1, True)
            replay_same = (json.dumps(clean(a["attacks"])) == json.dumps(clean(b["attacks"]))
                           and all(a[k] == b[k] for k in ("measured", "level", "best_eps",
                                                          "best_mu")))
        use_cache = identical and replay_same
        check = {"time": now(), "design": design, "bank": name,
                 "attack_runs_compared": len(cache0), "scores_identical": identical,
                 "replay_same": replay_same, "cached": use_cache,
                 "seconds": round(time.perf_counter() - started, 2),
                 "load_before": load_before, "load_after": load1()}
        self.log(f"shuffled {design}: attack runs identical across shuffles 0 and 1: "
                 f"{identical} ({len(cache0)} runs), replay equal: {replay_same}: "
                 f"{'cached attack runs' if use_cache else 'attacks run every time'}")
        with (self.out / "shuffle_checks.jsonl").open("a") as f:
            f.write(json.dumps(clean(check)) + "\n")
        state = {"cache": use_cache}

        def same_runs(cache: dict) -> bool:
            return cache.keys() == cache0.keys() and all(
                np.array_equal(np.asarray(cache[k].scores), np.asarray(cache0[k].scores),
                               equal_nan=True) for k in cache)

        for i in todo:
            def one(i: int = i) -> dict[str, Any]:
                if i in first:
                    return record(first[i], "shuffled membership", i, False)
                if state["cache"] and i % VERIFY_EVERY == 0:
                    # every tenth shuffle runs the attacks again: the cache must still hold
                    fresh: dict = {}
                    result = evaluate(i, "record", fresh)
                    same = same_runs(fresh)
                    if not same:
                        state["cache"] = False
                        self.log(f"shuffle {i}: attack runs differ from shuffle 0's: no more "
                                 "cached runs")
                    return {**record(result, "shuffled membership", i, False),
                            "runs_same_as_shuffle_0": same}
                result = evaluate(i, "replay" if state["cache"] else "run",
                                  cache0 if state["cache"] else None)
                return record(result, "shuffled membership", i, state["cache"])

            self.do(f"{prefix}|{i}", "shuffled", one)


# --- the report ----------------------------------------------------------------------------


def pct(k: int, n: int) -> str:
    if n == 0:
        return "–"
    low, high = clopper_pearson(k, n)
    flag = " **⚠**" if low > ALPHA else ""
    return f"{100 * k / n:.1f} [{100 * low:.1f}, {100 * high:.1f}] ({k}/{n}){flag}"


def significant(attack: dict[str, Any], key: str) -> bool | None:
    p = (attack.get("tpr_p") or {}).get(key)
    return None if p is None else p <= ALPHA


class Flags:
    """The cells whose Clopper-Pearson interval lies above 5%, with the binomial tail
    P(X >= k | n, 5%) and how many cells their table tested (for a Bonferroni reading: with
    hundreds of cells, some intervals above 5% are chance)."""

    def __init__(self) -> None:
        self.found: list[dict[str, Any]] = []
        self.tested: dict[str, int] = {}

    def add(self, table: str, text: str, k: int, n: int) -> None:
        from scipy.stats import binom

        self.found.append({"table": table, "text": text, "k": k, "n": n,
                           "p": float(binom.sf(k - 1, n, ALPHA))})

    def lines(self) -> list[str]:
        if not self.found:
            return ["None."]
        out = []
        for f in self.found:
            cells = self.tested[f["table"]]
            adjusted = min(1.0, f["p"] * cells)
            verdict = ("**beyond chance** after Bonferroni" if adjusted < ALPHA
                       else "within chance after Bonferroni")
            out.append(f"- {f['text']} — {f['table']}: P(≥ {f['k']} of {f['n']} | 5%) = "
                       f"{f['p']:.2g}; × {cells} cells tested = {adjusted:.2g}: {verdict}")
        return out


def fp_table(records: list[dict[str, Any]], columns: list[str], column_of: Callable,
             key: str, flags: Flags, table: str) -> list[str]:
    """Rows: attacks; columns: ``columns`` (+ all): the null false-positive rate at FPR
    ``key`` with its Clopper-Pearson interval and counts."""
    cells: dict[tuple[str, str], list[int]] = {}
    for r in records:
        col = column_of(r)
        for name, a in r["attacks"].items():
            s = significant(a, key)
            if s is None:
                continue
            for c in (col, "all"):
                cell = cells.setdefault((name, c), [0, 0])
                cell[0] += int(s)
                cell[1] += 1
    attacks = sorted({name for name, _ in cells})
    cols = [*columns, "all"]
    table = f"{table}, TPR at {float(key):.1%} FPR"
    flags.tested[table] = sum(1 for (_, _), (_, n) in cells.items() if n)
    lines = ["| attack | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for name in attacks:
        row = []
        for c in cols:
            k, n = cells.get((name, c), (0, 0))
            row.append(pct(k, n))
            if n and clopper_pearson(k, n)[0] > ALPHA:
                flags.add(table, f"{name} on {c}: {pct(k, n)}", k, n)
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return lines


def z_table(records: list[dict[str, Any]]) -> list[str]:
    zs: dict[str, list[float]] = {}
    eps: dict[str, list[int]] = {}
    for r in records:
        for name, a in r["attacks"].items():
            if a.get("z") is not None:
                zs.setdefault(name, []).append(a["z"])
            if "eps" in a:
                e = eps.setdefault(name, [0, 0])
                e[0] += int((a["eps"] or 0) > 0)
                e[1] += 1
    lines = ["| attack | audits | mean z | sd z | min z | max z | own ε > 0 (each at α) |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for name in sorted(zs):
        z = np.asarray(zs[name])
        k, n = eps.get(name, (0, 0))
        sd = z.std(ddof=1) if z.size > 1 else 0.0
        lines.append(f"| {name} | {z.size} | {z.mean():+.2f} | {sd:.2f} | "
                     f"{z.min():+.2f} | {z.max():+.2f} | {pct(k, n)} |")
    return lines


def rows_value(record: dict[str, Any], which: str) -> float | None:
    """The best ε (``eps``) or μ (``mu``) over the bounds on the audit rows only."""
    key = f"audit_rows_best_{which}"
    return record[key] if key in record else record[f"best_{which}"]


def verdict_table(records: list[dict[str, Any]], group: Callable) -> list[str]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(group(r), []).append(r)
    lines = ["| entry point · design | audits | measured a leak (exposed / average-case) | "
             "level says a leak | best ε > 0 | best μ > 0 | best ε > 0, canary bounds in | "
             "design check p < 0.05 | design check dependent (p < 0.001) | levels |",
             "|---|---:|---|---|---|---|---|---|---:|---|"]
    for name in sorted(groups):
        rs = groups[name]
        n = len(rs)
        leak = sum(r["measured"] in LEAK_LEVELS for r in rs)
        said = sum(r["level"] in LEAK_LEVELS for r in rs)
        eps = sum((rows_value(r, "eps") or 0) > 0 for r in rs)
        mu = sum((rows_value(r, "mu") or 0) > 0 for r in rs)
        canary = sum((r["best_eps"] or 0) > 0 for r in rs)
        canary_cell = "–"
        if any(r.get("has_canaries") for r in rs):
            null = [r for r in rs if r["variant"] == "untrained"]
            canary_cell = (f"{pct(canary, n)}; untrained variant "
                           f"{sum((r['best_eps'] or 0) > 0 for r in null)}/{len(null)}")
        dep = sum(bool((r.get("design_check") or {}).get("dependent")) for r in rs)
        design_p = sum(((r.get("design_check") or {}).get("p_value") or 1.0) < ALPHA
                       for r in rs)
        levels: dict[str, int] = {}
        for r in rs:
            levels[r["level"]] = levels.get(r["level"], 0) + 1
        words = ", ".join(f"{k} {v}" for k, v in sorted(levels.items()))
        lines.append(f"| {name} | {n} | {pct(leak, n)} | {pct(said, n)} | {pct(eps, n)} | "
                     f"{pct(mu, n)} | {canary_cell} | {pct(design_p, n)} | {dep} | {words} |")
    return lines


def runs_table(runs: list[dict[str, Any]]) -> list[str]:
    lines = ["| command | started | wall | load before → after | audits done |",
             "|---|---|---:|---|---|"]
    for r in runs:
        done = ", ".join(f"{k} {v}" for k, v in r.get("done", {}).items()) or "none new"
        note = f" ({r['note']})" if r.get("note") else ""
        lines.append(f"| `{r['command']}` | {r['started']} | {r['wall_s'] / 60:.1f} min | "
                     f"{r['load_before']:.2f} → {r['load_after']:.2f} | {done}{note} |")
    return lines


def report(out: Path) -> str:
    records = [r for r in read_jsonl(out / "records.jsonl")]
    runs = read_jsonl(out / "runs.jsonl")
    checks = read_jsonl(out / "shuffle_checks.jsonl")
    flags = Flags()
    by_part: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_part.setdefault(r["part"], []).append(r)
    from miaudit.null_calibration import DESIGNS

    lines = ["# Null calibration (`bench/null_calibration.py`)", "",
             f"Written {now()} from {len(records)} records "
             f"({', '.join(f'{k} {len(v)}' for k, v in by_part.items())}).", "",
             "Null false-positive rate: the share of audits where the attack's TPR at that "
             "FPR is significant at one-sided 0.05 by its exact null p-value "
             "(negative hypergeometric; uncorrected, per attack), % with its Clopper–Pearson "
             "95% interval and (significant / audits). A calibrated attack gives ≤ 5% "
             "(less where the law is discrete: at 0.1% FPR on ~300 non-members the point "
             "allows no false positive). **⚠**: the interval lies entirely above 5%.", ""]
    if runs:
        lines += ["## Commands and wall times", "", *runs_table(runs), ""]
    lines += ["## Pooled over every attack", "",
              "Every (attack, audit) figure of a part: the share significant at one-sided 0.05 "
              "(figures of one audit are correlated, so the interval is only indicative).", "",
              "| part | audits | TPR at 1% FPR | TPR at 0.1% FPR | AUC (one-sided p ≤ 0.05) |",
              "|---|---:|---|---|---|"]
    for part, rs in by_part.items():
        if part == "shuffled-reference":
            continue
        row = [part, str(len(rs))]
        for key in FPRS:
            flags_ = [significant(a, key) for r in rs for a in r["attacks"].values()]
            flags_ = [f for f in flags_ if f is not None]
            row.append(pct(sum(flags_), len(flags_)))
        aucs = [a["auc_p"] <= ALPHA for r in rs for a in r["attacks"].values()
                if a.get("auc_p") is not None]
        row.append(pct(sum(aucs), len(aucs)))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    synthetic = by_part.get("synthetic", [])
    sequence = by_part.get("sequence", [])
    for title, rs, cols in (("Synthetic classifier banks", synthetic, list(DESIGNS)),
                            ("Synthetic sequence (causal-LM) banks", sequence,
                             list(SEQUENCE_DESIGNS))):
        if not rs:
            continue
        n_models = sorted({r["models"] for r in rs})
        lines += [f"## {title}: attack × design", "",
                  f"{len(rs)} audits: variants {sorted({r['variant'] for r in rs})}, "
                  f"{len({r['seed'] for r in rs})} bank seeds (each variant its own), models "
                  f"{n_models[0]}–{n_models[-1]}, "
                  f"{rs[0]['n_members'] + rs[0]['n_nonmembers']} audit rows (non-members "
                  f"{min(r['n_nonmembers'] for r in rs)}–{max(r['n_nonmembers'] for r in rs)}"
                  f": {min(r['n_nonmembers'] for r in rs) * 0.01:.1f}+ expected false "
                  "positives at 1% FPR). Every attack at its default parameters.", ""]
        for key in FPRS:
            lines += [f"### TPR at {float(key):.1%} FPR", "",
                      *fp_table(rs, cols, lambda r: r["design"], key, flags, title),
                      ""]
        variants = sorted({r["variant"] for r in rs})
        lines += ["### By variant (all designs), TPR at 1% FPR", "",
                  *fp_table(rs, variants, lambda r: r["variant"], "0.01", flags,
                            f"{title} by variant"), ""]
        lines += ["### AUC z-scores (should be ~0 mean, ~1 sd) and each attack's own ε bound",
                  "", *z_table(rs), ""]
    entry = [r for p in ("synthetic", "sequence", "runs", "audits", "attack", "study")
             for r in by_part.get(p, [])]
    if entry:
        lines += ["## Verdicts and bounds per entry point and design", "",
                  "`measured`: the verdict's level before the checks (exposed = 'Exposed', "
                  "average-case = 'Warning sign'); `level`: after them (a target that learnt "
                  "nothing makes a 'no leak' inconclusive). Best ε / μ: the run's best bound, "
                  "Bonferroni over its bounds on the audit rows (family-wise α 0.05); with "
                  "canaries (offline-canaries) the run's own best, canary and one-run bounds "
                  "in, has a column of its own (the target learns none of its canaries in "
                  "either variant: they are part of the null).", "",
                  *verdict_table(entry, lambda r: f"{r['part']}: {r['entry']} · {r['design']}"
                                 + (f" ({r['models']} models)" if r["part"] == "runs" else "")),
                  ""]
    real = [r for p in ("runs", "audits", "attack", "study") for r in by_part.get(p, [])]
    if real:
        lines += ["## Entry points: attack × entry point, TPR at 1% FPR", "",
                  *fp_table(real, sorted({r["entry"] for r in real}), lambda r: r["entry"],
                            "0.01", flags, "Entry points"), "",
                  "### AUC z-scores on the entry points' audits", "", *z_table(real), ""]
    shuffled = by_part.get("shuffled", [])
    if shuffled:
        lines += ["## Shuffled-membership banks", "",
                  "A trained digits bank, the target's membership shuffled within the audit "
                  "rows (member count kept), every attack the bank supports "
                  "(`miaudit.attack`). 'Warning sign or worse': the level (after the checks) "
                  "is exposed or average-case.", ""]
        for c in checks:
            how = ("attack runs cached, metrics, bounds and verdict recomputed per shuffle"
                   if c["cached"] else "attacks run on every shuffle")
            lines.append(f"- {c['bank']} ({c['design']}): the {c.get('attack_runs_compared')} "
                         "attack runs (shadow views included) identical on shuffles 0 and 1: "
                         f"{c['scores_identical']}; shuffle 1 replayed from shuffle 0's runs "
                         f"gives the same record: {c['replay_same']} → {how}.")
        lines.append("")
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in shuffled:
            groups.setdefault(f"{r['bank']} ({r['design']}, {r['models']} models)", []).append(r)
        lines += ["| bank | shuffles | measured a leak | Warning sign or worse (level) | "
                  "best ε > 0 | best μ > 0 |", "|---|---:|---|---|---|---|"]
        for name, rs in sorted(groups.items()):
            n = len(rs)
            lines.append(
                f"| {name} | {n} | {pct(sum(r['measured'] in LEAK_LEVELS for r in rs), n)} | "
                f"{pct(sum(r['level'] in LEAK_LEVELS for r in rs), n)} | "
                f"{pct(sum((rows_value(r, 'eps') or 0) > 0 for r in rs), n)} | "
                f"{pct(sum((rows_value(r, 'mu') or 0) > 0 for r in rs), n)} |")
        lines.append("")
        for r in by_part.get("shuffled-reference", []):
            lines.append(f"Unshuffled {r['bank']}: measured {r['measured']}, level "
                         f"{r['level']} ({r['verdict_attack']}), best ε {r['best_eps']}.")
        lines += ["", "### Shuffled banks: attack × bank, TPR at 1% FPR", "",
                  *fp_table(shuffled, sorted({r["bank"] for r in shuffled}),
                            lambda r: r["bank"], "0.01", flags, "Shuffled banks"), ""]
    checks_alone = read_jsonl(out / "design_check.jsonl")
    if checks_alone:
        lines += ["## The design check alone, on independent null banks", "",
                  "Untrained null banks (8 models, the bank's own target, each bank its own "
                  "seed), `design_check` only: the share of banks with its (Bonferroni-"
                  "adjusted) p-value below 0.05, 0.01 and 0.001 (`dependent`).", "",
                  "| design | banks | p < 0.05 | p < 0.01 | p < 0.001 |", "|---|---:|---|---|---|"]
        for design in DESIGN_CHECK_DESIGNS:
            ps = [r["p_value"] for r in checks_alone if r["design"] == design]
            if ps:
                n = len(ps)
                lines.append(f"| {design} | {n} | {pct(sum(p < 0.05 for p in ps), n)} | "
                             f"{pct(sum(p < 0.01 for p in ps), n)} | "
                             f"{pct(sum(p < 0.001 for p in ps), n)} |")
        lines.append("")
    lines += ["## Cells whose interval lies above 5%", "",
              "Each table tests hundreds of cells (attack × column, the 'all' column "
              "included), and attacks on one bank are correlated: a few intervals above 5% "
              "are expected by chance. The binomial tail of each, times its table's cells "
              "(Bonferroni), says whether it is more than that.", "", *flags.lines()]
    skipped: dict[str, set[str]] = {}
    for r in records:
        for name in (r.get("runtime_skipped") or {}):
            skipped.setdefault(name, set()).add(f"{r['part']}:{r['design']}")
    if skipped:
        lines += ["", "Attacks whose needs a bank met but which refused it at run time "
                  "(AttackError; left out there): "
                  + "; ".join(f"{k} ({', '.join(sorted(v))})" for k, v in sorted(skipped.items()))]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


# --- the command line ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__,
        epilog="Every part is resumable: audits already in records.jsonl are skipped.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the null audits (then write the report)")
    run.add_argument("--parts", nargs="*", choices=PARTS, default=list(PARTS))
    run.add_argument("--seeds", type=int, default=10, help="seeds per design and variant "
                     "of the synthetic and sequence banks (default 10)")
    run.add_argument("--audit-seeds", type=int, default=8,
                     help="user models trained for the audits part (default 8)")
    run.add_argument("--attack-seeds", type=int, default=5,
                     help="LiRA-keep bank files per variant for the attack part (default 5)")
    run.add_argument("--study-seeds", type=int, default=4,
                     help="untrained many-model banks, 8 targets each (default 4)")
    run.add_argument("--shuffles", type=int, default=100,
                     help="shuffles of the offline (demo) bank (default 100)")
    run.add_argument("--online-shuffles", type=int, default=100,
                     help="shuffles of the online bank (default 100)")
    run.add_argument("--design-check-banks", type=int, default=150,
                     help="untrained banks per design for the design-check part (default 150)")
    run.add_argument("--quick", action="store_true", help="a 1-2 minute smoke of every part "
                     "(one seed, few designs, 3 shuffles, results under runs/)")
    run.add_argument("--out", help=f"results folder (default {RESULTS.relative_to(ROOT)}; "
                     "with --quick runs/null_calibration/quick)")
    run.add_argument("--work", help="run folders, model cache, user models, bank files "
                     "(default runs/null_calibration)")
    run.add_argument("--threads", default="1", help="OMP/MKL threads (default 1; set before "
                     "the libraries load)")
    rep = sub.add_parser("report", help="write summary.md from records.jsonl and print it")
    rep.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    if args.command == "report":
        print(report(Path(args.out)))
        return 0
    args.out = args.out or str(WORK / "quick" if args.quick else RESULTS)
    args.work = args.work or str(WORK / ("quick" if args.quick else ""))
    bench = Bench(args)
    python = Path(sys.executable)
    python_text = (str(python.relative_to(ROOT)) if python.is_relative_to(ROOT)
                   else str(python))
    niceness = os.nice(0)
    command = ((f"nice -n {niceness} " if niceness else "") + python_text
               + " bench/null_calibration.py "
               + shlex.join(sys.argv[1:] if argv is None else argv))
    started, load_before, start = now(), load1(), time.perf_counter()
    bench.log(f"{command}: parts {args.parts}, OMP_NUM_THREADS "
              f"{os.environ.get('OMP_NUM_THREADS')}, niceness {os.nice(0)}")
    part_times = {}
    try:
        for part in args.parts:
            t = time.perf_counter()
            getattr(bench, part.replace("-", "_"))()
            part_times[part] = round(time.perf_counter() - t, 1)
            bench.log(f"part {part} done in {part_times[part]} s")
    finally:
        entry = {"command": command, "started": started, "ended": now(),
                 "wall_s": round(time.perf_counter() - start, 1), "load_before": load_before,
                 "load_after": load1(), "niceness": os.nice(0), "parts_s": part_times,
                 "done": bench.counts, "threads": os.environ.get("OMP_NUM_THREADS")}
        Path(args.out).mkdir(parents=True, exist_ok=True)
        with (Path(args.out) / "runs.jsonl").open("a") as f:
            f.write(json.dumps(entry) + "\n")
        print(json.dumps(entry))
    print(report(Path(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
