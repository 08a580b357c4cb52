"""OUTLETS drafter: shapes, persistence, gated attention, drafting, length targets, training,
acceptance, and the train-drafter / train-probe CLI on a tiny real store."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from lenscope.analysis.core.metrics import mae, prediction_metrics
from lenscope.analysis.drafter.acceptance import cycle_acceptance
from lenscope.analysis.drafter.probes import remaining_length_samples
from lenscope.analysis.drafter.training import VARIANTS, DrafterExample, predict_example, train_drafter
from lenscope.models.drafter import Drafter, DrafterConfig, GatedSelfAttention, log_length, rotary

V, D, HEADS = 64, 32, 4
PROMPTS = ["Say hi.", "Name a colour.", "Count to three.", "What is 2+2?", "Give one fruit.", "Say bye."]


def tiny_drafter(**overrides) -> Drafter:
    torch.manual_seed(0)
    config = DrafterConfig(hidden_size=D, vocab_size=V, num_heads=HEADS, intermediate_size=64, **overrides)
    embed = torch.randn(V, D)
    return Drafter(config, embed, embed)


def synthetic_example(run_id: int, prompt_len: int = 6, output_length: int = 10) -> DrafterExample:
    gen = torch.Generator().manual_seed(run_id)
    t = prompt_len + output_length
    ids = torch.randint(0, V, (t,), generator=gen)
    logits = torch.randn(t, V, generator=gen) * 3
    top = torch.log_softmax(logits, -1).topk(8, dim=-1)
    return DrafterExample(run_id=run_id, prompt_id=run_id, split="train", prompt_len=prompt_len,
                          output_length=output_length, input_ids=ids,
                          hidden=[torch.randn(t, D, generator=gen).half() for _ in range(3)],
                          target_ids=top.indices, target_logp=top.values.half())


def test_shapes_and_save_load_round_trip(tmp_path):
    drafter = tiny_drafter().eval()
    ex = synthetic_example(1)
    hidden, next_ids = ex.inputs()
    rep, (k, v) = drafter(hidden, next_ids)
    t = ex.length - 1
    assert rep.shape == (1, t, D) and k.shape == (1, HEADS, t, D // HEADS)
    assert drafter.draft_logits(rep).shape == (1, t, V)
    assert drafter.predict_log_length(rep).shape == (1, t)
    drafter.save(tmp_path / "d")
    assert {p.name for p in (tmp_path / "d").iterdir()} == {"config.json", "model.safetensors"}
    loaded = Drafter.load(tmp_path / "d", drafter.embed_weight, drafter.head_weight)
    assert torch.allclose(loaded(hidden, next_ids)[0], rep)
    with pytest.raises(ValueError, match="hidden size 32"):
        Drafter.load(tmp_path / "d", torch.randn(V, 48), torch.randn(V, 48))
    with pytest.raises(FileNotFoundError):
        Drafter.load(tmp_path / "missing", drafter.embed_weight, drafter.head_weight)


def reference_attention(attn: GatedSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """Plain causal softmax attention written out by hand."""
    b, s, _ = x.shape
    pos = torch.arange(s).expand(b, s)
    split = lambda y: y.view(b, s, HEADS, D // HEADS).transpose(1, 2)  # noqa: E731
    q, k = rotary(split(attn.q_proj(x)), pos, attn.theta), rotary(split(attn.k_proj(x)), pos, attn.theta)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D // HEADS)
    scores = scores.masked_fill(torch.triu(torch.ones(s, s, dtype=torch.bool), 1), float("-inf"))
    out = (scores.softmax(-1) @ split(attn.v_proj(x))).transpose(1, 2).reshape(b, s, D)
    return attn.o_proj(out)


def test_gate_off_equals_plain_attention_and_gate_scales_output():
    x = torch.randn(2, 7, D)
    plain = tiny_drafter(gated_attention=False).decoder.attn
    assert plain.gate_proj is None
    assert torch.allclose(plain(x, torch.arange(7).expand(2, 7))[0], reference_attention(plain, x), atol=1e-5)
    gated = tiny_drafter(gated_attention=True).decoder.attn
    gated.load_state_dict(plain.state_dict(), strict=False)
    torch.nn.init.zeros_(gated.gate_proj.weight)          # sigmoid(0) = 0.5 on every channel
    assert torch.allclose(gated(x, torch.arange(7).expand(2, 7))[0], 0.5 * reference_attention(plain, x), atol=1e-5)


def test_draft_chain_matches_a_manual_second_step():
    drafter = tiny_drafter().eval()
    ex = synthetic_example(2)
    hidden, next_ids = ex.inputs()
    p = 5
    drafts = drafter.draft([h[0] for h in hidden], next_ids[0], torch.tensor([p]), k=2)
    with torch.no_grad():
        rep, _ = drafter(hidden, next_ids)
        assert drafts[0, 0] == drafter.draft_logits(rep[0, p]).argmax()
        # step 2 by hand: a causal pass whose last position has the drafter's own rep and draft token
        fused = drafter.fuse_features([h[:, :p + 1] for h in hidden])
        feats = torch.cat([fused, rep[:, p:p + 1]], dim=1)
        ids = torch.cat([next_ids[:, :p + 1], drafts[:, :1]], dim=1)
        rep2, _ = drafter.step(feats, ids, torch.arange(p + 2).unsqueeze(0))
    assert drafts[0, 1] == drafter.draft_logits(rep2[0, -1]).argmax()


def test_length_target_is_log1p_of_remaining():
    samples = remaining_length_samples(prompt_len=5, output_length=4)
    assert samples.steps.tolist() == [0, 1, 2, 3]
    assert samples.positions.tolist() == [4, 5, 6, 7]        # last visible position P - 1 + t
    assert samples.remaining.tolist() == [4, 3, 2, 1]        # L - t
    z = log_length(torch.as_tensor(samples.remaining))
    assert torch.allclose(z, torch.log1p(torch.tensor([4.0, 3.0, 2.0, 1.0])))
    assert remaining_length_samples(5, 100, max_step=32).steps.max() == 32


@pytest.mark.parametrize("variant", ["outlets", "classification", "no-decoder"])
def test_training_reduces_loss_on_a_small_batch(variant):
    spec = VARIANTS[variant]
    drafter = tiny_drafter(**spec.drafter_overrides())
    examples = [synthetic_example(i) for i in range(3)]
    history = train_drafter(drafter, examples, spec, epochs=25, lr=3e-3, warmup=1)
    assert history[-1]["loss"] < 0.7 * history[0]["loss"]
    assert history[-1]["length"] < history[0]["length"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_training_on_cuda_matches_the_cpu():
    """The same run trained on a GPU: losses and weights as on the CPU, the drafter left on the GPU, and
    predictions returned on the CPU."""
    examples = [synthetic_example(i) for i in range(4)]
    spec = VARIANTS["outlets"]
    runs = {}
    for device in ("cpu", "cuda"):
        drafter = tiny_drafter(draft_vocab_size=16)
        history = train_drafter(drafter, examples, spec, epochs=2, lr=3e-3, warmup=1, runs_per_step=2,
                                ttt_steps=3, device=device, bf16=False)
        runs[device] = drafter, history
    (cpu, cpu_history), (gpu, gpu_history) = runs["cpu"], runs["cuda"]
    assert gpu.embed_weight.device.type == "cuda"
    for a, b in zip(cpu_history, gpu_history):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3)
    for (name, a), b in zip(cpu.state_dict().items(), gpu.state_dict().values()):
        assert torch.allclose(a, b.cpu(), rtol=1e-3, atol=1e-4), name
    frame, feats = predict_example(gpu, examples[0])
    assert feats.device.type == "cpu"
    np.testing.assert_allclose(frame["predicted"], predict_example(cpu, examples[0])[0]["predicted"], rtol=1e-3)


def decodable_example(run_id: int, split: str) -> DrafterExample:
    """A run whose fused states carry log1p(remaining length) in one coordinate, next to a huge,
    nearly constant "massive activation" coordinate and noise, like real target states."""
    gen = torch.Generator().manual_seed(1000 + run_id)
    prompt_len, output_length = 4, int(torch.randint(3, 160, (1,), generator=gen))
    ex = synthetic_example(run_id, prompt_len, output_length)
    t = ex.length
    remaining = (output_length - (torch.arange(t) - prompt_len + 1)).clamp(1, output_length).float()
    hidden = []
    for _ in range(3):
        h = torch.randn(t, D, generator=gen)
        h[:, 0] = 400.0 + 20 * torch.randn(t, generator=gen)
        h[:, 1] = 2 * torch.log1p(remaining) + 0.05 * torch.randn(t, generator=gen)
        hidden.append(h.half())
    return replace(ex, split=split, hidden=hidden)


def test_trained_length_head_beats_a_constant_on_decodable_lengths():
    """The real training loop learns a length signal present in the fused states (held-out runs)."""
    train = [decodable_example(i, "train") for i in range(24)]
    test = [decodable_example(100 + i, "test") for i in range(8)]
    drafter = tiny_drafter()
    train_drafter(drafter, train, VARIANTS["outlets"], epochs=8, lr=1e-3, warmup=2, runs_per_step=4)
    frames = pd.concat([predict_example(drafter, ex)[0] for ex in train + test], ignore_index=True)
    constant = frames.loc[frames["split"] == "train", "true"].mean()
    held_out = frames[frames["split"] == "test"]
    assert mae(held_out["predicted"], held_out["true"]) < 0.6 * mae(np.full(len(held_out), constant), held_out["true"])


def test_metrics_report_the_per_step_constant_train_median_baseline():
    frame = pd.DataFrame({"run_id": [1, 1, 1, 2, 2, 2, 3, 3, 3], "step": [0, 10, 40, 0, 10, 40, 0, 10, 40],
                          "predicted": [10.0, 0, 5.0, 20.0, 0, 5.0, 12.0, 6.0, 1.0],
                          "true": [10, 0, 1, 30, 20, 2, 14, 4, 3],
                          "split": ["train"] * 6 + ["test"] * 3})
    metrics = prediction_metrics(frame)
    assert metrics["static_mae"] == pytest.approx(2.0) and metrics["dynamic_mae"] == pytest.approx(2.0)
    assert metrics["constant_static_mae"] == pytest.approx(6.0)     # train step-0 median 20 vs 14
    # step 10: the train median at step 10 (10) against 4, not one mean pooled over steps 0..32
    assert metrics["constant_dynamic_mae"] == pytest.approx((6.0 + 6.0) / 2)
    assert metrics["static_vs_constant"] == pytest.approx(-4.0)
    assert metrics["eval_split"] == "test" and metrics["n_runs"] == 1 and metrics["n"] == {"train": 2, "test": 1}


def test_sd_only_length_loss_does_not_move_the_backbone():
    drafter = tiny_drafter()
    length_only = replace(VARIANTS["sd-only"], kl_weight=0.0)   # keep only the detached length loss
    before_fuse, before_head = drafter.fuse.weight.clone(), drafter.length_head.mlp[0].weight.clone()
    train_drafter(drafter, [synthetic_example(1)], length_only, epochs=2, lr=1e-2, warmup=1)
    assert torch.equal(before_fuse, drafter.fuse.weight)
    assert not torch.equal(before_head, drafter.length_head.mlp[0].weight)


def test_live_cycle_acceptance_per_position():
    evaluated, accepted = cycle_acceptance([0, 3, 1, 2], k=3)
    assert evaluated.tolist() == [4, 3, 2] and accepted.tolist() == [3, 2, 1]


def make_tiny_dataset(store, target, name: str = "tiny", n: int = 4, max_new_tokens: int = 12) -> None:
    """A few real short generations of the embedded target, collected into dataset ``name``."""
    from lenscope.analysis.data.prompts import PromptItem
    from lenscope.jobs.runs.collect import collect_dataset
    from lenscope.models.engine import GenerationSettings

    prompts = [PromptItem(text, "user", f"t{i}") for i, text in enumerate(PROMPTS[:n])]
    collect_dataset(store, target, name, prompts, GenerationSettings(max_new_tokens=max_new_tokens, seed=1))


def test_cli_end_to_end_on_tiny_store(store, target, monkeypatch, capsys):
    from lenscope import cli
    from lenscope.cli import _common

    assert cli.main(["train-drafter", "--dataset", "nothing"]) == 2
    assert "collect --dataset nothing" in capsys.readouterr().err
    make_tiny_dataset(store, target)
    monkeypatch.setattr(_common, "load_target", lambda args: target)
    assert cli.main(["train-drafter", "--dataset", "tiny", "--epochs", "1", "--max-step", "40",
                     "--include-censored"]) == 0  # tiny answers hit their 8-token cap
    assert "registered drafter:tiny:outlets" in capsys.readouterr().out
    row = store.predictors_frame("drafter").iloc[0]
    assert row["config"]["fuse_layers"] == [2, 15, 27]
    preds = store.predictions_frame(int(row["predictor_id"]))
    runs = store.runs_frame("tiny")
    assert set(preds["run_id"]) == set(runs["run_id"])
    assert (preds.groupby("run_id")["step"].min() == 0).all()
    first = preds[preds["step"] == 0].set_index("run_id")["true"]
    assert (first == runs.set_index("run_id")["output_tokens"].loc[first.index]).all()
    assert "acceptance" not in row["metrics"]  # acceptance is measured live, by the target (speculative job)
    loaded = Drafter.load_for_target(row["artifact_path"], target)
    assert loaded.config.gated_attention and loaded.config.hidden_size == target.hidden_size

    assert cli.main(["train-probe", "--dataset", "tiny", "--layer", "15", "--epochs", "3"]) == 0
    probe_row = store.predictors_frame("probe").iloc[0]
    assert probe_row["name"] == "probe:tiny:L15:regression"
    assert not store.predictions_frame(int(probe_row["predictor_id"])).empty
    assert cli.main(["train-probe", "--dataset", "tiny", "--layer", "3", "--epochs", "1"]) == 2

    # the UMAP job (umap-learn swapped for a projection: its JIT warm-up alone takes ~40 s)
    import sys
    from types import SimpleNamespace

    from lenscope.jobs.drafter.training import UMAP_KIND, representation_umap_job, umap_config

    class FirstTwoColumns:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

        def fit_transform(self, data):
            return data[:, :2]

    monkeypatch.setitem(sys.modules, "umap", SimpleNamespace(UMAP=FirstTwoColumns))
    pid = int(row["predictor_id"])
    payload = representation_umap_job(store, target, pid, layer=15, n_points=20)
    assert len(payload["drafter"]) == len(payload["target"]) == len(payload["remaining"]) <= 20
    assert min(payload["remaining"]) >= 1 and payload["layer"] == 15
    assert store.get_result(UMAP_KIND, umap_config(pid, 15, 20)) == payload

    # a second variant reads the target's top-k from the store: no full-vocabulary LM head again
    monkeypatch.setattr(target, "next_token_logits", lambda *a: pytest.fail("the target top-k was recomputed"))
    assert cli.main(["train-drafter", "--dataset", "tiny", "--variant", "sd-only", "--epochs", "1",
                     "--max-step", "40", "--include-censored"]) == 0


def test_compare_predictors_pairs_the_same_test_runs_and_steps(store):
    from lenscope.jobs.results.leaderboard import compare_predictors
    from lenscope.store.store import NewRun
    from tests.fakes import fake_generation, fake_target

    run_ids = store.save_runs(fake_target(), [NewRun(f"prompt {i}", fake_generation(4, 6, seed=i)) for i in range(6)])
    rows = pd.DataFrame([{"run_id": r, "step": s, "true": 6.0 - s, "split": "test" if k < 4 else "train"}
                         for k, r in enumerate(run_ids) for s in range(3)])
    good = store.save_predictor("good", "drafter", {}, {})
    bad = store.save_predictor("bad", "probe", {}, {})
    store.save_predictions(good, rows.assign(predicted=rows["true"] + 1))
    store.save_predictions(bad, rows.assign(predicted=rows["true"] + 3))
    static, dynamic = compare_predictors(store, good, bad, max_step=2)
    assert (static["steps"], dynamic["steps"]) == ("0", "0-2")
    assert static["difference"] == pytest.approx(-2.0) and static["runs"] == static["prompts"] == 4  # no train run
    assert dynamic["hi"] == pytest.approx(-2.0) and dynamic["lo"] == pytest.approx(-2.0)


def test_live_drafting_cli_on_tiny_store(store, target, monkeypatch, capsys):
    from lenscope import cli
    from lenscope.cli import _common
    from lenscope.jobs.drafter.live import SPECULATIVE_KIND, speculative_config, speculative_job
    from lenscope.jobs.drafter.training import drafter_settings
    from lenscope.jobs.runs.datasets import predictor_fresh

    make_tiny_dataset(store, target)
    monkeypatch.setattr(_common, "load_target", lambda args: target)
    assert cli.main(["speculative", "--dataset", "tiny"]) == 2          # no drafter yet
    for variant in ("outlets", "sd-only"):
        assert cli.main(["train-drafter", "--dataset", "tiny", "--variant", variant, "--epochs", "1",
                         "--max-step", "40", "--include-censored", "--ttt-steps", "2", "--draft-vocab", "512"]) == 0
    config = store.predictors_frame("drafter").iloc[0]["config"]
    assert config["ttt_steps"] == 2 and config["draft_vocab_size"] == 512
    # a drafter trained with other TTT settings than the study's is stale
    assert predictor_fresh(store, "drafter:tiny:outlets", "tiny", True, {"ttt_steps": 2, "draft_vocab_size": 512})
    assert not predictor_fresh(store, "drafter:tiny:outlets", "tiny", True, drafter_settings(target))
    assert drafter_settings(target) == {"ttt_steps": 3, "draft_vocab_size": 4096}      # CPU default

    capsys.readouterr()
    assert cli.main(["speculative", "--dataset", "tiny", "--prompts", "2", "--max-new-tokens", "6",
                     "--draft-steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "outlets: acceptance per position" in out and "outlets - sd-only" in out
    payload = store.get_result(SPECULATIVE_KIND, speculative_config(store, "tiny", 2, 6, 3, 0.0, 0))
    for variant in ("outlets", "sd-only"):
        d = payload["drafters"][variant]
        assert d["identical_to_plain"] == d["prompts"] == 2          # greedy: lossless on the real model
        assert len(d["acceptance"]) == 3 and d["tau"]["value"] >= 1.0 and d["speedup"]["value"] > 0
    assert len(payload["difference"]["acceptance"]) == 3
    curves = pd.DataFrame(payload["curves"])
    assert {"step", "drafter", "true"} <= set(curves.columns) and (curves["true"] >= 1).all()
    monkeypatch.setattr("lenscope.jobs.drafter.live.plain_decode", lambda *a: pytest.fail("not memoised"))
    assert speculative_job(store, target, "tiny", 2, 6, 3) == payload

    from lenscope.figures.drafter import remaining_curves_figure
    from lenscope.jobs.drafter.live import answer_ended, live_generation, remaining_curve

    pid = int(store.predictors_frame().set_index("name").loc["drafter:tiny:outlets", "predictor_id"])
    cycles = list(live_generation(store, target, pid, "Say hi.", max_new_tokens=6, k=3))
    assert cycles[0].step == -1 and all(c.length is not None and len(c.drafts) == 3 for c in cycles[1:])
    total = sum(c.new_tokens for c in cycles)
    assert total <= 6 and all(c.new_tokens <= len(c.accepted) + 1 for c in cycles[1:])
    curve = remaining_curve(cycles)
    assert curve["true"].tolist() == [total - s for s in curve["step"]] and len(curve) == len(cycles) - 1
    ends = [c.ends for c in cycles]                                   # a stop token ends the answer, once, last
    assert not any(ends[:-1]) and (ends[-1] or total == 6) and answer_ended(cycles) == ends[-1]
    truth = remaining_curves_figure(curve, censored=not ends[-1]).data[0].name
    assert ("censored" in truth) != ends[-1]


def test_epoch_batches_cover_every_run_once_with_little_padding():
    from lenscope.analysis.drafter.training import epoch_batches

    lengths = [int(x) for x in torch.randint(20, 1200, (203,), generator=torch.Generator().manual_seed(3))]

    def padded(batches):
        return sum(max(lengths[i] for i in b) * len(b) for b in batches) / sum(lengths)

    windowed = epoch_batches(lengths, 4, 64, torch.Generator().manual_seed(0))
    plain = epoch_batches(lengths, 4, 0, torch.Generator().manual_seed(0))
    for batches in (windowed, plain):
        assert sorted(i for b in batches for i in b) == list(range(203))
        assert [len(b) for b in batches].count(4) == 50
    assert padded(windowed) < 1.2 < 1.4 < padded(plain)
    again = epoch_batches(lengths, 4, 64, torch.Generator().manual_seed(0))
    assert again == windowed != epoch_batches(lengths, 4, 64, torch.Generator().manual_seed(1))


def test_bfloat16_autocast_only_where_the_cpu_multiplies_it_natively(tmp_path, monkeypatch):
    from lenscope.analysis.drafter import training

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni\nbugs\t\t: spectre_v1\n"
                    "processor\t: 1\nflags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni\n")
    assert training.cpu_flags(str(info)) == {"fpu", "sse2", "avx2", "avx512f", "avx512bw", "avx512_vnni"}
    assert training.cpu_flags(str(tmp_path / "none")) == frozenset()
    for flags, native in [({"avx512f", "avx512bw"}, False), ({"avx512f", "avx512_bf16"}, True),
                          ({"amx_bf16", "amx_tile"}, True), (frozenset(), False)]:
        monkeypatch.setattr(training, "cpu_flags", lambda flags=flags: frozenset(flags))
        assert training.bf16_native("cpu") is native  # plain AVX-512 emulates bfloat16: slower than float32
        assert training.bf16_native("cuda")
        with training.mixed_precision("cpu", enabled=True):
            assert torch.is_autocast_enabled("cpu") is native
