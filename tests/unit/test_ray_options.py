"""Ray stays optional: nothing imports it without ``--ray``, and its options fail early and clearly."""

import subprocess
import sys

import pytest

from lenscope.jobs.runs import ray_cluster
from lenscope.jobs.runs.ray_cluster import RayOptions


def test_nothing_imports_ray_without_the_flag():
    code = ("import sys, lenscope.cli, lenscope.jobs.runs.collect, lenscope.jobs.study.pipeline, "
            "lenscope.jobs.scheduler.qps_sweep; "
            "sys.exit('ray' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("kwargs", [{"workers": 0}, {"shard_size": 0}, {"max_retries": -1}])
def test_bad_options_are_refused(kwargs):
    with pytest.raises(ValueError):
        RayOptions(**kwargs)


def test_missing_ray_says_how_to_install(monkeypatch):
    monkeypatch.setattr(ray_cluster.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(RuntimeError, match="requirements-ray.txt"):
        ray_cluster.require_ray()
