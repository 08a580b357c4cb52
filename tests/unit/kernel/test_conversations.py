"""Conversation-level task keys, leak groups and grouped folds, on hand-made prompts and on the shipped study:
no conversation in two folds, and no test prompt inside a training prompt of its fold."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest

from lenscope.analysis.core.splits import (
    FOLDS,
    MIN_CONTAINED_WORDS,
    conversation_id,
    fold_of,
    leak_groups,
    normalize,
    role_in_fold,
    split_of,
    task_key,
)
from lenscope.store.settings import SHIPPED_DATA

STUDY = SHIPPED_DATA / "generations" / "study-generations.jsonl.gz"


def test_task_keys_name_the_conversation_for_every_source():
    assert conversation_id("79vV0aT_508") == "79vV0aT" == conversation_id("79vV0aT")
    assert task_key("sharegpt", "79vV0aT_508", "a") == task_key("sharegpt-long", "79vV0aT_2", "b") == "sharegpt:79vV0aT"
    assert task_key("humaneval", "HumanEval/27", "x") == "humaneval:HumanEval/27"
    assert task_key("user", "", "typed") == task_key("user", "", "typed") != task_key("user", "", "other")


def test_containment_links_conversations_and_short_prompts_do_not():
    long_q = "please explain how the tax brackets of this country work for a new resident"
    keys = ["sharegpt:a", "sharegpt:b", "sharegpt:c", "sharegpt:d", "sharegpt:e"]
    texts = [long_q, f"Context first.\n\n  {long_q.replace(' ', '   ')}  and more", "how are you",
             "hi, how are you doing today?", "unrelated prompt about gardening tomatoes in early spring weather"]
    groups = leak_groups(keys, texts)
    assert groups[0] == groups[1] == "sharegpt:a"  # contained after whitespace normalisation
    assert groups[2] == "sharegpt:c" and groups[3] == "sharegpt:d"  # under MIN_CONTAINED_WORDS: not linked
    assert groups[4] == "sharegpt:e"
    assert leak_groups(["x:1", "x:2"], ["same text here", "same   text here"]) == ["x:1", "x:1"]
    assert leak_groups(keys[2:4], texts[2:4], min_words=1) == ["sharegpt:c", "sharegpt:c"]


def test_folds_and_roles_are_hashes_of_the_group():
    groups = [f"g{i}" for i in range(3000)]
    folds = [fold_of(g) for g in groups]
    assert set(folds) == set(range(FOLDS)) and all(fold_of(g) == f for g, f in zip(groups, folds))
    assert all(abs(folds.count(f) / len(groups) - 1 / FOLDS) < 0.03 for f in range(FOLDS))
    for fold in range(FOLDS):
        roles = [role_in_fold(g, fold) for g in groups]
        assert all((r == "test") == (f == fold) for r, f in zip(roles, folds))
        val = sum(r == "val" for r in roles) / sum(r != "test" for r in roles)
        assert 0.12 < val < 0.18
    assert [split_of(g) for g in groups] == [role_in_fold(g, 0) for g in groups]
    with pytest.raises(ValueError, match="fold"):
        role_in_fold("g", FOLDS)
    with pytest.raises(ValueError, match="2 folds"):
        fold_of("g", 1)


def test_shipped_study_has_no_conversation_in_two_folds_and_no_contained_test_prompt():
    with gzip.open(STUDY, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh][1:]
    keys = [task_key(r["source"], r["ref"], r["prompt"]) for r in records]
    groups = leak_groups(keys, [r["prompt"] for r in records])
    folds_of_conversation = defaultdict(set)
    for key, group in zip(keys, groups):
        folds_of_conversation[key].add(fold_of(group))
    assert len(folds_of_conversation) == 2562 and all(len(f) == 1 for f in folds_of_conversation.values())
    long_ids = {conversation_id(r["ref"]) for r in records if r["source"] == "sharegpt-long"}
    chat_ids = {conversation_id(r["ref"]) for r in records if r["source"] == "sharegpt"}
    assert long_ids & chat_ids  # the long and chat scenarios share conversations: one key each
    texts = [normalize(r["prompt"]) for r in records]
    contained = 0
    for fold in range(FOLDS):
        test = {t for t, g in zip(texts, groups) if fold_of(g) == fold}
        train = "\x00".join({t for t, g in zip(texts, groups) if fold_of(g) != fold})
        contained += sum(len(t.split()) >= MIN_CONTAINED_WORDS and t in train for t in test)
    assert contained == 0
