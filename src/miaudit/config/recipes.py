"""A run config's training recipes resolved (:func:`resolve_recipes`): the target's and the
reference models' :class:`~miaudit.train.recipe.Recipe`, as the config names them (fields,
a name in ``recipes``, or ``target`` / ``plain`` for the references). The one rule: a run
resolves them once, in its plan, and hands them to its steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from miaudit.train.recipe import Recipe

# reference_recipe values with a fixed meaning; they cannot name an entry of `recipes`.
REFERENCE_KEYWORDS = ("target", "plain")


class RecipeSettings(Protocol):
    """What of a run config (:class:`~miaudit.config.run.RunConfig`) names its recipes."""

    recipes: dict[str, dict[str, Any]]
    recipe: dict[str, Any] | str
    reference_recipe: dict[str, Any] | str | None


@dataclass(frozen=True)
class Recipes:
    """The target's recipe and the reference models' (the attacker's knowledge)."""

    target: Recipe
    reference: Recipe
    reference_source: str  # "target", "plain", a name in `recipes`, or "mapping"

    def describe(self) -> dict[str, Any]:
        """JSON-ready record for the run summary: both recipes spelled out, with keys."""
        return {
            "target": self.target.to_dict(),
            "target_key": self.target.key(),
            "reference": self.reference.to_dict(),
            "reference_key": self.reference.key(),
            "reference_source": self.reference_source,
        }


def resolve_recipes(cfg: RecipeSettings) -> Recipes:
    """``recipe`` / ``reference_recipe`` of the config as :class:`Recipes` (fields checked
    here: ConfigError naming a bad field by its place, recipe.lr, recipes.strong.epochs, ...).
    The one rule: a run resolves them once (its plan) and hands them to its steps."""
    from miaudit.train.recipe import Recipe

    target_fields, ref = recipe_fields(cfg)
    where = f"recipes.{cfg.recipe}" if isinstance(cfg.recipe, str) else "recipe"
    target = Recipe.from_dict(target_fields, where)
    if isinstance(ref, str):  # "target" or "plain" (recipe_fields resolved a name)
        reference, source = (target, "target") if ref == "target" else (target.plain(), "plain")
    else:
        named = isinstance(cfg.reference_recipe, str)
        where = f"recipes.{cfg.reference_recipe}" if named else "reference_recipe"
        reference = Recipe.from_dict(ref, where)
        source = str(cfg.reference_recipe) if named else "mapping"
    return Recipes(target, reference, source)


def recipe_fields(cfg: RecipeSettings) -> tuple[dict[str, Any], str | dict[str, Any]]:
    """The target's recipe fields, and the reference recipe as ``"target"``, ``"plain"`` or
    its fields (a name in ``recipes`` resolved)."""
    target = cfg.recipes[cfg.recipe] if isinstance(cfg.recipe, str) else cfg.recipe
    ref = "target" if cfg.reference_recipe is None else cfg.reference_recipe
    if isinstance(ref, str) and ref not in REFERENCE_KEYWORDS:
        ref = cfg.recipes[ref]
    return dict(target), ref if isinstance(ref, str) else dict(ref)
