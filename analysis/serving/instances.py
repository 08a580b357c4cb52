"""Serving instances of the simulated cluster: prefill-only, continuous-batching and static-batching.

Instances are engine-side objects: they read true output lengths (to know when a request ends)
from the engine's private arrays and talk to policies only through views. Decode work is simulated
in *segments*: runs of iterations over an unchanged batch, whose duration has a closed form under
the linear cost model. A segment ends at the next completion, at the next KV block the cache cannot
hold, or early when a request arrives that could join the batch.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

import numpy as np

from analysis.serving.policies import InstanceView, QueuePolicy, RequestView, WaitQueue
from analysis.serving.preemption import preemptible
from analysis.serving.prefix_cache import PrefixCache, cached_tokens


class Simulation(Protocol):
    """What instances need from the event loop (``analysis.serving.engine.Simulator``): the config, the
    per-request arrays, and the callbacks that schedule events and record what happened."""

    config: object
    prompt: np.ndarray
    gen: np.ndarray
    out: np.ndarray
    pred_total: np.ndarray
    kv_ready: np.ndarray
    preemptions: np.ndarray
    arrival: np.ndarray
    hash_ids: list | None
    cached: np.ndarray
    queue_policy: QueuePolicy
    prefill_policy: QueuePolicy

    def push_instance_event(self, t: float, instance: Instance) -> None: ...
    def record_segment(self, instance: Instance, kind: str, now: float, size: int, kv_tokens: int) -> None: ...
    def emit_tokens(self, batch: np.ndarray, now: float, count: int) -> None: ...
    def handoff(self, i: int, now: float) -> None: ...
    def request_view(self, i: int) -> RequestView: ...
    def admitted(self, i: int, now: float) -> None: ...


def blocks_for(tokens, block_size: int):
    """KV blocks holding ``tokens`` tokens (works on ints and arrays)."""
    return -(-tokens // block_size)


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
        blocks = self.prefix_cache.use(sim.hash_ids[i])
        sim.cached[i] = cached_tokens(blocks, sim.config.hash_block_tokens, int(sim.prompt[i]))
        return int(sim.cached[i])

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
        cfg, prompt, queue = self.sim.config, self.sim.prompt, self.queue
        batch, tokens = [], 0
        while queue and len(batch) < cfg.max_batch_size:
            i = queue.peek(now) if self.ordered else queue[0]
            p = int(prompt[i]) - (self.prefix_hit(i) if self.prefix_cache else 0)
            if batch and tokens + p > cfg.max_prefill_tokens:
                break
            batch.append(queue.pop(now) if self.ordered else queue.popleft())
            tokens += p
        self.batch, self.batch_tokens = batch, tokens
        self._schedule(now, now + cfg.cost.prefill.step_s(tokens, len(batch), 0))

    def finish_iteration(self, now: float) -> None:
        self.sim.record_segment(self, "prefill", now, len(self.batch), 0)
        batch = np.asarray(self.batch, dtype=np.int64)
        self.cache_prompts(batch)
        self.sim.emit_tokens(batch, now, 1)
        for i in batch[self.sim.gen[batch] < self.sim.out[batch]].tolist():
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
        self._running_pred: float | None = None

    def reserve(self, i: int) -> None:
        """Count a request dispatched here (in transfer or waiting) in the predicted load."""
        amount = max(self.sim.pred_total[i] - self.sim.gen[i], 1.0)
        self._queued_amount[i] = self._queued_amount.get(i, 0.0) + amount
        self.queued_pred += amount

    def _unreserve(self, i: int) -> None:
        self.queued_pred -= self._queued_amount.pop(i)

    def running_ids(self) -> np.ndarray:
        raise NotImplementedError

    def view(self) -> InstanceView:
        """Snapshot for dispatchers; the running part of the load is as of the last iteration end."""
        idx = self.running_ids()
        if self._running_pred is None:
            sim = self.sim
            self._running_pred = float(np.maximum(sim.pred_total[idx] - sim.gen[idx], 1.0).sum()) if len(idx) else 0.0
        return InstanceView(index=self.index, queued=len(self.waiting), running=len(idx),
                            predicted_outstanding_tokens=self.queued_pred + self._running_pred)

    def requeue(self, i: int) -> None:
        """Put a request in the wait queue (counted in the predicted load) without planning."""
        if i not in self._queued_amount:
            self.reserve(i)
        self.waiting.push(self.sim.request_view(i))

    def enqueue(self, i: int, now: float) -> None:
        self.requeue(i)
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
    the policy also preempts for waiting requests (:mod:`analysis.serving.preemption`).
    """

    def __init__(self, sim: Simulation, index: int, uid: int) -> None:
        super().__init__(sim, index, uid)
        cfg = sim.config
        self.cap_blocks = cfg.kv_capacity_tokens // cfg.block_size
        self.watermark = max(1, self.cap_blocks // 100)
        self.running = np.empty(0, dtype=np.int64)
        self.used_blocks = 0
        self.held_blocks = 0  # blocks of admitted requests outside ``running`` between iterations (chunked prefills)
        self.kind = "idle"
        self.seg_k = 0
        self.seg_ctx = 0.0
        self.prefill_batch = np.empty(0, dtype=np.int64)

    def running_ids(self) -> np.ndarray:
        return self.running

    def _set_running(self, idx: np.ndarray) -> None:
        self.running = idx
        self._running_pred = None

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
            resident = bool(sim.kv_ready[i])
            context = int(sim.prompt[i] + sim.gen[i])
            if self.prefix_cache and not resident:
                context -= self.prefix_hit(i)
            blocks = self._blocks_to_admit(i)
            if self.used_blocks + blocks > self.cap_blocks - self.watermark:
                break
            if not resident and batch and tokens + context > cfg.max_prefill_tokens:
                break
            self.waiting.pop(now)
            self._unreserve(i)
            self.used_blocks += blocks
            sim.admitted(i, now)
            (joined if resident else batch).append(i)
            tokens += 0 if resident else context
        if joined:
            self._set_running(np.concatenate([self.running, np.asarray(joined, dtype=np.int64)]))
        self.prefill_batch = np.asarray(batch, dtype=np.int64)
        return tokens

    def _blocks_to_admit(self, i: int) -> int:
        """KV blocks request ``i`` takes on admission (one more token when it must be prefilled first)."""
        sim = self.sim
        return int(blocks_for(int(sim.prompt[i] + sim.gen[i]) + (0 if sim.kv_ready[i] else 1), sim.config.block_size))

    def _key(self, i: int) -> float:
        return self.sim.queue_policy.key(self.sim.request_view(i))

    def _victims(self, head_key: float, slots: int, blocks: int) -> list[int]:
        """Running requests the guard lets the policy preempt, with keys above ``head_key``, worst first, just enough
        to free ``slots`` batch slots and ``blocks`` KV blocks (empty when even all of them are not enough)."""
        sim = self.sim
        allowed = preemptible(self.running, sim.gen, sim.pred_total, sim.preemptions, sim.config).tolist()
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
        self._evict(max(self.running.tolist(), key=lambda i: (self._key(i), sim.arrival[i], i)))

    def _evict(self, victim: int) -> None:
        """Drop ``victim``'s KV cache and put it back in the wait queue (recomputed on re-admission)."""
        sim = self.sim
        self._set_running(self.running[self.running != victim])
        self.used_blocks -= blocks_for(int(sim.prompt[victim] + sim.gen[victim]), sim.config.block_size)
        sim.kv_ready[victim] = False
        sim.preemptions[victim] += 1
        self.requeue(victim)

    def occupied(self) -> int:
        """Batch slots in use between iterations."""
        return len(self.running)

    def fit_next_token(self) -> None:
        """Preempt running requests (worst policy key first) until each can store one more token."""
        sim, bs = self.sim, self.sim.config.block_size
        if self.used_blocks + len(self.running) > self.cap_blocks:  # the next token may not fit
            while self.held_blocks + blocks_for(sim.prompt[self.running] + sim.gen[self.running] + 1, bs).sum() \
                    > self.cap_blocks:
                self._preempt_one()

    def _plan_decode(self, now: float) -> None:
        sim, bs = self.sim, self.sim.config.block_size
        self.fit_next_token()
        idx = self.running
        gen = sim.gen[idx]
        ctx = sim.prompt[idx] + gen
        k = int((sim.out[idx] - gen).min())
        free = self.cap_blocks - self.used_blocks
        if len(idx) * ((k - 1) // bs + 1) > free:  # the cache may fill up before the next completion
            first_new = bs - (ctx - 1) % bs  # iteration (1-based) at which each sequence needs a new block
            periods, rest = divmod(free, len(idx))
            within = np.cumsum(np.bincount(first_new, minlength=bs + 1))
            k = max(1, min(k, periods * bs + int(np.searchsorted(within, rest, side="right")) - 1))
        self.kind, self.seg_ctx, self.seg_k = "decode", float(ctx.sum()), k
        self._schedule(now, now + sim.config.cost.decode.decode_run_s(len(idx), self.seg_ctx, k))

    def finish_iteration(self, now: float) -> None:
        sim, bs = self.sim, self.sim.config.block_size
        if self.kind == "prefill":
            batch = self.prefill_batch
            self.cache_prompts(batch)
            sim.emit_tokens(batch, now, 1)
            sim.kv_ready[batch] = True
            sim.record_segment(self, "prefill", now, len(batch), self.used_blocks * bs)
            idx = np.concatenate([self.running, batch])
            self.prefill_batch = batch[:0]
        else:
            idx = self.running
            sim.emit_tokens(idx, now, self.seg_k)
        idx = idx[sim.gen[idx] < sim.out[idx]]
        used = int(blocks_for(sim.prompt[idx] + sim.gen[idx], bs).sum()) + self.held_blocks
        if self.kind == "decode":
            finished = self.running[sim.gen[self.running] >= sim.out[self.running]]
            peak = used + int(blocks_for(sim.prompt[finished] + sim.gen[finished], bs).sum())
            sim.record_segment(self, "decode", now, len(self.running), peak * bs)
        self._set_running(idx)
        self.used_blocks = used


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
            sim.admitted(i, now)
            batch.append(i)
        idx = np.asarray(batch, dtype=np.int64)
        fresh = idx[~sim.kv_ready[idx]]
        start_decode = now
        if len(fresh):
            start_decode += cfg.cost.prefill.step_s(int(sim.prompt[fresh].sum()), len(fresh), 0)
            sim.emit_tokens(fresh, start_decode, 1)
            sim.kv_ready[fresh] = True
        lengths = sim.out[idx]
        steps = int(lengths.max()) - 1
        context = float((sim.prompt[idx] + 1).sum())
        end = start_decode + cfg.cost.decode.decode_run_s(len(idx), context, steps)
        sim.record_padding(len(idx), int(lengths.sum()), int(lengths.max()))
        self.batch, self._running_pred = idx, None
        self._schedule(now, end)

    def finish_iteration(self, now: float) -> None:
        sim, idx = self.sim, self.batch
        sim.emit_tokens(idx, now, sim.out[idx] - sim.gen[idx])
        padded_kv = int((sim.prompt[idx] + sim.out[idx].max()).sum())
        sim.record_segment(self, "static", now, len(idx), padded_kv)
        self.batch, self._running_pred = np.empty(0, dtype=np.int64), None
