"""Serving instances of the simulated cluster: prefill-only, continuous-batching and static-batching.

Instances are engine-side objects: they read true output lengths (to know when a request ends)
from the engine's private arrays and talk to policies only through views. Decode work is simulated
in *segments*: runs of iterations over an unchanged batch, whose duration has a closed form under
the linear cost model. A segment ends at the next completion, at the next KV block the cache cannot
hold, or early when a request arrives that could join the batch.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections import deque
from typing import Protocol

import numpy as np

from lenscope.analysis.scheduler.policies import InstanceView, QueuePolicy, RequestView, WaitQueue
from lenscope.analysis.scheduler.preemption import preemptible
from lenscope.analysis.scheduler.prefix_cache import PrefixCache, cached_tokens
from lenscope.analysis.scheduler.states import RequestState, RequestStates


class Simulation(Protocol):
    """What instances need from the event loop (``lenscope.analysis.scheduler.engine.Simulator``): the config, the
    per-request arrays, and the callbacks that schedule events and record what happened."""

    config: object
    prompt: np.ndarray
    gen: np.ndarray
    out: np.ndarray
    pred_total: np.ndarray
    kv_ready: np.ndarray
    preemptions: np.ndarray
    arrival: np.ndarray
    arrival_list: list[float]
    prompt_list: list[int]
    pred_list: list[float]
    out_list: list[int]
    hash_ids: list | None
    cached: np.ndarray
    queue_policy: QueuePolicy
    prefill_policy: QueuePolicy
    states: RequestStates

    def push_instance_event(self, t: float, instance: Instance) -> None: ...
    def record_segment(self, instance: Instance, kind: str, now: float, size: int, kv_tokens: int) -> None: ...
    def emit_tokens(self, batch: np.ndarray, now: float, count: int) -> None: ...
    def completed(self, ids: list[int], now: float) -> None: ...
    def first_tokens(self, ids: list[int], now: float) -> list[int]: ...
    def prefilled(self, ids: list[int], now: float) -> list[int]: ...
    def preempted(self, i: int) -> None: ...
    def handoff(self, i: int, now: float) -> None: ...
    def request_view(self, i: int) -> RequestView: ...
    def admitted(self, i: int, now: float, to: RequestState) -> None: ...


# the ufunc reduction without the ndarray-method wrapper (the same result as .sum())
np_sum = np.add.reduce


def blocks_for(tokens, block_size: int):
    """KV blocks holding ``tokens`` (positive) tokens (works on ints and arrays)."""
    return (tokens + (block_size - 1)) // block_size


class Instance:
    """Base: one GPU engine that runs one iteration (or segment) at a time; the engine gives instances that prefill
    new requests a prefix cache when prefix caching is on."""

    role = "instance"
    prefix_cache: PrefixCache | None = None

    def __init__(self, sim: Simulation, index: int, uid: int) -> None:
        self.sim, self.index, self.uid = sim, index, uid
        self.busy_until: float | None = None
        self.version = 0
        self.seg_start = 0.0

    def _schedule(self, start: float, end: float) -> None:
        self.version += 1
        self.seg_start, self.busy_until = start, end
        self.sim.push_instance_event(end, self)

    def prefix_hit(self, i: int) -> int:
        """Prompt tokens of request ``i`` this instance's prefix cache holds (recorded as the request's cached
        tokens); call only with a cache."""
        sim = self.sim
        cached = cached_tokens(self.prefix_cache.use(sim.hash_ids[i]), sim.config.hash_block_tokens,
                               sim.prompt_list[i])
        sim.cached[i] = cached
        return cached

    def cache_prompts(self, idx) -> None:
        """Put the prompt blocks of prefilled requests ``idx`` in the prefix cache (if any)."""
        if self.prefix_cache is not None:
            for i in idx:
                self.prefix_cache.insert(self.sim.hash_ids[i])

    def on_event(self, now: float) -> None:
        self.busy_until = None
        self.finish_iteration(now)
        self.plan(now)

    def finish_iteration(self, now: float) -> None:
        raise NotImplementedError

    def plan(self, now: float) -> None:
        raise NotImplementedError


class PrefillInstance(Instance):
    """Disaggregated prefill: batches up to a token budget in the prefill queue policy's order (FCFS by default; the
    aging guard applies here too); hands requests to decode."""

    role = "prefill"

    def __init__(self, sim: Simulation, index: int, uid: int) -> None:
        super().__init__(sim, index, uid)
        self.ordered = sim.config.prefill_queue != "fcfs"
        self.queue: deque[int] | WaitQueue = WaitQueue(sim.prefill_policy, sim.config.aging_s) if self.ordered \
            else deque()
        self.batch: list[int] = []
        self.batch_tokens = 0

    def enqueue(self, i: int, now: float) -> None:
        if self.ordered:
            self.queue.push(self.sim.request_view(i))
        else:
            self.queue.append(i)
        if self.busy_until is None:
            self.plan(now)

    def plan(self, now: float) -> None:
        if self.busy_until is not None or not self.queue:
            return
        cfg, prompt, queue = self.sim.config, self.sim.prompt_list, self.queue
        batch, tokens = [], 0
        while queue and len(batch) < cfg.max_batch_size:
            i = queue.peek(now) if self.ordered else queue[0]
            p = prompt[i] - (self.prefix_hit(i) if self.prefix_cache is not None else 0)
            if batch and tokens + p > cfg.max_prefill_tokens:
                break
            batch.append(queue.pop(now) if self.ordered else queue.popleft())
            self.sim.states.move(batch[-1], RequestState.PREFILLING)
            tokens += p
        self.batch, self.batch_tokens = batch, tokens
        self._schedule(now, now + cfg.cost.prefill.step_s(tokens, len(batch), 0))

    def finish_iteration(self, now: float) -> None:
        self.sim.record_segment(self, "prefill", now, len(self.batch), 0)
        self.cache_prompts(self.batch)
        for i in self.sim.first_tokens(self.batch, now):
            self.sim.handoff(i, now)
        self.batch = []


class DecodeInstance(Instance):
    """Shared bookkeeping of decode-capable instances: wait queue and predicted load."""

    role = "decode"

    def __init__(self, sim: Simulation, index: int, uid: int) -> None:
        super().__init__(sim, index, uid)
        self.waiting = WaitQueue(sim.queue_policy, sim.config.aging_s)
        self.queued_pred = 0.0
        self._queued_amount: dict[int, float] = {}
        self._running_pred: float | None = None  # predicted load of the running requests, None when stale
        self._view: InstanceView | None = None  # the last snapshot, None once anything in it changed

    def reserve(self, i: int) -> None:
        """Count a request dispatched here (in transfer or waiting) in the predicted load."""
        amount = max(self.sim.pred_list[i] - self.sim.gen.item(i), 1.0)
        self._queued_amount[i] = self._queued_amount.get(i, 0.0) + amount
        self.queued_pred += amount
        self._view = None

    def _unreserve(self, i: int) -> None:
        self.queued_pred -= self._queued_amount.pop(i)
        self._view = None

    def _running_changed(self) -> None:
        """Forget the running load and the snapshot (after a change of the running requests or their progress)."""
        self._running_pred, self._view = None, None

    def running_ids(self) -> np.ndarray | list[int]:
        raise NotImplementedError

    def occupied(self) -> int:
        """Batch slots in use between iterations."""
        return len(self.running_ids())

    def _running_load(self) -> float:
        """Predicted remaining tokens of the running requests (at least 1 each)."""
        sim, idx = self.sim, self.running_ids()
        return float(np_sum(np.maximum(sim.pred_total[idx] - sim.gen[idx], 1.0))) if len(idx) else 0.0

    def view(self) -> InstanceView:
        """Snapshot for dispatchers (kept until something in it changes); the running part of the load is as of the
        last change of the running requests (``_running_pred``, reset by then)."""
        if self._view is None:
            if self._running_pred is None:
                self._running_pred = self._running_load()
            self._view = InstanceView(self.index, len(self.waiting), self.occupied(),
                                      self.queued_pred + self._running_pred)
        return self._view

    def requeue(self, i: int, request: RequestView | None = None) -> None:
        """Put a request (whose view is ``request`` when known) in the wait queue (counted in the predicted load)
        without planning."""
        if i not in self._queued_amount:
            self.reserve(i)
        self.waiting.push(request or self.sim.request_view(i))
        self._view = None

    def enqueue(self, i: int, now: float, request: RequestView | None = None) -> None:
        self.requeue(i, request)
        if self.busy_until is None:
            self.plan(now)
        else:
            self.on_arrival_while_busy(i, now)

    def on_arrival_while_busy(self, i: int, now: float) -> None:
        """Hook: request ``i`` arrived during an iteration."""


class ContinuousInstance(DecodeInstance):
    """Continuous (iteration-level) batching with paged KV cache and preemption by recompute.

    At each iteration boundary: admit waiting requests in policy order while the batch cap and
    the free KV blocks (minus a 1 % watermark) allow, prefill those whose KV is not resident (new
    requests in colocated mode, preempted ones), otherwise decode one token for every running
    request. When the next token does not fit in the cache, the running request with the worst
    policy key is preempted (its KV is dropped and recomputed on re-admission). With ``preemptive``
    the policy also preempts for waiting requests (:mod:`lenscope.analysis.scheduler.preemption`).

    The running requests are kept in batch order, in lists (per-iteration work on batches of tens of requests is
    cheaper in plain Python than in numpy calls), with per request ``g`` = generated tokens - ``steps``, ``c`` =
    context - ``steps``, ``f`` = remaining true tokens + ``steps`` and ``q`` = predicted total - ``g``, where ``steps``
    counts the decode steps the instance has run: a decode step then only advances ``steps``. The sum of the ``c``
    and a count of ``c`` modulo the block size give the batch's context and KV blocks without a pass over it, the
    sorted ``q`` and their sum its predicted load. A running request's generated count (``sim.gen``) is written
    when it leaves the batch and before a preemption decision reads it (:meth:`_sync_gen`).
    """

    def __init__(self, sim: Simulation, index: int, uid: int) -> None:
        super().__init__(sim, index, uid)
        cfg = sim.config
        self.cap_blocks = cfg.kv_capacity_tokens // cfg.block_size
        self.watermark = max(1, self.cap_blocks // 100)
        self.running: list[int] = []
        self.used_blocks = 0
        self.held_blocks = 0  # blocks of admitted requests outside ``running`` between iterations (chunked prefills)
        self.kind = "idle"
        self.seg_k = 0
        self.seg_ctx = 0.0
        self.prefill_batch: list[int] = []
        self.steps = 0
        self._g: list[int] = []
        self._c: list[int] = []
        self._c_sum = 0
        self._c_blocks = 0  # sum of c // block_size
        self._c_residues = [0] * cfg.block_size  # how many c have each value of c % block_size
        self._f: list[int] = []
        self._f_min: float = math.inf  # min(_f): the step at which the next running request ends
        self._q: list[float] = []  # per running request: predicted total - g, so its predicted remaining is q - steps
        self._q_sorted: list[float] = []  # the _q in ascending order, and their sum: the predicted load in O(log n)
        self._q_sum = 0.0

    def running_ids(self) -> list[int]:
        return self.running

    def _running_load(self) -> float:
        """Predicted remaining tokens of the running requests, at least 1 each: ``q - steps`` for those with
        ``q > steps + 1``, 1 for the others (the first ones of the sorted ``q``, usually none or a few)."""
        q, steps = self._q_sorted, self.steps
        floored = bisect_right(q, steps + 1.0)
        low = sum(q[:floored]) if floored else 0.0
        return (self._q_sum - low) - (len(q) - floored) * steps + floored

    def _sync_gen(self) -> None:
        """Write the generated counts of the running requests to ``sim.gen``."""
        gen, steps = self.sim.gen, self.steps
        for i, g in zip(self.running, self._g):
            gen[i] = g + steps

    def _join(self, ids: list[int]) -> None:
        """Add requests ``ids`` (their ``sim.gen`` current) to the running batch."""
        sim, steps = self.sim, self.steps
        for i in ids:
            g = sim.gen.item(i)
            self.running.append(i)
            self._g.append(g - steps)
            self._add_c(sim.prompt_list[i] + g - steps)
            self._f.append(sim.out_list[i] - g + steps)
            self._f_min = min(self._f_min, self._f[-1])
            q = sim.pred_list[i] - (g - steps)
            self._q.append(q)
            insort(self._q_sorted, q)
            self._q_sum += q
        self._running_changed()

    def _remove(self, positions: list[int]) -> list[int]:
        """Take the running requests at ``positions`` (ascending) out of the batch; returns their ``c``."""
        removed = []
        q_sorted = self._q_sorted
        for j in reversed(positions):
            del self.running[j], self._g[j], self._f[j]
            q = self._q.pop(j)
            del q_sorted[bisect_left(q_sorted, q)]
            self._q_sum -= q
            removed.append(self._c.pop(j))
            self._count_c(removed[-1], -1)
        if not self.running:
            self._q_sum = 0.0  # no rounding left over from the requests that came and went
        self._f_min = min(self._f, default=math.inf)
        self._running_changed()
        return removed

    def _add_c(self, c: int) -> None:
        self._c.append(c)
        self._count_c(c, 1)

    def _count_c(self, c: int, sign: int) -> None:
        blocks, residue = divmod(c, self.sim.config.block_size)
        self._c_sum += sign * c
        self._c_blocks += sign * blocks
        self._c_residues[residue] += sign

    def _blocks_after(self, k: int) -> int:
        """KV blocks of the running requests after ``k`` more tokens each."""
        bs = self.sim.config.block_size
        whole, part = divmod(self.steps + k + bs - 1, bs)  # (c + whole * bs + part) // bs, summed
        return self._c_blocks + len(self._c) * whole + sum(self._c_residues[bs - part:])

    def _context_sum(self) -> float:
        """Context tokens of the running requests."""
        return float(self._c_sum + len(self._c) * self.steps)

    def _advance(self, k: int, now: float) -> list[int]:
        """``k`` more tokens for every running request, the last at ``now``: the finished ones leave the batch
        (returns their ``c``)."""
        self.steps += k
        steps, f = self.steps, self._f
        if self._f_min > steps:
            self._running_changed()
            return []
        if self._f_min < steps:
            raise RuntimeError(f"instance {self.uid} decoded past the last token of a request")
        ended, j = [], -1
        for _ in range(f.count(steps)):  # the requests whose last token this was
            j = f.index(steps, j + 1)
            ended.append(j)
        done = [self.running[j] for j in ended]
        removed = self._remove(ended)
        self.sim.completed(done, now)
        return removed

    def on_arrival_while_busy(self, i: int, now: float) -> None:
        """End a decode segment at the first iteration boundary so the newcomer can join (or preempt)."""
        if self.kind != "decode":
            return
        if len(self.running) >= self.sim.config.max_batch_size and not (
                self.sim.config.preemptive and self._victims(self._key(i), 1, 0)):
            return
        decode, size = self.sim.config.cost.decode, len(self.running)
        done = decode.decode_steps_done(size, self.seg_ctx, now - self.seg_start)
        if done < self.seg_k:
            self.seg_k = done
            self._schedule(self.seg_start, self.seg_start + decode.decode_run_s(size, self.seg_ctx, done))

    def plan(self, now: float) -> None:
        if self.busy_until is not None:
            return
        if self.sim.config.preemptive and len(self.waiting) and len(self.running):
            self._preempt_for(self.waiting.peek(now))
        tokens = self._admit(now)
        if len(self.prefill_batch):
            self.kind = "prefill"
            self._schedule(now, now + self.sim.config.cost.prefill.step_s(tokens, len(self.prefill_batch), 0))
        elif len(self.running):
            self._plan_decode(now)
        else:
            self.kind = "idle"

    def _admit(self, now: float) -> int:
        """Admit waiting requests; resident ones join the batch, the others form a prefill batch
        (``self.prefill_batch``) whose token count is returned."""
        if not len(self.waiting):
            return 0
        sim, cfg = self.sim, self.sim.config
        joined, batch, tokens = [], [], 0
        while len(self.waiting) and len(self.running) + len(joined) + len(batch) < cfg.max_batch_size:
            i = self.waiting.peek(now)
            resident = sim.kv_ready.item(i)
            context = sim.prompt_list[i] + sim.gen.item(i)
            if self.prefix_cache is not None and not resident:
                context -= self.prefix_hit(i)
            blocks = self._blocks_to_admit(i)
            if self.used_blocks + blocks > self.cap_blocks - self.watermark:
                break
            if not resident and batch and tokens + context > cfg.max_prefill_tokens:
                break
            self.waiting.pop(now)
            self._unreserve(i)
            self.used_blocks += blocks
            sim.admitted(i, now, RequestState.DECODING if resident else RequestState.PREFILLING)
            (joined if resident else batch).append(i)
            tokens += 0 if resident else context
        if joined:
            self._join(joined)
        self.prefill_batch = batch
        return tokens

    def _blocks_to_admit(self, i: int) -> int:
        """KV blocks request ``i`` takes on admission (one more token when it must be prefilled first)."""
        sim = self.sim
        return blocks_for(sim.prompt_list[i] + sim.gen.item(i) + (0 if sim.kv_ready.item(i) else 1),
                          sim.config.block_size)

    def _key(self, i: int) -> float:
        return self.sim.queue_policy.key(self.sim.request_view(i))

    def _victims(self, head_key: float, slots: int, blocks: int) -> list[int]:
        """Running requests the guard lets the policy preempt, with keys above ``head_key``, worst first, just enough
        to free ``slots`` batch slots and ``blocks`` KV blocks (empty when even all of them are not enough)."""
        sim = self.sim
        self._sync_gen()
        running = np.array(self.running, dtype=np.int64)
        allowed = preemptible(running, sim.gen, sim.pred_total, sim.preemptions, sim.config).tolist()
        ranked = sorted(((self._key(r), sim.arrival[r], r) for r in allowed), reverse=True)
        chosen, freed = [], 0
        for key, _, r in ranked:
            if key <= head_key or (len(chosen) >= slots and freed >= blocks):
                break
            chosen.append(r)
            freed += int(blocks_for(int(sim.prompt[r] + sim.gen[r]), sim.config.block_size))
        return chosen if len(chosen) >= slots and freed >= blocks else []

    def _preempt_for(self, head: int) -> None:
        """Preempt running requests with worse keys when the waiting ``head`` cannot join otherwise."""
        slots = self.occupied() + 1 - self.sim.config.max_batch_size
        blocks = self.used_blocks + self._blocks_to_admit(head) - (self.cap_blocks - self.watermark)
        if slots > 0 or blocks > 0:
            for victim in self._victims(self._key(head), max(slots, 0), max(blocks, 0)):
                self._evict(victim)

    def _preempt_one(self) -> None:
        sim = self.sim
        self._sync_gen()
        self._evict(max(self.running, key=lambda i: (self._key(i), sim.arrival[i], i)))

    def _evict(self, victim: int) -> None:
        """Drop ``victim``'s KV cache and put it back in the wait queue (recomputed on re-admission)."""
        sim = self.sim
        self._sync_gen()
        self._remove([self.running.index(victim)])
        self.used_blocks -= blocks_for(sim.prompt_list[victim] + sim.gen.item(victim), sim.config.block_size)
        sim.preempted(victim)
        self.requeue(victim)

    def occupied(self) -> int:
        return len(self.running)

    def fit_next_token(self) -> None:
        """Preempt running requests (worst policy key first) until each can store one more token."""
        if self.used_blocks + len(self.running) > self.cap_blocks:  # the next token may not fit
            while self.held_blocks + self._blocks_after(1) > self.cap_blocks:
                self._preempt_one()

    def _plan_decode(self, now: float) -> None:
        sim, bs = self.sim, self.sim.config.block_size
        self.fit_next_token()
        idx = self.running
        k = self._f_min - self.steps
        free = self.cap_blocks - self.used_blocks
        if len(idx) * ((k - 1) // bs + 1) > free:  # the cache may fill up before the next completion
            # iteration (1-based) at which each sequence needs a new block
            first_new = bs - (np.array(self._c, dtype=np.int64) + (self.steps - 1)) % bs
            periods, rest = divmod(free, len(idx))
            within = np.cumsum(np.bincount(first_new, minlength=bs + 1))
            k = max(1, min(k, periods * bs + int(np.searchsorted(within, rest, side="right")) - 1))
        self.kind, self.seg_ctx, self.seg_k = "decode", self._context_sum(), k
        self._schedule(now, now + sim.config.cost.decode.decode_run_s(len(idx), self.seg_ctx, k))

    def finish_iteration(self, now: float) -> None:
        sim, bs = self.sim, self.sim.config.block_size
        if self.kind == "prefill":
            batch = self.prefill_batch
            self.cache_prompts(batch)
            alive = sim.prefilled(batch, now)
            sim.record_segment(self, "prefill", now, len(batch), self.used_blocks * bs)
            self._join(alive)
            self.prefill_batch = []
            self.used_blocks = self._blocks_after(0) + self.held_blocks
            return
        peak = self._blocks_after(self.seg_k)
        sim.record_segment(self, "decode", now, len(self.running), (peak + self.held_blocks) * bs)
        shift = self.steps + self.seg_k + bs - 1
        ended = self._advance(self.seg_k, now)
        self.used_blocks = peak - sum([(c + shift) // bs for c in ended]) + self.held_blocks


class StaticInstance(DecodeInstance):
    """Static batching: take up to ``max_batch_size`` waiting requests (policy order), prefill the
    new ones, then decode until the longest member ends; finished members keep their padded slot.
    Memory is assumed reserved for the whole batch (no preemption). Members return at batch end."""

    def __init__(self, sim: Simulation, index: int, uid: int) -> None:
        super().__init__(sim, index, uid)
        self.batch = np.empty(0, dtype=np.int64)

    def running_ids(self) -> np.ndarray:
        return self.batch

    def plan(self, now: float) -> None:
        if self.busy_until is not None or not len(self.waiting):
            return
        sim, cfg = self.sim, self.sim.config
        batch = []
        while len(self.waiting) and len(batch) < cfg.max_batch_size:
            i = self.waiting.pop(now)
            self._unreserve(i)
            sim.admitted(i, now, RequestState.DECODING if sim.kv_ready[i] else RequestState.PREFILLING)
            batch.append(i)
        idx = np.asarray(batch, dtype=np.int64)
        fresh = idx[~sim.kv_ready[idx]]
        start_decode = now
        if len(fresh):
            start_decode += cfg.cost.prefill.step_s(int(sim.prompt[fresh].sum()), len(fresh), 0)
            sim.prefilled(fresh.tolist(), start_decode)
        lengths = sim.out[idx]
        steps = int(lengths.max()) - 1
        context = float((sim.prompt[idx] + 1).sum())
        end = start_decode + cfg.cost.decode.decode_run_s(len(idx), context, steps)
        sim.record_padding(len(idx), int(lengths.sum()), int(lengths.max()))
        self.batch = idx
        self._running_changed()
        self._schedule(now, end)

    def finish_iteration(self, now: float) -> None:
        sim, idx = self.sim, self.batch
        sim.emit_tokens(idx, now, sim.out[idx] - sim.gen[idx])
        padded_kv = int((sim.prompt[idx] + sim.out[idx].max()).sum())
        sim.record_segment(self, "static", now, len(idx), padded_kv)
        self.batch = np.empty(0, dtype=np.int64)
        self._running_changed()
