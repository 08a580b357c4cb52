"""The dependency rules of the README, read from the imports of every module (function-level ones too):
models and analysis are pure computation, cache is the store, lenscope holds jobs / CLI / figures / app glue,
pages only draw; no import cycles anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("analysis", "models", "cache", "lenscope")
INTERNAL = (*PACKAGES, "pages", "app")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, Path]:
    files = [p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")]
    files += list((REPO / "pages").glob("*.py")) + [REPO / "app.py"]
    return {_module_name(p): p for p in files}


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


def _under(imp: str, *prefixes: str) -> bool:
    return any(imp == p or imp.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("layer, forbidden", [
    ("models", ("analysis", "cache", "lenscope", "pages", "streamlit")),
    ("analysis", ("cache", "lenscope", "pages", "streamlit")),
    ("cache", ("analysis", "lenscope", "pages", "streamlit")),
    ("lenscope", ("pages",)),
])
def test_layers_import_only_downwards(layer, forbidden):
    assert _violations(layer, lambda imp: _under(imp, *forbidden)) == []


def test_only_app_glue_imports_streamlit():
    outside = [v for v in _violations("lenscope", lambda imp: _under(imp, "streamlit"))
               if not v.startswith("lenscope.app")]
    assert outside == []


def test_figures_draw_without_the_store():
    assert _violations("lenscope.figures", lambda imp: _under(imp, "cache", "lenscope.jobs", "streamlit")) == []


def test_serving_simulation_needs_no_torch():
    assert _violations("analysis.serving", lambda imp: _under(imp, "torch")) == []


def test_pages_import_only_app_glue_jobs_and_figures():
    allowed = ("lenscope.app", "lenscope.jobs", "lenscope.figures")
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
    assert "models.target" in IMPORTS["models.engine"]
    assert "cache.store" in IMPORTS["lenscope.jobs.collect"]
    assert any(_under(imp, "lenscope.app") for imp in IMPORTS["app"])
