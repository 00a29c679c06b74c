"""miaudit.registry.Registry, the one registry type, and the seven registries built on it."""

from __future__ import annotations

import importlib

import pytest

from miaudit.errors import AttackError, ConfigError, DataError, MiauditError
from miaudit.registry import Registry
from miaudit.studies.sweep import StudyError


class FruitError(MiauditError):
    pass


def fruits(**options) -> Registry[int]:
    registry: Registry[int] = Registry("fruit", FruitError, **options)
    registry.register("cherry", 3)
    registry.register("apple", 1)
    registry.register("banana", 2)
    return registry


def test_a_name_registered_twice_is_refused():
    registry = fruits()
    with pytest.raises(ValueError, match="fruit 'apple' is already registered"):
        registry.register("apple", 10)
    assert registry.get("apple") == 1
    entry = object()
    same: Registry[object] = Registry("thing")
    same.register("x", entry)
    assert same.register("x", entry) is entry  # the very same object again: nothing to do


def test_an_unknown_name_is_refused_with_the_closest_and_the_known_ones():
    with pytest.raises(FruitError) as err:
        fruits().get("aple")
    assert str(err.value) == ("unknown fruit 'aple'. Did you mean 'apple'? "
                              "Known fruits: apple, banana, cherry.")
    with pytest.raises(FruitError, match=r"^unknown fruit 'kiwi'\. Known fruits: "):
        fruits().get("kiwi")  # nothing close: no hint


def test_the_message_is_each_registrys_own():
    registry = fruits(unknown="no {kind} '{name}' ({plural}: {known}){hint}", suggestions=3,
                      quote=False, cutoff=0.3, ordered=False)
    with pytest.raises(FruitError) as err:
        registry.get("banan")
    assert str(err.value) == ("no fruit 'banan' (fruits: cherry, apple, banana) "
                              "Did you mean banana?")
    assert Registry("study").plural == "studies"
    assert Registry("canary kind").plural == "canary kinds"


def test_unlisted_entries_are_kept_out_of_messages():
    registry = fruits(listed=lambda entry: entry != 2)
    with pytest.raises(FruitError) as err:
        registry.get("banan")
    assert "banana" not in str(err.value)
    assert registry.get("banana") == 2  # still registered
    assert registry.names() == ["apple", "banana", "cherry"]


def test_the_decorator_registers_what_it_decorates_and_returns_it():
    plain: Registry[object] = Registry("function")

    @plain.decorator("double")
    def double(x):
        return 2 * x

    assert plain.get("double") is double and double(2) == 4

    built: Registry[tuple] = Registry("function")
    made = []

    def make(fn):
        made.append(fn)
        return (fn, "spec")

    assert built.decorator("double", make)(double) is double
    assert built.get("double") == (double, "spec")
    with pytest.raises(ValueError, match="already registered"):
        built.decorator("double", make)(len)
    assert made == [double]  # refused before its entry was built


def test_names_sorted_or_in_registration_order():
    assert fruits().names() == ["apple", "banana", "cherry"]
    assert fruits(ordered=False).names() == ["cherry", "apple", "banana"]
    assert list(fruits(ordered=True)) == ["cherry", "apple", "banana"]  # the mapping's order


def test_it_is_a_mapping_tests_can_patch():
    registry = fruits()
    assert "apple" in registry and "kiwi" not in registry and len(registry) == 3
    assert dict(registry.items()) == {"cherry": 3, "apple": 1, "banana": 2} == dict(registry)
    assert registry.get("kiwi", None) is None  # with a default: as dict.get
    with pytest.raises(KeyError):
        registry["kiwi"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(registry, "apple", 100)  # replaces without complaint
        mp.setitem(registry, "kiwi", 4)
        assert (registry.get("apple"), registry.get("kiwi")) == (100, 4)
    assert dict(registry) == {"cherry": 3, "apple": 1, "banana": 2}
    saved = dict(registry)
    registry.clear()
    registry.update(saved)
    assert registry.names() == ["apple", "banana", "cherry"]


def test_a_copy_is_a_registry_of_its_own():
    registry = fruits()
    clone = registry.copy()
    clone.register("kiwi", 4)
    assert "kiwi" not in registry and clone.kind == "fruit" and clone.error is FruitError
    with pytest.raises(FruitError, match="Did you mean 'kiwi'"):
        clone.get("kiwii")


# module that fills the registry, the registry, its kind, its error, a typo, the hint
REGISTRIES = [
    ("miaudit.attacks", "miaudit.attacks.registry", "_REGISTRY", "attack", AttackError,
     "rmiaa", "Did you mean rmia"),
    ("miaudit.data", "miaudit.data.registry", "_REGISTRY", "dataset", DataError,
     "mnst", "Did you mean 'mnist'?"),
    ("miaudit.models", "miaudit.models.registry", "_REGISTRY", "architecture", ConfigError,
     "mlpp", "Did you mean 'mlp'?"),
    ("miaudit.protocol", "miaudit.protocol", "_DESIGNS", "design", ConfigError,
     "onlin", "Did you mean 'online'?"),
    ("miaudit.studies.registry", "miaudit.studies.registry", "_STUDIES", "study", StudyError,
     "smok", "Did you mean 'smoke'?"),
    ("miaudit.signals.defences", "miaudit.signals.defences", "_DEFENCES", "defence",
     ConfigError, "top-kk", "Did you mean 'top-k'?"),
    ("miaudit.privacy.canaries", "miaudit.privacy.canaries", "_KINDS", "canary kind",
     ConfigError, "naturel", "Did you mean 'natural'?"),
]


@pytest.mark.parametrize(("filler", "module", "attribute", "kind", "error", "typo", "hint"),
                         REGISTRIES, ids=[r[3] for r in REGISTRIES])
def test_every_registry_is_a_registry(filler, module, attribute, kind, error, typo, hint):
    importlib.import_module(filler)
    owner = importlib.import_module(module)
    if kind == "study":
        owner._load_builtins()
    registry = getattr(owner, attribute)
    assert isinstance(registry, Registry)
    assert registry.kind == kind
    assert len(registry) >= 2
    with pytest.raises(error) as err:
        registry.get(typo)
    assert hint in str(err.value)
