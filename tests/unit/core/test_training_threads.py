"""Small heads train on one thread, and the calling thread's thread count comes back, however the uses nest."""

from __future__ import annotations

import threading

import torch

from lenscope.analysis.core.training import fit_minibatch, one_thread


def test_one_thread_restores_the_callers_count_when_nested_and_in_other_threads():
    before = torch.get_num_threads()
    seen = []

    def worker():
        mine = torch.get_num_threads()
        with one_thread():
            seen.append(torch.get_num_threads())
        seen.append(torch.get_num_threads() == mine)

    with one_thread():
        with one_thread():
            seen.append(torch.get_num_threads())
        seen.append(torch.get_num_threads())
    other = threading.Thread(target=worker)
    other.start()
    other.join()
    assert seen == [1, 1, 1, True]
    assert torch.get_num_threads() == before


def test_training_runs_on_one_thread_and_restores_on_error():
    before = torch.get_num_threads()
    seen = []

    class Config:
        lr, weight_decay, batch_size, epochs, seed = 1e-2, 0.0, 4, 1, 0

    def loss(model, xb, yb):
        seen.append(torch.get_num_threads())
        return (model(xb).squeeze(-1) - yb).square().mean()

    fit_minibatch(torch.nn.Linear(3, 1), torch.randn(8, 3), torch.randn(8), loss, Config())
    assert set(seen) == {1} and torch.get_num_threads() == before

    def broken(model, xb, yb):
        raise RuntimeError("boom")

    try:
        fit_minibatch(torch.nn.Linear(3, 1), torch.randn(8, 3), torch.randn(8), broken, Config())
    except RuntimeError:
        pass
    assert torch.get_num_threads() == before
