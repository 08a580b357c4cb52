"""Live speculative decoding of a dataset's held-out prompts with its registered drafters (``speculative``), and
one live generation for a page.

For each test-split prompt the target decodes plainly once and speculatively with each compared drafter (OUTLETS
and SD-only), interleaved so machine load hits all alike. The stored ``speculative_live`` result holds, per
drafter, the acceptance rate of each draft position, tau (tokens per verify cycle, the bonus token included),
tokens/s and the speedup over plain decoding, each with a bootstrap 95% CI over prompts; the paired OUTLETS -
SD-only difference of acceptance and tau (the paper's "no acceptance loss" claim); and every verify cycle's
remaining-length estimates (drafter, and the target probe when one is registered) beside the true remaining length.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from lenscope.analysis.core.metrics import Estimate, bootstrap_ratio
from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.core.splits import evaluation_split
from lenscope.analysis.drafter.acceptance import DRAFT_STEPS, cycle_acceptance
from lenscope.analysis.drafter.probes import LengthProbe
from lenscope.jobs.drafter.training import drafter_name, load_drafter
from lenscope.jobs.runs.datasets import dataset_runs
from lenscope.models.drafter import Drafter
from lenscope.models.drafter_decoding import Decoded, SpeculativeDecoder, plain_decode
from lenscope.models.target import TargetModel
from lenscope.store.store import Store

SPECULATIVE_KIND = "speculative_live"
COMPARED = ("outlets", "sd-only")   # the paper's acceptance comparison: joint training vs drafting alone


def held_out_prompts(store: Store, dataset: str, n: int) -> list[tuple[int, list[int]]]:
    """(prompt id, prompt token ids) of up to ``n`` distinct prompts of the dataset's evaluation split (test, else
    val, else train), censored runs included: only the prompts are used."""
    runs = dataset_runs(store, dataset, include_censored=True)
    runs = runs[runs["split"] == evaluation_split(runs["split"])].drop_duplicates("prompt_id").head(n)
    prompts = []
    for row in runs.itertuples():
        run = store.load_run(int(row.run_id), layers=[])
        prompts.append((int(row.prompt_id), run.features.input_ids[:run.prompt_len].tolist()))
    return prompts


def registered_drafters(store: Store, dataset: str, variants=COMPARED) -> dict[str, pd.Series]:
    """The registered drafters of ``dataset`` among ``variants`` (name -> predictors row), OUTLETS required."""
    frame = store.predictors_frame("drafter").set_index("name")
    found = {v: frame.loc[drafter_name(dataset, v)] for v in variants if drafter_name(dataset, v) in frame.index}
    if "outlets" not in found:
        raise ValueError(f"no OUTLETS drafter trained on {dataset!r}; run `python -m lenscope train-drafter "
                         f"--dataset {dataset}` first")
    return found


def live_probes(probes: pd.DataFrame) -> pd.DataFrame:
    """The registered probes that read one layer's state at the newest position, what a live verify pass gives
    (not the fused or pooled views of the drafter ablation)."""
    if probes.empty:
        return probes
    return probes[probes["config"].map(lambda c: (c or {}).get("view", "last") == "last"
                                       and len((c or {}).get("layers", [None])) == 1)]


def registered_probe(store: Store, dataset: str) -> pd.Series | None:
    """A registered one-layer regression probe of ``dataset`` (the study's), or None."""
    probes = live_probes(store.predictors_frame("probe"))
    mine = probes["config"].map(lambda c: (c or {}).get("dataset") == dataset and (c or {}).get("mode") == "regression")
    return None if not mine.any() else probes[mine].iloc[0]


def speculative_config(store: Store, dataset: str, n_prompts: int, max_new_tokens: int, k: int,
                       temperature: float, seed: int) -> dict:
    """What a stored result depends on: the settings and the ids of the drafters and probe (a retrained one is a
    new id, so a new result)."""
    probe = registered_probe(store, dataset)
    return {"dataset": dataset, "n_prompts": n_prompts, "max_new_tokens": max_new_tokens, "k": k,
            "temperature": temperature, "seed": seed,
            "drafters": {v: int(row["predictor_id"]) for v, row in registered_drafters(store, dataset).items()},
            "probe": None if probe is None else int(probe["predictor_id"])}


def _estimate(est: Estimate) -> dict:
    """An estimate as JSON (NaN as None: PostgreSQL's JSON has no NaN)."""
    return {key: (None if isinstance(v, float) and not math.isfinite(v) else v) for key, v in asdict(est).items()}


def _curve(run: Decoded, prompt_id: int, variant: str, probe: LengthProbe | None) -> list[dict]:
    """Per verify cycle: the drafter's (and probe's) remaining-length estimate and the true remaining length."""
    total = len(run.tokens)
    rows = []
    for c in run.cycles:
        row = {"variant": variant, "prompt_id": prompt_id, "step": c.step, "drafter": c.length,
               "true": total - c.step, "accepted": c.accepted, "finished": run.finished}
        if probe is not None:
            row["probe"] = float(probe.predict(c.watched.unsqueeze(0))[0])
        rows.append(row)
    return rows


def _summary(runs: pd.DataFrame, k: int) -> dict:
    """Per drafter: acceptance per position, tau, tokens/s and speedup with CIs (rows = prompts)."""
    out = {}
    for variant, g in runs[runs["variant"] != "plain"].groupby("variant", sort=False):
        plain = runs[runs["variant"] == "plain"].set_index("prompt_id").loc[g["prompt_id"]]
        evaluated, accepted = np.stack(g["evaluated"].to_numpy()), np.stack(g["accepted"].to_numpy())
        # plain decoding's time for the speculative run's tokens, over the speculative time
        plain_time = g["tokens"].to_numpy() * plain["seconds"].to_numpy() / plain["tokens"].to_numpy()
        out[variant] = {
            "acceptance": [_estimate(bootstrap_ratio(accepted[:, i], evaluated[:, i])) for i in range(k)],
            "evaluated": evaluated.sum(0).tolist(),
            "tau": _estimate(bootstrap_ratio(g["cycle_tokens"], g["cycles"])),
            "tokens_per_s": _estimate(bootstrap_ratio(g["tokens"], g["seconds"])),
            "speedup": _estimate(bootstrap_ratio(plain_time, g["seconds"])),
            "identical_to_plain": int(g["identical"].sum()), "prompts": len(g)}
    return out


def _difference(runs: pd.DataFrame, k: int, first: str = "outlets", second: str = "sd-only") -> dict | None:
    """Paired ``first - second`` acceptance per position and tau over the same prompts."""
    if not {first, second} <= set(runs["variant"]):
        return None
    a, b = (runs[runs["variant"] == v].set_index("prompt_id").sort_index() for v in (first, second))
    ea, aa, eb, ab = (np.stack(f[c].to_numpy()) for f, c in ((a, "evaluated"), (a, "accepted"),
                                                              (b, "evaluated"), (b, "accepted")))
    return {"acceptance": [_estimate(bootstrap_ratio(aa[:, i], ea[:, i], baseline=(ab[:, i], eb[:, i])))
                           for i in range(k)],
            "tau": _estimate(bootstrap_ratio(a["cycle_tokens"], a["cycles"],
                                             baseline=(b["cycle_tokens"], b["cycles"]))),
            "pair": [first, second]}


def _run_row(run: Decoded, variant: str, prompt_id: int, k: int, plain: Decoded | None) -> dict:
    evaluated, accepted = cycle_acceptance([c.accepted for c in run.cycles], k)
    return {"variant": variant, "prompt_id": prompt_id, "tokens": len(run.tokens), "seconds": run.seconds,
            "finished": run.finished, "cycles": len(run.cycles),
            "cycle_tokens": sum(c.accepted + 1 for c in run.cycles),
            "evaluated": evaluated.tolist(), "accepted": accepted.tolist(),
            "identical": plain is not None and run.tokens == plain.tokens}


def speculative_job(store: Store, target: TargetModel, dataset: str, n_prompts: int = 16, max_new_tokens: int = 64,
                    k: int = DRAFT_STEPS, temperature: float = 0.0, seed: int = 0,
                    on_progress: Progress = no_progress) -> dict:
    """Live speculative vs plain decoding of ``n_prompts`` held-out prompts with the dataset's OUTLETS (and SD-only)
    drafters, computed once per configuration and kept as a ``speculative_live`` result: ``drafters`` (per variant:
    ``acceptance`` per position, ``evaluated`` counts, ``tau``, ``tokens_per_s``, ``speedup`` as value/lo/hi/n,
    ``identical_to_plain`` prompts), ``plain_tokens_per_s``, ``difference`` (OUTLETS - SD-only, or None),
    ``runs`` (per prompt and variant) and ``curves`` (per verify cycle: step, drafter, probe, true)."""
    config = speculative_config(store, dataset, n_prompts, max_new_tokens, k, temperature, seed)
    return store.memo(SPECULATIVE_KIND, config,
                      lambda: _speculative_payload(store, target, dataset, n_prompts, max_new_tokens, k, temperature,
                                                   seed, on_progress),
                      name=f"speculative {dataset} k={k} T={temperature}")


def _speculative_payload(store: Store, target: TargetModel, dataset: str, n_prompts: int, max_new_tokens: int,
                         k: int, temperature: float, seed: int, on_progress: Progress) -> dict:
    prompts = held_out_prompts(store, dataset, n_prompts)
    if not prompts:
        raise ValueError(f"dataset {dataset!r} has no held-out prompts")
    rows = registered_drafters(store, dataset)
    probe_row = registered_probe(store, dataset)
    probe = None if probe_row is None else LengthProbe.load(probe_row["artifact_path"])
    decoders = {v: SpeculativeDecoder(target, load_drafter(row["artifact_path"], target), k,
                                      None if probe is None else probe.config.layer) for v, row in rows.items()}
    for decoder in decoders.values():  # warm-up: first calls allocate
        decoder.generate(prompts[0][1], 4, temperature, seed)
    plain_decode(target, prompts[0][1], 4, temperature, seed)
    runs, curves = [], []
    for i, (prompt_id, ids) in enumerate(prompts):
        plain = plain_decode(target, ids, max_new_tokens, temperature, seed)
        runs.append(_run_row(plain, "plain", prompt_id, k, None))
        for variant, decoder in decoders.items():
            spec = decoder.generate(ids, max_new_tokens, temperature, seed)
            runs.append(_run_row(spec, variant, prompt_id, k, plain if temperature <= 0 else None))
            curves += _curve(spec, prompt_id, variant, probe)
        on_progress(i + 1, len(prompts), "speculative decoding")
    frame = pd.DataFrame(runs)
    plain_rows = frame[frame["variant"] == "plain"]
    return {"drafters": _summary(frame, k), "difference": _difference(frame, k),
            "plain_tokens_per_s": _estimate(bootstrap_ratio(plain_rows["tokens"], plain_rows["seconds"])),
            "prompts": len(prompts), "k": k, "temperature": temperature,
            "runs": frame.to_dict("records"), "curves": curves}


@dataclass
class LiveCycle:
    """One verify cycle of a live generation, as text: the ``accepted`` draft tokens, then ``token`` (the
    target's ``correction`` of a rejected draft, else its bonus token; empty when the budget ended the answer
    first); ``drafts`` the whole proposed chain; ``new_tokens`` how many tokens the cycle added; ``step`` and the
    remaining-length estimates of the drafter and (with a probe) the target probe. The first event is the
    target's own first token (``step`` -1, no drafts, no estimates). ``ends``: the answer's stop token came in
    this cycle (a generation with none hit its token cap: its true length is unknown)."""

    step: int
    accepted: list[str]
    token: str
    correction: bool
    drafts: list[str]
    new_tokens: int
    length: float | None
    probe: float | None
    ends: bool = False


def live_generation(store: Store, target: TargetModel, drafter_id: int, prompt: str, max_new_tokens: int = 64,
                    k: int = DRAFT_STEPS, temperature: float = 0.0, seed: int = 0,
                    probe_id: int | None = None) -> Iterator[LiveCycle]:
    """Speculative decoding of one chat prompt with a registered drafter, one :class:`LiveCycle` per verify
    cycle as it happens. The true remaining length at a cycle is known at the end: ``total tokens - step``
    (:func:`remaining_curve`)."""
    registered = store.predictors_frame().set_index("predictor_id")
    drafter: Drafter = load_drafter(registered.loc[drafter_id, "artifact_path"], target)
    probe = None if probe_id is None else LengthProbe.load(registered.loc[probe_id, "artifact_path"])
    decoder = SpeculativeDecoder(target, drafter, k, None if probe is None else probe.config.layer)
    text = target.token_strings
    for first, cycle in decoder.cycles(target.chat_ids(prompt), max_new_tokens, temperature, seed):
        if cycle is None:
            yield LiveCycle(-1, [], text([first])[0], False, [], 1, None, None, first in target.stop_ids)
            continue
        probe_estimate = None if probe is None else float(probe.predict(cycle.watched.unsqueeze(0))[0])
        kept = cycle.tokens[:cycle.accepted]
        last = cycle.tokens[cycle.accepted:]
        yield LiveCycle(cycle.step, text(kept), text(last)[0] if last else "", cycle.corrected and bool(last),
                        text(cycle.drafts), len(cycle.tokens), cycle.length, probe_estimate, cycle.ends)


def remaining_curve(cycles: list[LiveCycle]) -> pd.DataFrame:
    """The remaining-length curve of a completed live generation: per cycle ``step``, ``true`` (tokens generated
    from that step on: a lower bound on the true remaining length unless the answer ended, see
    :func:`answer_ended`), ``drafter`` and ``probe`` estimates."""
    total = sum(c.new_tokens for c in cycles)
    rows = [{"step": c.step, "true": total - c.step, "drafter": c.length, "probe": c.probe}
            for c in cycles if c.step >= 0]
    return pd.DataFrame(rows, columns=["step", "true", "drafter", "probe"])


def answer_ended(cycles: list[LiveCycle]) -> bool:
    """Whether a live generation ended with its stop token (else it hit the token cap and is censored)."""
    return any(c.ends for c in cycles)


def stored_measurement(store: Store, dataset: str) -> tuple[dict, dict] | None:
    """(config, payload) of the newest stored live measurement of ``dataset`` made with its current drafters
    (None: none yet)."""
    current = {v: int(row["predictor_id"]) for v, row in registered_drafters(store, dataset).items()}
    results = store.results_frame(SPECULATIVE_KIND)
    for row in results.itertuples():
        if row.config.get("dataset") == dataset and row.config.get("drafters") == current:
            return row.config, row.payload
    return None
