"""What the browser may load: embedded models, hub ids, paths under the allowed roots; nothing else, with one
message whether or not the path exists. The CLI keeps full access."""

from pathlib import Path

import pytest

from lenscope.app.model_access import browser_source
from models.sources import ModelSource


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
    for spec in ("", " ", "embedded:gemma3-270m", "embedded:unknown", str(allowed / "ckpt"), str(allowed / "m.gguf"),
                 str(allowed / "ckpt" / ".." / "m.gguf"), str(allowed / "missing")):
        assert browser_source(spec, [allowed]) == spec.strip()
    assert browser_source("Qwen/Qwen2.5-0.5B-Instruct", [allowed]) == ModelSource(
        "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", local=False)
    assert browser_source("gpt2", []) == ModelSource("gpt2", "gpt2", local=False)


def test_a_hub_shaped_name_outside_the_roots_stays_a_hub_id_even_where_it_exists(roots, monkeypatch):
    _, outside = roots
    (outside / "owner" / "name").mkdir(parents=True)
    (outside / "owner" / "name" / "config.json").write_text("{}")
    monkeypatch.chdir(outside)  # "owner/name" is a local checkpoint here, but the cwd is not a root
    assert browser_source("owner/name", []) == ModelSource("owner/name", "owner/name", local=False)


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
    assert calls == [str(allowed / "ckpt")]
    widgets._models.clear()
