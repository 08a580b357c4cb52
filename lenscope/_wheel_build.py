"""Build hook, named in pyproject.toml (``[tool.setuptools] cmdclass``): the wheel bundles the app.

The repository keeps ``app.py``, ``pages/``, ``.streamlit/`` and the shipped ``data/`` at its top level (where
``streamlit run app.py`` and the tests expect them); a wheel has only ``lenscope`` at the top level of
site-packages, so :class:`BuildPy` copies those four into ``lenscope/_bundle/`` of the build tree, beside the
packages. ``lenscope.store.settings.APP_ROOT`` is the one place that resolves them at run time (the repository
root in a checkout, ``lenscope/_bundle`` installed). An editable install bundles nothing: it runs the checkout.

Setuptools loads this file by its path at build time (it does not import the ``lenscope`` package), and the
wheel leaves it out. A wheel is built from a checkout (``pip wheel .``); the four items must be there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = "_bundle"  # lenscope/_bundle in the wheel: keep in step with cache/settings.py (APP_ROOT)
ITEMS = ("app.py", "pages", ".streamlit", "data", "docs", "mkdocs.yml")
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", ".DS_Store")


class BuildPy(build_py):
    """setuptools' build_py, plus the bundled app (app.py, pages/, .streamlit/, data/, docs/) under lenscope/_bundle."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if not (package == "lenscope" and m[1] == Path(__file__).stem)]

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "lenscope" / BUNDLE
        missing = [item for item in ITEMS if not (ROOT / item).exists()]
        if missing:
            raise FileNotFoundError(f"cannot bundle {', '.join(missing)}: not in {ROOT} (build the wheel from a "
                                    "checkout of the repository: `python -m pip wheel --no-deps .`)")
        shutil.rmtree(target, ignore_errors=True)
        for item in ITEMS:
            source = ROOT / item
            if source.is_dir():
                shutil.copytree(source, target / item, ignore=_SKIP)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target / item)
