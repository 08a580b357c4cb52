"""A real serving loop: the target model answers requests that arrive on a trace's clock, under the simulator's
queue policies and with the simulator's iteration semantics, so the two can be compared request by request.

One colocated instance with continuous batching (:class:`~lenscope.analysis.scheduler.instances.ContinuousInstance`
is its simulated twin): at every iteration boundary the requests that arrived join the wait queue (ordered by the
queue policy on the predictor's lengths); with ``preemptive`` the head of the queue may evict running requests with
a worse key (TRAIL's guard, :mod:`~lenscope.analysis.scheduler.preemption`), which recompute their prompt and tokens
on re-admission; waiting requests are admitted in policy order while the batch cap and the prefill token budget
allow and prefilled together (each one's first token at the end of that iteration); otherwise every running request
decodes one token. Preemption is considered when the simulator considers it: after an arrival, a completion or a
prefill. The instance has no paged KV limit (give the simulator a capacity that never binds).

The clock is pluggable: :class:`WallClock` serves in real time; :class:`CostClock` advances by the cost model per
iteration instead, which makes a live run reproduce the simulator exactly (how the tests check the semantics). On a
:class:`CostClock` that follows the machine's measured speed over time (:func:`speed_over_time`), :func:`replay`
serves a live run again without a model (:class:`ReplayEngine` gives each request the answer length it got): what
the simulator predicts once it knows how fast the machine ran at each moment.
The result is a :class:`~lenscope.analysis.scheduler.engine.SimResult`, so every metric and figure of the simulator
reads a live run the same way.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Protocol

import numpy as np
import pandas as pd

from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.scheduler.cost_model import CostModel, predicted_iterations
from lenscope.analysis.scheduler.engine import SimConfig, SimResult
from lenscope.analysis.scheduler.policies import RequestView, WaitQueue
from lenscope.analysis.scheduler.predictors import Predictor
from lenscope.analysis.scheduler.preemption import preemptible
from lenscope.analysis.scheduler.registry import QUEUE_POLICIES
from lenscope.models.engine import BatchedEngine, GenerationSettings

SEGMENT_COLUMNS = ["instance", "role", "kind", "start_s", "end_s", "batch_size", "kv_tokens", "tokens"]


@dataclass(frozen=True)
class LiveRequest:
    """A request of a live run: its prompt (token ids), when it arrives (seconds from the start) and its sampling
    settings (the seed fixes its answer)."""

    prompt_ids: tuple[int, ...]
    arrival_s: float
    settings: GenerationSettings


class Clock(Protocol):
    """Time of a live run, in seconds from its start."""

    def start(self) -> None: ...
    def now(self) -> float: ...
    def wait_until(self, t: float) -> None: ...
    def iteration(self, kind: str, tokens: int, size: int, context: int) -> None: ...


class WallClock:
    """Real time: iterations take what they take, idle waits sleep."""

    def __init__(self) -> None:
        self._t0 = time.perf_counter()

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self._t0

    def wait_until(self, t: float) -> None:
        time.sleep(max(0.0, t - self.now()))

    def iteration(self, kind: str, tokens: int, size: int, context: int) -> None:
        """Real time has passed by itself."""


@dataclass(frozen=True)
class MeasuredSpeed:
    """How fast a machine ran over a live run: at ``times_s``, the iterations took ``factors`` times what the cost
    model gives (linear in between, the end values outside)."""

    times_s: np.ndarray
    factors: np.ndarray

    def at(self, t: float) -> float:
        return float(np.interp(t, self.times_s, self.factors))


class CostClock:
    """Model time: each iteration lasts what ``cost`` says (the simulator's clock), times the machine's ``speed`` at
    that moment where given; idle waits jump."""

    def __init__(self, cost: CostModel, speed: MeasuredSpeed | None = None) -> None:
        self.cost, self.speed, self.t = cost, speed, 0.0

    def start(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def wait_until(self, t: float) -> None:
        self.t = max(self.t, t)

    def iteration(self, kind: str, tokens: int, size: int, context: int) -> None:
        factor = 1.0 if self.speed is None else self.speed.at(self.t)
        self.t += factor * self.cost.iteration_s(kind, tokens, size, context)


def check_live_config(config: SimConfig) -> None:
    """ValueError unless ``config`` is what the live server runs: one colocated instance, continuous batching,
    without chunked prefill or prefix caching."""
    if (config.mode, config.n_decode, config.batching) != ("colocated", 1, "continuous"):
        raise ValueError("the live server runs one colocated instance with continuous batching "
                         f"(mode='colocated', n_decode=1), not {config.label()}")
    if config.chunk_tokens or config.prefix_cache_tokens:
        raise ValueError("the live server has no chunked prefill and no prefix cache")


class LiveServer:
    """Serves ``requests`` on ``engine`` (without features) under ``config``'s queue policy with ``predictor``'s
    lengths (indexed like ``requests``); :meth:`run` returns the per-request timings."""

    def __init__(self, engine: BatchedEngine | ReplayEngine, requests: Sequence[LiveRequest], predictor: Predictor,
                 config: SimConfig, clock: Clock | None = None) -> None:
        check_live_config(config)
        if not requests:
            raise ValueError("a live run needs at least one request")
        self.engine, self.requests, self.predictor, self.config = engine, list(requests), predictor, config
        self.clock = clock or WallClock()
        self.policy = QUEUE_POLICIES.make(config.queue)
        n = len(self.requests)
        self.arrival = np.array([r.arrival_s for r in self.requests], dtype=float)
        self.rows = [engine.new_row(i, r.prompt_ids, r.settings) for i, r in enumerate(self.requests)]
        self.predicted = np.array([float(predictor.static(i)) for i in range(n)])
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.admitted_s = np.full(n, np.nan)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.segments: list[tuple] = []

    def view(self, i: int) -> RequestView:
        generated = len(self.rows[i].output_ids)
        return RequestView(i, float(self.arrival[i]), len(self.requests[i].prompt_ids), generated,
                           float(self.predicted[i]), float(self.predictor.remaining(i, generated)))

    def run(self, on_progress: Progress = no_progress) -> SimResult:
        started = time.perf_counter()
        n, clock, cfg = len(self.rows), self.clock, self.config
        order = np.argsort(self.arrival, kind="stable").tolist()
        waiting = WaitQueue(self.policy, cfg.aging_s)
        batch = self.engine.running_batch(cfg.max_batch_size)
        next_arrival, done, event = 0, 0, False
        clock.start()
        while done < n:
            now = clock.now()
            while next_arrival < n and self.arrival[order[next_arrival]] <= now:
                waiting.push(self.view(order[next_arrival]))
                next_arrival, event = next_arrival + 1, True
            if not batch.rows and not len(waiting):
                clock.wait_until(float(self.arrival[order[next_arrival]]))
                continue
            if cfg.preemptive and event and len(waiting) and batch.rows:
                self._preempt_for(waiting, batch, now)
            admitted = self._admit(waiting, batch, now)
            if admitted:
                tokens = sum(self.rows[i].context for i in admitted)
                finished = self.engine.admit(batch, [self.rows[i] for i in admitted])
                clock.iteration("prefill", tokens, len(admitted), 0)
                end = clock.now()
                for i in admitted:
                    if self.first_token[i] != self.first_token[i]:  # NaN: its first token
                        self.first_token[i] = end
                self._record("prefill", now, end, len(admitted), tokens, tokens)
                event = True
            else:
                size = len(batch.rows)
                context = sum(r.context for r in batch.rows)
                finished = self.engine.decode_step(batch)
                clock.iteration("decode", size, size, context)
                end = clock.now()
                self._record("decode", now, end, size, context, size)
                event = bool(finished)
            for row in finished:
                self.finish[row.index] = end
            done += len(finished)
            if finished:
                on_progress(done, n, "requests")
        return self._result(time.perf_counter() - started)

    def _admit(self, waiting: WaitQueue, batch, now: float) -> list[int]:
        """Pop waiting requests in policy order while the batch cap and the prefill token budget allow."""
        cfg, admitted, tokens = self.config, [], 0
        while len(waiting) and len(batch.rows) + len(admitted) < cfg.max_batch_size:
            i = waiting.peek(now)
            context = self.rows[i].context
            if admitted and tokens + context > cfg.max_prefill_tokens:
                break
            waiting.pop(now)
            if self.admitted_s[i] != self.admitted_s[i]:
                self.admitted_s[i] = now
            admitted.append(i)
            tokens += context
        return admitted

    def _preempt_for(self, waiting: WaitQueue, batch, now: float) -> None:
        """Evict running requests with worse keys than the head of the queue when the batch is full (the
        simulator's rule, :meth:`ContinuousInstance._victims`)."""
        slots = len(batch.rows) + 1 - self.config.max_batch_size
        if slots <= 0:
            return
        head_key = self.policy.key(self.view(waiting.peek(now)))
        running = np.array([r.index for r in batch.rows], dtype=np.int64)
        generated = np.array([len(r.output_ids) for r in self.rows], dtype=np.int64)
        allowed = preemptible(running, generated, self.predicted, self.preemptions, self.config).tolist()
        ranked = sorted(((self.policy.key(self.view(i)), self.arrival[i], i) for i in allowed), reverse=True)
        victims = [i for key, _, i in ranked if key > head_key][:slots]
        if len(victims) < slots:
            return
        self.engine.evict(batch, [self.rows[i] for i in victims])
        for i in victims:
            self.preemptions[i] += 1
            waiting.push(self.view(i))

    def _record(self, kind: str, start: float, end: float, size: int, kv_tokens: int, tokens: int) -> None:
        self.segments.append((0, "decode", kind, start, end, size, kv_tokens, tokens))

    def _result(self, wall_s: float) -> SimResult:
        n = len(self.rows)
        requests = pd.DataFrame({
            "rid": np.arange(n), "arrival_s": self.arrival,
            "prompt_tokens": [len(r.prompt_ids) for r in self.requests],
            "output_tokens": [len(r.output_ids) for r in self.rows], "predicted_tokens": self.predicted,
            "first_token_s": self.first_token, "finish_s": self.finish, "admitted_s": self.admitted_s,
            "decode_instance": np.zeros(n, dtype=np.int64), "preemptions": self.preemptions,
            "cached_tokens": np.zeros(n, dtype=np.int64),
            "finished": [bool(r.output_ids) and r.output_ids[-1] in self.engine.target.stop_ids for r in self.rows],
        })
        segments = pd.DataFrame(self.segments, columns=SEGMENT_COLUMNS)
        return SimResult(requests=requests, segments=segments, batches=pd.DataFrame(columns=["size", "sum_len",
                                                                                             "max_len"]),
                         config=self.config, wall_s=wall_s)


def iteration_ratio(result: SimResult) -> float:
    """Measured time of a live run's iterations over what its cost model gives for the same iterations: 1 when the
    machine ran as fast as when it was profiled, 2 when it ran at half that speed (a busy or throttled machine)."""
    seg = result.segments
    return float((seg["end_s"] - seg["start_s"]).sum() / max(predicted_iterations(result.config.cost, seg).sum(),
                                                              1e-12))


def speed_over_time(result: SimResult, window_s: float) -> MeasuredSpeed:
    """How fast the machine ran during a live run: at the middle of each iteration, the measured time of the
    iterations whose middles lie within ``window_s`` around it, over what the run's cost model gives for them."""
    if window_s <= 0:
        raise ValueError("the window must be positive")
    seg = result.segments
    if seg.empty:
        raise ValueError("a live run without iterations has no speed")
    middles = ((seg["start_s"] + seg["end_s"]) / 2).to_numpy(float)
    order = np.argsort(middles, kind="stable")
    middles = middles[order]
    measured = np.concatenate([[0.0], np.cumsum((seg["end_s"] - seg["start_s"]).to_numpy(float)[order])])
    predicted = np.concatenate([[0.0], np.cumsum(predicted_iterations(result.config.cost, seg)[order])])
    lo = np.searchsorted(middles, middles - window_s / 2, side="left")
    hi = np.searchsorted(middles, middles + window_s / 2, side="right")
    return MeasuredSpeed(middles, (measured[hi] - measured[lo]) / np.maximum(predicted[hi] - predicted[lo], 1e-12))


@dataclass
class _KnownRow:
    """A request of a :class:`ReplayEngine`: its prompt, the answer length it is to get, and its tokens so far."""

    index: int
    prompt_ids: list[int]
    length: int
    stops: bool
    output_ids: list[int] = field(default_factory=list)
    done: bool = False

    @property
    def context(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    def next_token(self) -> None:
        last = len(self.output_ids) + 1 >= self.length
        self.output_ids.append(ReplayEngine.STOP if last and self.stops else ReplayEngine.TOKEN)
        self.done = last


@dataclass
class _KnownBatch:
    """The running requests of a :class:`ReplayEngine`."""

    rows: list[_KnownRow] = field(default_factory=list)


class ReplayEngine:
    """The serving engine's interface without a model: request ``i`` gets an answer of ``lengths[i]`` tokens, ending
    with a stop token where ``stops[i]`` (so :class:`LiveServer` serves a live run again on any clock, see
    :func:`replay`). Admitting a request gives it its next token, as a prefill does; an evicted one keeps its tokens."""

    STOP, TOKEN = 0, 1

    def __init__(self, lengths: Sequence[int], stops: Sequence[bool]) -> None:
        if len(lengths) != len(stops) or min(lengths, default=1) < 1:
            raise ValueError("a replay needs one answer length of at least 1 token and one stop flag per request")
        self.lengths, self.stops = [int(n) for n in lengths], [bool(s) for s in stops]
        self.target = SimpleNamespace(stop_ids={self.STOP})

    def new_row(self, index: int, prompt: Sequence[int], settings: GenerationSettings) -> _KnownRow:
        return _KnownRow(index, list(prompt), self.lengths[index], self.stops[index])

    def running_batch(self, size: int) -> _KnownBatch:
        return _KnownBatch()

    def admit(self, batch: _KnownBatch, rows: list[_KnownRow]) -> list[_KnownRow]:
        for row in rows:
            row.next_token()
        batch.rows += [r for r in rows if not r.done]
        return [r for r in rows if r.done]

    def decode_step(self, batch: _KnownBatch) -> list[_KnownRow]:
        for row in batch.rows:
            row.next_token()
        finished = [r for r in batch.rows if r.done]
        batch.rows = [r for r in batch.rows if not r.done]
        return finished

    def evict(self, batch: _KnownBatch, rows: list[_KnownRow]) -> None:
        batch.rows = [r for r in batch.rows if not any(r is x for x in rows)]


REPLAY_SETTINGS = GenerationSettings()  # a replay samples nothing: its answers' lengths are given


def replay(run: SimResult, predictor: Predictor, clock: Clock) -> SimResult:
    """A live run served again on ``clock`` without a model: the same arrivals, prompt lengths, answer lengths and
    predictions, under the run's config. On a :class:`CostClock` without a speed this is the simulator's replay; with
    :func:`speed_over_time` of the run, the simulator at the machine's measured speed of each moment."""
    q = run.requests
    requests = [LiveRequest((ReplayEngine.TOKEN,) * int(p), float(a), REPLAY_SETTINGS)
                for p, a in zip(q["prompt_tokens"], q["arrival_s"])]
    engine = ReplayEngine(q["output_tokens"].to_numpy(), q["finished"].to_numpy())
    return LiveServer(engine, requests, predictor, run.config, clock).run()


PROMPT_PASSES = ("shortest", "longest")


def profile_iterations(engine: BatchedEngine, requests: Sequence[LiveRequest], max_batch: int, steps: int = 12,
                       on_progress: Progress = no_progress, passes: Sequence[str] = PROMPT_PASSES,
                       rounds: int = 1) -> pd.DataFrame:
    """Time the engine's iterations at every batch size from 1 to ``max_batch`` (the profile a cost model is fitted
    to, as Vidur profiles each batch size). After a warm-up, each size is timed once per pass of ``passes``: on the
    shortest ``requests`` and on the longest (so the context varies apart from the size). The rows are admitted one
    per prefill for odd sizes and all in one prefill for even ones, then decoded for up to ``steps`` iterations after
    an untimed first one (a new batch's first step costs 10-15% more on a CPU, once per batch: timed, it would raise
    every step's cost). With several ``rounds`` the whole plan is repeated, every other round in reverse order, so
    that a drift of a shared machine's speed during the profile falls on every batch size alike instead of bending
    the cost of the sizes timed while it was slow. Returns one row per timed iteration in the live segments' columns
    (``kv_tokens`` is the decode context)."""
    if not requests or max_batch < 1 or steps < 1 or rounds < 1:
        raise ValueError("profiling needs requests, a batch of at least 1, at least 1 step and at least 1 round")
    if not passes or set(passes) - set(PROMPT_PASSES):
        raise ValueError(f"passes are some of {PROMPT_PASSES}, not {tuple(passes)}")
    by_length = sorted(requests, key=lambda r: len(r.prompt_ids))

    def rows(n: int, longest: bool) -> list:
        picked = (by_length[::-1] if longest else by_length)[:n]
        picked += [picked[k % len(picked)] for k in range(n - len(picked))]
        return [engine.new_row(i, r.prompt_ids, r.settings) for i, r in enumerate(picked)]

    warm = engine.running_batch(1)
    engine.admit(warm, rows(1, False))
    for _ in range(2):
        if warm.rows:
            engine.decode_step(warm)
    once = [(size, kind == "longest") for kind in passes for size in range(1, max_batch + 1)]
    log, plan = [], [item for r in range(rounds) for item in (once[::-1] if r % 2 else once)]
    for done, (size, longest) in enumerate(plan, 1):
        batch, fresh = engine.running_batch(max_batch), rows(size, longest)
        for group in ([[r] for r in fresh] if size % 2 else [fresh]):
            tokens = sum(r.context for r in group)
            start = time.perf_counter()
            engine.admit(batch, group)
            log.append((0, "decode", "prefill", start, time.perf_counter(), len(group), tokens, tokens))
        if batch.rows:
            engine.decode_step(batch)
        for _ in range(steps):
            if not batch.rows:
                break
            n, context = len(batch.rows), sum(r.context for r in batch.rows)
            start = time.perf_counter()
            engine.decode_step(batch)
            log.append((0, "decode", "decode", start, time.perf_counter(), n, context, n))
        on_progress(done, len(plan), "batch sizes profiled")
    return pd.DataFrame(log, columns=SEGMENT_COLUMNS)


def serve(engine: BatchedEngine, requests: Sequence[LiveRequest], predictor: Predictor, config: SimConfig,
          clock: Clock | None = None, on_progress: Progress = no_progress) -> SimResult:
    """Serve ``requests`` for real (see module docstring)."""
    return LiveServer(engine, requests, predictor, config, clock).run(on_progress)
