"""Live serving: the embedded model serves held-out study prompts under each policy for real, and the simulator,
calibrated from a profile of the same engine, replays the same requests with the same predictions.

Requests are shipped study runs (their prompts and sampling settings, so the answers are the study's, generated
again), drawn from finished chat answers of at most ``max_output`` tokens; predictions are the shipped out-of-fold
predictions (each run predicted by a model that never saw its fold) or the oracle (the study's lengths). The cost
model is fitted to a profile of the same engine on other study prompts (every batch size timed, as Vidur profiles);
a shorter profile right before each run measures the machine's speed of the moment, and that run's replay uses the
session's cost model at that speed. Two more replays read the error apart from the machine's drift: at the speed the
run itself ran at, and at the machine's measured speed over time (2-second windows). Loads are fractions of the
capacity the session's cost model gives for these requests (:func:`~lenscope.jobs.scheduler.replay.stage_capacity`).
Each policy may be served several times, the repetitions interleaved, so that the simulator's error is read against
the real server's run-to-run spread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from lenscope.analysis.core.metrics import (
    Estimate,
    bootstrap_mean,
    ci_text,
    pooled_difference,
    pooled_group_means,
)
from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.analysis.scheduler.cost_model import Calibration, CostModel, fit_iterations, fit_speed
from lenscope.analysis.scheduler.engine import SimConfig, SimResult, simulate
from lenscope.analysis.scheduler.live_server import (
    CostClock,
    LiveRequest,
    iteration_ratio,
    profile_iterations,
    replay,
    serve,
    speed_over_time,
)
from lenscope.analysis.scheduler.metrics import LATENCIES, PERCENTILES, request_latencies, summarize
from lenscope.analysis.scheduler.predictors import ConstantPredictor, OraclePredictor, Predictor, StoredPredictor
from lenscope.analysis.scheduler.traces import poisson_retime
from lenscope.jobs.runs.generations import read_generations
from lenscope.jobs.runs.table import SHIPPED_STUDY
from lenscope.jobs.scheduler.replay import stage_capacity
from lenscope.jobs.study.shipped import shipped_study
from lenscope.models.engine import BatchedEngine, GenerationSettings
from lenscope.models.target import TargetModel

ORACLE = "oracle"
DEFAULT_PREDICTOR = "EGTP head (egtp pooling)"
# Offered load as a fraction of the estimated capacity: light (queues rare) and heavy (the requests arrive faster
# than the instance serves them, so queues form and the policies part).
LOADS = {"light": 0.5, "heavy": 1.2}
CLASSES = ("all", "short", "long")
# Decode iterations timed per batch size and prompt length: in each of the session profile's rounds (the cost model's
# shape, its rounds interleaved against the machine's drift), and in the short profile right before each run (the
# speed of the moment: a shared machine's drifts by 10-20% within a minute).
PROFILE_STEPS, PROFILE_ROUNDS, REPROFILE_STEPS = 4, 3, 4
P99_GOAL = 0.10  # issue 39's target: simulated P99 end-to-end latency within 10% of the real one
# The simulator's replays of a live run (LiveRun's attributes), in words: the prediction (the speed measured before the
# run), at the speed the run ran at on average, and at the machine's measured speed over time.
REPLAYS = {"sim": "at the speed measured before the run", "at_speed": "at the run's measured speed",
           "over_time": "at the machine's measured speed over time"}
# Width of the windows the machine's speed over time is measured in: 20-40 iterations, short enough to follow the
# drift of a shared machine (its speed in 4-second windows ranged over 0.88-1.23 of the median).
SPEED_WINDOW_S = 2.0
WITHIN, BEYOND, CANNOT_TELL, ONE_RUN = ("within the goal", "beyond the goal", "cannot tell",
                                        "one run each: no CI")


@dataclass(frozen=True)
class LivePolicy:
    """A queue policy on a predictor's lengths (FCFS reads none); SRPT preempts (TRAIL's preemptive SRPT)."""

    queue: str
    predictor: str = DEFAULT_PREDICTOR

    @property
    def preemptive(self) -> bool:
        return self.queue == "srpt"

    @property
    def label(self) -> str:
        if self.queue == "fcfs":
            return "FCFS"
        by = "oracle" if self.predictor == ORACLE else self.predictor
        return f"{self.queue.upper()}{' (preemptive)' if self.preemptive else ''} on {by}"


@dataclass(frozen=True)
class LiveSetup:
    """What a live comparison serves: ``requests`` drawn (``seed``) from the study's finished chat answers of at most
    ``max_output`` tokens with prompts of at most ``max_prompt``, ``calibration`` others for the profile, a batch cap
    of ``batch`` rows, Poisson arrivals (seeded) and answers cut at ``max_new_tokens`` should one run longer than
    the study's."""

    requests: int = 24
    calibration: int = 16
    max_output: int = 64
    max_prompt: int = 384
    batch: int = 4
    max_new_tokens: int = 192
    seed: int = 0

    def __post_init__(self) -> None:
        if self.requests < 4 or self.calibration < 2 * self.batch or self.batch < 1:
            raise ValueError("a live comparison needs at least 4 requests, a batch of at least 1 and at least twice "
                             "the batch of calibration requests")
        if self.max_new_tokens < self.max_output:
            raise ValueError("max_new_tokens must be at least max_output")


def config_for(setup: LiveSetup, policy: LivePolicy, calibration: Calibration) -> SimConfig:
    """The instance both the server and the simulator run: one colocated instance, continuous batching, a KV cache
    that never binds (the real engine has no paged limit)."""
    return SimConfig(mode="colocated", n_prefill=0, n_decode=1, max_batch_size=setup.batch, queue=policy.queue,
                     preemptive=policy.preemptive, kv_capacity_tokens=1 << 24, max_prefill_tokens=2048,
                     cost=calibration.cost)


def study_pool() -> pd.DataFrame:
    """Shipped study runs with their prompt ids and settings, matched to the generation records by conversation,
    prompt and answer length (runs whose match is ambiguous, RL samples of the same length, are left out)."""
    study = shipped_study()
    if study is None:
        raise ValueError("live serving needs the shipped study (data/results); `git checkout data/results`")
    runs = study.runs()
    _, records = read_generations(SHIPPED_STUDY)
    recs = pd.DataFrame({"source": [r["source"] for r in records],
                         "conversation": [r["ref"].rsplit("_", 1)[0] for r in records],
                         "prompt_tokens": [len(r["prompt_ids"]) for r in records],
                         "output_tokens": [len(r["output_ids"]) for r in records],
                         "prompt_ids": [tuple(r["prompt_ids"]) for r in records],
                         "settings": [r["settings"] for r in records]})
    runs = runs.assign(conversation=runs["task"].str.split(":", n=1).str[1])
    keys = ["source", "conversation", "prompt_tokens", "output_tokens"]
    unique = recs.drop_duplicates(keys, keep=False)
    return runs.drop_duplicates(keys, keep=False).merge(unique, on=keys, how="inner")


def draw_requests(setup: LiveSetup) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(evaluation runs, calibration runs): disjoint draws of finished chat answers within the setup's limits,
    the evaluation runs never sharing a conversation with the calibration runs."""
    pool = study_pool()
    pool = pool[(pool["scenario"] == "chat") & pool["finished"] & (pool["output_tokens"] <= setup.max_output)
                & (pool["prompt_tokens"] <= setup.max_prompt)]
    conversations = pool["conversation"].drop_duplicates().sample(frac=1.0, random_state=setup.seed).tolist()
    need = setup.requests + setup.calibration
    if len(conversations) < need:
        raise ValueError(f"only {len(conversations)} study conversations fit the limits, {need} are needed")
    first = pool.drop_duplicates("conversation").set_index("conversation").loc[conversations[:need]].reset_index()
    return first.iloc[:setup.requests].reset_index(drop=True), first.iloc[setup.requests:].reset_index(drop=True)


def live_requests(runs: pd.DataFrame, arrivals: Sequence[float], setup: LiveSetup) -> list[LiveRequest]:
    """The runs as requests arriving at ``arrivals``, with their study settings (answers cut at the setup's cap)."""
    requests = []
    for (_, run), at in zip(runs.iterrows(), arrivals):
        s = run["settings"]
        settings = GenerationSettings(max_new_tokens=min(int(s["max_new_tokens"]), setup.max_new_tokens),
                                      temperature=float(s["temperature"]), top_p=float(s["top_p"]),
                                      seed=int(s["seed"]), system_prompt=s.get("system_prompt", "default"))
        requests.append(LiveRequest(tuple(run["prompt_ids"]), float(at), settings))
    return requests


def predictor_for(name: str, runs: pd.DataFrame) -> Predictor:
    """The oracle (the study's lengths) or a shipped predictor's out-of-fold predictions of ``runs``."""
    if name == ORACLE:
        return OraclePredictor(runs["output_tokens"].to_numpy(float))
    oof = shipped_study().out_of_fold()
    mine = oof[oof["predictor"] == name]
    if mine.empty:
        raise ValueError(f"the shipped study has no out-of-fold predictions of {name!r}; choose one of "
                         f"{sorted(oof['predictor'].unique())}")
    return StoredPredictor(runs["run_id"].to_numpy(), mine)


def predictor_names() -> list[str]:
    """The oracle and every predictor with shipped out-of-fold predictions (none without the shipped study)."""
    study = shipped_study()
    return [ORACLE, *([] if study is None else sorted(study.out_of_fold()["predictor"].unique()))]


def profile_engine(engine: BatchedEngine, runs: pd.DataFrame, setup: LiveSetup,
                   on_progress: Progress = no_progress) -> tuple[Calibration, pd.DataFrame]:
    """Time the engine at every batch size up to the setup's on ``runs`` (:data:`PROFILE_ROUNDS` rounds of
    :data:`PROFILE_STEPS` decode iterations each) and fit the cost model to the iterations (returned too)."""
    iterations = profile_iterations(engine, live_requests(runs, [0.0] * len(runs), setup), setup.batch, PROFILE_STEPS,
                                    on_progress, rounds=PROFILE_ROUNDS)
    return fit_iterations(iterations), iterations


def capacity_qps(runs: pd.DataFrame, setup: LiveSetup, calibration: Calibration) -> float:
    """Requests per second the calibrated instance serves at full batches of these runs' mean lengths."""
    return stage_capacity(runs[["prompt_tokens", "output_tokens"]],
                          config_for(setup, LivePolicy("fcfs"), calibration))[0]


def arrivals(runs: pd.DataFrame, qps: float, seed: int) -> np.ndarray:
    """Poisson arrivals at ``qps`` (the first at 0)."""
    return poisson_retime(runs[["prompt_tokens", "output_tokens"]], qps, seed)["arrival_s"].to_numpy()


def simulated(real: SimResult, predictor: Predictor, cost: CostModel | None = None) -> SimResult:
    """The simulator's replay of a live run: the same arrivals, prompts, answer lengths, predictions and config, on
    ``cost`` (default: the run's)."""
    trace = real.requests[["arrival_s", "prompt_tokens", "output_tokens"]]
    return simulate(trace, predictor, real.config.with_(cost=cost or real.config.cost))


def latency_errors(real: SimResult, sim: SimResult) -> pd.DataFrame:
    """Per request class, latency and percentile: the real and simulated values and the simulator's relative error
    ((sim - real) / real). Both runs share their requests' lengths, hence their classes."""
    r, s = request_latencies(real), request_latencies(sim)
    rows = []
    for group in CLASSES:
        pick = (lambda f: f) if group == "all" else (lambda f, g=group: f[r["length_class"] == g])
        for metric in LATENCIES:
            rv, sv = pick(r)[metric].dropna().to_numpy(), pick(s)[metric].dropna().to_numpy()
            for p in PERCENTILES:
                a, b = float(np.percentile(rv, p)), float(np.percentile(sv, p))
                rows.append({"class": group, "metric": metric.removesuffix("_s"), "percentile": f"P{p}",
                             "real_s": a, "sim_s": b, "error": (b - a) / a if a > 0 else float("nan"),
                             "requests": len(rv)})
    return pd.DataFrame(rows)


def cpu_ticks() -> tuple[int, int] | None:
    """(stolen, total) CPU ticks of this machine since boot (Linux ``/proc/stat``; None elsewhere): the time a
    hypervisor gave this virtual machine's CPUs to others."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def stolen_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float:
    """The share of CPU time stolen between two :func:`cpu_ticks` readings (NaN when unknown)."""
    if before is None or after is None or after[1] <= before[1]:
        return float("nan")
    return (after[0] - before[0]) / (after[1] - before[1])


@dataclass
class LiveRun:
    """One policy at one load: the live run and four replays of it by the simulator. ``sim`` is the prediction, on
    the session's cost model at the speed measured right before the run (``speed``: its factor per phase); ``at_speed``
    scales each phase of that model by how long the run's own iterations of that phase took against it (what the
    simulator's batching and queueing get wrong once it knows how fast the machine ran on average); ``over_time``
    scales every iteration by the machine's measured speed at that moment (:data:`SPEED_WINDOW_S` windows: what is
    left once the machine's drift within the run is known too); ``ranked`` uses the session's cost model as profiled,
    common to every policy, so that policies are ranked on one cost model.
    ``stolen``: the share of CPU time the hypervisor took during the run; ``repeat``: which repetition it is."""

    load: str
    qps: float
    policy: LivePolicy
    real: SimResult
    sim: SimResult
    at_speed: SimResult
    over_time: SimResult
    ranked: SimResult
    study_tokens: np.ndarray
    stolen: float = float("nan")
    repeat: int = 0
    speed: dict[str, float] = field(default_factory=dict)

    def errors(self, replay: str = "sim") -> pd.DataFrame:
        """The simulator's errors against the real run in the ``replay`` of :data:`REPLAYS`."""
        if replay not in REPLAYS:
            raise ValueError(f"replay must be one of {sorted(REPLAYS)}, not {replay!r}")
        return latency_errors(self.real, getattr(self, replay))

    def p99(self, replay: str = "sim") -> pd.DataFrame:
        """The P99 of every request, per latency (``ttft``, ``tpot``, ``e2e``): real, simulated (in the ``replay`` of
        :data:`REPLAYS`) and the error."""
        errors = self.errors(replay)
        return errors[(errors["percentile"] == "P99") & (errors["class"] == "all")].set_index("metric")

    def summary(self) -> dict:
        real, sim, ranked = summarize(self.real), summarize(self.sim), summarize(self.ranked)
        return {"load": self.load, "qps": self.qps, "policy": self.policy.label,
                "real_mean_e2e_s": real["mean_jct_s"], "sim_mean_e2e_s": sim["mean_jct_s"],
                "ranked_mean_e2e_s": ranked["mean_jct_s"],
                "real_p99_e2e_s": real["all_e2e_p99_s"], "sim_p99_e2e_s": sim["all_e2e_p99_s"],
                "real_short_p99_e2e_s": real["short_e2e_p99_s"], "sim_short_p99_e2e_s": sim["short_e2e_p99_s"],
                "preemptions": int(self.real.requests["preemptions"].sum()), "repeat": self.repeat,
                "speed_prefill": self.speed.get("prefill", float("nan")),
                "speed_decode": self.speed.get("decode", float("nan")),
                "iteration_ratio": iteration_ratio(self.real), "stolen": self.stolen,
                "cut_at_cap": int((~self.real.requests["finished"]).sum()),
                "same_answer_length": float(np.mean(self.real.requests["output_tokens"].to_numpy()
                                                    == self.study_tokens))}


def run_live(engine: BatchedEngine, runs: pd.DataFrame, setup: LiveSetup, calibration: Calibration,
             common: Calibration, policy: LivePolicy, load: str, qps: float,
             on_progress: Progress = no_progress, repeat: int = 0, speed: dict[str, float] | None = None) -> LiveRun:
    """Serve ``runs`` at ``qps`` under ``policy`` for real, then replay it in the simulator on ``calibration`` (the
    prediction), on it at the run's measured speed and at the machine's measured speed over time, and on ``common``
    (the cost model every policy is ranked on)."""
    predictor = ConstantPredictor(1.0) if policy.queue == "fcfs" else predictor_for(policy.predictor, runs)
    requests = live_requests(runs, arrivals(runs, qps, setup.seed), setup)
    before = cpu_ticks()
    real = serve(engine, requests, predictor, config_for(setup, policy, calibration), on_progress=on_progress)
    stolen = stolen_share(before, cpu_ticks())
    at_speed = fit_speed(real.config.cost, real.segments)[0].cost
    over_time = replay(real, predictor, CostClock(real.config.cost, speed_over_time(real, SPEED_WINDOW_S)))
    return LiveRun(load, qps, policy, real, simulated(real, predictor), simulated(real, predictor, at_speed), over_time,
                   simulated(real, predictor, common.cost), runs["output_tokens"].to_numpy(), stolen, repeat,
                   dict(speed or {}))


NOT_APART = "real runs cannot tell apart"
# How the simulator reads a pair of policies (``sim_reading`` of :func:`policy_differences`), in words.
SIM_READINGS = {NOT_APART: "real runs cannot tell them apart", "same order": "the simulator orders them the same",
                "opposite order": "the simulator orders them OPPOSITE",
                "no difference": "the simulator sees NO difference"}


def e2e_by_policy(runs: Sequence[LiveRun], attribute: str) -> dict[str, np.ndarray]:
    """Per policy label (in the runs' order): each request's end-to-end latency in the ``attribute`` run ("real",
    "sim", "at_speed", "over_time" or "ranked"), averaged over the policy's repetitions."""
    by: dict[str, list[np.ndarray]] = {}
    for run in runs:
        by.setdefault(run.policy.label, []).append(request_latencies(getattr(run, attribute))["e2e_s"].to_numpy())
    return {label: np.mean(values, axis=0) for label, values in by.items()}


def ranking(runs: Sequence[LiveRun], which: str) -> list[str]:
    """Policy labels from best to worst by mean end-to-end latency in the ``which`` run (averaged over a policy's
    repetitions): "real", "at_speed" (the simulator at each run's measured speed), "over_time" (at the machine's
    measured speed over time) or "ranked" (the simulator on the cost model common to all policies)."""
    means = {label: float(np.mean(e2e)) for label, e2e in e2e_by_policy(runs, which).items()}
    return sorted(means, key=means.get)


def policy_differences(runs: Sequence[LiveRun]) -> pd.DataFrame:
    """Per pair of policies (A listed before B): the mean end-to-end latency of A minus B over the same requests, in
    the real runs, in the simulator's replays at each run's measured speed (``at_speed``: the same drift as the real
    runs) and at the machine's measured speed over time (``over_time``), and in the simulator's on the common cost
    model (``sim``: one speed for all), and how the simulator reads the pair (``sim_reading``: :data:`NOT_APART` where
    the real CI includes 0, else "same order", "opposite order", or "no difference" where the simulator's CI includes
    0). The simulator's CI is a paired bootstrap over requests. So are the real and measured-speed ones with a single
    run per policy; with repetitions (``real_ci_over`` "runs") they are over runs: a Student-t CI from the run-to-run
    spread of each run's mean, pooled over the policies, which a drift of the machine's speed widens as it should
    (over requests it would read a drift between two runs as a difference of policies)."""
    latencies = {which: e2e_by_policy(runs, which) for which in ("real", "at_speed", "over_time", "ranked")}
    labels = [r.policy.label for r in runs]
    over_runs = min(labels.count(label) for label in latencies["real"]) >= 2
    run_means = {which: [float(np.mean(request_latencies(getattr(r, which))["e2e_s"])) for r in runs]
                 for which in ("real", "at_speed", "over_time")}
    policies, rows = list(latencies["real"]), []
    for k, a in enumerate(policies):
        for b in policies[k + 1:]:
            row = {"A": a, "B": b, "real_ci_over": "runs" if over_runs else "requests", "requests": len(latencies[
                "real"][a])}
            for which, attribute in (("real", "real"), ("at_speed", "at_speed"), ("over_time", "over_time"),
                                     ("sim", "ranked")):
                est = (pooled_difference(run_means[attribute], labels, a, b) if attribute != "ranked" and over_runs
                       else bootstrap_mean(latencies[attribute][a] - latencies[attribute][b]))
                row.update({f"{which}_diff_s": est.value, f"{which}_lo_s": est.lo, f"{which}_hi_s": est.hi,
                            f"{which}_tells_apart": est.excludes_zero()})
            row["sim_reading"] = (NOT_APART if not row["real_tells_apart"] else "no difference"
                                  if not row["sim_tells_apart"] else "same order"
                                  if np.sign(row["sim_diff_s"]) == np.sign(row["real_diff_s"]) else "opposite order")
            rows.append(row)
    return pd.DataFrame(rows)


def goal_verdict(lo: float, hi: float, goal: float = P99_GOAL) -> str:
    """How a CI of the simulator's relative error reads against ``goal``: :data:`WITHIN` (inside +-goal),
    :data:`BEYOND` (wholly outside), :data:`CANNOT_TELL` (across a bound), :data:`ONE_RUN` (no CI)."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return ONE_RUN
    if -goal <= lo and hi <= goal:
        return WITHIN
    return BEYOND if lo > goal or hi < -goal else CANNOT_TELL


def run_p99_errors(runs: Sequence[LiveRun], replay: str = "sim") -> pd.DataFrame:
    """Per run: its load and policy, the real and simulated P99 end-to-end latency over all its requests and the
    simulator's error ((sim - real) / real) in the ``replay`` of :data:`REPLAYS`."""
    rows = []
    for run in runs:
        p99 = run.p99(replay).loc["e2e"]
        rows.append({"load": run.load, "policy": run.policy.label, "real_s": p99["real_s"], "sim_s": p99["sim_s"],
                     "error": p99["error"]})
    return pd.DataFrame(rows)


def p99_errors(runs: Sequence[LiveRun], replay: str = "sim") -> pd.DataFrame:
    """Per load and policy: the real and simulated P99 end-to-end latency averaged over its repetitions, and the
    simulator's error (:func:`run_p99_errors`) averaged over them, with a 95% CI from the run-to-run spread of the
    errors pooled over every load and policy (Student's t) and its reading against :data:`P99_GOAL`
    (:func:`goal_verdict`)."""
    frame = run_p99_errors(runs, replay)
    means = frame.groupby(["load", "policy"], sort=False)[["real_s", "sim_s"]].mean().reset_index()
    errors = pooled_group_means(frame["error"], list(zip(frame["load"], frame["policy"])))
    out = means.assign(error=errors["value"].to_numpy(), lo=errors["lo"].to_numpy(), hi=errors["hi"].to_numpy(),
                       runs=errors["n"].to_numpy())
    out["reading"] = [goal_verdict(lo, hi) for lo, hi in zip(out["lo"], out["hi"])]
    return out


def p99_bias(runs: Sequence[LiveRun], replay: str = "sim") -> tuple[Estimate, str]:
    """The simulator's P99 error (:func:`run_p99_errors`) averaged over every run, with a 95% bootstrap CI that
    resamples the loads and policies (a policy's runs together), and its reading against :data:`P99_GOAL`: whether
    the simulator is off on the whole, apart from any one run's noise."""
    frame = run_p99_errors(runs, replay)
    estimate = bootstrap_mean(frame["error"], list(zip(frame["load"], frame["policy"])))
    return estimate, goal_verdict(estimate.lo, estimate.hi)


def difference_texts(row: pd.Series, which: Sequence[str] = ("real", "sim")) -> tuple[str, ...]:
    """The ``which`` differences of a :func:`policy_differences` row ("real", "sim", "at_speed", "over_time"), each with
    its CI (seconds)."""
    return tuple(ci_text(row[f"{w}_diff_s"], row[f"{w}_lo_s"], row[f"{w}_hi_s"], True, 2) for w in which)


def engine_for(target: TargetModel, setup: LiveSetup) -> BatchedEngine:
    """The serving engine: no features, at most the setup's batch."""
    return BatchedEngine(target, batch_size=setup.batch, features="none")


@dataclass
class LiveSession:
    """What live comparisons share: the drawn requests, the engine serving them and its cost model fitted to a
    profile of other prompts (with the estimated capacity the loads are fractions of)."""

    setup: LiveSetup
    engine: BatchedEngine
    evaluation: pd.DataFrame
    calibration_runs: pd.DataFrame
    calibration: Calibration
    iterations: pd.DataFrame
    capacity: float

    def qps(self, load: str) -> float:
        if load not in LOADS:
            raise ValueError(f"load must be one of {sorted(LOADS)}, not {load!r}")
        return LOADS[load] * self.capacity

    def speed(self, on_progress: Progress = no_progress) -> tuple[Calibration, dict[str, float]]:
        """The session's cost model at the machine's speed of the moment (a shorter profile of the shortest
        calibration prompts, a few seconds), with the factor per phase against the session's profile."""
        iterations = profile_iterations(self.engine, live_requests(self.calibration_runs, [0.0] * len(
            self.calibration_runs), self.setup), self.setup.batch, REPROFILE_STEPS, on_progress, ("shortest",))
        return fit_speed(self.calibration.cost, iterations)

    def serve(self, policies: Sequence[LivePolicy], load: str, repeats: int = 1,
              on_progress: Progress = no_progress) -> list[LiveRun]:
        """Each policy serves the requests for real at ``load`` (arrivals at the session's capacity times the load's
        fraction), ``repeats`` times, the repetitions interleaved in the order A B C, C B A, A B C... (so that a
        steady drift of the machine's speed falls on each policy alike); before every run, :meth:`speed` calibrates
        the simulator's replay of that run."""
        if repeats < 1:
            raise ValueError("repeats must be at least 1")
        runs, policies = [], list(policies)
        for repeat in range(repeats):
            for policy in policies[::-1] if repeat % 2 else policies:
                label = f"serving under {policy.label}" + (f" (run {repeat + 1} of {repeats})" if repeats > 1 else "")

                def progress(done: int, total: int, phase: str, label: str = label) -> None:
                    on_progress(done, total, f"{label} · {phase}")
                fresh, speed = self.speed(progress)
                runs.append(run_live(self.engine, self.evaluation, self.setup, fresh, self.calibration, policy, load,
                                     self.qps(load), progress, repeat, speed))
        return runs


def live_session(target: TargetModel, setup: LiveSetup, on_progress: Progress = no_progress) -> LiveSession:
    """Draw the requests, profile the engine on the calibration prompts and fit its cost model."""
    evaluation, calibration_runs = draw_requests(setup)
    engine = engine_for(target, setup)
    calibration, iterations = profile_engine(engine, calibration_runs, setup, on_progress=on_progress)
    return LiveSession(setup, engine, evaluation, calibration_runs, calibration, iterations,
                       capacity_qps(evaluation, setup, calibration))
