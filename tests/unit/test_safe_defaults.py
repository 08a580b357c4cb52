"""Safe defaults of the served app: localhost only, offline, no tracebacks in the browser; exposing it is explicit."""

import subprocess
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_streamlit_config_binds_localhost_and_hides_tracebacks():
    config = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"
    assert config["client"]["showErrorDetails"] == "none"


def test_make_run_binds_localhost_unless_told_otherwise():
    def dry_run(*extra: str) -> str:
        out = subprocess.run(["make", "-n", "run", *extra], cwd=REPO, capture_output=True, text=True, check=True)
        return next(line for line in out.stdout.splitlines() if "streamlit run" in line)

    assert "--server.address 127.0.0.1" in dry_run()
    assert "--server.address 0.0.0.0" in dry_run("ADDRESS=0.0.0.0")
    assert "--server.address=0.0.0.0" in (REPO / "Dockerfile").read_text()  # the container is the boundary
    assert dry_run().startswith("HF_HUB_OFFLINE=1 ")  # hub ids load from the local cache, never wait on the hub
    assert dry_run("HF_HUB_OFFLINE=0").startswith("HF_HUB_OFFLINE=0 ")
    assert "ENV HF_HUB_OFFLINE=1" in (REPO / "Dockerfile").read_text()
