"""ForeLen-style scenario builders and ``lenscope collect --scenario``."""

import pytest

from lenscope.analysis.data.scenarios import (
    LONG_FOOTER,
    LONG_HEADER,
    SCENARIO_SAMPLING,
    approx_tokens,
    build_scenario,
    chat_prompts,
    flatten_conversation,
    long_prompts,
    long_token_budget,
    reasoning_prompts,
    rl_prompts,
)
from lenscope.cli import main


def words(text: str) -> int:
    return len(text.split())


def test_chat_prompts_are_short_sharegpt_first_turns():
    items = chat_prompts(5, seed=3, max_chars=300)
    assert len(items) == 5 and {p.scenario for p in items} == {"chat"} and {p.source for p in items} == {"sharegpt"}
    assert all(len(p.text) <= 300 for p in items)


def test_reasoning_and_rl_mix_math_and_code_and_do_not_overlap():
    reasoning, rl = reasoning_prompts(6, seed=1), rl_prompts(6, seed=1)
    assert len(reasoning) == len(rl) == 6
    assert {p.scenario for p in reasoning} == {"reasoning"} and {p.scenario for p in rl} == {"rl"}
    assert sorted(p.source for p in reasoning) == ["humaneval"] * 3 + ["sharegpt"] * 3
    assert all("step by step" in p.text.lower() for p in reasoning + rl)
    assert not {p.ref for p in reasoning} & {p.ref for p in rl}
    assert reasoning == reasoning_prompts(6, seed=1) and reasoning != reasoning_prompts(6, seed=2)
    with pytest.raises(ValueError, match="only"):
        reasoning_prompts(10_000)


def test_flatten_keeps_the_latest_turns_that_fit():
    turns = [("User", "a " * 50), ("Assistant", "b " * 50), ("User", "c " * 50), ("Assistant", "d " * 50),
             ("User", "what now?")]
    prompt = flatten_conversation(turns, words, max_tokens=130)
    assert prompt.startswith(LONG_HEADER) and prompt.endswith(LONG_FOOTER.format(question="what now?"))
    assert "c c" in prompt and "d d" in prompt and "a a" not in prompt and "b b" not in prompt
    assert words(prompt) <= 130
    assert flatten_conversation(turns, words, max_tokens=60) is None       # fewer than 2 context turns fit
    assert flatten_conversation(turns[:-1], words, max_tokens=1000) is None  # must end on a user turn


def test_long_prompts_fit_the_budget():
    items = long_prompts(3, seed=0, max_tokens=700, min_tokens=350)
    assert len(items) == 3 and {p.scenario for p in items} == {"long"}
    assert all(350 <= approx_tokens(p.text) <= 700 and "Assistant:" in p.text for p in items)
    assert len({p.ref for p in items}) == 3


def test_budget_and_dispatch():
    assert long_token_budget(8192, 512) == 2048
    assert long_token_budget(2048, 512) == 2048 - 512 - 64
    with pytest.raises(ValueError, match="no room"):
        long_token_budget(600, 512)
    assert [p.scenario for p in build_scenario("rl", 2)] == ["rl", "rl"]
    with pytest.raises(ValueError, match="unknown scenario"):
        build_scenario("poetry", 2)
    assert SCENARIO_SAMPLING["rl"] == (4, 1.0)


@pytest.fixture
def cli_target(target, monkeypatch):
    """``lenscope collect`` reuses the session model instead of loading its own."""
    monkeypatch.setattr("lenscope.cli.collect.load_target", lambda args: target)
    return target


def test_collect_rl_scenario_samples_each_prompt_four_times(data_dir, cli_target):
    from lenscope.store.store import Store

    assert main(["collect", "--scenario", "rl", "--n", "1", "--max-new-tokens", "3", "--dataset", "rl"]) == 0
    store = Store()
    runs = store.runs_frame("rl")
    assert len(runs) == 4 and runs["prompt_id"].nunique() == 1 and set(runs["scenario"]) == {"rl"}
    settings = [store.load_run(r, layers=[]).settings for r in runs["run_id"]]
    assert {s["temperature"] for s in settings} == {1.0} and sorted(s["seed"] for s in settings) == [0, 1, 2, 3]


def test_collect_long_scenario_respects_the_token_budget(data_dir, cli_target):
    from lenscope.store.store import Store

    assert main(["collect", "--scenario", "long", "--n", "1", "--max-new-tokens", "2", "--dataset", "long",
                 "--max-prompt-tokens", "400"]) == 0
    runs = Store().runs_frame("long")
    assert len(runs) == 1 and runs["scenario"].iloc[0] == "long"
    assert 200 <= runs["prompt_tokens"].iloc[0] <= 400 + 64


def test_collect_rejects_sources_with_scenario(data_dir, cli_target, capsys):
    assert main(["collect", "--scenario", "chat", "--sources", "sharegpt=1", "--n", "1"]) == 2
    assert "exclusive" in capsys.readouterr().err
