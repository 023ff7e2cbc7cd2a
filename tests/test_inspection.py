"""Memory inspection: per-token surprise, loss, gates and clip of every Titans memory."""

from __future__ import annotations

import json

import pytest
import torch

import titans_seq as ts
from titans_seq.ops.lmm import lmm_memory
from titans_seq.ops.lmm.reference import _inner_gradients
from titans_seq.ops.lmm.trace import lmm_memory_trace

SMALL = {"lmm": {}, "mag": dict(window=6), "mal": dict(window=6), "mac": dict(segment_size=6)}


@pytest.mark.parametrize("name", list(SMALL))
def test_recording_changes_nothing_and_covers_every_token(name):
    torch.manual_seed(0)
    mixer = ts.build_mixer(name, dim=16, heads=2, chunk_size=4, **SMALL[name])
    x = torch.randn(2, 23, 16)
    y_plain, _ = mixer(x)
    with ts.record_memory(mixer):
        y_recorded, _ = mixer(x)
    torch.testing.assert_close(y_recorded, y_plain, rtol=0, atol=0)
    with ts.record_memory(mixer) as recording:
        y, state = mixer(x[:, :10])  # a stream in two calls: one record
        y2, _ = mixer(x[:, 10:], state)
        mixer(x[:1, :5])  # a new stream: a second record
    torch.testing.assert_close(torch.cat([y, y2], 1), y_plain, rtol=1e-5, atol=1e-6)
    assert [r.name for r in recording.traces] == ["memory", "memory"]
    trace = recording.traces[0].trace
    assert trace.surprise.shape == (2, 23, 2)  # persistent tokens are left out
    assert recording.traces[1].trace.surprise.shape == (1, 5, 2)
    assert torch.isfinite(trace.surprise).all() and (trace.surprise > 0).all()
    assert 0 <= recording.clip_active() <= 1
    summary = recording.summary()["memory"]
    assert summary["tokens"] == 2 * 23 + 5
    assert summary["clip_active"] == pytest.approx(recording.clip_active())
    assert mixer.memory.recorder is None  # detached after the block


def test_trace_matches_autograd_inner_gradients_and_the_clip():
    """surprise_t = ||grad_W ||f_W(k_t) - v_t||^2|| at the chunk-entry weights, by autograd."""
    torch.manual_seed(0)
    B, T, H, d, C = 1, 11, 2, 4, 4
    q, k = (torch.nn.functional.normalize(torch.randn(B, T, H, d), dim=-1) for _ in range(2))
    v = torch.randn(B, T, H, d)
    theta, eta, alpha = torch.rand(B, T, H) * 0.2, torch.rand(B, T, H), torch.rand(B, T, H) * 0.1
    weights = (torch.randn(H, 6, d) / 2, torch.randn(H, d, 6) / 2)
    clip = 1.5
    trace = lmm_memory_trace(
        q, k, v, theta, eta, alpha, weights, chunk_size=C, inner_grad_clip=clip
    )
    # the weights entering each chunk, from the op itself (streamed chunk by chunk)
    state, entry = None, []
    for start in range(0, T, C):
        entry.append(weights if state is None else state.weights)
        _, state = lmm_memory(
            *(x[:, start : start + C] for x in (q, k, v, theta, eta, alpha)),
            weights,
            chunk_size=C,
            initial_state=state,
            output_final_state=True,
            inner_grad_clip=clip,
        )
    for t in range(T):
        w = entry[t // C]
        w = tuple(x if x.dim() == 4 else x.unsqueeze(0) for x in w)
        grads = _inner_gradients(w, k[:, t], v[:, t], "silu")
        norm = torch.sqrt(sum(g.pow(2).sum((-2, -1)) for g in grads))  # [B, H]
        torch.testing.assert_close(trace.surprise[:, t], norm, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(trace.clip_factor[:, t], (clip / norm).clamp(max=1))
    torch.testing.assert_close(trace.step, theta * trace.clip_factor * trace.surprise)


def test_models_without_a_memory_and_plots(tmp_path):
    with pytest.raises(ValueError, match="no Titans memory"):
        with ts.record_memory(ts.build_mixer("attention", dim=16, heads=2)):
            pass
    backbone = ts.Backbone(dim=16, depth=2, mixer="mag", heads=2, mixer_options={"window": 4})
    with ts.record_memory(backbone) as recording:
        backbone(torch.randn(2, 12, 16))
    assert recording.names() == ["blocks.0.mixer.memory", "blocks.1.mixer.memory"]
    path = ts.plot_memory_trace(recording, tmp_path / "trace.png", example=1)
    assert path.read_bytes()[:4] == b"\x89PNG"
    one = ts.plot_memory_trace(recording.traces[0].trace, tmp_path / "heads.png")
    assert one.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="example=5"):
        ts.plot_memory_trace(recording, tmp_path / "x.png", example=5)


def test_inspect_memory_command(tmp_path, capsys):
    from titans_seq.cli import main
    from titans_seq.training import load_config, train

    cfg = load_config(
        "synthetic/tiny",
        {
            "train.out_dir": str(tmp_path / "run"),
            "train.max_steps": 4,
            "train.progress": False,
            "train.plot": False,
            "train.tensorboard": False,
            "eval.every": 2,
        },
    )
    train(cfg)
    out = tmp_path / "trace.png"
    code = main(
        [
            "inspect-memory",
            str(tmp_path / "run"),
            "--out",
            str(out),
            "--json",
            str(tmp_path / "s.json"),
        ]
    )
    assert code == 0 and out.read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary and all(0 <= s["clip_active"] <= 1 for s in summary.values())
    assert main(["inspect-memory", str(tmp_path / "nothing")]) == 2
    assert "not a training run folder" in capsys.readouterr().err
