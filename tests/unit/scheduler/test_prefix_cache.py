"""Prefix caching from block hashes: the LRU cache, hand-worked TTFT savings, cache-aware dispatch, stored traces."""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest

from lenscope.analysis.scheduler import SimConfig, make_predictor, simulate
from lenscope.analysis.scheduler.cost_model import DEFAULT_COST
from lenscope.analysis.scheduler.prefix_cache import PrefixCache

CACHE = 10_000  # tokens per instance: 19 blocks of 512
PREFILL = DEFAULT_COST.prefill  # 10 ms + 0.04 ms per prompt token


def trace_of(arrivals, prompts, hashes, outputs=None) -> pd.DataFrame:
    return pd.DataFrame({"arrival_s": arrivals, "prompt_tokens": prompts,
                         "output_tokens": outputs or [5] * len(prompts), "hash_ids": hashes})


def run(trace: pd.DataFrame, config: SimConfig) -> pd.DataFrame:
    requests = simulate(trace, make_predictor("oracle", trace["output_tokens"].to_numpy()), config).requests
    return requests.assign(ttft_s=requests["first_token_s"] - requests["arrival_s"])


def test_lru_cache_matches_leading_blocks_and_evicts_the_least_recently_used():
    cache = PrefixCache(3)
    cache.insert([1, 2, 3])
    assert cache.matched([1, 2, 9]) == 2 and cache.matched([9, 2, 3]) == 0
    assert cache.use([1]) == 1  # 1 becomes the most recently used
    cache.insert([4])  # evicts 2, the least recently used
    assert len(cache) == 3 and cache.matched([1]) == 1 and cache.matched([2]) == 0 and cache.matched([3, 4]) == 2


# Request 1 shares its first two 512-token blocks with request 0, which prefilled a second earlier; request 2
# shares only later blocks (no leading match).
SHARED = trace_of([0.0, 1.0, 2.0], [1500, 1200, 1500], [(1, 2, 3), (1, 2, 9), (7, 2, 3)])


@pytest.mark.parametrize("config", [SimConfig(), SimConfig(mode="colocated", n_decode=1),
                                    SimConfig(mode="colocated", n_decode=1, chunk_tokens=2048)],
                         ids=["disaggregated", "colocated", "chunked"])
def test_a_prefix_hit_saves_exactly_the_cached_blocks_prefill(config):
    plain = run(SHARED, config)
    cached = run(SHARED, config.with_(prefix_cache_tokens=CACHE))
    assert cached["cached_tokens"].tolist() == [0, 1024, 0]
    saved = (plain["ttft_s"] - cached["ttft_s"]).tolist()
    assert saved == pytest.approx([0.0, PREFILL.b * 1024, 0.0])


def test_at_least_one_prompt_token_is_computed():
    trace = trace_of([0.0, 1.0], [1024, 1024], [(1, 2), (1, 2)])
    cached = run(trace, SimConfig(prefix_cache_tokens=CACHE))
    assert cached["cached_tokens"].tolist() == [0, 1023]
    assert cached["ttft_s"].iloc[1] == pytest.approx(PREFILL.step_s(1, 1, 0))


def test_a_full_cache_forgets_the_least_recently_used_prefix():
    # two blocks fit: request 1 evicts request 0's blocks, so request 2 (request 0's prefix) misses
    trace = trace_of([0.0, 1.0, 2.0], [1024, 1024, 1024], [(1, 2), (3, 4), (1, 2)])
    assert run(trace, SimConfig(prefix_cache_tokens=1024))["cached_tokens"].tolist() == [0, 0, 0]
    assert run(trace, SimConfig(prefix_cache_tokens=2048))["cached_tokens"].tolist() == [0, 0, 1023]


def test_cache_aware_dispatch_follows_the_cached_prefix():
    """Colocated: request 0 (long output) runs on instance 0, request 1 goes to the idle instance 1; request 2 shares
    request 1's prefix. Round robin sends it to instance 0 (a miss), cache-aware dispatch to instance 1 (a hit)."""
    trace = trace_of([0.0, 0.1, 1.0], [600, 1100, 1100], [(1, 2), (5, 6, 7), (5, 6, 8)], outputs=[5000, 5, 5])
    base = SimConfig(mode="colocated", n_decode=2, prefix_cache_tokens=CACHE)
    rr = run(trace, base)
    assert rr["decode_instance"].tolist() == [0, 1, 0] and rr["cached_tokens"].iloc[2] == 0
    aware = run(trace, base.with_(dispatch="prefix"))
    assert aware["decode_instance"].tolist() == [0, 1, 1] and aware["cached_tokens"].iloc[2] == 1024
    # disaggregated: the prefill instance is chosen by its cache (round robin would pick prefill instance 0)
    two_prefill = SimConfig(n_prefill=2, prefix_cache_tokens=CACHE)
    assert run(trace, two_prefill)["cached_tokens"].tolist() == [0, 0, 0]
    assert run(trace, two_prefill.with_(dispatch="prefix"))["cached_tokens"].tolist() == [0, 0, 1024]


def test_prefix_caching_needs_block_hashes_and_cache_aware_dispatch_a_cache():
    with pytest.raises(ValueError, match="hash_ids"):
        run(SHARED.drop(columns="hash_ids"), SimConfig(prefix_cache_tokens=CACHE))
    with pytest.raises(ValueError, match="prefix caching"):
        SimConfig(dispatch="prefix")
    with pytest.raises(ValueError, match="at least one block"):
        SimConfig(prefix_cache_tokens=100)
    assert "prefix_cache_tokens" not in SimConfig().to_dict()


def test_stored_traces_keep_block_hashes_and_older_stores_gain_the_column(data_dir):
    from lenscope.store.store import Store

    store = Store()
    plain = SHARED.drop(columns="hash_ids")
    old_id = store.save_trace("plain", "generic", plain)
    db = sqlite3.connect(data_dir / "lenscope.db")
    db.execute("ALTER TABLE trace_requests DROP COLUMN hash_ids")  # a store from before block hashes were kept
    db.commit()
    db.close()
    store = Store()
    assert "add column trace_requests.hash_ids" in store.migrations
    assert "hash_ids" not in store.load_trace(old_id)
    new_id = store.save_trace("mooncake", "mooncake", SHARED)
    assert new_id != old_id
    loaded = store.load_trace(new_id)
    assert loaded["hash_ids"].tolist() == [(1, 2, 3), (1, 2, 9), (7, 2, 3)]
    assert run(loaded, SimConfig(prefix_cache_tokens=CACHE))["cached_tokens"].tolist() == [0, 1024, 0]
