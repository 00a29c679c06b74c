"""Audits of the checkpoints kept along training ("Generalization and Membership Inference
Attack: a Practical Perspective" §IV-A2: train accuracy, test
accuracy and attack TPR at each stage of training).

Each checkpoint gets its own bank: the target *and* its reference models at the same position
of their runs, so the attacker calibrates with models trained as far as the target (the
paper attacks a model "at each saved checkpoint" and does not say otherwise; it is also what
an attacker who knows the training procedure, §IV-B, would do). Each bank is scored like the
final one and reported in ``checkpoints/<label>/`` (a full report); ``checkpoints.md`` and
``checkpoints.json`` in the run directory hold one row per checkpoint, the final model last.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from miaudit.config import RunConfig
from miaudit.formatting import fmt_auc, markdown_table, pct_ci, rate
from miaudit.io import write_json, write_text
from miaudit.pipeline.evaluate import EvaluationOptions, evaluate_attacks
from miaudit.pipeline.querying import BuiltBank, query_bank
from miaudit.records.outcomes import AttackMetrics, AuditResult
from miaudit.report import write_report
from miaudit.train.checkpoints import steps_per_epoch, total_steps

# what checkpoints.json keeps of each attack's metrics (their metrics.json keys)
ROW_METRICS = ("auc", "auc_ci", "tpr_at_fpr", "tpr_at_fpr_ci", "n_members", "n_nonmembers")


def summary_row(
    label: str, step: int | None, epoch: float, result: AuditResult, target: Any
) -> dict[str, Any]:
    """One checkpoint's line: the target's accuracies, epsilon (DP) and every attack's AUC
    and TPR at the configured FPRs with their bootstrap CIs."""
    acc = result.meta["models"][result.meta["target"]]
    attacks = {}
    for o in result.outcomes:
        metrics = o.metrics.to_dict()
        attacks[o.name] = {key: metrics[key] for key in ROW_METRICS}
    privacy = getattr(target, "privacy", None) or {}
    return {
        "checkpoint": label,
        "step": step,
        "epoch": epoch,
        "train_acc": acc["train_acc"],
        "test_acc": acc["test_acc"],
        "epsilon_spent": privacy.get("epsilon_spent"),
        "attacks": attacks,
    }


def checkpoints_table(rows: list[dict[str, Any]], fprs: list[float]) -> str:
    """The rows as a Markdown table: one line per checkpoint, TPRs with [CI] as the results
    table writes them."""
    names = list(rows[0]["attacks"]) if rows else []
    dp = any(r["epsilon_spent"] is not None for r in rows)
    head = ["checkpoint", "epoch", "train acc", "test acc", *(["ε spent"] if dp else [])]
    for name in names:
        head += [f"{name} AUC"] + [f"{name} TPR@{rate(f)} FPR" for f in fprs]
    lines = []
    for r in rows:
        eps = r["epsilon_spent"]
        cells = [r["checkpoint"], f"{r['epoch']:g}", f"{r['train_acc']:.3f}",
                 f"{r['test_acc']:.3f}", *(["-" if eps is None else f"{eps:.2f}"] if dp else [])]
        for name in names:
            m = AttackMetrics.from_dict(r["attacks"][name])
            cells += [fmt_auc(m.auc), *(pct_ci(t.tpr, t.ci) for t in m.tpr)]
        lines.append(cells)
    text = markdown_table(lines, header=head) + "\n"
    first = AttackMetrics.from_dict(next(iter(rows[0]["attacks"].values()))) if names else None
    if first:
        text += (f"\n{first.n_members} members and {first.n_nonmembers} non-members of the "
                 "target in the audit pool; CIs are bootstrap intervals.\n")
    return text


def audit_checkpoints(
    cfg: RunConfig, built: BuiltBank, final: AuditResult, out: Path, progress: bool = True
) -> list[dict[str, Any]]:
    """Score every checkpoint's bank, write its report under ``out/checkpoints/<label>/``
    and the summary table; return the summary rows (the final model last)."""
    design, target = built.design, built.models[built.design.target]
    rows = []
    for label, kept in target.checkpoints.items():
        if kept is target:
            continue  # the final model: reported by the run itself
        models = [m.checkpoints[label] for m in built.models]
        bank, _ = query_bank(cfg, built.dataset, design, models, [], built.queries,
                             built.info.device, progress, texts=built.texts)  # fmt: skip
        result = evaluate_attacks(bank, design.target, cfg.attacks, EvaluationOptions(
            params=cfg.attack_params, metrics=cfg.metrics, seed=cfg.seed,
            train_seconds=[m.train_seconds for m in models], progress=progress,
            target_privacy=kept.privacy, canaries=cfg.canaries, membership="miaudit"))
        assert kept.step is not None and bank.audit is not None  # a checkpoint has its step
        epoch = kept.step / steps_per_epoch(kept.recipe, kept.n_train)
        result.meta.update({
            "run": f"{cfg.name}@{label}", "checkpoint": label, "step": kept.step,
            "epoch": round(epoch, 3), "target_privacy": kept.privacy,
            "audit_samples": int(bank.audit.sum()), "n_models": design.n_models,
        })  # fmt: skip
        write_report(result, out / "checkpoints" / label)
        rows.append(summary_row(label, kept.step, round(epoch, 3), result, kept))
    total = total_steps(target.recipe, target.n_train)
    rows.append(summary_row("final", total, float(target.recipe.epochs), final, target))
    write_json(out / "checkpoints.json", rows)
    write_text(out / "checkpoints.md", checkpoints_table(rows, cfg.metrics.fprs))
    return rows
