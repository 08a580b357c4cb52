"""README.md and docs/ show only numbers rendered from data/: every rendered table agrees with data/results and
data/benchmarks, a changed number is caught, and the markers are read strictly."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from lenscope.cli import main
from lenscope.docs.blocks import BLOCKS, Renderer
from lenscope.docs.regions import RegionError, regions, rendered
from lenscope.docs.site import check, documented_files, sources_of, write
from lenscope.jobs.study.shipped import _read_study

REPO = Path(__file__).resolve().parents[3]


def test_every_rendered_table_agrees_with_data() -> None:
    stale = check(REPO)
    assert not stale, f"run `python -m lenscope docs`: {'; '.join(map(str, stale))}"


def test_readme_and_the_docs_render_the_study() -> None:
    names = {r.name for p in documented_files(REPO) for r in regions(p.read_text(), str(p))}
    assert {"findings", "claims", "dataset", "benchmarks", "cli"} <= names
    assert names <= set(BLOCKS)
    assert "findings" in {r.name for r in regions((REPO / "README.md").read_text())}


def test_the_readme_is_short_and_its_links_resolve() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "make run" in text.split("\n## ")[1] and "make test" in text.split("\n## ")[1]  # the two commands first
    links = re.findall(r"\]\(((?!https?:)[^)#\s]+)", text)
    assert links and all((REPO / link).exists() for link in links), [x for x in links if not (REPO / x).exists()]


def _copy_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "clone"
    shutil.copytree(REPO / "data" / "results", root / "data" / "results")
    if (REPO / "data" / "benchmarks").is_dir():
        shutil.copytree(REPO / "data" / "benchmarks", root / "data" / "benchmarks")
    shutil.copy(REPO / "README.md", root / "README.md")
    shutil.copytree(REPO / "docs", root / "docs", ignore=shutil.ignore_patterns("*.png"))
    return root


def _change_first_claim(results: Path) -> None:
    """Move the first claim's difference by one token and re-sign the file in the manifest, as a new study would."""
    path = results / "claims.json"
    payload = json.loads(path.read_text())
    payload["claims"][0]["difference"] += 1.0
    path.write_text(json.dumps(payload))
    manifest_path = results / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["claims.json"]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest_path.write_text(json.dumps(manifest))
    _read_study.cache_clear()  # the manifest is read once a process; a new study comes with a new process


def test_a_changed_number_fails_the_check_until_rendered(tmp_path: Path, capsys) -> None:
    root = _copy_checkout(tmp_path)
    assert check(root) == []
    _change_first_claim(root / "data" / "results")
    stale = check(root)
    assert stale and all("claims" in d.blocks for d in stale if d.path.name != "README.md")
    assert any(d.path == root / "docs" / "study" / "index.md" for d in stale)
    assert main(["docs", "--check", "--root", str(root)]) == 1
    assert "disagree with data/" in capsys.readouterr().err
    assert set(write(root)) == {d.path for d in stale}
    assert check(root) == [] and main(["docs", "--check", "--root", str(root)]) == 0


def test_markers_pair_up_and_name_known_blocks() -> None:
    good = "intro\n<!-- lenscope:begin a -->\nold\n<!-- lenscope:end a -->\noutro"
    assert rendered(good, lambda name: f"new {name}") == "intro\n<!-- lenscope:begin a -->\nnew a\n" \
                                                         "<!-- lenscope:end a -->\noutro"
    for bad, says in [("<!-- lenscope:begin a -->\n", "never closed"),
                      ("<!-- lenscope:end a -->\n", "closes no open block"),
                      ("<!-- lenscope:begin a -->\n<!-- lenscope:begin b -->", "begins inside"),
                      ("<!-- lenscope:begin A_1 -->", "alone on its line"),
                      ("<!-- lenscope:begin a -->\n<!-- lenscope:end b -->", "closes no open block")]:
        with pytest.raises(RegionError, match=says):
            list(regions(bad))
    with pytest.raises(RegionError, match="no rendered block 'nope'"):
        Renderer(sources_of(REPO))("nope")


def test_the_cli_reference_lists_every_command_and_flag() -> None:
    import argparse

    from lenscope.cli import build_parser, command_parser

    text = Renderer(sources_of(REPO))("cli")
    parser = build_parser()
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    for name in commands:
        assert f"\n## {name}\n" in f"\n{text}"
        for action in command_parser(parser, name)._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            for flag in action.option_strings:
                assert f"`{flag}`" in text, (name, flag)
