"""Long-document evaluation: the windowed, state-carrying loss equals one pass over each
document; the reset mode equals independent windows; buckets and the CLI."""

import json

import pytest
import torch
import torch.nn.functional as F

from titans_seq.cli import main
from titans_seq.domains.lm import TitansLM
from titans_seq.domains.lm.evals.long_documents import evaluate_long_documents, position_buckets


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    lm = TitansLM(40, dim=16, depth=2, heads=2, mixer="lmm,swa",
                  mixer_options={"lmm": {"chunk_size": 4}, "swa": {"window": 6}})  # fmt: skip
    return lm.double().eval()


def per_position_nats(model, document, window=None):
    """Reference: nats of every prediction, from one forward pass (or independent windows)."""
    inputs, targets = document[:-1], document[1:]
    step = window or inputs.numel()
    out = []
    for a in range(0, inputs.numel(), step):
        logits, _ = model(inputs[None, a : a + step])
        out.append(F.cross_entropy(logits[0], targets[a : a + step], reduction="none"))
    return torch.cat(out)


def test_position_buckets():
    assert position_buckets(1000) == [0, 128, 256, 512, 1000]
    assert position_buckets(100) == [0, 100]
    assert position_buckets(256) == [0, 128, 256]


@pytest.mark.parametrize("carry", [True, False])
def test_windows_equal_the_reference(model, carry):
    g = torch.Generator().manual_seed(1)
    documents = [torch.randint(0, 40, (n,), generator=g) for n in (23, 2, 40)]
    edges = [0, 5, 10, 20, 39]
    result = evaluate_long_documents(model, documents, window=7, carry_state=carry, edges=edges)
    nats = torch.zeros(4, dtype=torch.float64)
    counts = torch.zeros(4, dtype=torch.long)
    for d in documents:
        per = per_position_nats(model, d, None if carry else 7)
        for p, value in enumerate(per.tolist()):
            k = sum(p >= e for e in edges[1:-1])
            nats[k] += value
            counts[k] += 1
    assert result.tokens == counts.tolist() and result.documents == 3
    torch.testing.assert_close(
        torch.tensor(result.nats, dtype=torch.float64), nats, rtol=1e-9, atol=1e-9
    )
    assert result.bpb == pytest.approx(sum(result.nats) / 0.6931471805599453 / sum(counts))


def test_bad_arguments(model):
    with pytest.raises(ValueError, match="at least 2 tokens"):
        evaluate_long_documents(model, [torch.tensor([3])])
    with pytest.raises(ValueError, match="window"):
        evaluate_long_documents(model, [torch.arange(5)], window=0)
    with pytest.raises(ValueError, match="edges"):
        evaluate_long_documents(model, [torch.arange(9)], edges=[0, 4])


def test_cli_writes_table_json_and_plot(tmp_path, capsys):
    torch.manual_seed(0)
    lm = TitansLM(256, dim=16, depth=1, heads=2, mixer="lmm", mixer_options={"chunk_size": 4})
    lm.save(tmp_path / "model", tokenizer="byte")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("the quick brown fox " * 20)
    (docs / "b.txt").write_text("jumps over")
    code = main(["evaluate-lm", "--model", str(tmp_path / "model"), "--data", str(docs),
                 "--window", "128", "--compare-reset", "--out", str(tmp_path / "out"),
                 "--quiet", "--device", "cpu"])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "2 documents of 10-400 tokens" in out and "loss, carried 128" in out
    payload = json.loads((tmp_path / "out" / "long_eval.json").read_text())
    carried, reset = payload["results"]
    assert carried["tokens"] == reset["tokens"] == 399 + 9
    assert carried["bytes"] == 410
    # the first window of every document is the same in both modes
    assert carried["buckets"][0]["loss"] == pytest.approx(reset["buckets"][0]["loss"])
    assert (tmp_path / "out" / "long_eval.png").stat().st_size > 1000
