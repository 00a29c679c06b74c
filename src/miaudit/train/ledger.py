"""What an interrupted command can truthfully say about the models it was training.

Every :class:`~miaudit.train.model_cache.ModelCache` of the process counts here the models it set
out to train and those stored complete, so the command line's Ctrl-C handler can report on caches
it never sees.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainingLedger:
    """Models this process set out to train through any :class:`ModelCache`, and how many of
    them are stored complete: what an interrupted command can truthfully report (see
    :func:`training_ledger`). A model counts as stored only once its entry (checkpoints, then
    weights, then the metadata that makes it count) is fully written."""

    planned: int = 0
    stored: int = 0

    @property
    def lost(self) -> int:
        """Models set out to train that are not in the cache (unfinished or unstored)."""
        return self.planned - self.stored

    def reset(self) -> None:
        self.planned = self.stored = 0

    def interrupted_message(self) -> str:
        """What a Ctrl-C cost, in words. Counts only models whose training had begun: a design
        trained in several calls (e.g. target and references with different recipes) has not
        yet counted the models of later calls."""
        if self.planned == 0:
            return "interrupted: this run trained no models, so nothing new was cached"
        if self.stored == 0:
            return "interrupted before any model finished training: nothing was cached"
        if self.stored == self.planned:
            what = "the model" if self.planned == 1 else f"all {self.planned} models"
            verb = "is" if self.planned == 1 else "are"
            return f"interrupted: {what} this run trained {verb} cached (rerun resumes from them)"
        return (
            f"interrupted: {self.stored} of {self.planned} models were trained and cached "
            f"(rerun resumes from them); {self.lost} {'was' if self.lost == 1 else 'were'} "
            "not finished and will be trained again"
        )


# Process-wide, so the command line's Ctrl-C handler can report on caches it never sees.
_LEDGER = TrainingLedger()


def training_ledger() -> TrainingLedger:
    """This process's :class:`TrainingLedger` (reset it at the start of a command)."""
    return _LEDGER
