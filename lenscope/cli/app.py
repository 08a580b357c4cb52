"""``lenscope app``: start the Streamlit app (``streamlit run app.py``) from a checkout or an installed wheel.

The app's files are where :data:`lenscope.store.settings.APP_ROOT` says (the repository root in a checkout, the
copy bundled in the wheel when installed). Streamlit reads ``.streamlit/config.toml`` from the working directory
only, so the bundled one is passed as command-line flags, whatever the working directory; ``--port`` and
``--address`` override it. Hub ids load from the local Hugging Face cache only, as with ``make run``, unless
``HF_HUB_OFFLINE`` is set (``HF_HUB_OFFLINE=0 lenscope app`` downloads).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from lenscope.cli._common import number
from lenscope.models.numbers import Range

PORT = Range(1, 65535, integral=True)


def register(subparsers) -> None:
    p = subparsers.add_parser("app", help="start the Streamlit app (offline: hub ids from the local cache)")
    p.add_argument("--port", type=number(PORT), default=8501, help="TCP port (default 8501)")
    p.add_argument("--address", default=None,
                   help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 exposes it)")
    p.set_defaults(func=run_app, interrupt_note="stopped")


def config_flags(config: Path) -> list[str]:
    """The options of a ``.streamlit/config.toml`` as ``streamlit run`` flags (``--server.port=8501``)."""
    if not config.is_file():
        return []
    flags = []
    for section, options in tomllib.loads(config.read_text()).items():
        for key, value in options.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            flags.append(f"--{section}.{key}={text}")
    return flags


def streamlit_command(port: int = 8501, address: str | None = None, root: Path | None = None) -> list[str]:
    """The ``python -m streamlit run`` command line of the app under ``root`` (default: APP_ROOT)."""
    from lenscope.store.settings import APP_ROOT

    root = root or APP_ROOT
    script = root / "app.py"
    if not script.is_file():
        raise FileNotFoundError(f"the app is not at {script} (a wheel built without it? rebuild it from a checkout)")
    flags = config_flags(root / ".streamlit" / "config.toml")
    flags += [f"--server.port={port}", "--server.headless=true", "--browser.gatherUsageStats=false"]
    if address:
        flags.append(f"--server.address={address}")
    return [sys.executable, "-m", "streamlit", "run", str(script), *flags]


def run_app(args: argparse.Namespace) -> int:
    command = streamlit_command(args.port, args.address)
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    print(f"lenscope app: {Path(command[4])} on port {args.port}", file=sys.stderr, flush=True)
    if os.name == "posix":  # the server replaces this process: signals (Ctrl-C, kill) reach it directly
        os.execve(sys.executable, command, env)
    return subprocess.call(command, env=env)
