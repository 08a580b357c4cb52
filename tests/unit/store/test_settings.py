"""Settings of the app's model access (allowed roots, the model pool's bounds) from the environment, and where the
app, the shipped data and the data dir are in a checkout and in an installed wheel."""

import os
from pathlib import Path

import pytest
from huggingface_hub.constants import HF_HUB_CACHE

from lenscope.store import settings
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


# The data dir rule: LENSCOPE_DATA_DIR, else <repo>/cache/data in a checkout, else the per-user folder; a store an
# older installed copy kept inside the package is moved there.

REPO = Path(__file__).resolve().parents[3]


def test_a_checkout_finds_its_app_and_keeps_its_store_in_cache_data(monkeypatch):
    monkeypatch.delenv("LENSCOPE_DATA_DIR", raising=False)
    assert settings.CHECKOUT and settings.APP_ROOT == REPO and settings.SHIPPED_DATA == REPO / "data"
    assert (settings.APP_ROOT / "app.py").is_file() and (settings.SHIPPED_DATA / "results" / "manifest.json").is_file()
    assert settings.data_dir() == REPO / "cache" / "data"
    monkeypatch.setenv("LENSCOPE_DATA_DIR", "~/elsewhere")
    assert settings.data_dir() == Path.home() / "elsewhere"


@pytest.fixture
def installed(monkeypatch, tmp_path):
    """settings as in an installed wheel under tmp_path/site-packages, with a per-user folder under tmp_path."""
    package = tmp_path / "site-packages" / "lenscope"
    monkeypatch.setattr(settings, "CHECKOUT", False)
    monkeypatch.setattr(settings, "LEGACY_INSTALLED_DATA_DIR", package / "cache" / "data")
    monkeypatch.setattr(settings, "_REPORTED", set())
    monkeypatch.delenv("LENSCOPE_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return package / "cache" / "data"


def _old_store(legacy: Path) -> None:
    (legacy / "tensors").mkdir(parents=True)
    (legacy / "lenscope.db").write_bytes(b"db")
    (legacy / "tensors" / "1.npz").write_bytes(b"t")


def test_installed_the_data_dir_is_per_user_never_in_the_package(installed, monkeypatch, tmp_path, capsys):
    assert settings.data_dir() == tmp_path / "xdg" / "lenscope"
    assert get_settings().db_url == f"sqlite:///{tmp_path / 'xdg' / 'lenscope' / 'lenscope.db'}"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert settings.data_dir() == tmp_path / "home" / ".local" / "share" / "lenscope"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")  # the XDG spec: a relative path is ignored
    assert settings.data_dir() == tmp_path / "home" / ".local" / "share" / "lenscope"
    assert capsys.readouterr().err == ""


def test_an_old_store_inside_the_package_is_moved_once(installed, tmp_path, capsys):
    _old_store(installed)
    target = tmp_path / "xdg" / "lenscope"
    assert settings.data_dir() == target
    assert (target / "lenscope.db").read_bytes() == b"db" and (target / "tensors" / "1.npz").read_bytes() == b"t"
    assert not installed.exists()
    assert f"moved the store from {installed}" in capsys.readouterr().err
    assert settings.data_dir() == target and capsys.readouterr().err == ""


def test_an_old_store_is_copied_across_file_systems(installed, monkeypatch, tmp_path, capsys):
    _old_store(installed)
    rename = os.rename

    def no_cross_device(src, dst):
        if Path(src) == installed:
            raise OSError(18, "Invalid cross-device link")
        rename(src, dst)

    monkeypatch.setattr(settings.os, "rename", no_cross_device)
    target = tmp_path / "xdg" / "lenscope"
    assert settings.data_dir() == target
    assert (target / "tensors" / "1.npz").read_bytes() == b"t" and not installed.exists()
    assert not list(target.parent.glob("lenscope.moving-*"))
    assert "moved the store" in capsys.readouterr().err


def test_an_old_store_is_left_alone_when_the_per_user_one_exists(installed, tmp_path, capsys):
    _old_store(installed)
    target = tmp_path / "xdg" / "lenscope"
    target.mkdir(parents=True)
    assert settings.data_dir() == target and (installed / "lenscope.db").is_file()
    err = capsys.readouterr().err
    assert f"an older store is left at {installed}" in err and f"LENSCOPE_DATA_DIR={installed}" in err
    assert settings.data_dir() == target and capsys.readouterr().err == ""  # said once
