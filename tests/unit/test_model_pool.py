"""The app's model pool: least recently used out first, by count and by memory; failed loads remembered."""

import threading
import time
import traceback

import pytest

from lenscope.app.model_pool import ModelPool
from lenscope.store.settings import GIB


class Loads:
    """Loaders that record which keys were loaded; a value is its key, its size ``sizes[key]``."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes, self.calls = sizes, []

    def __call__(self, cache: ModelPool, key: str) -> str:
        def load() -> str:
            self.calls.append(key)
            return key
        return cache.get(key, load)


def test_evicts_the_least_recently_used_by_count():
    loads = Loads({})
    cache = ModelPool(max_models=2, max_bytes=GIB, size_of=lambda _: 1)
    for key in ("a", "b", "a", "c"):  # "a" was used after "b": "b" goes
        assert loads(cache, key) == key
    loads(cache, "a")
    assert loads.calls == ["a", "b", "c"]
    loads(cache, "b")
    assert loads.calls == ["a", "b", "c", "b"]


def test_evicts_by_memory_and_refuses_a_model_over_the_whole_budget():
    loads = Loads({"big": 3 * GIB, "small": GIB, "mid": 2 * GIB, "huge": 5 * GIB})
    cache = ModelPool(max_models=10, max_bytes=4 * GIB, size_of=lambda key: loads.sizes[key])
    for key in ("big", "small", "mid"):  # 3 + 1 + 2 GiB > 4: "big" goes, "small" and "mid" stay
        loads(cache, key)
    loads(cache, "small"), loads(cache, "mid")
    assert loads.calls == ["big", "small", "mid"]
    with pytest.raises(ValueError, match=r"takes 5.0 GiB, more than the app keeps loaded \(4.0 GiB"):
        loads(cache, "huge")
    loads(cache, "small"), loads(cache, "mid")  # the refused model evicted nothing
    assert loads.calls == ["big", "small", "mid", "huge"]


def test_a_failed_load_is_remembered_until_it_expires():
    now = [0.0]
    cache = ModelPool(max_models=2, max_bytes=GIB, size_of=lambda _: 1, failure_ttl_s=300, clock=lambda: now[0])
    calls = []

    def load():
        calls.append(1)
        raise ValueError("the model hub has no model 'nobody/nothing'")

    depths = []
    for _ in range(3):
        with pytest.raises(ValueError, match="has no model 'nobody/nothing'") as caught:
            cache.get("nobody/nothing", load)
        depths.append(len(traceback.extract_tb(caught.value.__traceback__)))
    assert len(calls) == 1 and depths[1] == depths[2]  # a fresh error each time, not one growing traceback
    now[0] = 301.0
    with pytest.raises(ValueError):
        cache.get("nobody/nothing", load)
    assert len(calls) == 2


def test_concurrent_sessions_load_a_model_once():
    cache = ModelPool(max_models=2, max_bytes=GIB, size_of=lambda _: 1)
    calls = []

    def load():
        calls.append(1)
        time.sleep(0.2)
        return "model"

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get("m", load))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == ["model"] * 4 and len(calls) == 1
