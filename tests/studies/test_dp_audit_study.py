"""The dp-audit study: the whole study on digits with a small MLP (no DP and ε = 8,
both canary kinds), resumed without running a cell, its configs' cells, bad configs,
Privacy Meter's published numbers as data, and the report's "best over attacks": the
Bonferroni best recounted from counts at α / K (never a plain max), labelled so in the
tables, the explanation and the figure's legend."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

from miaudit.errors import ConfigError
from miaudit.privacy import epsilon_from_counts, one_run_epsilon_from_counts
from miaudit.studies import registry
from miaudit.studies.dp_audit import ATTACKS, SETUPS, cells
from miaudit.studies.dp_audit.report import (
    CAVEAT,
    REFERENCE_NUMBERS,
    REFERENCE_SOURCE,
    bonferroni_best,
    bounds_figure,
    main_table,
    reference_table,
    summarize,
)
from miaudit.studies.registry import get_study, resolve_config, run_study
from miaudit.studies.sweep import StudyError

M = 200  # of the 397 digits rows the pools leave free

TINY = {
    "setup": "tiny-digits",
    "extra_setups": {"tiny-digits": SETUPS["digits"]},  # Adam, 30 epochs: seconds
    "epsilons": [None, 8],
    "canaries": M,
    "references": 2,
    "bootstrap": 20,
}


def _cell_rows(table: pd.DataFrame, kind: str, dp: bool) -> pd.DataFrame:
    eps = table["epsilon"].astype("float64")
    return table[(table["kind"] == kind) & (eps.notna() if dp else eps.isna())]


def test_the_study_runs_every_cell_and_resumes(tmp_path, monkeypatch):
    out = tmp_path / "study"
    table, study_dir = run_study("dp-audit", "cpu", TINY, executor="serial", out=out,
                                 progress=False)
    assert study_dir == out
    assert len(table) == 2 * 2 * len(ATTACKS) and table["cell"].nunique() == 4
    for row in table.to_dict("records"):
        # every bound present, >= 0, on the split's counts
        for column in ("eps_audit", "eps_canary", "eps_one_run", "best_epsilon"):
            assert row[column] >= 0, (column, row)
        assert row["n_members"] + row["n_nonmembers"] == 600
        assert row["eps_audit_n0"] + row["eps_audit_n1"] <= 300  # the counting half only
        assert row["one_run_m"] == M and row["one_run_delta"] == 1e-5
        assert 0 <= row["one_run_v"] <= row["one_run_r"] == row["one_run_k_plus"] + row[
            "one_run_k_minus"]
        assert row["one_run_candidates"] == 3 and row["bounds_compared"] == 4 * (2 + 3)
        # what the report's recount at α / K reads: each bound's α and δ, every candidate's v
        assert row["eps_audit_alpha"] == row["eps_canary_alpha"] == 0.05
        assert row["eps_audit_delta"] == row["eps_canary_delta"] == 1e-5
        guesses = json.loads(row["one_run_guesses"])
        assert [g[:2] for g in guesses] == [[10, 10], [20, 20], [50, 50]]  # 5/10/25% of m
        assert [row["one_run_k_plus"], row["one_run_k_minus"], row["one_run_v"]] in guesses
        assert 0 < row["canaries_included"] < M
        assert 0 < row["target_test_acc"] <= row["target_train_acc"] <= 1
    # no DP: no claim; mislabelled canaries are memorised, so a one-run bound certifies ε > 0
    plain = _cell_rows(table, "mislabelled", dp=False)
    assert plain["claimed_epsilon"].isna().all() and plain["refutes_claim"].isna().all()
    assert plain["eps_one_run"].max() > 0.5 and plain["best_epsilon"].iloc[0] > 0
    assert (plain["one_run_v"] > plain["one_run_r"] / 2).all()
    # DP cells: the accountant's claim recorded, audited at its δ, never refuted here
    for kind in ("mislabelled", "natural"):
        dp = _cell_rows(table, kind, dp=True)
        assert dp["claimed_epsilon"].between(7.5, 8.0).all() and (dp["accountant"] == "prv").all()
        assert (dp["claimed_delta"] == 1e-5).all() and (~dp["refutes_claim"].astype(bool)).all()
        assert (dp["best_epsilon"] < dp["claimed_epsilon"]).all()
        assert dp["noise_multiplier"].iloc[0] > 0
    # the natural cells reused the references the mislabelled ones trained (model cache)
    natural = table[table["kind"] == "natural"].drop_duplicates("cell")
    assert (natural["models_trained"] == 1).all() and (natural["models_from_cache"] == 2).all()

    summary = (out / "summary.md").read_text()
    for heading in ("# DP audit", "## Claimed ε vs empirical lower bounds",
                    "## Per attack: mislabelled canaries", "## Per attack: natural canaries",
                    "## Privacy Meter 2's published one-run audit beside ours"):
        assert heading in summary
    assert "Command: `miaudit study dp-audit --size cpu`" in summary and "4 cells" in summary
    assert "documentation/dpaudit.md" in summary and "vs digits MLP here" in summary
    for number in ("5.48", "4.56", "0.418", "0.126", "68.51"):
        assert number in summary
    for name in ("main.csv", "detail-mislabelled.csv", "detail-natural.csv", "reference.csv",
                 "reference-vs-ours.csv", "results.csv"):
        assert (out / name).is_file(), name
    assert (out / "bounds.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    main = pd.read_csv(out / "main.csv")
    assert list(main["target ε"]) == ["8", "none", "8", "none"] and (main["reps"] == 1).all()
    assert "one-run, canaries: Bonferroni best of 4 attacks, α/12 (attack)" in main.columns
    assert "all bounds: Bonferroni best, α/20 (attack, bound)" in main.columns
    # the privacy_audit best of every bound never exceeds a kind's best at a laxer α / K
    for column in ("threshold, audit samples: Bonferroni best of 4 attacks, α/4 (attack)",
                   "one-run, canaries: Bonferroni best of 4 attacks, α/12 (attack)"):
        assert column in main.columns
    assert "uncorrected, is not a 95% bound" in summary
    side = pd.read_csv(out / "reference-vs-ours.csv")
    assert list(side["ours: target ε"]) == ["none", "8", "none", "8"]  # 8: nearest to 68.51

    # resumable: a rerun finds every cell done and runs none (the registered study's work
    # replaced, since the sweep calls the function the registry holds)
    def no_work(cell):
        raise AssertionError("a finished cell ran again")

    monkeypatch.setitem(registry._STUDIES, "dp-audit",
                        dataclasses.replace(get_study("dp-audit"), work=no_work))
    again, _ = run_study("dp-audit", "cpu", TINY, executor="serial", out=out, progress=False)
    pd.testing.assert_frame_equal(again, table)


def test_cells_follow_the_configs():
    study = get_study("dp-audit")
    cpu = cells(resolve_config(study, "cpu"))
    assert len(cpu) == 5 * 2  # ε 1, 4, 10, 100 and no DP x two kinds x one repetition
    params = [c.params for c in cpu]
    assert [p["epsilon"] for p in params[:5]] == [1.0, 4.0, 10.0, 100.0, None]
    assert [p["kind"] for p in params] == ["mislabelled"] * 5 + ["natural"] * 5
    first = params[0]
    assert first["m"] == 1000 and first["references"] == 2 and first["device"] == "cpu"
    assert first["spec"]["dataset"]["name"] == "fashion-mnist"
    assert first["spec"]["recipe"] == {"architecture": "mlp", "arch_params": {"hidden": 256},
                                       "optimizer": "sgd", "lr": 0.1, "epochs": 30,
                                       "batch_size": 64}
    assert first["attack_params"]["lira-offline-fixed-variance"] == {"equal_counts": False}
    paper = cells(resolve_config(study, "paper"))
    assert len(paper) == 5 * 2 * 3
    assert {c.params["m"] for c in paper} == {5000} and paper[0].params["references"] == 8
    assert paper[0].params["spec"]["split"]["audit"] == 10000
    # "none" in a YAML list is no DP too
    tiny = cells(resolve_config(study, "cpu", {**TINY, "epsilons": ["none", 2]}))
    assert [c.params["epsilon"] for c in tiny[:2]] == [None, 2.0]


def test_run_configs_carry_dp_and_canaries():
    from miaudit.studies.dp_audit import run_config

    made = cells(resolve_config(get_study("dp-audit"), "cpu", TINY))
    dp = run_config(made[1].params)
    assert dp["recipe"]["dp"] == {"epsilon": 8.0, "delta": 1e-5}
    assert dp["canaries"]["count"] == M and dp["canaries"]["kind"] == "mislabelled"
    assert dp["design"] == "offline" and dp["models"] == 3
    assert "dp" not in run_config(made[0].params)["recipe"]


def test_bad_configs_fail_with_the_pipelines_message():
    study = get_study("dp-audit")
    with pytest.raises(StudyError, match="canaries.kind must be one of"):
        cells(resolve_config(study, "cpu", {**TINY, "kinds": ["poisoned"]}))
    with pytest.raises(StudyError, match="even all-correct guesses give ε = 0"):
        cells(resolve_config(study, "cpu", {**TINY, "canaries": 4, "guesses": None}))
    with pytest.raises(StudyError, match="no entry under setups"):
        cells(resolve_config(study, "cpu", {"setup": "cifar10"}))
    with pytest.raises(StudyError, match="references must be >= 1"):
        cells(resolve_config(study, "cpu", {**TINY, "references": 0}))


def test_privacy_meter_numbers_are_data_with_their_source():
    by = {(r["canaries"], r["training"]): r for r in REFERENCE_NUMBERS}
    assert by["mislabelled", "non-DP"]["empirical_epsilon"] == pytest.approx(5.48, abs=0.01)
    assert by["natural", "non-DP"]["empirical_epsilon"] == pytest.approx(4.56, abs=0.01)
    assert by["mislabelled", "DP-SGD"]["empirical_epsilon"] == pytest.approx(0.418, abs=1e-3)
    assert by["natural", "DP-SGD"]["empirical_epsilon"] == pytest.approx(0.126, abs=1e-3)
    assert {r["claimed_epsilon"] for r in REFERENCE_NUMBERS} == {None, 68.51}
    assert all(r["m"] == 1000 and r["delta"] == 1e-5 and r["dataset"] == "CIFAR-10"
               for r in REFERENCE_NUMBERS)
    assert "dpaudit.md" in REFERENCE_SOURCE and "CIFAR-10" in CAVEAT


# --- the report's best over attacks: Bonferroni, recounted from the recorded counts ---------

ALPHA, DELTA, M_SYN = 0.05, 1e-5, 400
# (attack, audit FP, FN of 150 each, canary FP, FN of 100 each, one-run v of each candidate)
SYNTHETIC = [
    ("loss", 40, 60, 30, 35, (18, 33, 70)),
    ("calibrated-loss", 25, 55, 20, 30, (20, 38, 80)),
    ("rmia", 30, 40, 28, 22, (19, 39, 78)),
]
CANDIDATES = [(10, 10), (20, 20), (50, 50)]


def _one_run_at(r: int, v: int, alpha: float) -> float | None:
    try:
        return one_run_epsilon_from_counts(M_SYN, r, v, DELTA, alpha).epsilon
    except ConfigError:
        return None


def _synthetic_rows(rep: int = 0, epsilon: float | None = 8.0, kind: str = "mislabelled",
                    shift: int = 0, guesses: bool = True) -> list[dict]:
    """A cell of hand-made study rows: each attack's bounds at α as the pipeline records them
    (the one-run bound: the best of 3 candidates at α / 3), the cell's privacy_audit best."""
    rows = []
    for attack, afp, afn, cfp, cfn, vs in SYNTHETIC:
        afp, cfp = afp + shift, cfp + shift
        per = [_one_run_at(kp + km, v, ALPHA / 3)
               for (kp, km), v in zip(CANDIDATES, vs, strict=True)]
        i = max(range(3), key=lambda j: -1 if per[j] is None else per[j])
        row = {
            "cell": f"c{rep}{kind}{epsilon}", "epsilon": epsilon, "kind": kind, "rep": rep,
            "attack": attack, "alpha": ALPHA, "delta": DELTA, "m": M_SYN,
            "spec.dataset.name": "digits", "spec.recipe.architecture": "mlp",
            "auc": 0.6, "tpr@0.01": 0.02, "n_members": 300, "n_nonmembers": 300,
            "eps_one_run": per[i], "one_run_m": M_SYN, "one_run_k_plus": CANDIDATES[i][0],
            "one_run_k_minus": CANDIDATES[i][1], "one_run_r": sum(CANDIDATES[i]),
            "one_run_v": vs[i], "one_run_alpha": ALPHA / 3, "one_run_family_alpha": ALPHA,
            "one_run_delta": DELTA, "one_run_candidates": 3, "canaries_included": 200,
            "one_run_guesses": json.dumps([[kp, km, v] for (kp, km), v in
                                           zip(CANDIDATES, vs, strict=True)]) if guesses else None,
            "claimed_epsilon": epsilon, "claimed_delta": DELTA, "accountant": "prv",
            "bound_alpha": ALPHA, "bound_delta": DELTA, "best_epsilon": 0.1,
            "best_attack": "rmia", "best_bound": "one_run", "bounds_compared": 15,
            "refutes_claim": False if epsilon else None, "target_train_acc": 0.9,
            "target_test_acc": 0.8, "cell_wall_s": 1.0, "train_wall_s": 1.0,
            "models_trained": 3, "models_from_cache": 0,
        }
        for prefix, fp, n0, fn, n1 in (("eps_audit", afp, 150, afn, 150),
                                       ("eps_canary", cfp, 100, cfn, 100)):
            row.update({prefix: epsilon_from_counts(fp, n0, fn, n1, DELTA, ALPHA).epsilon,
                        f"{prefix}_fp": fp, f"{prefix}_n0": n0, f"{prefix}_fn": fn,
                        f"{prefix}_n1": n1, f"{prefix}_alpha": ALPHA, f"{prefix}_delta": DELTA})
        rows.append(row)
    return rows


def _synthetic_table() -> pd.DataFrame:
    rows = []
    for kind in ("mislabelled", "natural"):
        for epsilon in (8.0, None):
            for rep in (0, 1):
                rows += _synthetic_rows(rep, epsilon, kind, shift=3 * rep)
    return pd.DataFrame(rows)


def test_the_bonferroni_best_recounts_each_bound_at_alpha_over_k():
    cell = pd.DataFrame(_synthetic_rows())
    k = len(SYNTHETIC)
    for column, (fp_n0, fn_n1) in (("eps_audit", (150, 150)), ("eps_canary", (100, 100))):
        again = {a: epsilon_from_counts(r[f"{column}_fp"], fp_n0, r[f"{column}_fn"], fn_n1,
                                        DELTA, ALPHA / k).epsilon
                 for a, r in zip(cell["attack"], cell.to_dict("records"), strict=True)}
        value, attack, tests = bonferroni_best(cell, column)
        assert tests == k and value == pytest.approx(max(again.values()), abs=1e-12)
        assert attack == max(again, key=again.get)
        # strictly below the plain max over attacks, which is not a 95% bound
        assert 0 < value < cell[column].max()
    # one-run: every candidate of every attack is a test (K = 3 x 3), each recounted at α / 9
    k = 3 * len(SYNTHETIC)
    again = {}
    for a, *_, vs in SYNTHETIC:
        each = [_one_run_at(kp + km, v, ALPHA / k)
                for (kp, km), v in zip(CANDIDATES, vs, strict=True)]
        again[a] = max(e for e in each if e is not None)
    value, attack, tests = bonferroni_best(cell, "eps_one_run")
    assert tests == k and value == pytest.approx(max(again.values()))
    assert attack == max(again, key=again.get) and 0 < value < cell["eps_one_run"].max()
    # an attack with no bound is no test: K counts the bounds there are
    partial = cell.copy()
    partial.loc[0, ["eps_audit", "eps_audit_n0"]] = None
    assert bonferroni_best(partial, "eps_audit")[2] == 2
    # a table without every candidate's counts recounts the reported one alone: still one of
    # the K tests at α / K, so never above the full recount
    old = pd.DataFrame(_synthetic_rows(guesses=False))
    reported = [_one_run_at(r["one_run_r"], r["one_run_v"], ALPHA / k)
                for r in old.to_dict("records")]
    fallback, _, tests = bonferroni_best(old, "eps_one_run")
    assert tests == k and fallback == pytest.approx(max(e for e in reported if e is not None))
    assert fallback <= value
    # older tables: the cell's α and δ where a bound's own are not recorded
    bare = cell.drop(columns=["eps_audit_alpha", "eps_audit_delta"])
    assert bonferroni_best(bare, "eps_audit")[0] == bonferroni_best(cell, "eps_audit")[0]


def _says_what_it_is(label: str) -> bool:
    """A best or max over attacks names its correction, or says it has none."""
    lowered = label.lower()
    if "best" not in lowered and "max" not in lowered:
        return True
    if "uncorrected" in lowered:
        return "not a 95% bound" in lowered or "(95%)" not in lowered
    return "bonferroni" in lowered


def test_report_labels_name_the_bonferroni_best_and_the_uncorrected_max(tmp_path):
    table = _synthetic_table()
    main = main_table(table)
    labels = {"eps_audit": "threshold, audit samples: Bonferroni best of 3 attacks, α/3",
              "eps_canary": "threshold, canaries: Bonferroni best of 3 attacks, α/3",
              "eps_one_run": "one-run, canaries: Bonferroni best of 3 attacks, α/9"}
    for label in labels.values():
        assert f"{label} (attack)" in main.columns
    assert "all bounds: Bonferroni best, α/15 (attack, bound)" in main.columns
    assert not any(c.startswith("best ") for c in main.columns)  # the old plain-max columns
    assert all(_says_what_it_is(c) for c in main.columns)
    # the cells show each repetition's recount: mean ± std of the two repetitions' bests
    first = table[(table["kind"] == "mislabelled") & (table["epsilon"] == 8.0)]
    best = [bonferroni_best(first[first["rep"] == r], "eps_audit")[0] for r in (0, 1)]
    shown = main.loc[0, f"{labels['eps_audit']} (attack)"]
    assert shown.startswith(f"{pd.Series(best).mean():.2f} ± {pd.Series(best).std():.2f}")
    assert main.loc[0, "refutes claim"] == "no" and main.loc[1, "refutes claim"] == "-"

    side = reference_table(table)
    pm = [c for c in side.columns if c.startswith("Privacy Meter 2: one-run")]
    assert pm == ["Privacy Meter 2: one-run ε (CIFAR-10; max over guess pairs, uncorrected: "
                  "not a 95% bound)"]
    assert "ours: one-run ε, Bonferroni best of 3 attacks, α/9 (attack)" in side.columns
    assert "ours: one-run ε, rmia (95%)" in side.columns
    assert all(_says_what_it_is(c) for c in side.columns)

    fig = bounds_figure(table)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert {*labels.values(), "all bounds: Bonferroni best, α/15"} < set(legend)
    assert "Privacy Meter 2, one-run (CIFAR-10: other data; max over guess pairs, uncorrected)" \
        in legend
    assert all(_says_what_it_is(t) for t in legend)
    for ax in fig.axes:  # the axis claims 95% of each line, every line being corrected
        assert ax.get_ylabel() == ("empirical ε lower bound\n(each line 95% on its own; "
                                   "mean ± std over 2 repetitions)")
    assert "Bonferroni best over attacks" in fig._suptitle.get_text()

    summarize(table, tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    assert "a plain max over attacks, uncorrected, is not a 95% bound" in summary
    assert "Each bound is a 95% lower bound" not in summary
    for label in labels.values():
        assert f"'{label}'" in summary  # the explanation names the columns as they read
    assert "mean ± std over repetitions of each repetition's bound" in summary
    assert "uncorrected: not a 95% bound" in summary  # Privacy Meter 2's figure, in the caveat
