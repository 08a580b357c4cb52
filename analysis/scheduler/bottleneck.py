"""Which stage of a simulated cluster held requests back, and whether compared policies tie.

:func:`read_stages` reads one simulation's outputs: how busy the prefill and decode work kept their instances, how
full the decode instances' batches and KV caches were, and the queues in front of each stage (mean and maximum number
of requests waiting, from the arrival, prefill-start, decode-ready and admission times). Length-aware dispatch and
queue policies only reorder the decode queues, so they change latencies only when requests wait there: a cluster
whose queues are short is *not loaded* (nothing to reorder), one whose prefill queue is the longer is *prefill-bound*
(the decode stage gets requests no faster than prefill frees them). :func:`compare_sentence` says in one sentence what
a comparison of configurations shows: where they differ, what to look at; where they tie (:func:`headline_tie`), why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

from lenscope.analysis.scheduler.engine import SimResult

LOADED_QUEUE = 1.0  # mean requests waiting in front of a stage for the cluster to count as loaded
TIE_TOLERANCE = 0.10  # configurations tie when each headline number's spread is under 10 % of its smallest value
TIE_METRICS = ("short_e2e_p99_s", "all_e2e_p99_s", "mean_jct_s")
BOTTLENECKS = ("none", "prefill", "decode")
SUMMARY_PREFIX = "stage_"


@dataclass(frozen=True)
class StageReading:
    """One simulation's stages. ``bottleneck`` is "decode" or "prefill" (the stage with the longer mean queue, once
    some queue averages at least :data:`LOADED_QUEUE` requests) or "none" (not loaded). ``*_busy``: the share of the
    run (first arrival to last finish) the stage's work kept its instances busy (colocated instances: the share spent
    in prefill and in decode iterations). ``decode_fill``: the time-averaged fill of the decode instances, the larger
    of batch size over its cap and KV tokens over the capacity. Queues count requests waiting to start prefill
    (disaggregated only) and, once ready (prefilled and transferred; colocated: arrived), to be admitted to a decode
    batch for the first time."""

    bottleneck: str
    prefill_busy: float
    decode_busy: float
    decode_fill: float
    prefill_queue_mean: float
    prefill_queue_max: int
    decode_queue_mean: float
    decode_queue_max: int

    @property
    def loaded(self) -> bool:
        return self.bottleneck != "none"

    def to_summary(self) -> dict:
        """The reading as summary entries (``stage_`` + field)."""
        return {SUMMARY_PREFIX + k: v for k, v in asdict(self).items()}

    @classmethod
    def from_summary(cls, summary: dict) -> StageReading | None:
        """The reading kept in a summary (None for a summary stored before readings were kept)."""
        try:
            return cls(**{f.name: summary[SUMMARY_PREFIX + f.name] for f in fields(cls)})
        except KeyError:
            return None


def queue_length(ready: np.ndarray, start: np.ndarray, t0: float, t1: float) -> tuple[float, int]:
    """Mean over [t0, t1] and maximum of the number of requests waiting, given when each became ready and when each
    left the queue (a start at the same moment as a readiness counts first: no wait)."""
    if t1 <= t0 or not len(ready):
        return 0.0, 0
    times = np.concatenate([start, ready])
    steps = np.concatenate([-np.ones(len(start)), np.ones(len(ready))])
    order = np.lexsort((steps, times))
    times, level = times[order], np.cumsum(steps[order])
    held = np.clip(np.diff(np.append(np.clip(times, t0, t1), t1)), 0, None)
    return float(np.sum(level * held) / (t1 - t0)), int(max(level.max(), 0))


def classify(prefill_queue: float, decode_queue: float) -> str:
    """The bottleneck of :class:`StageReading` from the two mean queue lengths."""
    if max(prefill_queue, decode_queue) < LOADED_QUEUE:
        return "none"
    return "decode" if decode_queue >= prefill_queue else "prefill"


def read_stages(result: SimResult) -> StageReading:
    """The stage reading of one simulation (see :class:`StageReading`)."""
    cfg, req, seg = result.config, result.requests, result.segments
    t0, t1 = float(req["arrival_s"].min()), float(req["finish_s"].max())
    span = max(t1 - t0, 1e-12)
    length = (seg["end_s"] - seg["start_s"]).to_numpy(float)
    decoding = (seg["role"] == "decode").to_numpy()
    prefill_kind = (seg["kind"] == "prefill").to_numpy()
    admitted = req["admitted_s"].to_numpy(float)
    went = ~np.isnan(admitted)  # requests that reached a decode batch (not those done at their first token)
    if cfg.mode == "disaggregated":
        prefill_busy = float(length[~decoding].sum() / (cfg.n_prefill * span))
        decode_busy = float(length[decoding].sum() / (cfg.n_decode * span))
        prefill = seg[~decoding]
        starts = np.repeat(prefill["start_s"].to_numpy(float), prefill["batch_size"].to_numpy(int))
        prefill_queue = queue_length(req["arrival_s"].to_numpy(float), starts, t0, t1)
        transfer = cfg.cost.kv_transfer_base_s + cfg.cost.kv_transfer_per_token_s * req["prompt_tokens"].to_numpy(float)
        ready = req["first_token_s"].to_numpy(float) + transfer
    else:
        prefill_busy = float(length[prefill_kind].sum() / (cfg.n_decode * span))
        decode_busy = float(length[~prefill_kind].sum() / (cfg.n_decode * span))
        prefill_queue = (0.0, 0)
        ready = req["arrival_s"].to_numpy(float)
    decode_queue = queue_length(np.minimum(ready[went], admitted[went]), admitted[went], t0, t1)
    dec = seg[decoding]
    held = length[decoding]
    batch_fill = float(np.sum(held * dec["batch_size"].to_numpy(float)) / (cfg.max_batch_size * cfg.n_decode * span))
    kv_fill = float(np.sum(held * dec["kv_tokens"].to_numpy(float)) / (cfg.kv_capacity_tokens * cfg.n_decode * span))
    return StageReading(classify(prefill_queue[0], decode_queue[0]), prefill_busy, decode_busy,
                        max(batch_fill, kv_fill), prefill_queue[0], prefill_queue[1], decode_queue[0],
                        decode_queue[1])


def spread(values) -> float:
    """(largest - smallest) / smallest of positive numbers (NaN when there is no positive smallest)."""
    v = np.asarray(values, dtype=float)
    low = np.nanmin(v) if v.size else np.nan
    return float((np.nanmax(v) - low) / low) if low > 0 else float("nan")


def headline_tie(summaries: list[dict], tolerance: float = TIE_TOLERANCE) -> bool:
    """Whether configurations tie: every headline number (:data:`TIE_METRICS`: short-request and all-request P99
    and mean job completion time) within ``tolerance`` of its smallest value across them (one simulation each, so
    this is a relative difference, not an interval)."""
    return len(summaries) > 1 and all(spread([s[m] for s in summaries]) < tolerance for m in TIE_METRICS)


def _waiting(mean: float) -> str:
    return f"{mean:.2f}" if mean < 0.1 else f"{mean:.1f}" if mean < 10 else f"{mean:.0f}"


def tie_reason(r: StageReading) -> str:
    """Why length-aware policies could not part on a run with this reading (a clause)."""
    if r.bottleneck == "none":
        return (f"the cluster was not loaded: on average {_waiting(r.decode_queue_mean)} requests waited for a decode "
                f"slot (at most {r.decode_queue_max}) and {_waiting(r.prefill_queue_mean)} for prefill, so a "
                "length-aware policy had no queue to reorder")
    if r.bottleneck == "prefill":
        return (f"prefill was the bottleneck: the prefill instances were busy {r.prefill_busy:.0%} of the time and on "
                f"average {_waiting(r.prefill_queue_mean)} requests waited for them (at most {r.prefill_queue_max}), "
                f"against {_waiting(r.decode_queue_mean)} for a decode slot; dispatch and queue policies order only "
                "the decode stage, which prefill fed no faster than it could serve")
    return (f"decode was the bottleneck ({_waiting(r.decode_queue_mean)} requests waited for a decode slot on average, "
            f"at most {r.decode_queue_max}), yet the predicted lengths did not change which requests waited")


def compare_sentence(summaries: list[dict]) -> tuple[bool, str]:
    """Whether the configurations tie, and one sentence on what the comparison shows: where they tie, why (from the
    first configuration's stage reading); where they differ, the short-request P99 of the first configuration and of
    the one with the lowest, and the queue behind it. Empty for a single configuration."""
    if len(summaries) < 2:
        return False, ""
    first = summaries[0]
    reading = StageReading.from_summary(first)
    if headline_tie(summaries):
        a, b = (f"{s['short_e2e_p99_s']:.1f} s" for s in (first, summaries[1]))
        why = tie_reason(reading) if reading else "this result was stored before stage readings were kept"
        return True, (f"The configurations tie (short-request P99 {a} vs {b}, every headline number within "
                      f"{TIE_TOLERANCE:.0%}) because {why}.")
    best = min(summaries[1:], key=lambda s: s["short_e2e_p99_s"])
    before, after = first["short_e2e_p99_s"], best["short_e2e_p99_s"]
    names = [s["label"].split(" ")[0] for s in (first, best)]
    names = names if names[0] != names[1] else [first["label"], best["label"]]
    verb = "cuts" if after < before else "raises"
    queue = ""
    if reading is not None and reading.bottleneck == "decode":
        queue = (f": decode is the bottleneck, with {_waiting(reading.decode_queue_mean)} requests waiting for a "
                 "decode slot on average, so the order of that queue decides who waits")
    elif reading is not None:
        queue = f" ({tie_reason(reading).split(':')[0]})"
    cost = ""
    if after < before and best["all_e2e_p99_s"] > first["all_e2e_p99_s"]:
        cost = (f"; long requests pay for it (all-request P99 {first['all_e2e_p99_s']:.1f} s -> "
                f"{best['all_e2e_p99_s']:.1f} s)")
    return False, (f"Look at the short-request P99 (the *short P99* bars): {names[1]} {verb} it from {before:.1f} s "
                   f"({names[0]}) to {after:.1f} s ({100 * (after - before) / before:+.0f}%){queue}{cost}.")
