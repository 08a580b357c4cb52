"""Model source resolution: embedded default, local files and dirs, and clear errors."""

import pytest

from lenscope.models.sources import DEFAULT_SOURCE, EMBEDDED_FILE, embedded_gguf_path, resolve_source


def test_embedded_default_is_found_without_import():
    path = embedded_gguf_path()
    assert path.name == EMBEDDED_FILE and path.stat().st_size > 50_000_000
    for spec in ("", None, "embedded:smollm2-135m-instruct"):
        source = resolve_source(spec)
        assert source.spec == DEFAULT_SOURCE and source.gguf_file == EMBEDDED_FILE


def test_second_embedded_model_is_assembled_once_and_unknown_names_are_refused():
    first = resolve_source("embedded:gemma3-270m")
    assert first.spec == "embedded:gemma3-270m" and first.gguf_file == "gemma-3-270m-q4_k_m.gguf"
    assert resolve_source("embedded:gemma3-270m") == first
    with pytest.raises(ValueError, match="unknown embedded model"):
        resolve_source("embedded:llama-70b")


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_source(str(tmp_path / "nope" / "model"))


def test_wrong_file_type_and_empty_dir(tmp_path):
    bad = tmp_path / "weights.bin"
    bad.write_bytes(b"x")
    with pytest.raises(ValueError, match="not a .gguf"):
        resolve_source(str(bad))
    with pytest.raises(ValueError, match="no config.json"):
        resolve_source(str(tmp_path))


def test_checkpoint_dir_and_hub_id(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_source(str(tmp_path)).gguf_file is None
    hub = resolve_source("Qwen/Qwen2.5-0.5B-Instruct")
    assert not hub.local and hub.path == "Qwen/Qwen2.5-0.5B-Instruct"


def test_unloadable_model_reports_source(tmp_path):
    from lenscope.models.target import TargetModel

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="could not load model"):
        TargetModel.load(str(tmp_path))
    with pytest.raises(ValueError, match="dtype"):
        TargetModel.load("", dtype="int3")


@pytest.fixture
def hub(monkeypatch):
    """The hub as ``hub_load_options`` sees it: offline or not, what the local cache holds, what the hub says."""
    import huggingface_hub

    state = {"offline": False, "cached": False, "answer": None}
    monkeypatch.setattr(huggingface_hub, "is_offline_mode", lambda: state["offline"])
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache",
                        lambda repo_id, filename: "/cache/config.json" if state["cached"] else None)

    def model_info(self, repo_id, timeout=None):
        if state["answer"] is not None:
            raise state["answer"]

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    return state


def test_an_unknown_hub_id_fails_fast_offline_unreachable_or_unknown(hub):
    from unittest.mock import Mock

    from huggingface_hub.errors import RepositoryNotFoundError

    from lenscope.models.sources import hub_load_options
    from lenscope.models.target import TargetModel

    hub["offline"] = True
    with pytest.raises(ValueError, match="not in the local Hugging Face cache and HF_HUB_OFFLINE is set"):
        TargetModel.load("nobody/nothing")
    hub["cached"] = True
    assert hub_load_options("nobody/nothing") == {"local_files_only": True}
    hub.update(offline=False, cached=False, answer=ConnectionError("Name or service not known"))
    with pytest.raises(ValueError, match="hub is not reachable .*Name or service not known"):
        hub_load_options("nobody/nothing")
    hub["cached"] = True
    assert hub_load_options("nobody/nothing") == {"local_files_only": True}
    hub["answer"] = RepositoryNotFoundError("404", response=Mock())
    with pytest.raises(ValueError, match="the model hub has no model 'nobody/nothing'"):
        hub_load_options("nobody/nothing")
    hub["answer"] = None
    assert hub_load_options("nobody/nothing") == {}
    with pytest.raises(ValueError, match="neither a local model path nor a hub id"):
        hub_load_options("not a hub id")
