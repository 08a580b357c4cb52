"""``doctor``: check a store and repair it, generating damaged runs again on their own model."""

from __future__ import annotations

from collections.abc import Callable
from itertools import groupby

from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.jobs.runs.store_check import StoreCheck, check_store, repair_store
from lenscope.models.engine import SAMPLER_VERSION, BatchedEngine, GenerationSettings
from lenscope.models.target import TargetModel
from lenscope.store.store import DamagedRun, NewRun, Store

ModelLoader = Callable[..., TargetModel]


def request_settings(settings: dict) -> GenerationSettings:
    """The :class:`GenerationSettings` a run was stored with (its ``settings`` dict)."""
    return GenerationSettings(settings["max_new_tokens"], settings["temperature"], settings["top_p"],
                              settings["seed"], settings.get("system_prompt", "default"))


def regenerate_damaged(store: Store, load: ModelLoader = TargetModel.load,
                       on_progress: Progress = no_progress) -> list[str]:
    """Generate every run marked damaged again on its model (same prompt, settings and seed: the same answer),
    rewriting it in place. Runs of an older sampler or of a model that no longer loads are reported and left
    marked (a collection of the current sampler stores them as new runs). Returns what was done."""
    damaged = store.damaged_requests()
    done, regenerated = [], 0
    old = [r for r in damaged if r.settings.get("sampler") != SAMPLER_VERSION]
    if old:
        done.append(f"left {len(old)} run(s) of an older sampler marked (run ids {[r.run_id for r in old][:10]})")
    current = sorted((r for r in damaged if r.settings.get("sampler") == SAMPLER_VERSION), key=_group)
    for (spec, dtype, key, layers), group in groupby(current, key=_group):
        runs: list[DamagedRun] = list(group)
        try:
            target = load(spec, dtype=dtype)
        except (ValueError, FileNotFoundError) as exc:
            done.append(f"left {len(runs)} run(s) of model {spec!r} marked: {exc}")
            continue
        if target.key != key:
            done.append(f"left {len(runs)} run(s) marked: {spec!r} now loads a different model")
            continue
        settings = [request_settings(r.settings) for r in runs]
        prompts = [target.chat_ids(r.prompt, s.system_prompt) for r, s in zip(runs, settings)]
        for j, generation in BatchedEngine(target, list(layers)).run(prompts, settings):
            store.save_runs(target, [NewRun(runs[j].prompt, generation, runs[j].source, runs[j].source_ref)])
            regenerated += 1
            on_progress(regenerated, len(current), "regenerating damaged runs")
    if regenerated:
        done.append(f"generated {regenerated} damaged run(s) again")
    return done


def _group(run: DamagedRun) -> tuple[str, str, str, tuple[int, ...]]:
    return run.model_spec, run.dtype, run.model_key, tuple(run.layers)


def doctor(store: Store, fix: bool = False, regenerate: bool = True, load: ModelLoader = TargetModel.load,
           on_progress: Progress = no_progress) -> tuple[StoreCheck, list[str]]:
    """Check ``store``; with ``fix``, repair it (and, with ``regenerate``, generate damaged runs again).
    Returns the check made before repairing and what was done. ``fix`` on a read-only store fails at once
    (:class:`lenscope.store.errors.StoreReadOnlyError`); a database that is no lenscope store never gets here: opening
    it as a :class:`Store` refuses it."""
    if fix:
        store.require_writable("doctor --fix")
    check = check_store(store, on_progress)
    if not fix:
        return check, []
    done = repair_store(store, check)
    if regenerate and check.damaged_runs:
        done += regenerate_damaged(store, load, on_progress)
    return check, done
