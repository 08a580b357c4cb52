"""The wheel installs and runs: only ``lenscope`` at the top level, the app, pages, ``.streamlit/`` and the shipped
data bundled, the declared dependencies enough to install it without an index, the ``lenscope`` console command
and the app's health check from a fresh virtual environment, outside the repository.

The virtual environment sees this interpreter's site-packages (``--system-site-packages``, and a ``.pth`` naming them
where this interpreter is a virtual environment itself), so the runtime dependencies are found there and nothing is
downloaded; the wheel's own ``lenscope`` (not the checkout's editable
install) is the one imported, which the test checks."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What the wheel is built from: the checkout without its history, tests, store and build leftovers.
_LEFT_OUT = {".git", ".gpu", "tests", "__pycache__", "test-artifacts", ".benchmarks", ".ruff_cache", ".pytest_cache",
             "build", "dist", ".venv", ".whl", ".gl"}


def _pins(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def test_declared_dependencies_are_the_requirement_files():
    """pyproject's dependencies and extras list what requirements.txt, -test and -ray pin (make and Docker install
    those files); the embedded models are no dependency (they install with --no-deps)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == _pins(REPO / "requirements.txt")
    assert project["optional-dependencies"]["test"] == _pins(REPO / "requirements-test.txt")
    assert project["optional-dependencies"]["ray"] == _pins(REPO / "requirements-ray.txt")
    assert project["optional-dependencies"]["docs"] == _pins(REPO / "requirements-docs.txt")
    assert "torch==2.13.0" in project["dependencies"]
    embedded = {pin.split("==")[0] for pin in _pins(REPO / "requirements-embedded.txt")}
    declared = {pin.split("==")[0] for pins in [project["dependencies"], *project["optional-dependencies"].values()]
                for pin in pins}
    assert embedded.isdisjoint(declared)
    assert project["scripts"] == {"lenscope": "lenscope.cli:main"}


def test_lenscope_app_runs_streamlit_with_the_app_s_config():
    """``lenscope app`` runs app.py where APP_ROOT says, its .streamlit/config.toml passed as flags (streamlit reads
    that file from the working directory only); --address and --port override it."""
    from lenscope.cli import main
    from lenscope.cli.app import streamlit_command

    command = streamlit_command(8600, "0.0.0.0")
    assert command[1:5] == ["-m", "streamlit", "run", str(REPO / "app.py")]
    flags = command[5:]
    assert {"--server.maxUploadSize=50", "--client.showErrorDetails=none", "--server.port=8600"} <= set(flags)
    assert flags.index("--server.address=0.0.0.0") > flags.index("--server.address=127.0.0.1")
    with pytest.raises(SystemExit) as refused:  # argparse: the port's range, one line
        main(["app", "--port", "0"])
    assert refused.value.code == 2


def _copy_source(target: Path) -> Path:
    def ignore(folder: str, names: list[str]) -> list[str]:
        here = Path(folder)
        return [n for n in names if n in _LEFT_OUT or n.endswith(".egg-info")
                or (here == REPO / "cache" and n == "data")]

    shutil.copytree(REPO, target, ignore=ignore)
    return target


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    # No pip configuration (no find-links, no index): every dependency must already be installed.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "HF_HUB_OFFLINE": "1",
            **extra}


def _run(command: list, cwd: Path, timeout: float = 300, **env: str) -> str:
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=_env(**env), capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{command} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.wheel
@pytest.mark.timeout(600)
def test_the_wheel_installs_into_a_fresh_venv_and_runs(tmp_path):
    # Build from a copy, so that setuptools' build/ and egg-info never land in the checkout.
    source = _copy_source(tmp_path / "src")
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist, "."], source)
    (wheel,) = dist.glob("lenscope-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"lenscope", wheel.name.split("-py")[0] + ".dist-info"}
    bundled = {n.removeprefix("lenscope/_bundle/") for n in names if n.startswith("lenscope/_bundle/")}
    assert {"app.py", ".streamlit/config.toml", "data/results/manifest.json", "data/generations/README.md",
            "data/traces/README.md"} <= bundled
    assert {f"pages/{p.name}" for p in (REPO / "pages").glob("*.py")} <= bundled
    shipped = {str(p.relative_to(REPO)) for p in (REPO / "data").rglob("*") if p.is_file()}
    assert shipped <= bundled
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "lenscope/_wheel_build.py" not in names and not any("__pycache__" in n for n in names)

    # A fresh venv without pip of its own (the ensurepip one is older than torch's setuptools requirement): this
    # interpreter's pip installs into it; --no-index and no pip configuration: nothing downloaded or found elsewhere.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], tmp_path)
    python, lenscope = venv / "bin" / "python", venv / "bin" / "lenscope"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).strip())
    # --system-site-packages reaches the base interpreter's packages only: where this interpreter is a venv itself
    # (`make test PYTHON=.venv/bin/python`), a .pth names its site-packages too (as plain paths: the editable
    # lenscope's own .pth there is not run)
    (site / "_tests_interpreter.pth").write_text("\n".join(sorted({sysconfig.get_paths()[k] for k in
                                                                   ("purelib", "platlib")})) + "\n")
    _run([python, "-m", "pip", "install", "--no-index", wheel], tmp_path)
    # Every declared dependency was installed already: the wheel alone went into the venv.
    assert sorted(p.name for p in site.iterdir() if not p.name.startswith("_")) == [
        "lenscope", "lenscope-0.1.0.dist-info"]
    assert lenscope.is_file()

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    data = tmp_path / "lenscope-data"
    probe = ("import json, lenscope, lenscope.store.settings as s, lenscope.jobs.study.shipped as r; "
             "print(json.dumps({'module': lenscope.__file__, 'checkout': s.CHECKOUT, 'app': str(s.APP_ROOT), "
             "'results': str(r.RESULTS_DIR), 'data': str(s.get_settings().data_dir)}))")
    found = json.loads(_run([python, "-c", probe], outside, LENSCOPE_DATA_DIR=str(data)))
    assert Path(found["module"]).is_relative_to(site), "the checkout's editable lenscope was imported, not the wheel's"
    assert not found["checkout"] and Path(found["app"]) == site / "lenscope" / "_bundle"
    assert (Path(found["results"]) / "manifest.json").is_file() and Path(found["data"]) == data
    # Without LENSCOPE_DATA_DIR: the per-user folder, never inside the package.
    home = tmp_path / "home"
    found = json.loads(_run([python, "-c", probe], outside, HOME=str(home), XDG_DATA_HOME=""))
    assert Path(found["data"]) == home / ".local" / "share" / "lenscope"

    assert "app" in _run([lenscope, "--help"], outside)
    port = _free_port()
    log = tmp_path / "app.log"
    with log.open("w") as out:
        server = subprocess.Popen([lenscope, "app", "--port", str(port)], cwd=outside, stdout=out,
                                  stderr=subprocess.STDOUT, env=_env(LENSCOPE_DATA_DIR=str(data)))
    try:
        deadline, health = time.monotonic() + 120, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5) as response:
                    health = response.read().decode()
                    break
            except OSError:
                time.sleep(0.5)
        assert health == "ok", f"no health check (exit {server.poll()}):\n{log.read_text()[-3000:]}"
        assert str(site / "lenscope" / "_bundle" / "app.py") in log.read_text()
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
