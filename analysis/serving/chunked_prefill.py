"""Chunked prefill (Sarathi-Serve style) on a colocated continuous-batching instance.

Every iteration has a budget of ``SimConfig.chunk_tokens`` tokens. Running requests decode first (one token each);
what is left goes to prefill chunks: first the requests whose prefill is under way (in admission order), then newly
admitted ones in queue-policy order while the batch cap and the KV cache allow (a request's blocks are reserved
when it is admitted). A request's prefill ends with its first token (or, after a preemption, its next one) and it
joins the decoding batch. The mixed iteration costs :meth:`CostModel.mixed_step_s`. Iterations without prefill work
run as closed-form decode segments, as without chunking.
"""

from __future__ import annotations

import numpy as np

from analysis.serving.instances import ContinuousInstance, Simulation, blocks_for


class ChunkedPrefillInstance(ContinuousInstance):
    """Continuous batching whose prefills run in chunks beside the decodes (see module docstring)."""

    def __init__(self, sim: Simulation, index: int, uid: int) -> None:
        super().__init__(sim, index, uid)
        self.prefilling: dict[int, int] = {}  # request -> prompt (plus generated) tokens still to prefill
        self.reserved: dict[int, int] = {}  # request -> KV blocks reserved while it prefills
        self.chunks: list[tuple[int, int]] = []  # (request, tokens) prefilled in the current iteration
        self.decoding = np.empty(0, dtype=np.int64)  # requests decoding in the current iteration

    def occupied(self) -> int:
        return len(self.running) + len(self.prefilling)

    def running_ids(self) -> np.ndarray:
        """Decoding and prefilling requests (the predicted load dispatchers see)."""
        return np.concatenate([self.running, np.fromiter(self.prefilling, dtype=np.int64, count=len(self.prefilling))])

    def plan(self, now: float) -> None:
        if self.busy_until is not None:
            return
        sim, cfg = self.sim, self.sim.config
        if cfg.preemptive and len(self.waiting) and len(self.running):
            self._preempt_for(self.waiting.peek(now))
        budget = cfg.chunk_tokens - len(self.running)
        chunks = []
        for i, left in self.prefilling.items():
            if budget <= 0:
                break
            chunks.append((i, min(left, budget)))
            budget -= chunks[-1][1]
        while budget > 0 and len(self.waiting) and self.occupied() < cfg.max_batch_size:
            i = self.waiting.peek(now)
            blocks = self._blocks_to_admit(i)
            if self.used_blocks + blocks > self.cap_blocks - self.watermark:
                break
            self.waiting.pop(now)
            self._unreserve(i)
            sim.admitted(i, now)
            self.used_blocks += blocks
            self.held_blocks += blocks
            self.reserved[i] = blocks
            self.prefilling[i] = int(sim.prompt[i] + sim.gen[i]) - (self.prefix_hit(i) if self.prefix_cache else 0)
            self._running_pred = None
            chunks.append((i, min(self.prefilling[i], budget)))
            budget -= chunks[-1][1]
        if chunks:
            self._plan_mixed(now, chunks)
        elif len(self.running):
            self._plan_decode(now)
        else:
            self.kind = "idle"

    def _plan_mixed(self, now: float, chunks: list[tuple[int, int]]) -> None:
        sim = self.sim
        self.fit_next_token()
        self.chunks, self.decoding, self.kind = chunks, self.running, "mixed"
        context = float((sim.prompt[self.decoding] + sim.gen[self.decoding]).sum())
        step = sim.config.cost.mixed_step_s(sum(t for _, t in chunks), len(chunks), len(self.decoding), context)
        self._schedule(now, now + step)

    def finish_iteration(self, now: float) -> None:
        if self.kind != "mixed":
            super().finish_iteration(now)
            return
        sim, bs = self.sim, self.sim.config.block_size
        sim.emit_tokens(self.decoding, now, 1)
        done = []
        for i, tokens in self.chunks:
            self.prefilling[i] -= tokens
            if not self.prefilling[i]:
                del self.prefilling[i]
                self.held_blocks -= self.reserved.pop(i)
                done.append(i)
        prefilled = np.asarray(done, dtype=np.int64)
        self.cache_prompts(prefilled)
        sim.emit_tokens(prefilled, now, 1)
        sim.kv_ready[prefilled] = True
        sim.record_segment(self, "mixed" if len(self.decoding) else "prefill", now,
                           len(self.decoding) + len(self.chunks), self.used_blocks * bs)
        idx = np.concatenate([self.decoding, prefilled])
        idx = idx[sim.gen[idx] < sim.out[idx]]
        self._set_running(idx)
        self.used_blocks = int(blocks_for(sim.prompt[idx] + sim.gen[idx], bs).sum()) + self.held_blocks
        self.chunks = []
