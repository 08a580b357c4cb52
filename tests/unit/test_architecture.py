"""The dependency rules of the README, read from the imports of every module (function-level ones too):
lenscope.models and lenscope.analysis are pure computation, lenscope.store (folder cache/) is the store and knows
neither, the rest of lenscope holds jobs / CLI / figures / app glue, pages only draw; no import cycles anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Where each importable package lives in the repository (pyproject's package-dir: only `lenscope` installs).
FOLDERS = {"lenscope.analysis": "analysis", "lenscope.models": "models", "lenscope.store": "cache",
           "lenscope": "lenscope"}
LOWER = ("lenscope.analysis", "lenscope.models", "lenscope.store")
INTERNAL = ("lenscope", "pages", "app")


def _module_name(package: str, folder: Path, path: Path) -> str:
    parts = [package, *path.relative_to(folder).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, Path]:
    found = {}
    for package, folder in FOLDERS.items():
        found |= {_module_name(package, REPO / folder, p): p for p in (REPO / folder).rglob("*.py")}
    found |= {f"pages.{p.stem}": p for p in (REPO / "pages").glob("*.py")}
    return found | {"app": REPO / "app.py"}


def _under(imp: str, *prefixes: str) -> bool:
    return any(imp == p or imp.startswith(p + ".") for p in prefixes)


SOURCES = _sources()


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports; ``from pkg import mod`` counts as ``pkg.mod`` when that is a module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in SOURCES}
    return found


IMPORTS = {name: _imports(path) for name, path in SOURCES.items()}


def _top(module: str) -> str:
    return module.split(".")[0]


def _violations(prefix: str, forbidden) -> list[str]:
    return sorted(f"{name} imports {imp}" for name, imps in IMPORTS.items()
                  if name == prefix or name.startswith(prefix + ".") for imp in imps if forbidden(imp))


def _app_layer(imp: str) -> bool:
    """``lenscope`` itself: jobs, CLI, figures, app glue (not the three packages below it)."""
    return _under(imp, "lenscope") and not _under(imp, *LOWER)


@pytest.mark.parametrize("layer, forbidden", [
    ("lenscope.models", ("lenscope.analysis", "lenscope.store", "pages", "streamlit")),
    ("lenscope.analysis", ("lenscope.store", "pages", "streamlit")),
    ("lenscope.store", ("lenscope.analysis", "lenscope.models", "pages", "streamlit")),
    ("lenscope", ("pages",)),
])
def test_layers_import_only_downwards(layer, forbidden):
    upward = _app_layer if layer in LOWER else (lambda imp: False)
    assert _violations(layer, lambda imp: _under(imp, *forbidden) or upward(imp)) == []


def test_only_app_glue_imports_streamlit():
    outside = [v for v in _violations("lenscope", lambda imp: _under(imp, "streamlit"))
               if not v.startswith(("lenscope.app", "lenscope.benchmarks"))]
    assert outside == []


def test_figures_draw_without_the_store():
    assert _violations("lenscope.figures", lambda imp: _under(imp, "cache", "lenscope.jobs", "streamlit")) == []


def test_scheduler_simulation_needs_no_torch():
    assert _violations("lenscope.analysis.scheduler", lambda imp: _under(imp, "torch")) == []


def test_pages_import_only_app_glue_jobs_and_figures():
    # and the papers' reported numbers, shown beside ours (constants, nothing computed)
    allowed = ("lenscope.app", "lenscope.jobs", "lenscope.figures", "lenscope.analysis.papers")
    bad = [f"{name} imports {imp}" for name, imps in IMPORTS.items() if name == "app" or name.startswith("pages.")
           for imp in imps if _top(imp) in INTERNAL and not _under(imp, *allowed)]
    assert bad == []


def test_pages_are_short_views():
    long = {p.name: n for p in (REPO / "pages").glob("*.py") if (n := len(p.read_text().splitlines())) > 120}
    assert long == {}


def test_no_import_cycles():
    graph = {name: {imp for imp in imps if imp in SOURCES and imp != name} for name, imps in IMPORTS.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert cycles == []


def test_the_rules_see_real_imports():
    """The checks above are not vacuous: known edges are found."""
    assert "lenscope.models.target" in IMPORTS["lenscope.models.engine"]
    assert "lenscope.store.store" in IMPORTS["lenscope.jobs.runs.collect"]
    assert any(_under(imp, "lenscope.app") for imp in IMPORTS["app"])


def test_the_wheel_lists_every_package():
    """pyproject names each package (package-dir maps the card's folders under ``lenscope``): none is left out."""
    import tomllib
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {**FOLDERS, "lenscope": "lenscope"}
    tree = {_module_name(package, REPO / folder, init) for package, folder in FOLDERS.items()
            for init in (REPO / folder).rglob("__init__.py")}
    assert sorted(config["packages"]) == sorted(tree)


def _defined(path: Path) -> set[str]:
    """Top-level names a module defines or imports (what ``from it import name`` can find)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def test_every_imported_name_exists():
    """``from lenscope.x import name`` names something x defines, or a module under it: a name left behind by a
    move fails here, not in the page that imports it."""
    defined = {name: _defined(path) for name, path in SOURCES.items()}
    missing = sorted(f"{name} imports {node.module}.{alias.name}" for name, path in SOURCES.items()
                     for node in ast.walk(ast.parse(path.read_text()))
                     if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in SOURCES
                     for alias in node.names
                     if alias.name not in defined[node.module] and f"{node.module}.{alias.name}" not in SOURCES)
    assert missing == []


def test_stored_results_go_through_the_memo():
    """Result rows are read and written by the store's memo only (``Store.memo`` / ``stored`` / ``memo_many``): no
    job, page or glue calls ``get_result`` / ``put_result`` by hand."""
    by_hand = sorted(name for name, path in SOURCES.items() if not _under(name, "lenscope.store")
                     for node in ast.walk(ast.parse(path.read_text()))
                     if isinstance(node, ast.Attribute) and node.attr in ("get_result", "put_result"))
    assert by_hand == []
