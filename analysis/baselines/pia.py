"""PiA-style baseline: ask the target model for a length estimate before it answers, and parse it.

The question asks for a number of words, because small models have no notion of tokens. Answers are
junk-tolerant parsed: digits (``"250"``, ``"1,200"``, ``"1.5k"``), number words (``"about fifty"``,
``"two hundred and ten"``), ranges (``"100-200"``, ``"100 to 200"``, ``"between 100 and 200"`` -> midpoint),
and units converted to tokens with the factors of :data:`TOKENS_PER_UNIT`. A number followed by
``tokens`` or ``words`` is preferred over other numbers in the answer. An answer without a usable number
gets the fallback (the training median) and is flagged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from lenscope.models.engine import BatchedEngine, GenerationSettings
from lenscope.models.target import TargetModel

PIA_TEMPLATE = ("Before you answer the request below, estimate how long your answer will be. "
                "Reply with only the number of words your answer will have, nothing else.\n\n"
                "Request:\n{prompt}")
# Tokens per unit. English text with a BPE tokenizer averages about 0.75 words per token, so one word is
# ~1.33 tokens; a sentence ~20 words, a line ~12 words, a paragraph ~100 words, a character ~1/4 token.
TOKENS_PER_WORD = 1.33
TOKENS_PER_UNIT = {"token": 1.0, "word": TOKENS_PER_WORD, "sentence": 20 * TOKENS_PER_WORD,
                   "line": 12 * TOKENS_PER_WORD, "paragraph": 100 * TOKENS_PER_WORD, "character": 0.25,
                   "char": 0.25}
DEFAULT_UNIT = "word"

_SMALL = {w: i for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
     "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"])}
_TENS = {w: 10 * (i + 2) for i, w in enumerate(["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty",
                                                 "ninety"])}
_MULTIPLIERS = {"hundred": 100, "dozen": 12}
_WORD = "|".join(sorted([*_SMALL, *_TENS, *_MULTIPLIERS, "thousand"], key=len, reverse=True))
_NUMBER_WORDS = re.compile(rf"\b(?:an?\s+(?=hundred|thousand|dozen))?(?:{_WORD})(?:(?:\s+and\s+|[\s-]+)(?:{_WORD}))*\b")
_NUMBER = r"\d+(?:\.\d+)?"
_UNIT = r"(tokens?|words?|sentences?|lines?|paragraphs?|characters?|chars?)\b"
_RANGE = re.compile(rf"(?:between\s+({_NUMBER})\s+and\s+({_NUMBER})|({_NUMBER})\s*(?:-|to)\s*({_NUMBER}))"
                    rf"(?:\s*{_UNIT})?")
_SINGLE = re.compile(rf"({_NUMBER})(?:\s*{_UNIT})?")


@dataclass(frozen=True)
class LengthEstimate:
    """A parsed estimate in tokens; ``flagged`` when the answer held no usable number (fallback used)."""

    tokens: float
    flagged: bool
    reason: str


def _words_value(span: str) -> int:
    """Value of a spelled-out number such as "two hundred and ten", "a thousand" or "fifty-five"."""
    total, current = 0, 0
    for word in re.findall(r"[a-z]+", span):
        if word in _SMALL or word in _TENS:
            current += _SMALL.get(word, 0) + _TENS.get(word, 0)
        elif word in _MULTIPLIERS:
            current = max(current, 1) * _MULTIPLIERS[word]
        elif word == "thousand":
            total, current = total + max(current, 1) * 1000, 0
    return total + current


def _normalise(answer: str) -> str:
    text = answer.lower().replace("\u2013", "-").replace("\u2014", "-").replace("~", " ")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    text = re.sub(rf"({_NUMBER})\s*k\b", lambda m: str(float(m.group(1)) * 1000), text)
    return _NUMBER_WORDS.sub(lambda m: str(_words_value(m.group(0))), text)


def _unit_factor(unit: str | None) -> float:
    if not unit:
        return TOKENS_PER_UNIT[DEFAULT_UNIT]
    return TOKENS_PER_UNIT[unit.rstrip("s") if unit not in TOKENS_PER_UNIT else unit]


def parse_length_answer(answer: str, fallback: float, cap: float | None = None) -> LengthEstimate:
    """Tokens estimated by ``answer`` (bare numbers are words, as the question asks), at most ``cap`` (e.g. the
    longest answer a dataset has: an estimate above it is clipped and said so); ``fallback`` and a flag when
    there is no positive number in it."""
    text = _normalise(answer or "")
    candidates: list[tuple[int, float, str | None, str]] = []
    taken: list[tuple[int, int]] = []
    for m in _RANGE.finditer(text):
        lo, hi = (float(g) for g in (m.group(1, 2) if m.group(1) else m.group(3, 4)))
        if 0 < lo <= hi:
            candidates.append((m.start(), (lo + hi) / 2, m.group(5), "range midpoint"))
            taken.append(m.span())
    for m in _SINGLE.finditer(text):
        if not any(a <= m.start() < b for a, b in taken) and float(m.group(1)) > 0:
            candidates.append((m.start(), float(m.group(1)), m.group(2), "number"))
    if not candidates:
        return LengthEstimate(float(fallback), True, "no positive number in the answer; training median used")
    candidates.sort(key=lambda c: (c[2] is None or _unit_factor(c[2]) not in
                                   (TOKENS_PER_UNIT["token"], TOKENS_PER_UNIT["word"]), c[2] is None, c[0]))
    _, value, unit, how = candidates[0]
    tokens, reason = value * _unit_factor(unit), f"{how} in {unit or DEFAULT_UNIT + 's (default)'}"
    if cap is not None and tokens > cap:
        return LengthEstimate(float(cap), False, f"{reason}, {tokens:.4g} tokens clipped to {cap:g}")
    return LengthEstimate(tokens, False, reason)


def ask_lengths(target: TargetModel, prompts: Sequence[str], max_new_tokens: int = 24) -> list[str]:
    """The target's greedy answers to the PiA question about each of ``prompts``, sampled as one batch by
    the collection engine (no features recorded)."""
    settings = GenerationSettings(max_new_tokens=max_new_tokens, temperature=0.0, seed=0)
    ids = [target.chat_ids(PIA_TEMPLATE.format(prompt=p)) for p in prompts]
    answers = dict(BatchedEngine(target, features="none").run(ids, [settings] * len(ids)))
    return [answers[i].text.strip() for i in range(len(prompts))]
