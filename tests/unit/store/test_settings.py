"""Settings of the app's model access: allowed roots and the model pool's bounds, from the environment."""

import os
from pathlib import Path

import pytest
from huggingface_hub.constants import HF_HUB_CACHE

from lenscope.store.settings import GIB, get_settings


def test_defaults_allow_the_working_dir_the_data_dir_and_the_hub_cache(data_dir, monkeypatch, tmp_path):
    for name in ("LENSCOPE_ALLOWED_MODEL_ROOTS", "LENSCOPE_MODEL_POOL_MODELS", "LENSCOPE_MODEL_POOL_GIB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    settings = get_settings()
    assert settings.allowed_model_roots == (tmp_path.resolve(), data_dir.resolve(), Path(HF_HUB_CACHE).resolve())
    assert (settings.model_pool_models, settings.model_pool_bytes) == (2, 4 * GIB)


def test_roots_and_bounds_are_set_by_the_environment(data_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("LENSCOPE_ALLOWED_MODEL_ROOTS", os.pathsep.join([str(tmp_path / "a"), "", str(tmp_path)]))
    monkeypatch.setenv("LENSCOPE_MODEL_POOL_MODELS", "3")
    monkeypatch.setenv("LENSCOPE_MODEL_POOL_GIB", "0.5")
    settings = get_settings()
    assert settings.allowed_model_roots == ((tmp_path / "a").resolve(), tmp_path.resolve())
    assert (settings.model_pool_models, settings.model_pool_bytes) == (3, GIB // 2)
    monkeypatch.setenv("LENSCOPE_ALLOWED_MODEL_ROOTS", "")
    assert get_settings().allowed_model_roots == ()


@pytest.mark.parametrize("name, value", [("LENSCOPE_MODEL_POOL_MODELS", "1.5"), ("LENSCOPE_MODEL_POOL_MODELS", "0"),
                                         ("LENSCOPE_MODEL_POOL_GIB", "-1"), ("LENSCOPE_MODEL_POOL_GIB", "inf"),
                                         ("LENSCOPE_MODEL_POOL_GIB", "lots")])
def test_a_bad_bound_is_a_clear_error(data_dir, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=f"{name} must be a positive"):
        get_settings()
