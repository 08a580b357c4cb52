"""The docs' Python example (docs/guide/predictions.md) runs as written, on a fresh data dir (the shipped predictor
and study file)."""

from __future__ import annotations

import re

import pytest

from tests.apptest import REPO


def docs_example() -> str:
    """The first Python block after the predictions guide's "## From Python" heading."""
    text = (REPO / "docs" / "guide" / "predictions.md").read_text()
    section = text[text.index("## From Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.model
def test_the_docs_python_example_runs(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(docs_example(), "docs/guide/predictions.md", "exec"), namespace)  # noqa: S102 - the documented example
    predicted, runs, dataset = namespace["predicted"], namespace["runs"], namespace["dataset"]
    assert len(predicted) == 2 and (predicted["q10_tokens"] <= predicted["q90_tokens"]).all()
    assert predicted["predicted_tokens"].between(1, 2048).all()
    assert len(runs) == 3014 and runs.attrs["origin"] and set(runs["split"]) == {"train", "val", "test"}
    assert len(dataset) == len(runs) and "output_tokens" in dataset.column_names
    assert (tmp_path / "study.parquet").stat().st_size > 0
    assert "egtp" in capsys.readouterr().out
