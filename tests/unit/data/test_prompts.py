"""Prompt sources from the PyPI packages."""

import pytest

from lenscope.analysis.data.prompts import complete_json_objects, humaneval_prompts, sample_prompts, sharegpt_first_turns


def test_truncated_json_array_keeps_complete_objects():
    assert complete_json_objects('[{"a": 1}, {"b": [2, 3]}, {"c": "cut') == [{"a": 1}, {"b": [2, 3]}]
    assert complete_json_objects('[ {"a": 1} ]') == [{"a": 1}]


def test_sources_load():
    turns = sharegpt_first_turns()
    assert len(turns) > 10_000 and all(t.text.strip() and t.source == "sharegpt" for t in turns[:100])
    problems = humaneval_prompts()
    assert len(problems) == 164 and problems[0].scenario == "reasoning"
    assert "def " in problems[0].text


def test_sampling_is_reproducible_and_weighted():
    a = sample_prompts(12, {"sharegpt": 3, "humaneval": 1}, seed=5, max_chars=500)
    b = sample_prompts(12, {"sharegpt": 3, "humaneval": 1}, seed=5, max_chars=500)
    assert a == b and len(a) == 12 and len({p.text for p in a}) == 12
    assert sum(p.source == "humaneval" for p in a) == 3
    assert all(len(p.text) <= 500 for p in a)
    assert sample_prompts(12, {"sharegpt": 1}, seed=6) != a


def test_sampling_errors():
    with pytest.raises(ValueError, match="unknown prompt sources"):
        sample_prompts(3, {"lmsys": 1})
    with pytest.raises(ValueError, match="only 164"):
        sample_prompts(200, {"humaneval": 1})
    with pytest.raises(ValueError, match="at least 1"):
        sample_prompts(0)
