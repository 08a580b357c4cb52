"""Discrete-event simulation of a serving cluster replaying a request trace.

``simulate(trace, predictor, config)`` replays requests (arrival_s, prompt_tokens, output_tokens)
through P prefill + D decode instances (or D colocated instances) with the configured dispatch and
queue policies and returns per-request timings plus per-iteration instance records. True output
lengths live only in :class:`Simulator` (private arrays read by the instances); policies see
:class:`~lenscope.analysis.scheduler.policies.RequestView` snapshots with predictions.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pandas as pd

from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.scheduler.chunked_prefill import ChunkedPrefillInstance
from lenscope.analysis.scheduler.cost_model import DEFAULT_COST, CostModel
from lenscope.analysis.scheduler.instances import (
    ContinuousInstance,
    DecodeInstance,
    Instance,
    PrefillInstance,
    StaticInstance,
    blocks_for,
)
from lenscope.analysis.scheduler.policies import RequestView
from lenscope.analysis.scheduler.predictors import Predictor
from lenscope.analysis.scheduler.preemption import check_preemption_options, preemption_label
from lenscope.analysis.scheduler.prefix_cache import PrefixCache
from lenscope.analysis.scheduler.registry import (
    DISPATCH_POLICIES,
    PREFILL_QUEUE_POLICIES,
    QUEUE_POLICIES,
    needs_prefix_cache,
)
from lenscope.analysis.scheduler.states import Event, EventType, RequestState, RequestStates
from lenscope.analysis.scheduler.traces import MAX_ARRIVAL_S, MAX_TOKENS
from lenscope.models.numbers import NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE, POSITIVE_INT, SEED, Range, check_fields

_ITERATION_DONE = EventType.ITERATION_DONE  # (a module constant: cheaper to read than the enum attribute)
MODES = ("disaggregated", "colocated")
BATCHING = ("continuous", "static")
TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
# Options added after results were first stored, with the defaults that keep the earlier behaviour.
LATER_OPTIONS = {"prefill_queue": "fcfs", "preemptive": False, "preempt_limit": None, "max_preemptions": None,
                 "chunk_tokens": None, "prefix_cache_tokens": None, "hash_block_tokens": 512}
# The numbers a SimConfig takes (None: an option left off); the CLI's flags and the app's forms use the same ranges.
CONFIG_RANGES = {
    "n_prefill": NON_NEGATIVE_INT, "n_decode": POSITIVE_INT, "max_batch_size": POSITIVE_INT,
    "kv_capacity_tokens": POSITIVE_INT, "block_size": POSITIVE_INT, "max_prefill_tokens": POSITIVE_INT,
    "aging_s": NON_NEGATIVE, "seed": SEED, "preempt_limit": POSITIVE, "max_preemptions": POSITIVE_INT,
    "chunk_tokens": POSITIVE_INT, "prefix_cache_tokens": POSITIVE_INT, "hash_block_tokens": POSITIVE_INT,
}
# Offered load of Poisson arrivals (requests per second) and the quantile of output length that splits short from long.
QPS = POSITIVE
SHORT_QUANTILE = Range(0, 1, low_open=True, high_open=True)


@dataclass(frozen=True)
class SimConfig:
    """Cluster shape, engine limits, policies and cost model of one simulation.

    Defaults are the OUTLETS setup: 1 prefill + 3 decode instances, continuous batching. ``prefill_queue`` orders
    the prefill instances' queue (disaggregated). ``preemptive`` lets the decode queue policy preempt running
    requests for waiting ones with a smaller key (preemptive SRPT with ``queue="srpt"``; continuous batching),
    limited TRAIL-style (see :mod:`lenscope.analysis.scheduler.preemption`) by ``preempt_limit`` (a request is
    preemptible only while it has generated fewer than ``preempt_limit`` times its initial predicted length) and
    ``max_preemptions`` (per request, all preemptions counted). ``chunk_tokens`` turns on chunked prefill with that
    token budget per iteration (colocated, continuous; :mod:`lenscope.analysis.scheduler.chunked_prefill`).
    ``prefix_cache_tokens`` gives every prefilling instance an LRU prefix cache of that many tokens, in blocks of
    ``hash_block_tokens`` (the trace's ``hash_ids``; :mod:`lenscope.analysis.scheduler.prefix_cache`);
    ``dispatch="prefix"`` then routes requests to the instance caching most of their prompt.
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
        check_fields(self, CONFIG_RANGES)
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {self.mode!r}")
        if self.batching not in BATCHING:
            raise ValueError(f"batching must be one of {BATCHING}, not {self.batching!r}")
        if self.n_decode < 1 or (self.mode == "disaggregated" and self.n_prefill < 1):
            raise ValueError("need at least one decode (and, disaggregated, one prefill) instance")
        if self.max_batch_size < 1 or self.block_size < 1 or self.kv_capacity_tokens < 4 * self.block_size:
            raise ValueError("batch size, block size and KV capacity must be positive")
        DISPATCH_POLICIES.entry(self.dispatch)
        QUEUE_POLICIES.entry(self.queue)
        PREFILL_QUEUE_POLICIES.entry(self.prefill_queue)
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
        if needs_prefix_cache(self.dispatch) and self.prefix_cache_tokens is None:
            raise ValueError(f"cache-aware dispatch ({self.dispatch}) needs prefix caching (prefix_cache_tokens)")

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
    """Event loop and request state of one simulation (see module docstring). Instances reach it only through the
    :class:`~lenscope.analysis.scheduler.instances.Simulation` protocol; ``record_transitions`` keeps every state move
    in ``states.history``."""

    def __init__(self, trace: pd.DataFrame, predictor: Predictor, config: SimConfig,
                 record_segments: bool = True, record_transitions: bool = False) -> None:
        validate_trace(trace)
        self.config, self.predictor = config, predictor
        self.queue_policy = QUEUE_POLICIES.make(config.queue)
        self.prefill_policy = PREFILL_QUEUE_POLICIES.make(config.prefill_queue)
        self.dispatcher = DISPATCH_POLICIES.make(config.dispatch, seed=config.seed)
        n = len(trace)
        self.n = n
        self.arrival = trace["arrival_s"].to_numpy(float)
        self.prompt = trace["prompt_tokens"].to_numpy(np.int64)
        self.out = trace["output_tokens"].to_numpy(np.int64)  # true lengths: engine-side only
        # the same as lists, for one-request reads
        self.arrival_list, self.prompt_list = self.arrival.tolist(), self.prompt.tolist()
        self.out_list = self.out.tolist()
        self._check_fits()
        self.states = RequestStates(n, record_transitions)
        self.gen = np.zeros(n, dtype=np.int64)
        self.kv_ready = np.zeros(n, dtype=bool)
        self.pred_total = np.zeros(n)
        self.pred_list = [0.0] * n  # the same, for one-request reads
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.decode_of = np.full(n, -1, dtype=np.int64)
        self.admitted_s = [math.nan] * n
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.cached = np.zeros(n, dtype=np.int64)  # prompt tokens a request's (last) prefill found in a prefix cache
        self.hash_ids = self._block_hashes(trace)
        self.finished_count = 0
        # arrivals in event order (time, then request id), merged in run() with the heap of all other events
        self._arrivals: list[Event] = [Event(self.arrival_list[k], k, EventType.ARRIVAL, k, 0)
                                       for k in np.argsort(self.arrival, kind="stable").tolist()]
        self._events: list[Event] = []
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
    def _push(self, t: float, kind: EventType, target: int, arg: int) -> None:
        self._seq += 1
        heapq.heappush(self._events, Event(t, self._seq, kind, target, arg))

    def push_instance_event(self, t: float, instance: Instance) -> None:
        self._push(t, _ITERATION_DONE, instance.uid, instance.version)

    def run(self, on_progress: Progress = no_progress) -> SimResult:
        start = time.perf_counter()
        step = max(1, self.n // 100)
        reported = 0
        events, arrivals = self._events, self._arrivals
        handlers = (self._arrive, self._iteration_done, self._transfer_done)
        next_arrival = 0
        while True:
            if events and (next_arrival == self.n or events[0] < arrivals[next_arrival]):
                t, _, kind, target, arg = heapq.heappop(events)
            elif next_arrival < self.n:
                t, _, kind, target, arg = arrivals[next_arrival]
                next_arrival += 1
            else:
                break
            handlers[kind](target, arg, t)
            if self.finished_count - reported >= step:
                reported = self.finished_count
                on_progress(reported, self.n, "requests")
        if self.finished_count != self.n:
            raise RuntimeError(f"simulation stalled with {self.n - self.finished_count} unfinished requests")
        on_progress(self.n, self.n, "requests")
        return self._result(time.perf_counter() - start)

    def _arrive(self, i: int, _: int, now: float) -> None:
        self.pred_total[i] = self.pred_list[i] = float(self.predictor.static(i))
        if self.prefill:
            inst = self.prefill[self._next_prefill % len(self.prefill)]
            self._next_prefill += 1
            if self.dispatcher.needs_prefix_cache:  # the most cached blocks; ties: round robin
                inst = max(self.prefill, key=lambda p: (p.prefix_cache.matched(self.hash_ids[i]),
                                                        p is inst, -p.index))
            inst.enqueue(i, now)
        else:
            view = self.request_view(i)
            self.decode[self._dispatch(i, view)].enqueue(i, now, view)

    def _iteration_done(self, uid: int, version: int, now: float) -> None:
        inst = self.instances[uid]
        if inst.version == version:  # later plans supersede an instance's earlier events
            inst.on_event(now)

    def _transfer_done(self, i: int, decode_index: int, now: float) -> None:
        self.states.move(i, RequestState.WAITING)
        self.decode[decode_index].enqueue(i, now)

    def _dispatch(self, i: int, request: RequestView | None = None) -> int:
        """Choose (and reserve) the decode instance of request ``i``, whose view is ``request`` when known."""
        views = [d.view() for d in self.decode]
        if self.dispatcher.needs_prefix_cache and not self.prefill:
            views = [replace(v, cached_tokens=d.prefix_cache.matched(self.hash_ids[i]))
                     for v, d in zip(views, self.decode)]
        choice = self.dispatcher.choose(request or self.request_view(i), views)
        if not 0 <= choice < len(self.decode):
            raise RuntimeError(f"dispatcher chose instance {choice} of {len(self.decode)}")
        self.decode_of[i] = choice
        self.decode[choice].reserve(i)
        return choice

    def handoff(self, i: int, now: float) -> None:
        """After prefill: choose a decode instance and ship the KV cache there."""
        choice = self._dispatch(i)
        self.kv_ready[i] = True
        self.states.move(i, RequestState.TRANSFERRING)
        self._push(now + self.config.cost.kv_transfer_s(self.prompt_list[i]), EventType.TRANSFER_DONE, i, choice)

    # request state ----------------------------------------------------------------------------------
    def request_view(self, i: int) -> RequestView:
        g = self.gen.item(i)
        return RequestView(i, self.arrival_list[i], self.prompt_list[i], g, self.pred_list[i],
                           float(self.predictor.remaining(i, g)))

    def admitted(self, i: int, now: float, to: RequestState) -> None:
        """Request ``i`` leaves a decode-capable instance's wait queue for a batch, in state ``to``."""
        self.states.move(i, to)
        if self.admitted_s[i] != self.admitted_s[i]:  # NaN: first admission
            self.admitted_s[i] = now

    def emit_tokens(self, idx: np.ndarray, now: float, k) -> None:
        """``k`` more tokens for requests ``idx``, the last of them at ``now``."""
        if not len(idx):
            return
        before = self.gen[idx]
        after = before + k
        self.gen[idx] = after
        if before[before.argmin()] == 0:  # (argmin: cheaper than a comparison on small arrays)
            self.first_token[idx[before == 0]] = now
        out = self.out[idx]
        ended = after >= out
        if np.count_nonzero(ended):
            self.completed(idx[ended & (before < out)].tolist(), now)

    def completed(self, ids: list[int], now: float) -> None:
        """Requests ``ids`` generated their last token at ``now`` (every completion passes here once)."""
        self.states.move_all(ids, RequestState.DONE)
        gen, out, finish = self.gen, self.out_list, self.finish
        for i in ids:
            gen[i] = out[i]
            finish[i] = now
        self.finished_count += len(ids)

    def first_tokens(self, ids: list[int], now: float) -> list[int]:
        """A token at ``now`` for each of requests ``ids`` at the end of their prefill (their first, or the next
        after a recompute); returns the unfinished ones."""
        gen, out, alive, done = self.gen, self.out_list, [], []
        for i in ids:
            g = gen.item(i) + 1
            if g == 1:
                self.first_token[i] = now
            gen[i] = g
            (alive if g < out[i] else done).append(i)
        if done:
            self.completed(done, now)
        return alive

    def prefilled(self, ids: list[int], now: float) -> list[int]:
        """End the prefill of requests ``ids`` on a decode-capable instance with a token each at ``now``; the
        unfinished ones (returned) decode next, their KV cache resident."""
        alive = self.first_tokens(ids, now)
        for i in alive:
            self.kv_ready[i] = True
        self.states.move_all(alive, RequestState.DECODING)
        return alive

    def preempted(self, i: int) -> None:
        """Request ``i`` lost its KV cache and waits to be recomputed."""
        self.kv_ready[i] = False
        self.preemptions[i] += 1
        self.states.move(i, RequestState.PREEMPTED)

    def record_segment(self, inst: Instance, kind: str, end: float, batch: int, kv_tokens: int) -> None:
        if self._segments is not None:
            self._segments.append((inst.uid, inst.role, kind, inst.seg_start, end, batch, kv_tokens))

    def record_padding(self, size: int, sum_len: int, max_len: int) -> None:
        self._padding.append((size, sum_len, max_len))

    def _result(self, wall_s: float) -> SimResult:
        requests = pd.DataFrame({
            "rid": np.arange(self.n), "arrival_s": self.arrival, "prompt_tokens": self.prompt,
            "output_tokens": self.out, "predicted_tokens": self.pred_total,
            "first_token_s": self.first_token, "finish_s": self.finish,
            "admitted_s": np.array(self.admitted_s, dtype=float),
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
