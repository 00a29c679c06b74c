"""The shape of the package at a git revision: modules, top-level modules, repeated file names,
long files, long functions and imports that run up the layers (the layers and the import
graph are tests/test_imports.py's). For comparing a refactor's before and after.

    python bench/code_shape.py 28cf33d HEAD

Reads the revisions with `git show` (the working tree is not touched).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_imports import import_graph_of, upward_imports  # noqa: E402

LONG_FILE = 400  # lines
LONG_FUNCTION = 80  # lines


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def shape(rev: str) -> dict:
    paths = [p for p in _git("ls-tree", "-r", "--name-only", rev, "src/miaudit").split()
             if p.endswith(".py")]
    lines, long_functions, sources = {}, [], {}
    for path in paths:
        text = _git("show", f"{rev}:{path}")
        lines[path] = text.count("\n")
        parts = path.removeprefix("src/").removesuffix(".py").split("/")
        package = parts[-1] == "__init__"
        sources[".".join(parts[:-1] if package else parts)] = (package, text)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > LONG_FUNCTION:
                    long_functions.append((length, f"{path}:{node.name}"))
    names = Counter(p.rsplit("/", 1)[1] for p in paths if not p.endswith("__init__.py"))
    top = [p for p in paths if p.count("/") == 2 and not p.endswith("__init__.py")]
    return {"modules": len(paths), "lines": sum(lines.values()), "top_level": top,
            "repeated": {n: c for n, c in names.items() if c > 1},
            "long_files": sorted(((n, p) for p, n in lines.items() if n > LONG_FILE),
                                 reverse=True),
            "long_functions": sorted(long_functions, reverse=True),
            "upward": upward_imports(import_graph_of(sources))}


def main(revs: list[str]) -> None:
    for rev in revs:
        s = shape(rev)
        print(f"## {rev} ({_git('rev-parse', '--short', rev).strip()})")
        print(f"modules {s['modules']}, lines {s['lines']}")
        print(f"top-level modules ({len(s['top_level'])}): "
              + ", ".join(p.rsplit("/", 1)[1] for p in s["top_level"]))
        print("repeated file names: " + (", ".join(f"{n} x{c}" for n, c in
                                                  sorted(s["repeated"].items())) or "none"))
        print(f"files over {LONG_FILE} lines ({len(s['long_files'])}): "
              + ", ".join(f"{p.removeprefix('src/miaudit/')} {n}" for n, p in s["long_files"]))
        print(f"functions over {LONG_FUNCTION} lines ({len(s['long_functions'])}): "
              + ", ".join(f"{p.removeprefix('src/miaudit/')} {n}"
                          for n, p in s["long_functions"]))
        print(f"imports up the layers ({len(s['upward'])}): "
              + ", ".join(f"{a.removeprefix('miaudit.')} -> {b.removeprefix('miaudit.')}"
                          for a, b in s["upward"]))
        print()


if __name__ == "__main__":
    main(sys.argv[1:] or ["HEAD"])
