"""Iteration-time cost model of a serving instance and its calibration from a latency profile.

One iteration (a forward pass over the current batch) costs::

    step_s = a + b * batch_tokens + c * batch_size + d * context_tokens

``batch_tokens`` are the tokens computed in the iteration (all prompt tokens of a prefill, one
token per sequence in a decode step), ``batch_size`` the number of sequences and ``context_tokens``
the KV-cache tokens the batch attends to (sum of each sequence's prompt + generated tokens; zero
for a fresh prefill). Prefill and decode iterations have separate coefficients because prefill is
compute-bound and decode memory-bound. A phase may also carry a measured fixed cost per batch size
(``sizes``, fitted by :func:`fit_iterations`), which replaces ``a + c * batch_size`` for the sizes it
covers: on a CPU the step from 3 to 4 sequences can cost more than any other (the kernels change).

Defaults (``DEFAULT_COST``) approximate an 8B model in fp16 on one H100-class GPU with a vLLM-like
engine: decode 8 ms + 0.06 ms per sequence + 0.05 ms per 1k context tokens (about 8k tokens/s at a
batch of 256), prefill 10 ms + 0.04 ms per prompt token, KV transfer 1 ms + 5 us per token.
Calibrate other hardware with :func:`fit_cost_model` on a Splitwise-style profile
(``python -m lenscope calibrate-cost --profile splitwise_perf_model.csv``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from lenscope.models.numbers import NON_NEGATIVE, check_fields

# Every coefficient is a time in seconds (per token, per sequence, per context token, or fixed): finite, >= 0.
COEFFICIENT = NON_NEGATIVE


@dataclass(frozen=True)
class LinearCost:
    """Coefficients of ``a + b*batch_tokens + c*batch_size + d*context_tokens`` (seconds; each finite and >= 0);
    ``sizes[k]``, where given, is the measured fixed cost of ``k + 1`` sequences and replaces ``a + c*batch_size``."""

    a: float
    b: float
    c: float
    d: float
    sizes: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        check_fields(self, dict.fromkeys("abcd", COEFFICIENT))
        object.__setattr__(self, "sizes", tuple(self.sizes))
        for k, value in enumerate(self.sizes):
            COEFFICIENT.check(f"sizes[{k}]", value)

    def fixed_s(self, batch_size: float) -> float:
        """The cost of ``batch_size`` sequences before their tokens and context: measured, else ``a + c*size``."""
        if 0 < batch_size <= len(self.sizes) and batch_size == int(batch_size):
            return self.sizes[int(batch_size) - 1]
        return self.a + self.c * batch_size

    def step_s(self, batch_tokens: float, batch_size: float, context_tokens: float) -> float:
        return self.fixed_s(batch_size) + self.b * batch_tokens + self.d * context_tokens

    def decode_run_s(self, batch_size: int, context_tokens: float, steps: int) -> float:
        """Duration of ``steps`` decode iterations of a fixed batch whose context grows by one
        token per sequence per step (closed form of the arithmetic series)."""
        first = self.step_s(batch_size, batch_size, context_tokens)
        return steps * first + self.d * batch_size * steps * (steps - 1) / 2.0

    def decode_steps_done(self, batch_size: int, context_tokens: float, elapsed_s: float) -> int:
        """Number of decode iterations started within ``elapsed_s`` (the smallest ``k`` with
        ``decode_run_s(k) >= elapsed_s``), i.e. the iteration in flight counts as done."""
        first = self.step_s(batch_size, batch_size, context_tokens)
        growth = self.d * batch_size / 2.0
        if growth <= 0:
            k = math.ceil(elapsed_s / first - 1e-12)
        else:  # growth*k^2 + (first - growth)*k - elapsed = 0
            lin = first - growth
            k = math.ceil((-lin + math.sqrt(lin * lin + 4 * growth * elapsed_s)) / (2 * growth) - 1e-9)
        while k > 0 and self.decode_run_s(batch_size, context_tokens, k - 1) >= elapsed_s:
            k -= 1
        while self.decode_run_s(batch_size, context_tokens, k) < elapsed_s:
            k += 1
        return max(k, 1)


@dataclass(frozen=True)
class CostModel:
    """Prefill and decode iteration costs plus the prefill->decode KV transfer cost."""

    prefill: LinearCost
    decode: LinearCost
    kv_transfer_base_s: float = 1e-3
    kv_transfer_per_token_s: float = 5e-6

    def __post_init__(self) -> None:
        check_fields(self, dict.fromkeys(("kv_transfer_base_s", "kv_transfer_per_token_s"), COEFFICIENT))

    def kv_transfer_s(self, tokens: int) -> float:
        return self.kv_transfer_base_s + self.kv_transfer_per_token_s * tokens

    def mixed_step_s(self, prefill_tokens: int, prefill_seqs: int, decode_seqs: int, decode_context: float) -> float:
        """One iteration running prefill chunks and decode steps together (chunked prefill): the larger fixed cost
        once, plus each part's per-token, per-sequence and context terms."""
        prefill = self.prefill.step_s(prefill_tokens, prefill_seqs, 0) if prefill_seqs else 0.0
        decode = self.decode.step_s(decode_seqs, decode_seqs, decode_context) if decode_seqs else 0.0
        if prefill_seqs and decode_seqs:
            return prefill + decode - min(self.prefill.a, self.decode.a)
        return prefill + decode

    def iteration_s(self, kind: str, tokens: int, size: int, context: int) -> float:
        """One ``kind`` ("prefill" or "decode") iteration of ``size`` sequences computing ``tokens`` tokens over
        ``context`` cached tokens (a prefill attends to no cache yet)."""
        if kind == "prefill":
            return self.prefill.step_s(tokens, size, 0)
        return self.decode.step_s(tokens, size, context)

    def scaled(self, factor: float, decode: float | None = None) -> CostModel:
        """Every cost ``factor`` times as long (decode iterations ``decode`` times, where given): the same engine on a
        machine running slower (or faster) than when it was profiled."""
        def phase(cost: LinearCost, by: float) -> LinearCost:
            return LinearCost(*(by * getattr(cost, k) for k in "abcd"), sizes=tuple(by * x for x in cost.sizes))
        return replace(self, prefill=phase(self.prefill, factor),
                       decode=phase(self.decode, factor if decode is None else decode),
                       kv_transfer_base_s=factor * self.kv_transfer_base_s,
                       kv_transfer_per_token_s=factor * self.kv_transfer_per_token_s)

    def to_dict(self) -> dict:
        """Plain data; a phase without measured sizes has just ``a``-``d`` (the layout of every stored config)."""
        data = asdict(self)
        for phase in ("prefill", "decode"):
            data[phase]["sizes"] = list(data[phase]["sizes"])
            if not data[phase]["sizes"]:
                del data[phase]["sizes"]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> CostModel:
        """The cost model of :meth:`to_dict`'s layout; ValueError naming the key of a missing, unknown, negative or
        non-finite coefficient (``prefill.a must be a finite number >= 0, not -1``)."""
        if not isinstance(data, dict) or not all(isinstance(data.get(p), dict) for p in ("prefill", "decode")):
            raise ValueError("a cost model is an object with prefill and decode objects of coefficients a, b, c, d "
                             "(seconds), as `lenscope calibrate-cost --out` writes it")
        phases = {}
        for phase in ("prefill", "decode"):
            coefficients = data[phase]
            if set(coefficients) - {"sizes"} != set("abcd"):
                raise ValueError(f"{phase} needs exactly the coefficients a, b, c, d (seconds) and optionally "
                                 f"sizes, not {', '.join(sorted(coefficients)) or 'none'}")
            for key in "abcd":
                COEFFICIENT.check(f"{phase}.{key}", coefficients[key])
            sizes = coefficients.get("sizes", [])
            if not isinstance(sizes, list):
                raise ValueError(f"{phase}.sizes is a list of seconds per batch size, not {sizes!r}")
            for k, value in enumerate(sizes):
                COEFFICIENT.check(f"{phase}.sizes[{k}]", value)
            phases[phase] = LinearCost(**coefficients)
        extra = {k: data[k] for k in ("kv_transfer_base_s", "kv_transfer_per_token_s") if k in data}
        for key, value in extra.items():
            COEFFICIENT.check(key, value)
        return cls(**phases, **extra)


DEFAULT_COST = CostModel(prefill=LinearCost(a=10e-3, b=4e-5, c=0.0, d=0.0),
                         decode=LinearCost(a=8e-3, b=0.0, c=6e-5, d=5e-8))


@dataclass(frozen=True)
class Calibration:
    """A fitted cost model with its fit quality (mean absolute percentage error per phase)."""

    cost: CostModel
    prefill_mape: float
    decode_mape: float
    n_rows: int


PROFILE_COLUMNS = ["model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size",
                   "prompt_time", "token_time"]


def profile_configs(profile: pd.DataFrame) -> pd.DataFrame:
    """The (model, hardware, tensor_parallel) combinations in a Splitwise-style profile."""
    missing = [c for c in PROFILE_COLUMNS if c not in profile.columns]
    if missing:
        raise ValueError(f"profile lacks columns {missing}; expected Splitwise's perf model CSV")
    return (profile.groupby(["model", "hardware", "tensor_parallel"]).size().rename("rows").reset_index())


def _nnls_fit(features: np.ndarray, target: np.ndarray, relative: bool = False) -> tuple[np.ndarray, float]:
    """Non-negative least squares of absolute errors (or, ``relative``, of errors relative to the target) and the
    fit's mean absolute percentage error."""
    weight = 1.0 / target if relative else np.ones_like(target)
    coef, _ = nnls(features * weight[:, None], target * weight)
    fitted = features @ coef
    return coef, float(np.mean(np.abs(fitted - target) / target))


def fit_cost_model(profile: pd.DataFrame, model: str, hardware: str, tensor_parallel: int,
                   base: CostModel = DEFAULT_COST) -> Calibration:
    """Fit non-negative prefill and decode coefficients to one configuration of a profile.

    Profile times are milliseconds: ``prompt_time`` is the prefill of ``batch_size`` prompts of
    ``prompt_size`` tokens, ``token_time`` one decode step of the batch, whose average context is
    ``prompt_size + token_size / 2``. KV-transfer costs are kept from ``base``.
    """
    profile_configs(profile)
    rows = profile[(profile["model"] == model) & (profile["hardware"] == hardware)
                   & (profile["tensor_parallel"] == tensor_parallel)]
    if rows.empty:
        raise ValueError(f"no profile rows for model={model!r} hardware={hardware!r} tp={tensor_parallel}")
    size = rows["batch_size"].to_numpy(float)
    prompt = rows["prompt_size"].to_numpy(float)
    ones = np.ones_like(size)
    pre_coef, pre_err = _nnls_fit(np.column_stack([ones, prompt * size, size]),
                                  rows["prompt_time"].to_numpy(float) / 1e3)
    context = size * (prompt + rows["token_size"].to_numpy(float) / 2.0)
    dec_coef, dec_err = _nnls_fit(np.column_stack([ones, size, context]),
                                  rows["token_time"].to_numpy(float) / 1e3)
    pre, dec = [float(x) for x in pre_coef], [float(x) for x in dec_coef]
    cost = CostModel(prefill=LinearCost(a=pre[0], b=pre[1], c=pre[2], d=0.0),
                     decode=LinearCost(a=dec[0], b=0.0, c=dec[1], d=dec[2]),
                     kv_transfer_base_s=base.kv_transfer_base_s,
                     kv_transfer_per_token_s=base.kv_transfer_per_token_s)
    return Calibration(cost=cost, prefill_mape=pre_err, decode_mape=dec_err, n_rows=len(rows))


def fit_iterations(iterations: pd.DataFrame, base: CostModel = DEFAULT_COST) -> Calibration:
    """Fit non-negative prefill and decode coefficients to a log of measured iterations (a live run's segments:
    ``kind``, ``start_s``, ``end_s``, ``batch_size``, ``tokens``, ``kv_tokens``). Prefill: ``a + b*tokens +
    c*sequences``. Decode: a fixed cost per batch size up to the largest measured (``sizes``; a size never measured
    is interpolated between its neighbours) plus ``d*context`` (``kv_tokens``), and ``a + c*sequences`` fitted to
    the sizes for larger batches. Both minimise relative errors (the short iterations count as much as the long).
    KV-transfer costs are kept from ``base``. ValueError unless both kinds have at least 3 iterations."""
    seconds = (iterations["end_s"] - iterations["start_s"]).to_numpy(float)
    size = iterations["batch_size"].to_numpy(int)
    kinds = {kind: (iterations["kind"] == kind).to_numpy() & (seconds > 0) for kind in ("prefill", "decode")}
    for kind, rows in kinds.items():
        if rows.sum() < 3:
            raise ValueError(f"fitting a cost model needs at least 3 {kind} iterations, not {int(rows.sum())}")
    pre = kinds["prefill"]
    (pa, pb, pc), prefill_mape = _nnls_fit(np.column_stack([np.ones(pre.sum()), iterations.loc[pre, "tokens"],
                                                            size[pre]]).astype(float), seconds[pre],
                                            relative=True)
    dec = kinds["decode"]
    measured = np.unique(size[dec])
    one_hot = (size[dec][:, None] == measured[None, :]).astype(float)
    coef, decode_mape = _nnls_fit(np.column_stack([one_hot, iterations.loc[dec, "kv_tokens"].to_numpy(float)]),
                                  seconds[dec], relative=True)
    table = np.interp(np.arange(1, measured.max() + 1), measured, coef[:-1])
    (da, dc), _ = nnls(np.column_stack([np.ones_like(table), np.arange(1, len(table) + 1)]), table)
    cost = CostModel(prefill=LinearCost(a=float(pa), b=float(pb), c=float(pc), d=0.0),
                     decode=LinearCost(a=float(da), b=0.0, c=float(dc), d=float(coef[-1]),
                                       sizes=tuple(float(x) for x in table)),
                     kv_transfer_base_s=base.kv_transfer_base_s, kv_transfer_per_token_s=base.kv_transfer_per_token_s)
    return Calibration(cost=cost, prefill_mape=prefill_mape, decode_mape=decode_mape, n_rows=len(iterations))


def predicted_iterations(cost: CostModel, iterations: pd.DataFrame) -> np.ndarray:
    """What ``cost`` gives for each iteration of a log (``kind``, ``tokens``, ``batch_size``, ``kv_tokens``)."""
    return np.array([cost.iteration_s(kind, tokens, size, context) for kind, tokens, size, context
                     in zip(iterations["kind"], iterations["tokens"], iterations["batch_size"],
                            iterations["kv_tokens"])], dtype=float)


def fit_speed(cost: CostModel, iterations: pd.DataFrame) -> tuple[Calibration, dict[str, float]]:
    """``cost`` at the speed ``iterations`` ran at: each phase scaled by the iterations' measured time over what
    ``cost`` gives for them (a short profile places a long profile's shape at a drifting machine's speed of the
    moment). Returns the calibration (its MAPE on ``iterations``) and the factor per phase. ValueError unless both
    phases have an iteration."""
    seconds = (iterations["end_s"] - iterations["start_s"]).to_numpy(float)
    predicted = predicted_iterations(cost, iterations)
    factors, kinds = {}, iterations["kind"].to_numpy()
    for kind in ("prefill", "decode"):
        rows = kinds == kind
        if not rows.any() or predicted[rows].sum() <= 0:
            raise ValueError(f"measuring a speed needs {kind} iterations")
        factors[kind] = float(seconds[rows].sum() / predicted[rows].sum())
    scaled = cost.scaled(factors["prefill"], factors["decode"])
    fitted = predicted_iterations(scaled, iterations)
    timed = seconds > 0
    mape = {kind: float(np.mean(np.abs(fitted - seconds)[timed & (kinds == kind)] / seconds[timed & (kinds == kind)]))
            for kind in factors}
    return Calibration(scaled, mape["prefill"], mape["decode"], len(iterations)), factors
