"""The SQLAlchemy store: run round trips, cache hits and misses, predictions, traces, results."""

import pandas as pd
import pytest
import torch

from lenscope.jobs.runs.generate import generate_cached
from lenscope.models.engine import GenerationSettings, generate

SETTINGS = GenerationSettings(max_new_tokens=8, temperature=0.7, seed=1)


def test_generate_finds_the_same_request_stored_and_misses_otherwise(store, target, monkeypatch):
    import lenscope.jobs.runs.generate

    calls = []
    real = lenscope.jobs.runs.generate.generate
    monkeypatch.setattr(lenscope.jobs.runs.generate, "generate", lambda *a, **k: calls.append(a) or real(*a, **k))
    first, hit1 = generate_cached(store, target, "Say hello.", SETTINGS)
    second, hit2 = generate_cached(store, target, "Say hello.", SETTINGS)
    assert (hit1, hit2) == (False, True) and len(calls) == 1 and first.id == second.id
    _, hit3 = generate_cached(store, target, "Say hello.", GenerationSettings(8, 0.7, 1.0, seed=2))
    _, hit4 = generate_cached(store, target, "Say hello!", SETTINGS)
    assert (hit3, hit4) == (False, False) and len(calls) == 3


def test_run_round_trip_keeps_features(store, target):
    gen = generate(target, "Count to three.", SETTINGS)
    run = store.load_run(store.save_run(target, "Count to three.", gen))
    assert run.output_length == gen.output_length and run.prompt_len == gen.prompt_len
    assert run.response == gen.text and run.features.tokens == gen.features.tokens
    torch.testing.assert_close(run.features.entropy, gen.features.entropy)
    torch.testing.assert_close(run.features.hidden[30], gen.features.hidden[30], atol=1e-2, rtol=1e-3)
    only = store.load_run(run.id, layers=[15])
    assert set(only.features.hidden) == {15}
    frame = store.runs_frame()
    assert frame.loc[0, "output_tokens"] == gen.output_length and frame.loc[0, "prompt"] == "Count to three."


def test_damaged_run_is_generated_again_by_the_next_request_and_by_doctor(store, target):
    from lenscope.jobs.runs.doctor import doctor
    from lenscope.store.errors import DamagedRunError

    with pytest.raises(KeyError):
        store.load_run(999)
    run, _ = generate_cached(store, target, "Hi.", SETTINGS)
    store.tensors.path_for(_hash(store, run.id)).unlink()
    with pytest.raises(DamagedRunError, match="missing"):
        store.load_run(run.id)
    again, hit = generate_cached(store, target, "Hi.", SETTINGS)
    assert not hit and again.id == run.id and again.response == run.response
    path = store.tensors.path_for(_hash(store, run.id))
    path.write_bytes(path.read_bytes()[:100])
    check, done = doctor(store, fix=True, load=lambda spec, dtype: target)
    assert check.damaged_runs == [run.id] and "generated 1 damaged run(s) again" in done
    healed = store.load_run(run.id)
    assert healed.response == run.response
    torch.testing.assert_close(healed.features.entropy, run.features.entropy, atol=1e-3, rtol=1e-3)
    assert doctor(store)[0].healthy


def _hash(store, run_id):
    from lenscope.store.schema import Run

    with store.session() as s:
        return s.get(Run, run_id).features_hash


def test_tensor_store_is_content_addressed(store):
    a = store.tensors.put({"x": torch.arange(4)})
    b = store.tensors.put({"x": torch.arange(4)})
    c = store.tensors.put({"x": torch.arange(5)})
    assert a == b and a[0] != c[0]


def test_predictors_predictions_traces_results(store, target):
    run, _ = generate_cached(store, target, "Hi.", SETTINGS)
    pid = store.save_predictor("p", "egtp", {"alpha": 1}, {"mae": 3.0})
    store.save_predictions(pid, pd.DataFrame({"run_id": [run.id, run.id], "step": [0, 1],
                                              "predicted": [5.0, 4.0], "true": [6.0, 5.0],
                                              "split": ["test", "test"]}))
    assert store.predictions_frame(pid)["predicted"].tolist() == [5.0, 4.0]
    pid2 = store.save_predictor("p", "egtp", {"alpha": 2}, {"mae": 2.0})
    assert store.predictions_frame(pid2).empty and len(store.predictors_frame()) == 1
    trace = pd.DataFrame({"arrival_s": [0.0, 0.5], "prompt_tokens": [10, 20], "output_tokens": [5, 7]})
    tid = store.save_trace("t", "generic", trace)
    assert store.save_trace("t again", "generic", trace) == tid
    pd.testing.assert_frame_equal(store.load_trace(tid)[trace.columns], trace, check_dtype=False)
    store.put_result("ablation", "first", {"k": 1}, {"mae": 1})
    store.put_result("ablation", "second", {"k": 1}, {"mae": 2})
    assert store.get_result("ablation", {"k": 1}) == {"mae": 2} and store.get_result("ablation", {"k": 2}) is None


def test_sqlite_store_uses_wal(store):
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_cancelled_generation_stores_nothing_and_can_rerun(store, target):
    class Cancelled(Exception):
        pass

    def cancel_at_third(step, total, label):
        if step == 3:
            raise Cancelled

    with pytest.raises(Cancelled):
        generate_cached(store, target, "Tell me a story.", SETTINGS, on_progress=cancel_at_third)
    assert store.runs_frame().empty
    run, hit = generate_cached(store, target, "Tell me a story.", SETTINGS)
    assert not hit and run.output_length >= 1


def test_hidden_states_beyond_float16_range_survive(store):
    from tests.fakes import fake_generation, fake_target

    gen = fake_generation(3, 4, layers=(1, 2))
    gen.features.hidden[1][2, 1] = 1e5  # a massive activation, above float16's 65504
    gen.features.hidden[1][4, 3] = -3.3e6
    run = store.load_run(store.save_run(fake_target(), "massive", gen))
    for layer in (1, 2):
        torch.testing.assert_close(run.features.hidden[layer], gen.features.hidden[layer], rtol=1e-3, atol=1e-3)
    assert torch.isfinite(run.features.hidden[1]).all()
    only = store.load_run(run.id, layers=[1])
    torch.testing.assert_close(only.features.hidden[1], gen.features.hidden[1], rtol=1e-3, atol=1e-3)


def test_runs_are_written_in_batches_and_keep_their_ids(store):
    from lenscope.store.store import NewRun
    from tests.fakes import fake_generation, fake_target

    new = [NewRun(f"prompt {i}", fake_generation(2, 3 + i, seed=i)) for i in range(5)]
    ids = store.save_runs(fake_target(), new)
    assert len(set(ids)) == 5 and store.save_runs(fake_target(), new[::-1]) == ids[::-1]
    assert store.load_run(ids[2]).features.tokens == new[2].generation.features.tokens


def test_signature_changes_when_something_is_added(store):
    from tests.fakes import fake_generation, fake_target

    empty = store.signature()
    assert empty == (0, 0, 0, 0, 0)
    target = fake_target()
    run_id = store.save_run(target, "hi", fake_generation(3, 4))
    store.add_to_dataset(store.ensure_dataset("d", store.ensure_model(target), {}), run_id, "chat")
    with_run = store.signature()
    pid = store.save_predictor("p", "kind", {}, {})
    with_predictor = store.signature()
    store.put_result("kind", "r", {"a": 1}, {"x": 1})
    with_result = store.signature()
    assert empty < with_run and with_run[0] == 1
    assert with_predictor[1:3] == (1, pid) and with_result[3] == 1
    assert store.signature() == with_result  # reading changes nothing


def test_dataset_config_is_kept_from_creation_and_none_for_an_unknown_name(store):
    from tests.fakes import fake_target

    model_id = store.ensure_model(fake_target())
    store.ensure_dataset("d", model_id, {"layers": [2, 30], "censored_not_imported": 3})
    store.ensure_dataset("d", model_id, {"layers": [1]})
    store.ensure_dataset("bare", model_id, None)
    assert store.dataset_config("d") == {"layers": [2, 30], "censored_not_imported": 3}
    assert store.dataset_config("bare") == {}
    assert store.dataset_config("missing") is None


def test_a_run_whose_features_stop_early_keeps_its_answer_and_is_completed_in_place(store):
    from lenscope.store.store import NewRun
    from tests.fakes import cut_generation, fake_generation, fake_target

    target, whole = fake_target(), fake_generation(3, 10, seed=4)
    whole.finished = False
    cut = cut_generation(whole, 4)
    run_id = store.save_run(target, "long", cut)
    run = store.load_run(run_id)
    assert run.features_cut and len(run.features) == 7 and run.output_length == 10
    assert run.output_ids == whole.output_ids  # every answer id, beyond the features
    assert store.feature_positions(run_id) == 7 and store.runs_frame()["feature_positions"].tolist() == [7]
    key = store.run_key(target.key, "long", whole.settings, [1, 2])
    assert store.find_runs([key]) == {key: run_id} and store.find_runs([key], whole=True) == {}
    assert store.find_run(key, whole=True) is None
    assert store.save_runs(target, [NewRun("long", whole)]) == [run_id]  # completed in place, same id
    run = store.load_run(run_id)
    assert not run.features_cut and run.kept_output_ids is None and run.output_ids == whole.output_ids
    torch.testing.assert_close(run.features.entropy, whole.features.entropy)
    assert store.feature_positions(run_id) is None and store.find_run(key, whole=True) == run_id
    assert store.save_runs(target, [NewRun("long", cut)]) == [run_id]  # a shorter one never replaces it
    assert not store.load_run(run_id).features_cut
    finished = fake_generation(3, 5, seed=5)  # features of every position: nothing marked, no extra ids kept
    plain = store.load_run(store.save_run(target, "short", finished))
    assert not plain.features_cut and plain.kept_output_ids is None and plain.output_ids == finished.output_ids
