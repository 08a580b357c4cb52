"""Discrete-event simulation of a serving cluster replaying a request trace.

``simulate(trace, predictor, config)`` replays requests (arrival_s, prompt_tokens, output_tokens)
through P prefill + D decode instances (or D colocated instances) with the configured dispatch and
queue policies and returns per-request timings plus per-iteration instance records. True output
lengths live only in :class:`Simulator` (private arrays read by the instances); policies see
:class:`~analysis.serving.policies.RequestView` snapshots with predictions.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pandas as pd

from analysis.core.progress import Progress, no_progress
from analysis.serving.chunked_prefill import ChunkedPrefillInstance
from analysis.serving.cost_model import DEFAULT_COST, CostModel
from analysis.serving.instances import (
    ContinuousInstance,
    DecodeInstance,
    Instance,
    PrefillInstance,
    StaticInstance,
    blocks_for,
)
from analysis.serving.policies import PREFILL_QUEUE_POLICIES, RequestView, make_dispatcher, make_queue_policy
from analysis.serving.predictors import Predictor
from analysis.serving.preemption import check_preemption_options, preemption_label
from analysis.serving.prefix_cache import PrefixCache
from analysis.serving.traces import MAX_ARRIVAL_S, MAX_TOKENS

MODES = ("disaggregated", "colocated")
BATCHING = ("continuous", "static")
TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
# Options added after results were first stored, with the defaults that keep the earlier behaviour.
LATER_OPTIONS = {"prefill_queue": "fcfs", "preemptive": False, "preempt_limit": None, "max_preemptions": None,
                 "chunk_tokens": None, "prefix_cache_tokens": None, "hash_block_tokens": 512}


@dataclass(frozen=True)
class SimConfig:
    """Cluster shape, engine limits, policies and cost model of one simulation.

    Defaults are the OUTLETS setup: 1 prefill + 3 decode instances, continuous batching. ``prefill_queue`` orders
    the prefill instances' queue (disaggregated). ``preemptive`` lets the decode queue policy preempt running
    requests for waiting ones with a smaller key (preemptive SRPT with ``queue="srpt"``; continuous batching),
    limited TRAIL-style (see :mod:`analysis.serving.preemption`) by ``preempt_limit`` (a request is preemptible only
    while it has generated fewer than ``preempt_limit`` times its initial predicted length) and
    ``max_preemptions`` (per request, all preemptions counted). ``chunk_tokens`` turns on chunked prefill with that
    token budget per iteration (colocated, continuous; :mod:`analysis.serving.chunked_prefill`).
    ``prefix_cache_tokens`` gives every prefilling instance an LRU prefix cache of that many tokens, in blocks of
    ``hash_block_tokens`` (the trace's ``hash_ids``; :mod:`analysis.serving.prefix_cache`); ``dispatch="prefix"``
    then routes requests to the instance caching most of their prompt.
    """

    mode: str = "disaggregated"
    n_prefill: int = 1
    n_decode: int = 3
    batching: str = "continuous"
    max_batch_size: int = 256
    kv_capacity_tokens: int = 262_144
    block_size: int = 16
    max_prefill_tokens: int = 8192
    dispatch: str = "rr"
    queue: str = "fcfs"
    aging_s: float | None = None
    seed: int = 0
    cost: CostModel = field(default=DEFAULT_COST)
    prefill_queue: str = "fcfs"
    preemptive: bool = False
    preempt_limit: float | None = None
    max_preemptions: int | None = None
    chunk_tokens: int | None = None
    prefix_cache_tokens: int | None = None
    hash_block_tokens: int = 512

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {self.mode!r}")
        if self.batching not in BATCHING:
            raise ValueError(f"batching must be one of {BATCHING}, not {self.batching!r}")
        if self.n_decode < 1 or (self.mode == "disaggregated" and self.n_prefill < 1):
            raise ValueError("need at least one decode (and, disaggregated, one prefill) instance")
        if self.max_batch_size < 1 or self.block_size < 1 or self.kv_capacity_tokens < 4 * self.block_size:
            raise ValueError("batch size, block size and KV capacity must be positive")
        make_dispatcher(self.dispatch)
        make_queue_policy(self.queue)
        if self.prefill_queue not in PREFILL_QUEUE_POLICIES:
            raise ValueError(f"prefill queue must be one of {PREFILL_QUEUE_POLICIES}, not {self.prefill_queue!r}")
        if self.prefill_queue != "fcfs" and self.mode != "disaggregated":
            raise ValueError("a prefill queue policy needs prefill instances (disaggregated mode)")
        check_preemption_options(self)
        if self.chunk_tokens is not None and (self.mode != "colocated" or self.batching != "continuous"
                                              or self.chunk_tokens < self.max_batch_size):
            raise ValueError("chunked prefill needs colocated continuous batching and a token budget of at least "
                             f"the batch-size cap ({self.max_batch_size})")
        if self.prefix_cache_tokens is not None and (self.batching != "continuous" or self.hash_block_tokens < 1
                                                     or self.prefix_cache_tokens < self.hash_block_tokens):
            raise ValueError("prefix caching needs continuous batching and room for at least one block of "
                             f"{self.hash_block_tokens} tokens")
        if self.dispatch == "prefix" and self.prefix_cache_tokens is None:
            raise ValueError("cache-aware dispatch (prefix) needs prefix caching (prefix_cache_tokens)")

    def to_dict(self) -> dict:
        """All fields; options added later (:data:`LATER_OPTIONS`) only when set, so that results stored before they
        existed keep their keys."""
        data = {**asdict(self), "cost": self.cost.to_dict()}
        return {k: v for k, v in data.items() if k not in LATER_OPTIONS or v != LATER_OPTIONS[k]}

    @classmethod
    def from_dict(cls, data: dict) -> SimConfig:
        return cls(**{**data, "cost": CostModel.from_dict(data["cost"])})

    def label(self) -> str:
        shape = f"{self.n_prefill}P+{self.n_decode}D" if self.mode == "disaggregated" else f"{self.n_decode}x colo"
        guard = f" aging {self.aging_s:g}s" if self.aging_s else ""
        prefill = f" prefill {self.prefill_queue.upper()}" if self.prefill_queue != "fcfs" else ""
        chunked = f" chunked {self.chunk_tokens}" if self.chunk_tokens else ""
        cache = f" prefix cache {self.prefix_cache_tokens}" if self.prefix_cache_tokens else ""
        return (f"{self.dispatch.upper()}+{self.queue.upper()} {shape} {self.batching}{chunked}{cache}{guard}"
                f"{prefill}{preemption_label(self)}")

    def with_(self, **changes) -> SimConfig:
        return replace(self, **changes)


@dataclass
class SimResult:
    """Outcome of one simulation."""

    requests: pd.DataFrame  # per request: times, lengths, instance, preemptions
    segments: pd.DataFrame  # per iteration/segment: instance, kind, start, end, batch, kv_tokens
    batches: pd.DataFrame   # static batching only: size, sum_len, max_len
    config: SimConfig
    wall_s: float

    @property
    def sim_s(self) -> float:
        return float(self.requests["finish_s"].max() - self.requests["arrival_s"].min())


def validate_trace(trace: pd.DataFrame) -> None:
    """Raise ValueError unless the trace has positive integer lengths and finite arrivals."""
    missing = [c for c in TRACE_COLUMNS if c not in trace.columns]
    if missing:
        raise ValueError(f"trace lacks columns {missing}")
    if trace.empty:
        raise ValueError("trace is empty")
    arrival = trace["arrival_s"].to_numpy(float)
    tokens = trace[["prompt_tokens", "output_tokens"]].to_numpy(float)
    bad = trace.index[~np.isfinite(arrival) | (arrival < 0) | (arrival > MAX_ARRIVAL_S)
                      | ((tokens < 1) | (tokens > MAX_TOKENS)).any(axis=1)].tolist()
    if bad:
        raise ValueError(f"trace rows {bad[:20]} need arrivals from 0 to {MAX_ARRIVAL_S:,.0f} s and prompt/output "
                         f"tokens from 1 to {MAX_TOKENS:,}")


class Simulator:
    """Event loop and request state of one simulation (see module docstring)."""

    def __init__(self, trace: pd.DataFrame, predictor: Predictor, config: SimConfig,
                 record_segments: bool = True) -> None:
        validate_trace(trace)
        self.config, self.predictor = config, predictor
        self.queue_policy = make_queue_policy(config.queue)
        self.prefill_policy = make_queue_policy(config.prefill_queue)
        self.dispatcher = make_dispatcher(config.dispatch, config.seed)
        n = len(trace)
        self.n = n
        self.arrival = trace["arrival_s"].to_numpy(float)
        self.prompt = trace["prompt_tokens"].to_numpy(np.int64)
        self.out = trace["output_tokens"].to_numpy(np.int64)  # true lengths: engine-side only
        self._check_fits()
        self.gen = np.zeros(n, dtype=np.int64)
        self.kv_ready = np.zeros(n, dtype=bool)
        self.pred_total = np.zeros(n)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.decode_of = np.full(n, -1, dtype=np.int64)
        self.admitted_s = np.full(n, np.nan)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.cached = np.zeros(n, dtype=np.int64)  # prompt tokens a request's (last) prefill found in a prefix cache
        self.hash_ids = self._block_hashes(trace)
        self.finished_count = 0
        self._events: list[tuple] = [(float(t), k, 0, k, 0) for k, t in enumerate(self.arrival)]
        heapq.heapify(self._events)
        self._seq = n
        self._segments: list[tuple] | None = [] if record_segments else None
        self._padding: list[tuple[int, int, int]] = []
        decode_cls = ContinuousInstance if config.batching == "continuous" else StaticInstance
        if config.chunk_tokens:
            decode_cls = ChunkedPrefillInstance
        self.prefill: list[PrefillInstance] = []
        if config.mode == "disaggregated":
            self.prefill = [PrefillInstance(self, k, k) for k in range(config.n_prefill)]
        self.decode: list[DecodeInstance] = [decode_cls(self, k, len(self.prefill) + k)
                                             for k in range(config.n_decode)]
        self.instances: list[Instance] = [*self.prefill, *self.decode]
        self._next_prefill = 0
        if config.prefix_cache_tokens:
            for inst in self.prefill or self.decode:
                inst.prefix_cache = PrefixCache(config.prefix_cache_tokens // config.hash_block_tokens)

    def _block_hashes(self, trace: pd.DataFrame) -> list | None:
        if not self.config.prefix_cache_tokens:
            return None
        if "hash_ids" not in trace or trace["hash_ids"].isna().any():
            raise ValueError("prefix caching needs a trace with block hashes (hash_ids, as in Mooncake traces)")
        return [tuple(h) for h in trace["hash_ids"]]

    def _check_fits(self) -> None:
        cfg = self.config
        cap = cfg.kv_capacity_tokens // cfg.block_size
        usable = cap - max(1, cap // 100)
        too_big = np.flatnonzero(blocks_for(self.prompt + self.out, cfg.block_size) > usable)
        if len(too_big) and cfg.batching == "continuous":
            raise ValueError(f"requests {too_big[:20].tolist()} need more KV cache than an instance has "
                             f"({cfg.kv_capacity_tokens} tokens); raise the capacity or filter the trace")

    # events --------------------------------------------------------------------------------------
    def push_instance_event(self, t: float, instance: Instance) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, 1, instance.uid, instance.version))

    def run(self, on_progress: Progress = no_progress) -> SimResult:
        start = time.perf_counter()
        step = max(1, self.n // 100)
        reported = 0
        events = self._events
        while events:
            t, _, kind, a, b = heapq.heappop(events)
            if kind == 0:
                self._arrive(a, t)
            elif kind == 1:
                inst = self.instances[a]
                if inst.version == b:
                    inst.on_event(t)
            else:
                self.decode[b].enqueue(a, t)
            if self.finished_count - reported >= step:
                reported = self.finished_count
                on_progress(reported, self.n, "requests")
        if self.finished_count != self.n:
            raise RuntimeError(f"simulation stalled with {self.n - self.finished_count} unfinished requests")
        on_progress(self.n, self.n, "requests")
        return self._result(time.perf_counter() - start)

    def _arrive(self, i: int, now: float) -> None:
        self.pred_total[i] = self.predictor.static(i)
        if self.prefill:
            inst = self.prefill[self._next_prefill % len(self.prefill)]
            self._next_prefill += 1
            if self.config.dispatch == "prefix":  # the most cached blocks; ties: round robin
                inst = max(self.prefill, key=lambda p: (p.prefix_cache.matched(self.hash_ids[i]),
                                                        p is inst, -p.index))
            inst.enqueue(i, now)
        else:
            self.decode[self._dispatch(i)].enqueue(i, now)

    def _dispatch(self, i: int) -> int:
        views = [d.view() for d in self.decode]
        if self.config.dispatch == "prefix" and not self.prefill:
            views = [replace(v, cached_tokens=d.prefix_cache.matched(self.hash_ids[i]))
                     for v, d in zip(views, self.decode)]
        choice = self.dispatcher.choose(self.request_view(i), views)
        if not 0 <= choice < len(self.decode):
            raise RuntimeError(f"dispatcher chose instance {choice} of {len(self.decode)}")
        self.decode_of[i] = choice
        self.decode[choice].reserve(i)
        return choice

    def handoff(self, i: int, now: float) -> None:
        """After prefill: choose a decode instance and ship the KV cache there."""
        choice = self._dispatch(i)
        self.kv_ready[i] = True
        self._seq += 1
        arrive = now + self.config.cost.kv_transfer_s(int(self.prompt[i]))
        heapq.heappush(self._events, (arrive, self._seq, 2, i, choice))

    # request state ----------------------------------------------------------------------------------
    def request_view(self, i: int) -> RequestView:
        g = int(self.gen[i])
        return RequestView(rid=i, arrival_s=float(self.arrival[i]), prompt_tokens=int(self.prompt[i]),
                           generated=g, predicted_total=float(self.pred_total[i]),
                           predicted_remaining=float(self.predictor.remaining(i, g)))

    def admitted(self, i: int, now: float) -> None:
        if np.isnan(self.admitted_s[i]):
            self.admitted_s[i] = now

    def emit_tokens(self, idx: np.ndarray, now: float, k) -> None:
        """``k`` more tokens for requests ``idx``, the last of them at ``now``."""
        before = self.gen[idx]
        self.first_token[idx[before == 0]] = now
        self.gen[idx] = before + k
        done = idx[(before < self.out[idx]) & (self.gen[idx] >= self.out[idx])]
        if len(done):
            self.finish[done] = now
            self.finished_count += len(done)

    def record_segment(self, inst: Instance, kind: str, end: float, batch: int, kv_tokens: int) -> None:
        if self._segments is not None:
            self._segments.append((inst.uid, inst.role, kind, inst.seg_start, end, batch, kv_tokens))

    def record_padding(self, size: int, sum_len: int, max_len: int) -> None:
        self._padding.append((size, sum_len, max_len))

    def _result(self, wall_s: float) -> SimResult:
        requests = pd.DataFrame({
            "rid": np.arange(self.n), "arrival_s": self.arrival, "prompt_tokens": self.prompt,
            "output_tokens": self.out, "predicted_tokens": self.pred_total,
            "first_token_s": self.first_token, "finish_s": self.finish, "admitted_s": self.admitted_s,
            "decode_instance": self.decode_of, "preemptions": self.preemptions, "cached_tokens": self.cached,
        })
        segments = pd.DataFrame(self._segments or [], columns=["instance", "role", "kind", "start_s", "end_s",
                                                                "batch_size", "kv_tokens"])
        batches = pd.DataFrame(self._padding, columns=["size", "sum_len", "max_len"])
        return SimResult(requests=requests, segments=segments, batches=batches, config=self.config, wall_s=wall_s)


def simulate(trace: pd.DataFrame, predictor: Predictor, config: SimConfig = SimConfig(),
             on_progress: Progress = no_progress, record_segments: bool = True) -> SimResult:
    """Replay ``trace`` through the cluster of ``config`` using ``predictor``'s predictions."""
    trace = trace.reset_index(drop=True)
    return Simulator(trace, predictor, config, record_segments).run(on_progress)
