"""Request state machine (legal paths, consistent counts), named event types, and the one registry of policies and
predictors that the CLI and the playground read."""

from __future__ import annotations

import argparse
import ast
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from lenscope.analysis.scheduler import SimConfig, make_predictor
from lenscope.analysis.scheduler.engine import Simulator
from lenscope.analysis.scheduler.instances import ContinuousInstance
from lenscope.analysis.scheduler.registry import (
    DISPATCH_POLICIES,
    PREDICTORS,
    PREFILL_QUEUE_POLICIES,
    QUEUE_POLICIES,
    dispatch_choices,
    predictor_choices,
)
from lenscope.analysis.scheduler.states import (
    TRANSITIONS,
    Event,
    EventType,
    IllegalTransition,
    RequestState,
    RequestStates,
)
from lenscope.cli import build_parser
from tests.unit.scheduler.test_scheduler import random_trace

S = RequestState
CONFIGS = [SimConfig(), SimConfig(dispatch="lb", queue="srpt", kv_capacity_tokens=20_000),
           SimConfig(mode="colocated", n_decode=2, queue="srpt", kv_capacity_tokens=12_000, chunk_tokens=512,
                     preemptive=True, max_preemptions=3),
           SimConfig(prefill_queue="spf", queue="srpt", max_batch_size=16, preemptive=True, preempt_limit=0.5),
           SimConfig(batching="static", max_batch_size=8),
           SimConfig(mode="colocated", n_decode=2, dispatch="prefix", prefix_cache_tokens=4096, hash_block_tokens=64)]


def test_illegal_transitions_raise():
    states = RequestStates(3)
    states.move(0, S.PREFILLING)
    with pytest.raises(IllegalTransition, match="request 0: PREFILLING -> WAITING"):
        states.move(0, S.WAITING)
    with pytest.raises(IllegalTransition, match="request 1: WAITING -> DONE"):
        states.move(1, S.DONE)
    states.move_all(np.array([0]), S.DECODING)
    with pytest.raises(IllegalTransition, match="request 2: WAITING -> PREEMPTED"):
        states.move_all(np.array([0, 2]), S.PREEMPTED)  # all or nothing
    assert states.counts()[S.DECODING] == 1 and states.counts()[S.WAITING] == 2
    states.move(0, S.DONE)
    for target in S:
        with pytest.raises(IllegalTransition):
            states.move(0, target)


class Checked(Simulator):
    """Checks after every event that the state counts match the instances' own bookkeeping."""

    def _check(self) -> None:
        counts = self.states.counts()
        assert sum(counts.values()) == self.n
        assert counts[S.DONE] == self.finished_count
        assert counts[S.TRANSFERRING] == sum(e.kind == EventType.TRANSFER_DONE for e in self._events)
        if self.config.batching == "continuous":
            assert counts[S.DECODING] == sum(len(d.running) for d in self.decode)

    def _iteration_done(self, uid: int, version: int, now: float) -> None:
        super()._iteration_done(uid, version, now)
        self._check()

    def _transfer_done(self, i: int, decode_index: int, now: float) -> None:
        super()._transfer_done(i, decode_index, now)
        self._check()


def hashed_trace(n: int = 300, seed: int = 1):
    trace = random_trace(n=n, qps=80, seed=seed)
    return trace.assign(hash_ids=[(k % 3, 10 + k % 5, 1000 + k) for k in range(n)])


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.label())
def test_every_request_takes_a_legal_path_and_counts_stay_consistent(config):
    trace = hashed_trace()
    sim = Checked(trace, make_predictor("oracle-noise", trace["output_tokens"].to_numpy(), mae=100), config,
                  record_transitions=True)
    result = sim.run().requests
    paths: dict[int, list[RequestState]] = defaultdict(lambda: [S.WAITING])
    for i, src, dst in sim.states.history:
        assert paths[i][-1] == src and dst in TRANSITIONS[src]
        paths[i].append(dst)
    assert sim.states.counts()[S.DONE] == len(trace)
    for i, path in paths.items():
        assert path[-1] == S.DONE and path.count(S.DONE) == 1
        assert path.count(S.PREEMPTED) == result["preemptions"][i]
        assert (S.TRANSFERRING in path) == (config.mode == "disaggregated" and trace["output_tokens"][i] > 1)
    assert len(paths) == len(trace)


def test_the_event_queue_holds_named_events():
    trace = random_trace(n=20)
    sim = Simulator(trace, make_predictor("oracle", trace["output_tokens"].to_numpy()), SimConfig())
    assert len(sim._arrivals) == 20 and all(isinstance(e, Event) and e.kind is EventType.ARRIVAL for e in sim._arrivals)
    seen = set()

    def spy(self, t, kind, target, arg):
        seen.add(kind)
        push(self, t, kind, target, arg)

    push = Simulator._push
    Simulator._push = spy
    try:
        sim.run()
    finally:
        Simulator._push = push
    assert seen == {EventType.ITERATION_DONE, EventType.TRANSFER_DONE}


def _choices(parser: argparse.ArgumentParser, command: str, flag: str) -> tuple:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return tuple(next(a for a in sub._actions if flag in a.option_strings).choices)


@pytest.mark.parametrize("command", ["simulate", "qps-sweep", "outlets-preset"])
def test_cli_choices_are_the_registry_names(command):
    parser = build_parser()
    assert _choices(parser, command, "--predictor") == PREDICTORS.names()
    if command != "outlets-preset":
        assert _choices(parser, command, "--prefill-queue") == PREFILL_QUEUE_POLICIES.names()
    if command == "simulate":
        assert _choices(parser, command, "--dispatch") == DISPATCH_POLICIES.names()
        assert _choices(parser, command, "--queue") == QUEUE_POLICIES.names()


def test_registry_builds_what_it_names_and_rejects_others():
    for registry in (DISPATCH_POLICIES, QUEUE_POLICIES, PREFILL_QUEUE_POLICIES):
        for name in registry.names():
            assert registry.make(name).name == name
    assert set(PREFILL_QUEUE_POLICIES.names()) < set(QUEUE_POLICIES.names())
    for name in ("oracle", "oracle-noise", "constant"):
        assert PREDICTORS.make(name, np.array([5, 9])).name == name
    with pytest.raises(ValueError, match="unknown queue policy 'lifo'; choose one of fcfs, sjf, srpt, spf"):
        QUEUE_POLICIES.make("lifo")
    with pytest.raises(ValueError, match="unknown prefill queue policy 'srpt'"):
        SimConfig(prefill_queue="srpt")
    assert dispatch_choices(prefix_cache=False) == ("rr", "random", "lb")
    assert dispatch_choices(prefix_cache=True) == DISPATCH_POLICIES.names()
    assert "trace-column" not in predictor_choices(["arrival_s"]) and "stored" in predictor_choices(["run_id"])


def test_no_hard_coded_policy_lists_outside_the_registry():
    root = Path(__file__).resolve().parents[3]
    files = [*root.glob("lenscope/cli/scheduler*.py"), *(root / f for f in ("lenscope/app/scheduler.py",
             "lenscope/app/qps_sweep.py", "pages/6_Scheduler_playground.py"))]
    names = {*DISPATCH_POLICIES.names(), *QUEUE_POLICIES.names(), *PREDICTORS.names()}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
                strings = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                assert len(set(strings) & names) < 2, f"{path.name}:{node.lineno} lists policy names {strings}"


def test_instances_do_not_import_the_engine():
    for module in ("instances", "chunked_prefill", "states", "registry", "policies", "predictors", "preemption"):
        tree = ast.parse(Path(__file__).resolve().parents[3].joinpath(f"analysis/scheduler/{module}.py").read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "lenscope.analysis.scheduler.engine" not in imported, module
    assert "engine" not in ContinuousInstance.__module__


def _kind_comparisons(source: str, kinds: set[str]) -> list[int]:
    """Lines of ``source`` that branch on a predictor kind's name: ``==``/``!=``/``in``/``not in`` against one (or a
    collection holding one), a ``case`` of one, or a dict keyed by two or more (a lookup table of kinds)."""
    def names(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value} & kinds
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return set().union(*(names(e) for e in node.elts)) if node.elts else set()
        return set()

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                                 for op in node.ops):
            if any(names(side) for side in (node.left, *node.comparators)):
                found.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and names(node.value):
            found.append(node.lineno)
        elif isinstance(node, ast.Dict) and len(set().union(*(names(k) for k in node.keys if k is not None))) >= 2:
            found.append(node.lineno)
    return sorted(found)


def test_the_kind_check_sees_the_if_chains_it_forbids():
    kinds = set(PREDICTORS.names())
    old = ('if spec.kind == "stored":\n    pass\nif "empirical" != kind:\n    pass\nok = kind in ("oracle", "x")\n'
           'label = {"oracle": "oracle", "constant": "c"}.get(kind)\nmatch kind:\n    case "constant":\n        pass\n')
    assert _kind_comparisons(old, kinds) == [1, 3, 5, 6, 8]
    assert _kind_comparisons('spec = PredictorSpec(kind="oracle")\nif kind == other:\n    pass\n', kinds) == []


def test_no_module_outside_the_registry_branches_on_predictor_kind_names():
    """Callers ask the registry (a kind's options, label, trace columns, store inputs) instead of comparing kind
    names: every module of the scheduler's packages, and every other module (CLI, app, pages, jobs) that handles
    predictor specs or kinds (other registries have kinds of their own, such as the catalog's "constant")."""
    root = Path(__file__).resolve().parents[3]
    kinds = set(PREDICTORS.names())
    handles = {"PredictorSpec", "PREDICTORS", "make_predictor", "predictor_choices", "predictor_kind",
               "build_predictor", "spec_from", "specs_from", "predictor_picker", "SweepGrid"}

    def uses_predictors(path: Path) -> bool:
        return any(isinstance(n, ast.ImportFrom) and handles & {a.name for a in n.names}
                   for n in ast.walk(ast.parse(path.read_text())))

    files = [*(root / "analysis/scheduler").glob("*.py"), *(root / "lenscope/jobs/scheduler").glob("*.py")]
    files += [p for folder in ("lenscope", "pages") for p in (root / folder).rglob("*.py") if uses_predictors(p)]
    checked = {p for p in files if p != root / "analysis/scheduler/registry.py"}
    assert {"scheduler.py", "pipeline.py", "qps_sweep.py", "6_Scheduler_playground.py"} <= {p.name for p in checked}
    bad = {f"{p.relative_to(root)}:{line}" for p in checked for line in _kind_comparisons(p.read_text(), kinds)}
    assert not bad, f"branches on predictor kind names (ask the registry): {sorted(bad)}"
