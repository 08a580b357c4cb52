"""The files jobs write for a user (exported runs and generations, published results, trained artifacts) are
written all or nothing: stopped or failed midway, the previous file stays whole and no temporary file is left."""

from __future__ import annotations

import errno
import gzip
import os
import time

import pandas as pd
import pytest

from lenscope.analysis.core.soft_label_head import SoftLabelHead, log_bins
from lenscope.analysis.drafter.probes import LengthProbe, ProbeConfig
from lenscope.analysis.egtp.training import save_head
from lenscope.jobs.runs.generations import export_generations
from lenscope.jobs.runs.table import export_runs
from lenscope.jobs.study import shipped
from tests.fakes import fake_generation, fake_target

FRAME = pd.DataFrame({"run_id": [1, 2, 3], "output_tokens": [10, 20, 30]})


def _files(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_killed_parquet_export_keeps_the_previous_file(tmp_path, monkeypatch):
    out = tmp_path / "runs.parquet"
    export_runs(FRAME, out)
    before = out.read_bytes()

    def killed(frame, path, **kwargs):
        with open(path, "wb") as handle:
            handle.write(b"PAR1" + b"\0" * 19)  # what a kill left: 23 bytes
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_parquet", killed)
    with pytest.raises(KeyboardInterrupt):
        export_runs(FRAME.assign(output_tokens=0), out)
    assert out.read_bytes() == before and _files(tmp_path) == ["runs.parquet"]


def test_a_csv_export_on_a_full_disk_keeps_the_previous_file_and_names_it(tmp_path, monkeypatch):
    out = tmp_path / "runs.csv"
    export_runs(FRAME, out)
    real = pd.DataFrame.to_csv

    def full(frame, path, **kwargs):
        real(frame.iloc[:1], path, **kwargs)  # a row, then no space for the rest
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    with pytest.raises(OSError) as caught:
        export_runs(FRAME, out)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(out)
    assert pd.read_csv(out).equals(FRAME) and _files(tmp_path) == ["runs.csv"]


def test_a_stopped_generations_export_keeps_the_previous_file(store, tmp_path, monkeypatch):
    target = fake_target()
    dataset = store.ensure_dataset("dev", target, {"layers": [1, 2]})
    for seed in range(2):
        store.add_to_dataset(dataset, store.save_run(target, f"prompt {seed}", fake_generation(3, 4, seed)), "chat")
    out = tmp_path / "exported" / "dev.jsonl.gz"
    assert export_generations(store, "dev", out) == 2
    before = out.read_bytes()
    real = store.load_run

    def stopped_on_the_second(run_id, **kwargs):
        if run_id != store.runs_frame(dataset="dev")["run_id"].iloc[0]:
            raise KeyboardInterrupt
        return real(run_id, **kwargs)

    monkeypatch.setattr(store, "load_run", stopped_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        export_generations(store, "dev", out)
    assert out.read_bytes() == before and _files(out.parent) == ["dev.jsonl.gz"]
    assert b"dev.jsonl\x00" in before[:32]  # the gzip header names the file, not a temporary one


def test_published_results_are_the_same_bytes_and_a_stopped_one_keeps_the_previous(tmp_path, monkeypatch):
    table, doc = tmp_path / "runs.csv.gz", tmp_path / "attribution.json.gz"
    shipped._dump(table, FRAME)
    shipped._dump(doc, {"a": 1})
    before = table.read_bytes(), doc.read_bytes()
    shipped._dump(table, FRAME)
    assert table.read_bytes() == before[0] and pd.read_csv(table).equals(FRAME)
    assert b"runs.csv\x00" in before[0][:32] and b"tmp" not in before[0][:64]
    real = gzip.GzipFile.write

    def stopped(handle, data):
        real(handle, bytes(data)[: len(data) // 2])
        handle.flush()
        raise KeyboardInterrupt

    monkeypatch.setattr(gzip.GzipFile, "write", stopped)
    for path, value in ((table, FRAME.assign(output_tokens=0)), (doc, {"a": 2})):
        with pytest.raises(KeyboardInterrupt):
            shipped._dump(path, value)
    assert (table.read_bytes(), doc.read_bytes()) == before
    assert _files(tmp_path) == ["attribution.json.gz", "runs.csv.gz"]


def test_a_trained_artifact_stopped_while_saving_keeps_its_previous_files(tmp_path, monkeypatch):
    from safetensors import torch as safetensors_torch

    probe = LengthProbe(ProbeConfig(in_dim=4, layer=1, hidden=8))
    folder = probe.save(tmp_path / "probe")
    soft_label_head = SoftLabelHead(4, log_bins([5, 10, 40, 100], k=4), hidden=8)
    head = save_head(soft_label_head, tmp_path / "head.safetensors", {})
    before = {p.name: p.read_bytes() for p in [*folder.iterdir(), head, head.with_suffix(".json")]}

    def cut(tensors, filename, metadata=None):
        with open(filename, "wb") as handle:
            handle.write(b"\x10\x00")  # the first bytes of a safetensors header, then the kill
        raise KeyboardInterrupt

    monkeypatch.setattr(safetensors_torch, "save_file", cut)
    for save in (lambda: probe.save(folder), lambda: save_head(soft_label_head, head, {"new": 1})):
        with pytest.raises(KeyboardInterrupt):
            save()
    assert {p.name: p.read_bytes() for p in [*folder.iterdir(), head, head.with_suffix(".json")]} == before


def test_doctor_finds_and_deletes_what_a_killed_artifact_write_left(store, data_dir):
    from lenscope.jobs.runs.store_check import GRACE_S, check_store, repair_store

    folder = data_dir / "artifacts" / "probes" / "probe-dev-L1-regression"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    left = folder / ".model.safetensors.tmp-0123abcd.safetensors"
    left.write_bytes(b"\x10\x00")
    fresh = folder / ".config.json.tmp-4567cdef.json"  # a write going on now: left alone
    fresh.write_text("{")
    old = time.time() - GRACE_S - 60
    os.utime(left, (old, old))
    check = check_store(store)
    assert check.temp_files == [left] and not check.healthy
    assert "1 temporary file(s) left by an interrupted write" in check.lines()
    repair_store(store, check)
    assert sorted(p.name for p in folder.iterdir()) == [fresh.name, "model.safetensors"]
