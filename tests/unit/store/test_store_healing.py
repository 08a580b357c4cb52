"""Injected damage: truncated, altered and deleted tensor files, leftovers and orphans, a corrupt database, an
unreachable server, a read-only store, a malformed URL; each ends in a clear message and a store that heals."""

import os
import time

import pytest
import torch

from lenscope.jobs.runs.store_check import check_store, repair_store
from lenscope.store.errors import DamagedRunError, NotAStoreError, StoreUnavailableError
from lenscope.store.store import NewRun, Store
from lenscope.store.tensors import DamagedTensorError
from tests.fakes import fake_generation, fake_target


def _file(store: Store, run_id: int):
    from lenscope.store.schema import Run

    with store.session() as s:
        return store.tensors.path_for(s.get(Run, run_id).features_hash)


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-7])


def _alter(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, problem", [(_truncate, "damaged"), (_alter, "damaged"),
                                              (lambda p: p.unlink(), "missing")])
def test_a_damaged_run_is_reported_then_regenerated_in_place(store, damage, problem):
    target, gen = fake_target(), fake_generation(3, 4)
    run_id = store.save_run(target, "a prompt", gen)
    key = store.run_key(target.key, "a prompt", gen.settings, [1, 2])
    damage(_file(store, run_id))
    with pytest.raises(DamagedRunError, match=f"run {run_id}'s tensor file .* is {problem}.*doctor --fix"):
        store.load_run(run_id)
    assert store.find_runs([key]) == {}  # no longer a cache hit: the next request generates it again
    with pytest.raises(DamagedRunError, match="waiting to be regenerated"):
        store.load_run(run_id)
    assert store.save_runs(target, [NewRun("a prompt", gen)]) == [run_id]  # rewritten in place, same id
    assert store.find_runs([key]) == {key: run_id}
    torch.testing.assert_close(store.load_run(run_id).features.entropy, gen.features.entropy)


def test_put_rewrites_a_damaged_file_and_get_verifies(store):
    digest, path = store.tensors.put({"x": torch.arange(10)})
    _truncate(path)
    with pytest.raises(DamagedTensorError, match="does not match its hash"):
        store.tensors.get(digest)
    assert store.tensors.put({"x": torch.arange(10)}) == (digest, path)
    assert torch.equal(store.tensors.get(digest)["x"], torch.arange(10))


def test_memoised_features_recompute_a_damaged_file(store, monkeypatch):
    import lenscope.jobs.runs.features as features

    run_id = store.save_run(fake_target(), "a prompt", fake_generation(3, 4))
    first = features.run_features(store, run_id, 1, 1.0)
    from lenscope.store.schema import Result

    with store.session() as s:
        digest = s.query(Result).filter(Result.kind == features.FEATURES_KIND).one().payload["hash"]
    _alter(store.tensors.path_for(digest))
    again = features.run_features(store, run_id, 1, 1.0)
    torch.testing.assert_close(again["prompt.egtp"], first["prompt.egtp"])
    assert store.tensors.problem(digest) is None


def _age(path, seconds=7200):
    old = time.time() - seconds
    os.utime(path, (old, old))


def test_doctor_finds_and_repairs_injected_damage(store):
    target = fake_target()
    ids = [store.save_run(target, f"prompt {i}", fake_generation(3, 4, seed=i)) for i in range(3)]
    _truncate(_file(store, ids[0]))
    _file(store, ids[1]).unlink()
    _, orphan = store.tensors.put({"nobody": torch.ones(3)})
    temp = orphan.parent / "half-written.tmp"
    temp.write_bytes(b"\x00" * 5)
    fresh_temp = orphan.parent / "being-written.tmp"  # a running writer's file is left alone
    fresh_temp.write_bytes(b"\x00")
    for path in (orphan, temp):
        _age(path)
    check = check_store(store)
    assert check.damaged_runs == ids[:2] and not check.integrity
    assert check.orphans == [orphan] and check.temp_files == [temp]
    assert any("2 run(s) with a missing or damaged tensor file" in line for line in check.lines())
    done = repair_store(store, check)
    assert "marked 2 run(s) for regeneration" in done
    assert not orphan.exists() and not temp.exists() and fresh_temp.exists()
    assert [r.run_id for r in store.damaged_requests()] == ids[:2]
    assert store.load_run(ids[2]).output_length == 4  # the healthy run is untouched
    after = check_store(store)
    assert after.damaged_runs == ids[:2] and not after.damaged_files and not after.orphans


def test_regenerate_leaves_runs_of_an_older_sampler_marked(store):
    from lenscope.jobs.runs.doctor import regenerate_damaged

    target = fake_target()
    gen = fake_generation(3, 4)
    gen.settings = {"max_new_tokens": 4, "temperature": 0.7, "top_p": 1.0, "seed": 0, "sampler": "old-sampler"}
    run_id = store.save_run(target, "a prompt", gen)
    store.mark_damaged(_file(store, run_id).stem)
    done = regenerate_damaged(store, load=lambda *a, **k: pytest.fail("an older sampler's run is not resampled"))
    assert done == [f"left 1 run(s) of an older sampler marked (run ids [{run_id}])"]


def test_a_failed_first_collection_leaves_no_empty_dataset(store):
    from lenscope.analysis.data.prompts import PromptItem
    from lenscope.jobs.runs.collect import collect_dataset
    from lenscope.models.engine import GenerationSettings

    broken = fake_target()
    broken.check_layers = lambda layers: [1]
    broken.chat_ids = lambda *a: (_ for _ in ()).throw(RuntimeError("the model failed"))
    with pytest.raises(RuntimeError, match="the model failed"):
        collect_dataset(store, broken, "new", [PromptItem("hi", "user", "", "chat")], GenerationSettings(4))
    assert store.dataset_id("new") is None


def test_corrupt_database_file_is_named_not_a_store(data_dir):
    data_dir.mkdir(parents=True)
    (data_dir / "lenscope.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(NotAStoreError, match=r"lenscope.db is not a lenscope store .*move it aside"):
        Store()


def test_unreachable_postgresql_names_host_and_port(monkeypatch):
    pytest.importorskip("psycopg2")
    with pytest.raises(StoreUnavailableError, match=r"PostgreSQL at 127.0.0.1:9 is not reachable"):
        Store("postgresql+psycopg2://user:secret@127.0.0.1:9/lenscope?connect_timeout=2")


@pytest.mark.parametrize("url, message", [("not a url", "is not a database URL"),
                                          ("nosuchdb://x/y", "no database driver")])
def test_malformed_url_or_unknown_driver(url, message):
    with pytest.raises(NotAStoreError, match=message):
        Store(url)


def test_read_only_store_says_read_only(store, data_dir):
    store.save_run(fake_target(), "a prompt", fake_generation(3, 4))
    url = f"sqlite:///file:{data_dir / 'lenscope.db'}?mode=ro&uri=true"
    read_only = Store(url)
    with pytest.raises(StoreUnavailableError, match="read-only"):
        read_only.ensure_prompt("a new prompt")


def test_unwritable_data_directory_is_reported(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(StoreUnavailableError, match="cannot create the data directory .*LENSCOPE_DATA_DIR"):
        Store(f"sqlite:///{blocker / 'data' / 'lenscope.db'}")


def test_memo_tensors_computes_once_and_again_after_damage(store):
    calls = []

    def compute():
        calls.append(1)
        return {"x": torch.arange(6.0)}

    first = store.memo_tensors("kind", "a result", {"run_id": 1}, compute)
    again = store.memo_tensors("kind", "a result", {"run_id": 1}, compute)
    assert len(calls) == 1 and torch.equal(first["x"], again["x"])
    _alter(store.tensors.path_for(store.get_result("kind", {"run_id": 1})["hash"]))
    healed = store.memo_tensors("kind", "a result", {"run_id": 1}, compute)
    assert len(calls) == 2 and torch.equal(healed["x"], first["x"])
    store.memo_tensors("kind", "a result", {"run_id": 2}, compute)
    assert len(calls) == 3
