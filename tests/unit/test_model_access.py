"""What the browser may load: embedded models, hub ids, paths under the allowed roots; nothing else, with one
message whether or not the path exists. The CLI keeps full access."""

from pathlib import Path

import pytest

from lenscope.app.model_access import browser_source
from lenscope.models.sources import ModelSource


@pytest.fixture
def roots(tmp_path) -> tuple[Path, Path]:
    """An allowed root with a checkpoint dir and a .gguf file in it, and a folder outside every root."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    (allowed / "ckpt").mkdir(parents=True)
    (allowed / "ckpt" / "config.json").write_text("{}")
    (allowed / "m.gguf").write_bytes(b"x")
    outside.mkdir()
    return allowed.resolve(), outside


def test_embedded_hub_ids_and_paths_under_a_root_are_allowed(roots):
    allowed, _ = roots
    for spec in ("", " ", "embedded:gemma3-270m", "embedded:unknown"):
        assert browser_source(spec, [allowed]) == spec.strip()
    assert browser_source(str(allowed / "ckpt"), [allowed]) == ModelSource(str(allowed / "ckpt"), str(allowed / "ckpt"))
    for spec in (str(allowed / "m.gguf"), str(allowed / "ckpt" / ".." / "m.gguf")):
        assert browser_source(spec, [allowed]) == ModelSource(spec, str(allowed), "m.gguf")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        browser_source(str(allowed / "missing"), [allowed])
    assert browser_source("Qwen/Qwen2.5-0.5B-Instruct", [allowed]) == ModelSource(
        "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", local=False)
    assert browser_source("gpt2", []) == ModelSource("gpt2", "gpt2", local=False)


def test_a_path_under_a_root_is_loaded_as_its_resolved_path(roots, monkeypatch):
    """A relative name under a root, even hub-shaped, is a local path: its source holds the resolved folder, so
    nothing reads the name again (as a path from another working directory, or as a hub id)."""
    allowed, _ = roots
    (allowed / "owner").mkdir()
    (allowed / "owner" / "name").symlink_to(allowed / "ckpt")
    monkeypatch.chdir(allowed)
    assert browser_source("owner/name", [allowed]) == ModelSource("owner/name", str(allowed / "ckpt"))


def test_a_hub_shaped_name_that_exists_outside_the_roots_is_refused(roots, monkeypatch):
    _, outside = roots
    (outside / "owner" / "name").mkdir(parents=True)
    (outside / "owner" / "name" / "config.json").write_text("{}")
    monkeypatch.chdir(outside)  # "owner/name" is a local checkpoint here (transformers would load it), not a root
    with pytest.raises(ValueError, match="is not a model the app may load"):
        browser_source("owner/name", [])


def test_a_symlink_named_like_a_cached_hub_id_that_leads_outside_is_refused(roots, monkeypatch):
    """The working directory is a root; ``HuggingFaceTB/SmolLM2-135M`` in it is a symlink to a folder outside:
    refused with the very message of the outside path itself, never taken for the hub id."""
    allowed, outside = roots
    (outside / "secret").mkdir()
    (outside / "secret" / "config.json").write_text("{}")
    (allowed / "HuggingFaceTB").mkdir()
    (allowed / "HuggingFaceTB" / "SmolLM2-135M").symlink_to(outside / "secret")
    (allowed / "HuggingFaceTB" / "dangling").symlink_to(outside / "gone")
    monkeypatch.chdir(allowed)
    for spec in ("HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/dangling"):
        with pytest.raises(ValueError) as refused:
            browser_source(spec, [allowed])
        with pytest.raises(ValueError) as direct:
            browser_source(str(outside / "secret"), [allowed])
        assert str(refused.value) == str(direct.value).replace(repr(str(outside / "secret")), repr(spec))


def test_a_hub_source_whose_name_appeared_locally_is_not_loaded(roots, monkeypatch):
    """Between the check and the load a folder of the hub id's name appears: the load refuses it."""
    from lenscope.models.target import TargetModel

    _, outside = roots
    source = browser_source("owner/name", [])
    (outside / "owner" / "name").mkdir(parents=True)
    (outside / "owner" / "name" / "config.json").write_text("{}")
    monkeypatch.chdir(outside)
    with pytest.raises(ValueError, match="a local path of that name exists"):
        TargetModel.load(source)


@pytest.mark.parametrize("make", [
    lambda p: p.mkdir() or (p / "config.json").write_text("{}"),
    lambda p: p.write_bytes(b"gguf"),
])
def test_paths_outside_the_roots_get_one_message_whether_or_not_they_exist(roots, make):
    allowed, outside = roots
    spec = str(outside / "model.gguf")
    with pytest.raises(ValueError, match="is not a model the app may load") as missing:
        browser_source(spec, [allowed])
    make(outside / "model.gguf")
    with pytest.raises(ValueError) as existing:
        browser_source(spec, [allowed])
    assert str(existing.value) == str(missing.value)
    for spec in ("/etc/passwd", "~/.ssh/id_rsa", "../../etc", "a/b/c", "C:\\models\\x", "~nouser-xyz/m", "a\x00b"):
        with pytest.raises(ValueError, match="is not a model the app may load"):
            browser_source(spec, [allowed])


def test_a_symlink_under_a_root_that_leads_outside_is_refused(roots):
    allowed, outside = roots
    (outside / "secret").mkdir()
    (allowed / "link").symlink_to(outside / "secret")
    with pytest.raises(ValueError, match="is not a model the app may load"):
        browser_source(str(allowed / "link"), [allowed])


def test_the_app_glue_applies_the_policy_and_loads_a_failing_spec_once(roots, monkeypatch):
    """``get_target``: outside paths never reach the loader; a failed load is not repeated on the rerun."""
    import lenscope.app.widgets as widgets

    allowed, outside = roots
    monkeypatch.setenv("LENSCOPE_ALLOWED_MODEL_ROOTS", str(allowed))
    calls = []

    def failing_load(spec, device, dtype):
        calls.append(spec)
        raise ValueError(f"could not load model {spec!r}")

    monkeypatch.setattr(widgets.TargetModel, "load", failing_load)
    widgets._models.clear()
    with pytest.raises(ValueError, match="is not a model the app may load"):
        widgets.get_target(str(outside))
    for _ in range(2):
        with pytest.raises(ValueError, match="could not load model"):
            widgets.get_target(str(allowed / "ckpt"))
    assert calls == [ModelSource(str(allowed / "ckpt"), str(allowed / "ckpt"))]
    widgets._models.clear()
