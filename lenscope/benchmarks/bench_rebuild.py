"""A reviewer's rebuild of the whole study from the shipped generations, timed phase by phase.

The study pipeline (``lenscope study --size full``: import the generations with features recomputed, heads, PLP,
attribution, probe, drafters, baselines, scheduler preset, the claims' cross-validation, the drafter ablation,
live speculative decoding) runs into an empty store in a temporary folder; nothing is published into the
checkout. Prints each phase's wall time and, inside it, where the time went (the progress labels it reported),
then a last line ``study rebuilt (...) in N min``.

``--phases import,heads`` times a subset (later phases need what earlier ones store: ``--store DIR`` keeps a
store to time them on); ``--sample 0.05`` rebuilds from 5% of the shipped prompts per scenario (every sample
of a drawn prompt), for profiling: its minutes are not the full study's.

Usage: python -m lenscope benchmark rebuild [--phases P,...] [--sample F] [--store DIR] [--dtype D]
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from lenscope.analysis.core.progress import Progress, label_phase
from lenscope.benchmarks.records import Number, Numbers


class PhaseClock:
    """A progress callback that charges the wall time between two reports to the label of the earlier one
    (details after `` · `` and counts dropped), so a phase's time splits by what it said it was doing."""

    def __init__(self, forward: Progress) -> None:
        self.forward = forward
        self.spent: dict[str, float] = defaultdict(float)
        self._label, self._since = "starting", time.perf_counter()

    def __call__(self, done: int, total: int, label: str) -> None:
        self._charge(_activity(label))
        self.forward(done, total, label)

    def _charge(self, next_label: str) -> None:
        now = time.perf_counter()
        self.spent[self._label] += now - self._since
        self._label, self._since = next_label, now

    def close(self) -> dict[str, float]:
        """Seconds per activity, up to now."""
        self._charge("")
        return dict(self.spent)


def _activity(label: str) -> str:
    """What a phase said it was doing, without counts and details: ``EGTP head (max pooling): fold 2/5, seed 1/3 ·
    training`` -> ``EGTP head (max pooling)``; ``training · loss 0.512`` -> ``training``."""
    head = re.sub(r"\d+/\d+", "", label_phase(label))
    return re.split(r":\s*(?:folds?|seeds?|done|started)\b", head)[0].strip(" :,") or "other"


def _sample_step(store, target, dataset: str, fraction: float):
    """An import step over ``fraction`` of the shipped study's prompts per scenario (at least one each)."""
    from lenscope.jobs.results.crossval import CENSORED_ANSWER_TOKENS
    from lenscope.jobs.runs.generations import import_records, read_generations, sample_prompts_of
    from lenscope.jobs.study.pipeline import SHIPPED, Step

    path = SHIPPED / "study-generations.jsonl.gz"
    header, records = read_generations(path)
    counts: dict[str, set] = defaultdict(set)
    for r in records:
        counts[r["scenario"]].add(r["prompt"])
    chosen = sample_prompts_of(records, {s: max(1, round(fraction * len(p))) for s, p in counts.items()})
    return Step("import", f"import {len(chosen)} shipped runs ({100 * fraction:g}% of the prompts per scenario)",
                lambda: False,
                lambda cb: import_records(store, target, path.name, header, chosen, dataset,
                                          censored_answer_tokens=CENSORED_ANSWER_TOKENS, on_progress=cb))


def rebuild(target, phases: set[str] | None = None, sample: float = 1.0) -> list[tuple[str, str, float, dict]]:
    """Run the study's phases (all, or ``phases``) on ``target`` into the store of ``LENSCOPE_DATA_DIR``; returns
    (phase, status, seconds, seconds per activity) per phase. Raises ValueError on a phase the study lacks."""
    from lenscope.cli._common import PhaseBars
    from lenscope.jobs.study.pipeline import PUBLISHED_SIZE, study_dataset, study_steps
    from lenscope.store.store import Store

    store = Store()
    dataset = study_dataset(PUBLISHED_SIZE)
    steps = study_steps(store, target, dataset, PUBLISHED_SIZE, collect=sample >= 1)
    if sample < 1:
        steps.insert(0, _sample_step(store, target, dataset, sample))
    steps = [s for s in steps if s.phase != "publish"]
    unknown = (phases or set()) - {s.phase for s in steps}
    if unknown:
        raise ValueError(f"no phase {', '.join(sorted(unknown))}; the phases: {', '.join(s.phase for s in steps)}")
    steps = [s for s in steps if phases is None or s.phase in phases]
    rows = []
    with PhaseBars() as bars:
        for i, step in enumerate(steps, start=1):
            label = f"step {i}/{len(steps)}: {step.name}"
            clock = PhaseClock(lambda d, n, text, label=label: bars(d, n, f"{label} · {text}"))
            began = time.perf_counter()
            if step.done():
                rows.append((step.phase, "stored already", time.perf_counter() - began, {}))
                continue
            try:
                step.run(clock)
                status = "done"
            except ValueError as exc:  # the pipeline's "cannot run on this data": said, and the rest go on
                status = f"not run: {exc}"
            rows.append((step.phase, status, time.perf_counter() - began, clock.close()))
    return rows


def report(rows: list[tuple[str, str, float, dict]], what: str) -> str:
    """The phase table, the top activities inside each long phase, and the last line."""
    total = sum(r[2] for r in rows)
    lines = ["| phase | status | minutes | share |", "|---|---|---|---|"]
    for phase, status, seconds, _ in rows:
        lines.append(f"| {phase} | {status[:80]} | {seconds / 60:.1f} | {seconds / max(total, 1e-9):.0%} |")
    for phase, _, seconds, spent in rows:
        if seconds >= 30 and spent:
            top = sorted(spent.items(), key=lambda kv: -kv[1])[:5]
            lines.append(f"  {phase}: " + "; ".join(f"{k} {v / 60:.1f} min" for k, v in top))
    lines.append(f"study rebuilt ({what}) in {total / 60:.1f} min")
    return "\n".join(lines)


def figures(rows: list[tuple[str, str, float, dict]], what: str) -> Numbers:
    """Each phase's minutes (its status in the figure's description) and the total."""
    numbers = {("load_target" if phase == "load the target model" else re.sub(r"\W+", "_", phase)) + "_min":
               Number(seconds / 60, "min", f"{phase} ({status[:80]})") for phase, status, seconds, _ in rows}
    return numbers | {"total_min": Number(sum(r[2] for r in rows) / 60, "min", f"the study rebuilt ({what})")}


def main(argv: list[str] | None = None) -> Numbers:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", default=None, help="comma-separated phases to run (default: all), e.g. "
                        "import,heads,plp,attribution,evidence,probe,drafter:outlets,baselines,preset,claims")
    parser.add_argument("--sample", type=float, default=1.0,
                        help="fraction of the shipped prompts per scenario to rebuild from (default 1: the study)")
    parser.add_argument("--store", type=Path, default=None,
                        help="store folder to rebuild into and keep (default: a new temporary one, removed)")
    parser.add_argument("--dtype", default="float32", help="the target's dtype (default float32, the study's)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, ... (default cpu)")
    args = parser.parse_args(argv)
    if not 0 < args.sample <= 1:
        parser.error("--sample must be in (0, 1]")
    phases = None if args.phases is None else {p.strip() for p in args.phases.split(",") if p.strip()}
    from lenscope.models.target import TargetModel

    with tempfile.TemporaryDirectory(prefix="lenscope-rebuild-") as tmp:
        os.environ["LENSCOPE_DATA_DIR"] = str(args.store or tmp)
        os.environ.pop("LENSCOPE_DB_URL", None)
        began = time.perf_counter()
        target = TargetModel.load(None, device=args.device, dtype=args.dtype)
        loaded = ("load the target model", "done", time.perf_counter() - began, {})
        try:
            rows = [loaded, *rebuild(target, phases, args.sample)]
        except ValueError as exc:
            parser.error(str(exc))
    what = ("the full study" if args.sample >= 1 else f"{100 * args.sample:g}% sample") + \
        (f", phases {args.phases}" if phases else ", every phase") + f", {args.dtype} on {args.device}, " \
        f"{os.cpu_count()} cores"
    print(report(rows, what))
    return figures(rows, what)


if __name__ == "__main__":
    main()
