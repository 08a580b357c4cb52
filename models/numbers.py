"""Valid ranges of numeric inputs: the one check behind every number a user or a caller gives lenscope.

A :class:`Range` says which numbers an input takes (finite always; bounds, open or closed; integers only or not).
The concept that owns a number states its range next to itself (the sampling settings in :mod:`lenscope.models.engine`,
the simulated cluster in :mod:`lenscope.analysis.scheduler.engine`, ...); settings objects check their fields with
:func:`check_fields`, and the CLI turns the same ranges into argparse types (:func:`lenscope.cli._common.number`), so
a flag, a form and a Python caller refuse the same values with the same words. It lives in the lowest layer so that
models, analysis and lenscope can all use it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass


def _text(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


@dataclass(frozen=True)
class Range:
    """The numbers an input takes: finite, between ``low`` and ``high`` (None: unbounded; ``*_open``: the bound
    itself excluded), integers only with ``integral``."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integral: bool = False

    def describe(self) -> str:
        """``an integer >= 1``, ``a finite number in (0, 1]``, ``a positive finite number``, ...: what the range
        takes, in words (every range takes finite numbers only)."""
        kind = "an integer" if self.integral else "a finite number"
        low, high = self.low, self.high
        if low is not None and high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"{kind} in {left}{_text(low)}, {_text(high)}{right}"
        if low == 0 and self.low_open:
            return "a positive integer" if self.integral else "a positive finite number"
        if low is not None:
            return f"{kind} {'>' if self.low_open else '>='} {_text(low)}"
        if high is not None:
            return f"{kind} {'<' if self.high_open else '<='} {_text(high)}"
        return kind

    def contains(self, value: object) -> bool:
        """Whether ``value`` (a Python or NumPy number) lies in the range; False for anything that is not a number."""
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.integral and not isinstance(value, numbers.Integral):
            return False
        x = float(value)
        if not math.isfinite(x):
            return False
        if self.low is not None and (x <= self.low if self.low_open else x < self.low):
            return False
        return self.high is None or (x < self.high if self.high_open else x <= self.high)

    def check(self, name: str, value: object):
        """``value`` when it lies in the range; else ValueError ``<name> must be <range>, not <value>``."""
        if not self.contains(value):
            raise ValueError(f"{name} must be {self.describe()}, not {value!r}")
        return value

    def parse(self, text: str) -> int | float:
        """The number ``text`` spells (an int for integral ranges) when it lies in the range; else ValueError
        ``expected <range>, not '<text>'`` (so ``nan``, ``inf``, ``2.5`` for an integer and out-of-range values are
        all refused)."""
        raw = text.strip() if isinstance(text, str) else text
        try:
            value = int(raw) if self.integral else float(raw)
        except (TypeError, ValueError):
            value = None
        if value is None or not self.contains(value):
            raise ValueError(f"expected {self.describe()}, not {text!r}")
        return value

    def parse_list(self, text: str) -> list[int | float]:
        """Comma-separated numbers, each in the range (empty parts skipped; an empty text gives an empty list)."""
        values = []
        for part in (p.strip() for p in text.split(",")):
            if part:
                try:
                    values.append(self.parse(part))
                except ValueError:
                    raise ValueError(f"expected comma-separated numbers, each {self.describe()}, not {part!r} "
                                     f"(in {text!r})") from None
        return values


POSITIVE_INT = Range(1, integral=True)
NON_NEGATIVE_INT = Range(0, integral=True)
POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)
OPEN_FRACTION = Range(0, 1, low_open=True, high_open=True)
UNIT_INTERVAL = Range(0, 1)
# Seeds of torch generators and NumPy (default_rng and the legacy RandomState) alike; stored as JSON integers.
SEED = Range(0, 2**32 - 1, integral=True)


def check_fields(obj: object, ranges: Mapping[str, Range], prefix: str = "") -> None:
    """Check the attributes ``ranges`` names on ``obj`` (None passes: an option left unset); the first one out of
    its range raises ValueError naming ``<prefix><field>``. For ``__post_init__`` of settings dataclasses."""
    for name, valid in ranges.items():
        value = getattr(obj, name)
        if value is not None:
            valid.check(prefix + name, value)
