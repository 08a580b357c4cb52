"""Chunked prefill (Sarathi-Serve style) on a colocated continuous-batching instance.

Every iteration has a budget of ``SimConfig.chunk_tokens`` tokens. Running requests decode first (one token each);
what is left goes to prefill chunks: first the requests whose prefill is under way (in admission order), then newly
admitted ones in queue-policy order while the batch cap and the KV cache allow (a request's blocks are reserved
when it is admitted). A request's prefill ends with its first token (or, after a preemption, its next one) and it
joins the decoding batch. The mixed iteration costs :meth:`CostModel.mixed_step_s`. Iterations without prefill work
run as closed-form decode segments, as without chunking.
"""

from __future__ import annotations

from lenscope.analysis.scheduler.instances import ContinuousInstance, Simulation
from lenscope.analysis.scheduler.states import RequestState


class ChunkedPrefillInstance(ContinuousInstance):
    """Continuous batching whose prefills run in chunks beside the decodes (see module docstring)."""

    def __init__(self, sim: Simulation, index: int, uid: int) -> None:
        super().__init__(sim, index, uid)
        self.prefilling: dict[int, int] = {}  # request -> prompt (plus generated) tokens still to prefill
        self.reserved: dict[int, int] = {}  # request -> KV blocks reserved while it prefills
        self.chunks: list[tuple[int, int]] = []  # (request, tokens) prefilled in the current iteration
        self.decoding: list[int] = []  # requests decoding in the current iteration

    def occupied(self) -> int:
        return len(self.running) + len(self.prefilling)

    def running_ids(self) -> list[int]:
        """Decoding and prefilling requests (the predicted load dispatchers see)."""
        return self.running + list(self.prefilling)

    def _running_load(self) -> float:
        """The running requests' predicted load, then the prefilling ones'."""
        sim = self.sim
        return super()._running_load() + sum(max(sim.pred_list[i] - sim.gen.item(i), 1.0) for i in self.prefilling)

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
            sim.admitted(i, now, RequestState.PREFILLING)
            self.used_blocks += blocks
            self.held_blocks += blocks
            self.reserved[i] = blocks
            hit = self.prefix_hit(i) if self.prefix_cache is not None else 0
            self.prefilling[i] = sim.prompt_list[i] + sim.gen.item(i) - hit
            self._running_changed()
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
        self.chunks, self.decoding, self.kind = chunks, self.running.copy(), "mixed"
        step = sim.config.cost.mixed_step_s(sum(t for _, t in chunks), len(chunks), len(self.decoding),
                                            self._context_sum())
        self._schedule(now, now + step)

    def finish_iteration(self, now: float) -> None:
        if self.kind != "mixed":
            super().finish_iteration(now)
            return
        sim, bs = self.sim, self.sim.config.block_size
        if self.decoding:  # the decoding requests are still the running ones
            self._advance(1, now)
        done = []
        prefilling = self.prefilling
        for i, tokens in self.chunks:
            rest = prefilling[i] - tokens
            if rest:
                prefilling[i] = rest
            else:
                del prefilling[i]
                self.held_blocks -= self.reserved.pop(i)
                done.append(i)
        if done:
            self.cache_prompts(done)
            self._join(sim.prefilled(done, now))
        sim.record_segment(self, "mixed" if self.decoding else "prefill", now,
                           len(self.decoding) + len(self.chunks), self.used_blocks * bs)
        self.used_blocks = self._blocks_after(0) + self.held_blocks
        self.chunks = []
