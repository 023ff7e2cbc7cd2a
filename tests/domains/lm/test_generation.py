"""Generation: streaming greedy vs full recomputation, filters, sampling, state size, errors."""

import math

import pytest
import torch

from titans_seq.domains.lm import TitansLM
from titans_seq.domains.lm.generation import (
    generate,
    next_token,
    stream,
    top_k_filter,
    top_p_filter,
)

OPTIONS = {
    "lmm": {"chunk_size": 4, "num_persistent": 2},
    "mag": {"chunk_size": 4, "window": 5, "num_persistent": 2},
    "mal": {"chunk_size": 4, "window": 5, "num_persistent": 2},
    "mac": {"chunk_size": 4, "segment_size": 6, "num_memory_tokens": 2, "num_persistent": 2},
    "attention": {},
    "swa": {"window": 5},
}


def tiny(mixer):
    return TitansLM.from_preset("tiny", mixer=mixer, mixer_options=OPTIONS[mixer]).double()


def greedy_by_recomputation(model, prompt, n):
    """The slow obvious reference: re-run the whole sequence for every new token."""
    tokens = prompt.clone()
    for _ in range(n):
        logits, _ = model(tokens)
        tokens = torch.cat((tokens, logits[:, -1].argmax(-1, keepdim=True)), dim=1)
    return tokens


@pytest.mark.parametrize("mixer", list(OPTIONS))
def test_greedy_streaming_equals_recomputation(mixer):
    model = tiny(mixer)
    prompt = torch.randint(0, 256, (2, 5))
    out = model.generate(prompt, 9, temperature=0)
    assert out.shape == (2, 14) and torch.equal(out[:, :5], prompt)
    assert torch.equal(out, greedy_by_recomputation(model, prompt, 9))


def test_prompt_forms():
    model = tiny("lmm")
    one = model.generate(torch.tensor([3, 1, 4]), 4, temperature=0)
    assert one.shape == (7,) and one.dtype == torch.long
    assert torch.equal(one, model.generate([[3, 1, 4]], 4, temperature=0)[0])
    assert torch.equal(model.generate([3, 1, 4], 0), torch.tensor([3, 1, 4]))


def test_top_k_keeps_the_k_largest():
    logits = torch.tensor([[0.1, 3.0, 2.0, -1.0, 5.0]])
    kept = torch.isfinite(top_k_filter(logits, 2))[0].nonzero().flatten().tolist()
    assert kept == [1, 4]
    assert torch.equal(top_k_filter(logits, 5), logits)
    assert torch.equal(top_k_filter(logits, 50), logits)
    random = torch.randn(7, 40)
    for k in (1, 3, 39):
        filtered = top_k_filter(random, k)
        for row, out in zip(random, filtered):
            expected = set(row.argsort(descending=True)[:k].tolist())
            assert set(torch.isfinite(out).nonzero().flatten().tolist()) == expected
            assert torch.equal(out[list(expected)], row[list(expected)])


def nucleus_reference(probs, p):
    """Most probable tokens, one by one, until their mass reaches p."""
    order = sorted(range(len(probs)), key=lambda i: -probs[i])
    kept, mass = set(), 0.0
    for i in order:
        kept.add(i)
        mass += probs[i]
        if mass >= p:
            break
    return kept


def test_top_p_keeps_the_nucleus():
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]], dtype=torch.float64)
    logits = probs.log()
    cases = [(0.45, {1}), (0.55, {1, 3}), (0.79, {1, 3}), (0.9, {0, 1, 3}), (1, {0, 1, 2, 3})]
    for p, expected in cases:
        kept = set(torch.isfinite(top_p_filter(logits, p))[0].nonzero().flatten().tolist())
        assert kept == expected, p
    random = torch.randn(20, 30, dtype=torch.float64) * 2
    for p in (0.05, 0.3, 0.7, 0.95):
        filtered = top_p_filter(random, p)
        for row, out in zip(random, filtered):
            expected = nucleus_reference(torch.softmax(row, -1).tolist(), p)
            assert set(torch.isfinite(out).nonzero().flatten().tolist()) == expected


def test_sampling_follows_the_filtered_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -3.0]]).expand(20000, 5)
    gen = torch.Generator().manual_seed(0)
    # temperature 2, top-k 4, then top-p 0.9 over the renormalized top 4
    ids = next_token(logits, temperature=2.0, top_k=4, top_p=0.9, generator=gen)
    probs = torch.softmax(logits[0, :4] / 2.0, -1)
    kept = nucleus_reference(probs.tolist(), 0.9)
    target = torch.zeros(5)
    target[list(kept)] = probs[list(kept)] / probs[list(kept)].sum()
    freq = torch.bincount(ids, minlength=5).float() / ids.numel()
    torch.testing.assert_close(freq, target, atol=0.015, rtol=0)
    assert freq[4] == 0


def test_seeded_sampling_is_reproducible():
    model = tiny("mag")
    prompt = torch.randint(0, 256, (2, 4))

    def sample(seed):
        gen = torch.Generator().manual_seed(seed)
        return model.generate(prompt, 12, temperature=1.0, top_p=0.95, generator=gen)

    assert torch.equal(sample(1), sample(1))
    assert not torch.equal(sample(1), sample(2))
    # top-k 1 at any temperature is greedy
    top1 = model.generate(prompt, 6, temperature=1.5, top_k=1)
    assert torch.equal(top1, model.generate(prompt, 6, temperature=0))


def test_eos_stops_and_pads():
    model = tiny("swa")
    prompt = torch.randint(0, 256, (2, 3))
    free = model.generate(prompt, 10, temperature=0)
    eos = int(free[0, 3 + 2])  # the first row's third new token
    out = model.generate(prompt, 10, temperature=0, eos_id=eos)

    def stop(row):
        hits = (free[row, 3:] == eos).nonzero().flatten()
        return int(hits[0]) + 1 if len(hits) else 10

    length = max(stop(0), stop(1))
    assert out.shape == (2, 3 + length)
    for row in range(2):
        s = stop(row)
        assert torch.equal(out[row, : 3 + s], free[row, : 3 + s])
        assert (out[row, 3 + s :] == eos).all()


@pytest.mark.parametrize("mixer", ["lmm", "mag", "mal", "swa", "attention", "mac"])
def test_state_memory_per_generated_token(mixer):
    model = tiny(mixer)
    prompt = torch.randint(0, 256, (1, 3))
    sizes = [
        sum(s.num_bytes() for s in state)
        for _, state in stream(model, prompt, 40, generator=torch.Generator().manual_seed(0))
    ]
    # sizes[i]: the state after 3 + i tokens
    if mixer == "attention":  # a key/value cache: grows with every token
        assert all(b > a for a, b in zip(sizes, sizes[1:]))
    elif mixer == "mac":  # keys/values of the current segment only: periodic, bounded
        assert sizes[10:34] == sizes[16:40]
        assert max(sizes) == max(sizes[:6])
    else:  # memory and a window: flat once the window is full
        assert len(set(sizes[5:])) == 1, sizes


def test_bad_arguments():
    model = tiny("lmm")
    prompt = torch.tensor([1, 2])
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        model.generate(prompt, 3, temperature=-0.5)
    with pytest.raises(ValueError, match="temperature"):
        model.generate(prompt, 3, temperature=math.nan)
    for top_p in (0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
            model.generate(prompt, 3, top_p=top_p)
    for top_k in (0, -3, 2.5):
        with pytest.raises(ValueError, match="top_k must be a positive integer"):
            model.generate(prompt, 3, top_k=top_k)
    with pytest.raises(ValueError, match="the prompt is empty"):
        model.generate(torch.tensor([], dtype=torch.long), 3)
    with pytest.raises(ValueError, match="the prompt is empty"):
        model.generate([], 3)
    with pytest.raises(ValueError, match="integer ids"):
        model.generate(torch.tensor([0.5, 1.0]), 3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(prompt, -1)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        generate(model, torch.tensor([1, 999]), 2)


def test_prompts_of_different_lengths_share_a_batch():
    """Greedy decoding of a ragged batch gives every prompt what it gets alone, for a
    memory model (chunk boundaries crossed) and an attention model; EOS stops a row."""
    from titans_seq.domains.lm import TitansLM

    for mixer, options in (("lmm", {"chunk_size": 4}), ("swa", {"window": 5})):
        torch.manual_seed(0)
        model = TitansLM(30, dim=16, depth=2, heads=2, mixer=mixer, mixer_options=options)
        prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11]]
        out = model.generate(prompts, 6, temperature=0)
        for prompt, got in zip(prompts, out):
            alone = model.generate(prompt, 6, temperature=0)
            assert got.tolist() == alone.tolist()
        eos = int(out[0][3])  # the first generated token of the first prompt
        stopped = model.generate(prompts, 6, temperature=0, eos_id=eos)
        assert stopped[0].tolist() == prompts[0] + [eos]
        assert all(len(s) <= len(p) + 6 for s, p in zip(stopped, prompts))
