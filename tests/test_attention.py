"""The attention primitive (masks, SDPA/flex/reference paths) and the "attention"/"swa" mixers."""

import math
import random

import pytest
import torch

import titans_seq.mixers.attention  # noqa: F401  (registers "attention" and "swa")
from titans_seq.attention import (
    attention_mask,
    causal_attention,
    first_visible_position,
    is_plain_causal,
)
from titans_seq.attention.flex import FLEX_AVAILABLE
from titans_seq.attention.sdpa import sdpa_attention
from titans_seq.mixers import build_mixer
from titans_seq.mixers.attention import KVCacheState


# -- naive references -----------------------------------------------------------------------
def naive_visible(query_pos, key_pos, window, segment_size):
    if key_pos > query_pos:
        return False
    if window is not None and query_pos - key_pos >= window:
        return False
    if segment_size is not None and query_pos // segment_size != key_pos // segment_size:
        return False
    return True


def naive_mask(num_queries, num_keys, position, num_prefix, window, segment_size):
    key_start = position + num_queries - num_keys
    rows = []
    for i in range(num_queries):
        row = [True] * num_prefix
        for j in range(num_keys):
            row.append(naive_visible(position + i, key_start + j, window, segment_size))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.bool)


def naive_attention(q, k, v, prefix_k, prefix_v, position, window, segment_size):
    """Query by query, softmax over the explicitly listed visible keys (float64)."""
    batch, heads, num_queries, head_dim = q.shape
    num_keys = k.shape[2]
    key_start = position + num_queries - num_keys
    out = torch.zeros(batch, heads, num_queries, v.shape[-1], dtype=q.dtype)
    for i in range(num_queries):
        keys = [
            k[:, :, j]
            for j in range(num_keys)
            if naive_visible(position + i, key_start + j, window, segment_size)
        ]
        values = [
            v[:, :, j]
            for j in range(num_keys)
            if naive_visible(position + i, key_start + j, window, segment_size)
        ]
        if prefix_k is not None:
            keys = list(prefix_k.expand(batch, -1, -1, -1).unbind(2)) + keys
            values = list(prefix_v.expand(batch, -1, -1, -1).unbind(2)) + values
        keys, values = torch.stack(keys, 2), torch.stack(values, 2)
        scores = (q[:, :, i : i + 1] * keys).sum(-1) / math.sqrt(head_dim)
        out[:, :, i] = (scores.softmax(-1).unsqueeze(-1) * values).sum(2)
    return out


def random_qkv(
    num_queries, num_past, num_prefix, batch=2, heads=2, head_dim=8, value_dim=8, seed=0
):
    g = torch.Generator().manual_seed(seed)
    kw = dict(generator=g, dtype=torch.float64)
    q = torch.randn(batch, heads, num_queries, head_dim, **kw)
    k = torch.randn(batch, heads, num_past + num_queries, head_dim, **kw)
    v = torch.randn(batch, heads, num_past + num_queries, value_dim, **kw)
    prefix_k = prefix_v = None
    if num_prefix:
        prefix_k = torch.randn(1, heads, num_prefix, head_dim, **kw)
        prefix_v = torch.randn(1, heads, num_prefix, value_dim, **kw)
    return q, k, v, prefix_k, prefix_v


# -- masks ----------------------------------------------------------------------------------
MASK_CASES = [
    # T, K, position, P, window, segment
    (7, 7, 0, 0, None, None),
    (7, 7, 0, 0, 3, None),
    (5, 9, 4, 2, None, None),
    (5, 9, 11, 0, 4, None),
    (6, 6, 0, 3, 10, None),
    (9, 12, 3, 1, None, 4),
    (9, 12, 3, 0, 2, 4),
    (1, 5, 20, 2, 3, None),
]


@pytest.mark.parametrize("T, K, position, P, window, segment", MASK_CASES)
def test_mask_matches_naive_loop(T, K, position, P, window, segment):
    mask = attention_mask(
        T, K, position=position, num_prefix=P, window=window, segment_size=segment
    )
    assert mask.shape == (T, P + K) and mask.dtype == torch.bool
    assert torch.equal(mask, naive_mask(T, K, position, P, window, segment))
    assert mask.any(dim=1).all()  # every query sees at least itself: no NaN rows


def test_first_visible_position_bounds_the_mask():
    for query_pos in range(30):
        for window in (None, 1, 4, 9):
            for segment in (None, 5):
                first = first_visible_position(query_pos, window, segment)
                visible = [
                    j for j in range(query_pos + 1) if naive_visible(query_pos, j, window, segment)
                ]
                assert first == visible[0]


def test_plain_causal_detection():
    assert is_plain_causal(8, 8, position=0)
    assert is_plain_causal(8, 8, position=3, window=8)
    assert not is_plain_causal(8, 8, position=0, window=7)
    assert not is_plain_causal(8, 9, position=1)
    assert not is_plain_causal(8, 8, position=0, num_prefix=1)
    assert is_plain_causal(4, 4, position=8, segment_size=4)
    assert not is_plain_causal(4, 4, position=6, segment_size=4)


# -- the functional primitive vs the naive reference (float64) -------------------------------
ATTENTION_CASES = [
    # T (odd), past S, prefix P, window, segment
    (13, 0, 0, None, None),  # is_causal fast path
    (13, 0, 0, 1, None),
    (13, 0, 0, 4, None),  # shorter than T, not dividing it
    (13, 0, 0, 13, None),  # equal to T
    (13, 0, 0, 40, None),  # longer than T
    (13, 0, 3, None, None),
    (13, 0, 3, 5, None),
    (11, 6, 0, None, None),
    (11, 6, 2, 4, None),
    (11, 6, 2, 30, None),
    (1, 9, 2, 3, None),  # one decoding step
    (13, 0, 2, None, 4),  # segments
    (9, 3, 0, 3, 5),
]


@pytest.mark.parametrize("T, S, P, window, segment", ATTENTION_CASES)
@pytest.mark.parametrize("backend", ["sdpa", "reference"])
def test_attention_matches_naive(T, S, P, window, segment, backend):
    q, k, v, pk, pv = random_qkv(T, S, P)
    position = S + 5 if segment is None else S + 2  # keys need not start the stream
    y = causal_attention(
        q,
        k,
        v,
        prefix_k=pk,
        prefix_v=pv,
        position=position,
        window=window,
        segment_size=segment,
        backend=backend,
    )
    expected = naive_attention(q, k, v, pk, pv, position, window, segment)
    torch.testing.assert_close(y, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.skipif(not FLEX_AVAILABLE, reason="torch.nn.attention.flex_attention missing")
@pytest.mark.parametrize(
    "T, S, P, window, segment",
    [(13, 0, 3, 5, None), (11, 6, 2, 4, None), (9, 3, 0, 3, 5), (13, 0, 0, 40, None)],
)
def test_flex_block_mask_matches_naive(T, S, P, window, segment):
    """The flex path's mask_mod (run unfused off CUDA) encodes the same visibility rule."""
    q, k, v, pk, pv = random_qkv(T, S, P, head_dim=16, value_dim=16)
    position = S + 2
    y = causal_attention(
        q,
        k,
        v,
        prefix_k=pk,
        prefix_v=pv,
        position=position,
        window=window,
        segment_size=segment,
        backend="flex",
    )
    expected = naive_attention(q, k, v, pk, pv, position, window, segment)
    torch.testing.assert_close(y, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.skipif(not FLEX_AVAILABLE, reason="torch.nn.attention.flex_attention missing")
@pytest.mark.parametrize("window", [None, 4])
def test_flex_segments_of_a_stream_share_one_block_mask(window):
    """Every segment of a stream (queries and keys inside it, as MAC's attention calls it)
    builds the same block mask, whatever its position: one mask and, on CUDA, one compiled
    kernel for a whole sequence. A call with cached keys from the previous segment (keys
    starting before the segment grid's shift) is still exact."""
    from titans_seq.attention import flex

    flex._block_mask.cache_clear()
    S, P = 8, 2
    for segment_index in range(5):
        q, k, v, pk, pv = random_qkv(S, 0, P, head_dim=16, value_dim=16)
        position = segment_index * S
        y = causal_attention(
            q, k, v, prefix_k=pk, prefix_v=pv, position=position, window=window,
            segment_size=S, backend="flex",
        )  # fmt: skip
        expected = naive_attention(q, k, v, pk, pv, position, window, S)
        torch.testing.assert_close(y, expected, rtol=1e-9, atol=1e-9)
    assert flex._block_mask.cache_info().currsize == 1
    # 5 new queries at stream position 3 S + 3, 6 cached keys from position 3 S - 3 on
    q, k, v, pk, pv = random_qkv(5, 6, P, head_dim=16, value_dim=16)
    y = causal_attention(
        q, k, v, prefix_k=pk, prefix_v=pv, position=3 * S + 3, window=window,
        segment_size=S, backend="flex",
    )  # fmt: skip
    expected = naive_attention(q, k, v, pk, pv, 3 * S + 3, window, S)
    torch.testing.assert_close(y, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("window, segment", [(5, None), (1, None), (12, None), (None, 6), (4, 6)])
def test_query_blocking_is_exact(window, segment):
    """Blocked SDPA (O(T * window) memory) equals one masked call, blocks not dividing T."""
    q, k, v, pk, pv = random_qkv(23, 4, 2)
    kwargs = dict(position=4, window=window, segment_size=segment, scale=8**-0.5)
    blocked = sdpa_attention(
        q, k, v, pk.expand(2, -1, -1, -1), pv.expand(2, -1, -1, -1), query_block=5, **kwargs
    )
    expected = naive_attention(q, k, v, pk, pv, 4, window, segment)
    torch.testing.assert_close(blocked, expected, rtol=1e-10, atol=1e-10)


def test_value_dim_may_differ_and_default_position():
    q, k, v, pk, pv = random_qkv(5, 3, 1, value_dim=3)
    y = causal_attention(q, k, v, prefix_k=pk, prefix_v=pv, window=4)
    assert y.shape == (2, 2, 5, 3)
    torch.testing.assert_close(y, naive_attention(q, k, v, pk, pv, 3, 4, None))


def test_backend_aliases_agree():
    q, k, v, pk, pv = random_qkv(7, 2, 2)
    ys = [
        causal_attention(q, k, v, prefix_k=pk, prefix_v=pv, window=3, backend=b)
        for b in ("auto", "torch", "sdpa", "reference")
    ]
    for y in ys[1:]:
        torch.testing.assert_close(y, ys[0])


def test_gradients_flow_through_masked_path():
    q, k, v, pk, pv = (t.requires_grad_() for t in random_qkv(6, 2, 2))
    causal_attention(q, k, v, prefix_k=pk, prefix_v=pv, window=3).sum().backward()
    for t in (q, k, v, pk, pv):
        assert t.grad is not None and torch.isfinite(t.grad).all()


BAD_CALLS = [
    (dict(window=0), ValueError, "window must be positive"),
    (dict(window=-3), ValueError, "window must be positive"),
    (dict(window=2.5), TypeError, "window must be an int"),
    (dict(segment_size=0), ValueError, "segment_size must be positive"),
    (dict(position=1), ValueError, "cannot precede stream position"),
    (dict(backend="cuda"), ValueError, "unknown attention backend"),
]


@pytest.mark.parametrize("kwargs, error, message", BAD_CALLS)
def test_bad_arguments(kwargs, error, message):
    q, k, v, _, _ = random_qkv(4, 2, 0)
    with pytest.raises(error, match=message):
        causal_attention(q, k, v, **kwargs)


def test_bad_shapes():
    q, k, v, pk, pv = random_qkv(4, 2, 2)
    with pytest.raises(ValueError, match="rank 4"):
        causal_attention(q[0], k, v)
    with pytest.raises(ValueError, match="one key per query"):
        causal_attention(q, k[:, :, :3], v[:, :, :3])
    with pytest.raises(ValueError, match="head dims differ"):
        causal_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match="both prefix_k and prefix_v"):
        causal_attention(q, k, v, prefix_k=pk)
    with pytest.raises(ValueError, match="does not broadcast"):
        causal_attention(q, k, v, prefix_k=pk[:, :1], prefix_v=pv[:, :1])
    with pytest.raises(TypeError, match="dtypes differ"):
        causal_attention(q.float(), k, v)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flex_on_cuda_matches_sdpa(dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (2, 4, 300, 64)
    q = torch.randn(*shape, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(2, 4, 340, 64, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(2, 4, 340, 64, device="cuda", dtype=dtype, generator=g)
    pk = torch.randn(1, 4, 4, 64, device="cuda", dtype=dtype, generator=g)
    pv = torch.randn(1, 4, 4, 64, device="cuda", dtype=dtype, generator=g)
    kwargs = dict(prefix_k=pk, prefix_v=pv, position=1000, window=100)
    flex = causal_attention(q, k, v, backend="flex", **kwargs)
    sdpa = causal_attention(q, k, v, backend="sdpa", **kwargs)
    tol = 2e-2 if dtype == torch.bfloat16 else 2e-3
    torch.testing.assert_close(flex, sdpa, rtol=tol, atol=tol)


# -- the mixers -----------------------------------------------------------------------------
MIXER_CONFIGS = [
    ("attention", dict()),
    ("attention", dict(qk_norm=True, num_persistent=2)),
    ("swa", dict(window=4)),
    ("swa", dict(window=1)),
    ("swa", dict(window=5, num_persistent=3, qk_norm=True)),
    ("swa", dict(window=64)),  # longer than the sequence
    ("swa", dict(window=3, rope_base=None, bias=True)),
]


def make_mixer(name, options, dim=16, heads=2, seed=0):
    torch.manual_seed(seed)
    return build_mixer(name, dim=dim, heads=heads, **options).double()


@pytest.mark.parametrize("name, options", MIXER_CONFIGS)
def test_mixer_is_causal(name, options):
    mixer = make_mixer(name, options)
    x = torch.randn(2, 17, 16, dtype=torch.float64)
    y, _ = mixer(x)
    for t in (0, 6, 15):
        perturbed = x.clone()
        perturbed[:, t + 1 :] += torch.randn_like(perturbed[:, t + 1 :])
        y_perturbed, _ = mixer(perturbed)
        torch.testing.assert_close(y_perturbed[:, : t + 1], y[:, : t + 1], rtol=0, atol=1e-12)
        assert not torch.allclose(y_perturbed[:, t + 1 :], y[:, t + 1 :])


def random_splits(total, rng):
    cuts = sorted(rng.sample(range(1, total), rng.randint(1, 6)))
    return [b - a for a, b in zip([0, *cuts], [*cuts, total])]


@pytest.mark.parametrize("name, options", MIXER_CONFIGS)
def test_streaming_equals_one_shot(name, options):
    mixer = make_mixer(name, options)
    x = torch.randn(2, 19, 16, dtype=torch.float64)
    y_once, state_once = mixer(x)
    rng = random.Random(0)
    for pieces in (
        [1] * 19,
        [1, 18],
        [7, 1, 1, 10],
        random_splits(19, rng),
        random_splits(19, rng),
    ):
        state, outputs, start = None, [], 0
        for size in pieces:
            y, state = mixer(x[:, start : start + size], state)
            outputs.append(y)
            start += size
        torch.testing.assert_close(torch.cat(outputs, 1), y_once, rtol=1e-10, atol=1e-10)
        assert state.position == 19 == state_once.position
        torch.testing.assert_close(state.keys, state_once.keys)


def test_state_is_a_kv_cache_dataclass():
    mixer = make_mixer("swa", dict(window=4))
    _, state = mixer(torch.randn(3, 6, 16, dtype=torch.float64))
    assert isinstance(state, KVCacheState)
    assert (state.batch_size, state.position) == (3, 6)
    assert state.keys.shape == state.values.shape == (3, 2, 3, 8)


def test_swa_state_size_is_bounded():
    mixer = make_mixer("swa", dict(window=6))
    x = torch.randn(1, 80, 16, dtype=torch.float64)
    _, short_state = mixer(x[:, :10])
    _, long_state = mixer(x)
    state, sizes = None, []
    for t in range(0, 80, 7):
        _, state = mixer(x[:, t : t + 7], state)
        sizes.append(state.num_bytes())
    assert short_state.num_bytes() == long_state.num_bytes() == max(sizes)
    assert state.keys.shape[2] == 5  # window - 1
    # and the stored keys are not views into a longer buffer
    assert state.keys.untyped_storage().nbytes() == state.keys.numel() * 8


def test_attention_cache_grows():
    mixer = make_mixer("attention", {})
    _, short_state = mixer(torch.randn(1, 10, 16, dtype=torch.float64))
    _, long_state = mixer(torch.randn(1, 40, 16, dtype=torch.float64))
    assert long_state.num_bytes() == 4 * short_state.num_bytes()


@pytest.mark.parametrize(
    "name, options",
    [("attention", dict(num_persistent=2)), ("swa", dict(window=3, num_persistent=2))],
)
def test_backends_share_parameters_and_agree(name, options):
    """A state dict loads across backends and the outputs agree (flex: unfused off CUDA)."""
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    trained = make_mixer(name, dict(options, head_dim=16))
    backends = ("reference", "sdpa", "flex") if FLEX_AVAILABLE else ("reference", "sdpa")
    outputs = []
    for backend in backends:
        mixer = make_mixer(name, dict(options, head_dim=16, backend=backend), seed=1)
        mixer.load_state_dict(trained.state_dict())
        with torch.no_grad():  # flex has no CPU backward
            outputs.append(mixer(x)[0])
    for y in outputs[1:]:
        torch.testing.assert_close(y, outputs[0])


def test_mixer_parameters_get_finite_gradients():
    mixer = make_mixer("swa", dict(window=3, num_persistent=2, qk_norm=True))
    y, _ = mixer(torch.randn(2, 7, 16, dtype=torch.float64))
    y.square().sum().backward()
    for name, p in mixer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_state_can_be_detached_for_tbptt():
    mixer = make_mixer("attention", {})
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    _, state = mixer(x[:, :3])
    assert state.keys.requires_grad
    detached = state.detach()
    assert not detached.keys.requires_grad
    y, _ = mixer(x[:, 3:], detached)
    y.sum().backward()


BAD_MIXERS = [
    ("attention", dict(dim=10, heads=3), "heads=3 does not divide dim=10"),
    ("attention", dict(dim=16, heads=0), "heads must be a positive integer"),
    ("attention", dict(dim=15, heads=5), "even head_dim"),
    ("attention", dict(dim=16, heads=2, backend="cuda"), "unknown attention backend"),
    ("attention", dict(dim=16, heads=2, num_persistent=-1), "num_persistent must be >= 0"),
    ("swa", dict(dim=16, heads=2, window=0), "window must be a positive integer"),
    ("swa", dict(dim=16, heads=2, window=-4), "window must be a positive integer"),
    ("swa", dict(dim=16, heads=2, window=None), "window: expected an integer, got None"),
]


@pytest.mark.parametrize("name, kwargs, message", BAD_MIXERS)
def test_bad_mixer_options(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_mixer(name, **kwargs)


def test_unknown_option_is_rejected():
    with pytest.raises(TypeError, match="window"):
        build_mixer("attention", dim=16, heads=2, window=4)


def test_bad_inputs_and_states():
    swa = make_mixer("swa", dict(window=4))
    other = make_mixer("swa", dict(window=5))
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    _, state = swa(x)
    with pytest.raises(ValueError, match="different mixer configuration"):
        other(x, state)
    with pytest.raises(ValueError, match="batch size"):
        swa(x[:1], state)
    with pytest.raises(ValueError, match="D=16"):
        swa(torch.randn(2, 5, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match="floating-point"):
        swa(torch.ones(2, 5, 16, dtype=torch.long))
