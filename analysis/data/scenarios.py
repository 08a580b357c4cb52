"""ForeLen-style scenarios as prompt builders: short chat, long inputs, step-by-step reasoning, RL sampling.

* ``chat``: ShareGPT first user turns (short, as in LMSYS-style benchmarks).
* ``long``: long multi-turn ShareGPT conversations flattened into one prompt (earlier turns as context plus
  the last user message as the question); the oldest turns are dropped until the prompt fits a token budget
  that leaves room for the answer in the model's context.
* ``reasoning``: step-by-step prompts, half code (HumanEval) and half math word problems (ShareGPT first
  turns that look like arithmetic questions), each with a chain-of-thought instruction.
* ``rl``: prompts from the same math/code pool phrased as in GRPO pipelines, sampled ``K = 4`` times at
  temperature 1.0 (:data:`SCENARIO_SAMPLING`), so one prompt has several true lengths. ``reasoning`` takes
  the pool from the front and ``rl`` from the back, so both are disjoint while ``2 n`` fits the pool.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache

from lenscope.analysis.data.prompts import (
    PromptItem,
    humaneval_prompts,
    sample_prompts,
    sharegpt_conversations,
    sharegpt_first_turns,
)

SCENARIOS = ("chat", "long", "reasoning", "rl")
# (samples per prompt, temperature) each scenario is collected with unless the user overrides them.
SCENARIO_SAMPLING = {"chat": (1, 0.7), "long": (1, 0.7), "reasoning": (1, 0.7), "rl": (4, 1.0)}
LONG_TOKEN_CAP = 2048
COT_MATH = "{problem}\n\nThink step by step, then give the final answer."
COT_CODE = "Think step by step about the algorithm first, then complete this Python function.\n\n{code}"
RL_MATH = "{problem}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
RL_CODE = "Solve the following programming task. Reason step by step, then write the full function.\n\n{code}"
LONG_HEADER = "Below is an earlier conversation between a user and an assistant.\n\n"
LONG_FOOTER = "\n\nContinue the conversation by answering the user's last message.\n\nUser: {question}"
ROLES = {"human": "User", "user": "User", "gpt": "Assistant", "chatgpt": "Assistant", "bard": "Assistant",
         "bing": "Assistant", "assistant": "Assistant"}

TokenCounter = Callable[[str], int]
_MATH_WORDS = re.compile(r"\b(how many|how much|calculate|compute|solve|what is the (?:sum|product|probability)|"
                         r"probability|percent|average|total)\b", re.IGNORECASE)
_NOT_MATH = re.compile(r"\b(code|html|css|javascript|python|sql|java|error|api|function|program|script|essay|"
                       r"blog|article|story|write|suggest|you are|you're)\b", re.IGNORECASE)


def approx_tokens(text: str) -> int:
    """Rough token count (about 4 characters per token in English) when no tokenizer is at hand."""
    return max(1, len(text) // 4)


def long_token_budget(context_length: int, max_new_tokens: int, cap: int = LONG_TOKEN_CAP, margin: int = 64) -> int:
    """Prompt-token budget of the long scenario: at most ``cap`` and leaving room for the answer plus the
    chat template (``margin``) in the model's context."""
    budget = min(cap, context_length - max_new_tokens - margin)
    if budget < 128:
        raise ValueError(f"a context of {context_length} tokens leaves no room for long prompts with "
                         f"{max_new_tokens} new tokens")
    return budget


def chat_prompts(n: int, seed: int = 0, max_chars: int = 2000) -> list[PromptItem]:
    """``n`` short ShareGPT first turns."""
    return sample_prompts(n, {"sharegpt": 1.0}, seed=seed, max_chars=max_chars)


@lru_cache(maxsize=1)
def math_problems() -> tuple[PromptItem, ...]:
    """Distinct ShareGPT first turns that look like math word problems: a digit, a question, an arithmetic
    cue word, no code, writing or role-play request, at most 800 characters."""
    found = {p.text: p for p in sharegpt_first_turns()
             if len(p.text) <= 800 and "?" in p.text and re.search(r"\d", p.text)
             and _MATH_WORDS.search(p.text) and not _NOT_MATH.search(p.text)}
    return tuple(found.values())


def _reasoning_pool(seed: int) -> list[tuple[str, PromptItem]]:
    """Math problems and HumanEval tasks, each shuffled with ``seed`` and interleaved (math, code, ...)."""
    rng = random.Random(seed)
    math, code = list(math_problems()), list(humaneval_prompts())
    rng.shuffle(math)
    rng.shuffle(code)
    pool = []
    for i in range(max(len(math), len(code))):
        pool += [("math", math[i])] if i < len(math) else []
        pool += [("code", code[i])] if i < len(code) else []
    return pool


def _code_body(item: PromptItem) -> str:
    return item.text.split("\n\n", 1)[-1]


def _phrase(kind: str, item: PromptItem, scenario: str) -> PromptItem:
    if kind == "math":
        text = (COT_MATH if scenario == "reasoning" else RL_MATH).format(problem=item.text)
    else:
        text = (COT_CODE if scenario == "reasoning" else RL_CODE).format(code=_code_body(item))
    return replace(item, text=text, scenario=scenario)


def _take(pool: Sequence, n: int, what: str) -> Sequence:
    if n < 1:
        raise ValueError("n must be at least 1")
    if n > len(pool):
        raise ValueError(f"asked for {n} {what} prompts but only {len(pool)} are available")
    return pool[:n]


def reasoning_prompts(n: int, seed: int = 0) -> list[PromptItem]:
    """``n`` chain-of-thought math/code prompts (front of the pool)."""
    return [_phrase(kind, item, "reasoning") for kind, item in _take(_reasoning_pool(seed), n, "reasoning")]


def rl_prompts(n: int, seed: int = 0) -> list[PromptItem]:
    """``n`` GRPO-style math/code prompts (back of the pool); collect them with ``SCENARIO_SAMPLING["rl"]``."""
    return [_phrase(kind, item, "rl") for kind, item in _take(_reasoning_pool(seed)[::-1], n, "rl")]


def _turns(conv: dict) -> list[tuple[str, str]]:
    """(role, text) of the user/assistant turns of a ShareGPT record, ending on a user turn."""
    turns = [(ROLES[t.get("from", "")], (t.get("value") or "").strip()) for t in conv.get("conversations") or []
             if t.get("from") in ROLES and (t.get("value") or "").strip()]
    while turns and turns[-1][0] != "User":
        turns.pop()
    return turns


def flatten_conversation(turns: Sequence[tuple[str, str]], count_tokens: TokenCounter, max_tokens: int,
                         min_context_turns: int = 2) -> str | None:
    """One prompt from a conversation ending on a user turn: as many of the most recent earlier turns as fit
    ``max_tokens`` (by ``count_tokens``) as context, then the last user message. None when fewer than
    ``min_context_turns`` context turns fit."""
    if not turns or turns[-1][0] != "User":
        return None
    question, context = turns[-1][1], list(turns[:-1])
    footer = LONG_FOOTER.format(question=question)
    room = max_tokens - count_tokens(LONG_HEADER) - count_tokens(footer)
    kept: list[str] = []
    for role, text in reversed(context):
        cost = count_tokens(f"{role}: {text}\n\n")
        if cost > room:
            break
        kept.insert(0, f"{role}: {text}")
        room -= cost
    while len(kept) >= min_context_turns:
        prompt = LONG_HEADER + "\n\n".join(kept) + footer
        if count_tokens(prompt) <= max_tokens:
            return prompt
        kept.pop(0)
    return None


def long_prompts(n: int, seed: int = 0, max_tokens: int = LONG_TOKEN_CAP, min_tokens: int = 512,
                 count_tokens: TokenCounter = approx_tokens, min_turns: int = 5) -> list[PromptItem]:
    """``n`` flattened multi-turn ShareGPT conversations (at least ``min_turns`` turns) whose prompt has
    ``min_tokens..max_tokens`` tokens."""
    if n < 1:
        raise ValueError("n must be at least 1")
    if min_tokens > max_tokens:
        raise ValueError(f"min_tokens {min_tokens} exceeds the budget of {max_tokens} tokens")
    candidates = []
    for conv in sharegpt_conversations():
        turns = _turns(conv)
        if len(turns) >= min_turns and sum(len(t) for _, t in turns) >= 3 * min_tokens:
            candidates.append((str(conv.get("id", "")), turns))
    random.Random(seed).shuffle(candidates)
    items = []
    for ref, turns in candidates:
        prompt = flatten_conversation(turns, count_tokens, max_tokens)
        if prompt is not None and count_tokens(prompt) >= min_tokens:
            items.append(PromptItem(prompt, "sharegpt-long", ref, "long"))
            if len(items) == n:
                return items
    raise ValueError(f"asked for {n} long prompts but only {len(items)} conversations fit "
                     f"{min_tokens}..{max_tokens} tokens")


def build_scenario(name: str, n: int, seed: int = 0, max_chars: int = 2000,
                   count_tokens: TokenCounter = approx_tokens, max_prompt_tokens: int = LONG_TOKEN_CAP) -> list[PromptItem]:
    """The ``n`` prompts of scenario ``name`` (``max_chars`` applies to chat, the token budget to long)."""
    if name == "chat":
        return chat_prompts(n, seed, max_chars)
    if name == "long":
        return long_prompts(n, seed, max_prompt_tokens, min(512, max_prompt_tokens // 2), count_tokens)
    if name == "reasoning":
        return reasoning_prompts(n, seed)
    if name == "rl":
        return rl_prompts(n, seed)
    raise ValueError(f"unknown scenario {name!r}; choose from {SCENARIOS}")
