"""The package's import graph has no cycle: every import counts, module-level or inside a
function (a function-level import is how cycles hide), so each layer imports only the ones
below it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import miaudit

SRC = Path(miaudit.__file__).parent.parent


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# The layers, lowest first: a module imports its own layer and those below it, never one above
# (docs/contributing.md). A layer is a subpackage (miaudit.train), a top-level module
# (miaudit.formatting) or, where named, one module of a subpackage: config.sections (the
# sections' value types, which privacy and the verdict read) sits below the rest of config
# (a run's whole config and its checks, which consult the privacy layer's canary kinds).
LAYERS = (
    "errors", "version", "io", "registry", "formatting", "runtime", "cache", "data", "models",
    "train", "signals", "protocol", "attacks", "metrics", "records", "config.sections",
    "privacy", "verdict", "config", "report", "experiments", "pipeline", "null_calibration",
    "external", "studies", "api", "cli",
)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports, in the working tree."""
    return import_graph_of({_module(p): (p.name == "__init__.py", p.read_text(encoding="utf-8"))
                            for p in (SRC / "miaudit").rglob("*.py")})


def import_graph_of(sources: dict[str, tuple[bool, str]]) -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from a import b`` counts as ``a.b`` when
    that is a module, else as ``a``), from each module's (is a package ``__init__``, source)."""
    paths = sources
    graph: dict[str, set[str]] = {m: set() for m in paths}
    for module, (is_package, text) in paths.items():
        package = module.split(".") if is_package else module.split(".")[:-1]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, `level - 1` packages up
                    parent = package[: len(package) - node.level + 1]
                    base = ".".join(parent + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base
                           for a in node.names]
            else:
                continue
            graph[module] |= {t for t in targets if t in paths and t != module}
    return graph


def layer_of(module: str) -> str | None:
    """The layer a module belongs to: the longest of :data:`LAYERS` that names it or a
    package above it (None for the package itself)."""
    parts = module.split(".")[1:]
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in LAYERS:
            return ".".join(parts[:end])
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a module imports one of a higher layer."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    found = []
    for module, targets in graph.items():
        for target in targets:
            a, b = layer_of(module), layer_of(target)
            if a is not None and b is not None and rank[b] > rank[a]:
                found.append((module, target))
    return sorted(found)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_detector_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_function_level_imports():
    graph = import_graph()
    # miaudit.cli.main imports the API inside its command functions only, and the API the pipeline
    assert "miaudit.api" in graph["miaudit.cli.main"]
    assert "miaudit.pipeline.runner" in graph["miaudit.api"]
    assert "miaudit.train.loop" in graph["miaudit.train.stacked"]


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_every_package_is_in_a_layer():
    modules = import_graph()
    assert {layer_of(m) for m in modules} - {None} == set(LAYERS)


def test_the_detector_finds_a_planted_upward_import():
    graph = {"miaudit.data.x": {"miaudit.report.y"}, "miaudit.report.y": {"miaudit.data.x"}}
    assert upward_imports(graph) == [("miaudit.data.x", "miaudit.report.y")]


def test_layers_import_one_way():
    """No module imports a layer above its own."""
    assert upward_imports(import_graph()) == []


def test_the_pipeline_is_a_package_of_one_way_stages():
    graph = import_graph()
    stages = ["models", "canaries", "querying", "evaluate", "checkpoint_audit", "runner"]
    for i, stage in enumerate(stages):
        later = {f"miaudit.pipeline.{s}" for s in stages[i + 1:]}
        assert not graph[f"miaudit.pipeline.{stage}"] & later, stage


def test_the_attack_command_loads_no_study_code(tmp_path, digits_bank):
    """`miaudit attack` pays for the attacks, not for the studies (the `study` command's
    argument parser, which imports nothing, is loaded)."""
    bank = tmp_path / "bank.npz"
    digits_bank.save(bank)
    args = ["attack", str(bank), "--target", "0", "--attacks", "loss", "--out",
            str(tmp_path / "out")]
    code = ("import sys\nfrom miaudit.cli.main import main\n"
            f"assert main({args!r}) == 0\n"
            "print(sorted(m for m in sys.modules if m.startswith('miaudit.studies')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_attack_command_loads_no_torch_nor_scipy_stats(tmp_path, digits_bank):
    """`miaudit attack` on a bank needs numpy, scipy.special and matplotlib only: torch (~1.1 s
    to import; the scorers load it when they train), scipy.stats and scipy.optimize (~0.5 s;
    loaded by the functions that use them) stay out (`miaudit attack`'s wall time)."""
    bank = tmp_path / "bank.npz"
    digits_bank.save(bank)
    args = ["attack", str(bank), "--target", "0", "--attacks", "loss,lira-offline,rmia",
            "--out", str(tmp_path / "out")]
    code = ("import sys\nfrom miaudit.cli.main import main\n"
            f"assert main({args!r}) == 0\n"
            "print(sorted(m for m in ('torch', 'scipy.stats', 'scipy.optimize') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"
