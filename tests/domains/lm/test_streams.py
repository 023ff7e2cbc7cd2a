"""Training with the state carried (`streams:`): segments with the state passed along equal
one call on the whole stream, truncation cuts exactly the gradients it should, streams
never cross a document, a resumed run continues its streams bit for bit, and two processes
read disjoint streams that add up to the one-process run."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml
from process_helpers import subprocess_env, torchrun_train

from titans_seq.domains.lm import TitansLM
from titans_seq.domains.lm.data import DocumentSpans, RandomStreams, TokenSplit
from titans_seq.domains.lm.tasks.streaming import segment_nats
from titans_seq.training import from_dict, load_config, train
from titans_seq.training.checkpoint import (
    CheckpointError,
    decode_state,
    encode_state,
    load_checkpoint,
)
from titans_seq.training.config import ConfigError
from titans_seq.training.logs import read_csv
from titans_seq.training.schema import StreamsConfig
from titans_seq.training.streams import (
    IGNORE_INDEX,
    StreamTraining,
    detach_state,
    passes_state,
    segment_count,
    split_segments,
)
from titans_seq.training.tasks import get_task

MIXER_OPTIONS = {
    "lmm": {"num_persistent": 2, "memory": {"chunk_size": 4}},
    "mag": {"window": 6, "num_persistent": 2, "memory": {"chunk_size": 4}},
    "mal": {"window": 6, "num_persistent": 2, "memory": {"chunk_size": 4}},
    "mac": {"segment_size": 8, "num_persistent": 2, "memory": {"chunk_size": 4}},
    "swa": {"window": 6},
    "attention": {},
}


def _model(mixer: str) -> TitansLM:
    torch.manual_seed(0)
    model = TitansLM(256, dim=16, depth=2, heads=2, mixer=mixer, mixer_options=MIXER_OPTIONS[mixer])
    return model.double()


def _stream_batch(B: int = 2, L: int = 37) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    inputs = torch.randint(0, 256, (B, L), generator=g)
    targets = torch.randint(0, 256, (B, L), generator=g)
    targets[-1, L - 9 :] = IGNORE_INDEX  # the last stream's document ends early
    return {"inputs": inputs, "targets": targets}


def _grads(model) -> dict[str, torch.Tensor]:
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def _run_streams(model, batch, segment_length, bptt=None):
    streams = StreamTraining(StreamsConfig(segments=2, bptt=bptt), segment_length, seed=0)
    loss, state = streams.run(
        get_task("lm"), model, batch, None, lambda loss: loss.backward(), contextlib.nullcontext
    )
    return loss, state, _grads(model)


@pytest.mark.parametrize("mixer", list(MIXER_OPTIONS))
def test_segments_with_the_state_carried_equal_one_call(mixer):
    # 37 tokens in segments of 8: not a multiple of the segment, nor of the memory's chunk
    model, batch = _model(mixer), _stream_batch()
    logits, _ = model(batch["inputs"])
    targets = batch["targets"].flatten()
    scored = int((targets != IGNORE_INDEX).sum())
    whole = F.cross_entropy(logits.flatten(0, 1), targets, reduction="sum") / scored
    whole.backward()
    want = _grads(model)
    for length in (8, 37, 50):  # several segments, one segment, a segment longer than L
        loss, state, got = _run_streams(model, batch, length)
        assert float(loss) == pytest.approx(float(whole.detach()), rel=1e-10)
        assert set(got) == set(want)
        for name, grad in want.items():
            torch.testing.assert_close(got[name], grad, rtol=1e-7, atol=1e-10, msg=name)
        assert all(not t.requires_grad for t in _tensors(state))


def _tensors(state):
    from titans_seq.mixers.state import iter_tensors

    return list(iter_tensors(state))


@pytest.mark.parametrize("mixer", ["lmm", "mag"])
def test_truncation_cuts_the_gradient_between_blocks_of_segments(mixer):
    model, batch = _model(mixer), _stream_batch(L=40)
    scored = int((batch["targets"] != IGNORE_INDEX).sum())
    # the same truncation written as one graph: the state entering segments 2 and 4 of
    # four is detached, so each pair of segments is back-propagated alone
    state, total = None, 0.0
    for i, segment in enumerate(split_segments(batch, 10)):
        if i % 2 == 0 and state is not None:
            state = detach_state(state)
        nats, state = segment_nats(model, segment, state)
        total = total + nats
    (total / scored).backward()
    want = _grads(model)
    loss, _, got = _run_streams(model, batch, 10, bptt=2)
    assert float(loss) == pytest.approx(float(total.detach()) / scored, rel=1e-10)
    for name, grad in want.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-7, atol=1e-10, msg=name)
    # and it is a truncation: the memory's gradients differ from full back-propagation
    _, _, full = _run_streams(model, batch, 10)
    assert any(not torch.allclose(full[n], want[n]) for n in want if "memory" in n)


def test_streams_are_causal_through_the_carried_state():
    model, batch = _model("lmm"), _stream_batch(B=2, L=24)
    changed = {k: v.clone() for k, v in batch.items()}
    changed["inputs"][0, 12] = (changed["inputs"][0, 12] + 1) % 256  # in segment 1 of 3
    losses = []
    for b in (batch, changed):
        state, per_segment = None, []
        with torch.no_grad():
            for segment in split_segments(b, 8):
                nats, state = segment_nats(model, segment, state)
                per_segment.append(float(nats))
        losses.append(per_segment)
    assert losses[0][0] == losses[1][0]  # the segment before sees nothing of it
    assert losses[0][1] != losses[1][1] and losses[0][2] != losses[1][2]  # carried on


def _split(documents: list[list[int]]) -> TokenSplit:
    tokens = np.concatenate([np.asarray(d, dtype=np.int64) for d in documents])
    starts = np.cumsum([len(d) for d in documents])[:-1]
    return TokenSplit([tokens], int(tokens.size), [starts.astype(np.int64)])


def test_document_spans_never_cross_a_document_and_cover_every_prediction():
    lengths = [1, 5, 23, 8, 9, 40]
    documents = [[100 + d] * n for d, n in enumerate(lengths)]  # each document its own token
    spans = DocumentSpans(_split(documents), span=8)
    batch = spans.stream_batch(range(len(spans)), 8)
    scored = batch["targets"] != IGNORE_INDEX
    # every prediction inside a document, once: n - 1 per document of n tokens
    assert int(scored.sum()) == sum(n - 1 for n in lengths)
    for row in range(len(spans)):
        tokens = set(batch["inputs"][row][scored[row]].tolist())
        tokens |= set(batch["targets"][row][scored[row]].tolist())
        assert len(tokens) == 1  # a stream reads one document only
    assert spans.example_lengths().tolist() == scored.sum(1).tolist()
    # a shorter stream reads the first predictions of the same spans
    short = spans.stream_batch([2], 3)
    assert short["inputs"].shape == (1, 3) and bool((short["targets"] != IGNORE_INDEX).all())
    with pytest.raises(ValueError, match="no document of two or more tokens"):
        DocumentSpans(_split([[1], [2]]), span=4)
    with pytest.raises(IndexError, match="span index out of range"):
        spans.stream_batch([len(spans)], 8)


def test_random_streams_start_anywhere_but_never_cross_a_document():
    lengths = [1, 5, 23, 8, 9, 40]
    documents = [[100 + d] * n for d, n in enumerate(lengths)]
    streams = RandomStreams(_split(documents), span=8, seed=3)
    assert len(streams) == sum(lengths) - 1  # every position but the last, once an epoch
    batch = streams.stream_batch(range(len(streams)), 8)
    scored = batch["targets"] != IGNORE_INDEX
    for row in range(len(streams)):
        inside = batch["inputs"][row][scored[row]].tolist()
        follows = batch["targets"][row][scored[row]].tolist()
        if len(set(inside + follows)) > 1:  # only a document's last token reads on
            assert len(inside) == 1 and follows[0] == inside[0] + 1
    assert streams.example_lengths().tolist() == scored.sum(1).tolist()
    begins = streams.bounds(range(len(streams)))[1]
    assert sorted(begins.tolist()) == list(range(sum(lengths) - 1))  # each start once
    again = RandomStreams(_split(documents), span=8, seed=3).stream_batch([4, 17], 8)
    assert all(torch.equal(again[k], streams.stream_batch([4, 17], 8)[k]) for k in again)
    # many more positions than `max_positions`: strided, one start in each stride
    strided = RandomStreams(_split(documents), span=8, seed=3, max_positions=10)
    assert (len(strided), strided.stride) == (10, 9)  # 85 positions in strides of 9


def test_draws_follow_the_curriculum_and_are_functions_of_seed_and_step():
    cfg = StreamsConfig(curriculum=[[0, 1], [10, 2], [20, 4]])
    assert [segment_count(cfg, s, 0) for s in (0, 9, 10, 19, 20, 500)] == [1, 1, 2, 2, 4, 4]
    drawn = StreamsConfig(curriculum=[[0, 2], [5, 8]], random_segments=True)
    counts = [segment_count(drawn, s, 3) for s in range(5, 400)]
    assert set(counts) == set(range(1, 9))
    assert counts == [segment_count(drawn, s, 3) for s in range(5, 400)]
    passing = StreamsConfig(state_passing=0.25)
    share = np.mean([passes_state(passing, s, 1) for s in range(2000)])
    assert 0.2 < share < 0.3
    assert not any(passes_state(StreamsConfig(), s, 1) for s in range(100))


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    """A folder of 12 text documents of 60-400 bytes (each file one document)."""
    folder = tmp_path_factory.mktemp("documents")
    rng = np.random.default_rng(0)
    words = "the memory holds a key and a value until the question comes back".split()
    for i in range(12):
        text = " ".join(rng.choice(words, size=int(rng.integers(12, 80))))
        (folder / f"doc{i:02d}.txt").write_text(text)
    val = tmp_path_factory.mktemp("val") / "val.txt"
    val.write_text(" ".join(words * 20))
    return folder, val


def _lm_model(depth: int) -> dict:
    return {
        "dim": 16,
        "depth": depth,
        "heads": 2,
        "mixer": "lmm",
        "mixer_options": MIXER_OPTIONS["lmm"],
    }


def _raw(out_dir, documents, **streams):
    folder, val = documents
    return {
        "name": "streams_test",
        "task": "lm",
        "model": _lm_model(depth=2),
        "data": {"train": str(folder), "val": str(val), "seq_len": 16},
        "optim": {"lr": 3.0e-3, "warmup_steps": 2},
        "train": {
            "max_steps": 8,
            "batch_size": 4,
            "log_every": 2,
            "checkpoint_every": 4,
            "threads": 1,
            "out_dir": str(out_dir),
            "progress": False,
            "plot": False,
            "tensorboard": False,
        },
        "eval": {"every": 4, "batch_size": 4, "max_batches": 2},
        "streams": {"segments": 3, "bptt": 2, "state_passing": 0.5, **streams},
    }


def test_a_resumed_run_continues_its_streams_bit_for_bit(tmp_path, documents):
    reference = train(from_dict(_raw(tmp_path / "straight", documents)), quiet=True)
    middle = reference.run_dir / "checkpoints" / "step_00000004"
    (passed,) = load_checkpoint(middle).training_state["streams"]  # one process
    assert passed["passed"], "the checkpoint holds the streams' states"
    # a second run takes over from the middle checkpoint and runs the last 4 steps
    train(from_dict(_raw(tmp_path / "resumed", documents)), resume=middle, quiet=True)
    got = load_checkpoint(tmp_path / "resumed" / "checkpoints" / "step_00000008")
    want = load_checkpoint(reference.run_dir / "checkpoints" / "step_00000008")
    for key, value in want.model_state.items():
        assert torch.equal(got.model_state[key], value), key
    passed = [_tensors(run.training_state["streams"]) for run in (got, want)]
    for a, b in zip(*passed, strict=True):
        assert torch.equal(a, b)
    columns = ("step", "loss", "grad_norm")
    rows = [read_csv(run / "train_log.csv") for run in (tmp_path / "resumed", reference.run_dir)]
    resumed = [[r[c] for c in columns] for r in rows[0]]
    assert resumed == [[r[c] for c in columns] for r in rows[1] if r["step"] > 4]
    # without the passed states the continuation differs: they matter to the result
    streams_free = _raw(tmp_path / "fresh_streams", documents)
    cfg = from_dict(streams_free)
    fresh = _continue_without_passed_states(cfg, middle)
    assert any(not torch.equal(fresh[k], v) for k, v in want.model_state.items())


def _continue_without_passed_states(cfg, checkpoint):
    from titans_seq.training.loop import Trainer

    trainer = Trainer(cfg, quiet=True)
    try:
        trainer.setup(checkpoint)
        trainer.streams.passed.clear()
        trainer.fit()
        return {k: v.detach().clone() for k, v in trainer.raw_model.state_dict().items()}
    finally:
        trainer.close()


def test_mixer_states_round_trip_through_checkpoint_encoding():
    model = _model("mag").float()
    _, state = model(torch.randint(0, 256, (2, 11)))
    tensors: dict[str, torch.Tensor] = {}
    decoded = decode_state(encode_state(state, tensors), tensors)
    assert [type(s) for s in decoded] == [type(s) for s in state]
    assert decoded[0].position == state[0].position == 11 + 0
    for a, b in zip(_tensors(decoded), _tensors(state), strict=True):
        assert torch.equal(a, b)
    # streaming on from the decoded state equals streaming on from the original
    more = torch.randint(0, 256, (2, 5))
    torch.testing.assert_close(model(more, decoded)[0], model(more, state)[0], rtol=0, atol=0)
    with pytest.raises(CheckpointError, match="unknown class"):
        decode_state({"__dataclass__": "os:system", "fields": {}}, {})
    with pytest.raises(CheckpointError, match="not a state class"):
        decode_state({"__dataclass__": "titans_seq.mixers.lmm:LMMMixer", "fields": {}}, {})


@pytest.mark.parametrize(
    ("streams", "message"),
    [
        ({"bptt": 0}, "streams.bptt must be an integer >= 1"),
        ({"segments": 0}, "streams.segments must be an integer >= 1"),
        ({"curriculum": [[0, 4], [100, 2]]}, "streams.curriculum must grow"),
        ({"curriculum": [[0, 2], [0, 4]]}, "streams.curriculum must grow"),
        ({"curriculum": [[10, 2]]}, "must start at step 0"),
        ({"curriculum": [[0, 2, 3]]}, r"streams.curriculum\[0\] must be a \[from_step, segments\]"),
        ({"state_passing": 1.5}, "streams.state_passing must be in"),
        ({"segments": 1, "random_segments": True, "state_passing": 0.5}, "random_segments"),
        ({"segment_length": -3}, "streams.segment_length must be an integer >= 1"),
    ],
)
def test_bad_stream_settings_are_refused_by_name(tmp_path, documents, streams, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(_raw(tmp_path, documents, **streams))


def test_streams_are_refused_where_nothing_is_carried(tmp_path, documents):
    with pytest.raises(ConfigError, match="'associative_recall' does not train with carried"):
        load_config("synthetic/tiny", ["streams.segments=2"])
    raw = _raw(tmp_path, documents)
    raw["train"]["distributed"] = "fsdp"
    with pytest.raises(ConfigError, match="FSDP is not supported"):
        from_dict(raw)


def test_passkey_and_suite_tasks_train_on_streams(tmp_path):
    common = {
        "model": _lm_model(depth=1),
        "optim": {"lr": 3.0e-3, "warmup_steps": 1},
        "train": {"max_steps": 2, "batch_size": 2, "progress": False, "plot": False},
        "eval": {"every": 2, "batch_size": 2, "max_batches": 1},
        "streams": {"curriculum": [[0, 1], [1, 3]], "segment_length": 128},
    }
    for task, data in (
        ("lm_passkey", {"train_length": 128, "num_val": 4}),
        ("lm_suite", {"train_length": 128, "num_val": 4, "tasks": ["niah_passkey"]}),
    ):
        raw = {"name": task, "task": task, "data": data, **common}
        raw["train"] = {**common["train"], "out_dir": str(tmp_path / task)}
        cfg = from_dict(raw)
        batch = get_task(task).stream_batch(get_task(task).build_datasets(cfg)[0], [0, 1], 384)
        assert batch["inputs"].shape == (2, 384)
        scored = batch["targets"] != IGNORE_INDEX
        assert bool(scored[:, :-8].sum() == 0) and bool(scored.any())  # the answer at the end
        result = train(cfg, quiet=True)
        assert result.step == 2


def test_two_processes_read_disjoint_streams_that_add_up_to_one_process(tmp_path, documents):
    one = _raw(tmp_path / "one", documents)
    one["train"].update(max_steps=4, grad_accum=2)
    reference = train(from_dict(one), quiet=True)
    two = _raw(tmp_path / "two", documents)
    two["train"].update(max_steps=4, grad_accum=1)
    recipe = tmp_path / "two.yaml"
    recipe.write_text(yaml.safe_dump(two, sort_keys=False))
    done = torchrun_train(2, str(recipe), env=subprocess_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = read_csv(tmp_path / "two" / "train_log.csv")
    want = read_csv(reference.run_dir / "train_log.csv")
    for g, w in zip(got, want, strict=True):
        assert g["loss"] == pytest.approx(w["loss"], rel=1e-5)
    a = load_checkpoint(tmp_path / "two" / "checkpoints" / "step_00000004")
    b = load_checkpoint(reference.run_dir / "checkpoints" / "step_00000004")
    for key, value in b.model_state.items():
        torch.testing.assert_close(a.model_state[key], value, rtol=1e-4, atol=1e-6)
    # each process carried its own streams: rank r holds the states of micro-batch slot r
    ranks = a.training_state["streams"]
    assert len(ranks) == 2 and all(set(r["passed"]) <= {"0"} for r in ranks)
