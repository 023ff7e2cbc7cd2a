"""The Titans hybrids "mac", "mag", "mal": causality at segment/window boundaries, streaming,
backends, bounded states, option validation, and MAC's retrieval rule."""

import pytest
import torch
from mixer_checks import VARIANTS, assert_memory_backends_agree, variant

import titans_seq as ts
import titans_seq.mixers.mac
import titans_seq.mixers.mag
import titans_seq.mixers.mal  # noqa: F401  (register the hybrids until the package imports them)
from titans_seq.mixers.mac import MACState
from titans_seq.mixers.mag import WindowHybridState

DIM, HEADS = 16, 2
HYBRIDS = ("mac", "mag", "mal")
WITH_VARIANTS = (*HYBRIDS, *VARIANTS)


@pytest.fixture(autouse=True)
def one_thread():
    """The shapes here are tiny: one thread is fastest, and a shared 2-core machine makes
    OpenMP barriers of two threads stall (measured: 0.75 s for a [2, 48, 26] conv1d)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def size_option(name: str, size: int) -> dict:
    return {"segment_size": size} if name == "mac" else {"window": size}


def build(name, size=6, **options):
    """A small float64 hybrid; `name` may be a variant id of mixer_checks.VARIANTS."""
    torch.manual_seed(0)
    name, variant_options = variant(name)
    defaults = dict(chunk_size=4, num_persistent=2, **size_option(name, size))
    if name == "mac":
        defaults["num_memory_tokens"] = 3
    options = {**defaults, **variant_options, **options}
    return ts.build_mixer(name, dim=DIM, heads=HEADS, **options).double()


def randn(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def test_hybrids_are_registered():
    assert set(HYBRIDS) <= set(ts.list_mixers())


# -- causality ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", WITH_VARIANTS)
@pytest.mark.parametrize("size", [5, 8])
@pytest.mark.parametrize("t", [0, 3, 4, 5, 7, 8, 9, 15, 16, 22])
def test_causality_around_segment_and_window_boundaries(name, size, t):
    """Perturbing x[:, t+1:] leaves y[:, :t+1] bit-identical; later outputs change."""
    mixer = build(name, size)
    T = 24
    x = randn(2, T, DIM)
    y, _ = mixer(x)
    x2 = x.clone()
    x2[:, t + 1 :] += randn(2, T - t - 1, DIM)
    y2, _ = mixer(x2)
    torch.testing.assert_close(y2[:, : t + 1], y[:, : t + 1], rtol=0, atol=1e-12)
    assert not torch.allclose(y2[:, t + 1 :], y[:, t + 1 :])


@pytest.mark.parametrize("t", [6, 7, 11])
def test_mac_context_does_not_see_the_segment(t):
    """Perturbing only the tokens after t inside the segment leaves earlier outputs intact
    (the memory context is retrieved before the segment)."""
    mixer = build("mac", 8, num_memory_tokens=4)
    x = randn(1, 16, DIM)
    y, _ = mixer(x)
    x2 = x.clone()
    x2[:, t + 1 : (t // 8 + 1) * 8] += 1.0
    y2, _ = mixer(x2)
    torch.testing.assert_close(y2[:, : t + 1], y[:, : t + 1], rtol=0, atol=1e-12)


def test_mac_later_segments_see_earlier_segments_through_the_memory():
    """With segment attention, tokens of segment 2 cannot attend to segment 0; they are
    still influenced by it through the memory (context tokens and the memory read-out)."""
    mixer = build("mac", 4, num_persistent=0)
    x = randn(1, 12, DIM)
    y, _ = mixer(x)
    x2 = x.clone()
    x2[:, :4] += 1.0
    y2, _ = mixer(x2)
    assert (y2[:, 8:] - y[:, 8:]).abs().max() > 1e-6


def test_mac_context_is_read_from_the_memory_as_it_stood_at_the_segment_start():
    mixer = build("mac", 5, num_memory_tokens=3)
    x = randn(2, 14, DIM)
    _, at_boundary = mixer(x[:, :10])  # two whole segments
    assert at_boundary.keys is None and at_boundary.context_keys is None
    _, inside = mixer(x[:, 10:12], at_boundary)
    expected_k, expected_v = mixer._retrieve_context(at_boundary.memory, 2, torch.float64)
    torch.testing.assert_close(inside.context_keys, expected_k, rtol=0, atol=0)
    torch.testing.assert_close(inside.context_values, expected_v, rtol=0, atol=0)
    # ... and it is the same context for every later token of the segment
    _, later = mixer(x[:, 12:13].clone(), inside)
    assert later.context_keys is inside.context_keys


def test_mac_segment_retrieval_reads_each_token_from_the_memory_at_the_segment_start():
    """retrieval="segment": the retrieved block holds f_W(q_t) of the segment's tokens so
    far, W the memory after the previous segment, whatever the memory absorbed since."""
    mixer = build("mac[segment]", 5)
    x = randn(2, 14, DIM)
    _, at_boundary = mixer(x[:, :10])  # two whole segments
    assert at_boundary.context_keys is None and at_boundary.segment_memory is None
    _, inside = mixer(x[:, 10:12], at_boundary)
    _, later = mixer(x[:, 12:14], inside)
    expected_k, expected_v = mixer._retrieve_for_tokens(x[:, 10:14], at_boundary.memory)
    assert later.context_keys.shape[2] == 4  # one retrieved token per token so far
    torch.testing.assert_close(later.context_keys, expected_k, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(later.context_values, expected_v, rtol=1e-12, atol=1e-12)
    # content-keyed: another token at the same position retrieves something else
    other_k, _ = mixer._retrieve_for_tokens(x[:, 10:14] + 1.0, at_boundary.memory)
    assert not torch.allclose(other_k, expected_k)


@pytest.mark.parametrize("memory_input", ["residual", "attention"])
def test_mac_memory_input(memory_input):
    """ "residual" writes x + attention_proj(a) (the projection starts at zero: x itself);
    "attention" writes attention_proj(a) only (eq. 24), so x enters the memory only
    through the attention output."""
    mixer = build("mac", 6, memory_input=memory_input)
    absorbed = []
    mixer.memory.register_forward_hook(lambda module, args, out: absorbed.append(args[0]))
    x = randn(1, 6, DIM)
    mixer(x)
    if memory_input == "residual":
        torch.testing.assert_close(absorbed[0], x, rtol=0, atol=0)
        return
    assert not torch.allclose(absorbed[0], x)
    with torch.no_grad():
        mixer.attention_proj.weight.zero_()
    absorbed.clear()
    mixer(x)
    assert absorbed[0].abs().max() == 0


def test_mac_bad_variant_options():
    with pytest.raises(ValueError, match="retrieval must be one of .*did you mean 'segment'"):
        ts.build_mixer("mac", dim=DIM, retrieval="segmnt")
    with pytest.raises(ValueError, match="memory_input"):
        ts.build_mixer("mac", dim=DIM, memory_input="x")


@pytest.mark.parametrize("name", ["mag", "mal"])
def test_window_hybrids_see_beyond_the_window_through_the_memory(name):
    mixer = build(name, 4, num_persistent=0)
    x = randn(1, 16, DIM)
    y, _ = mixer(x)
    x2 = x.clone()
    x2[:, 0] += 1.0
    y2, _ = mixer(x2)
    assert (y2[:, 12:] - y[:, 12:]).abs().max() > 1e-6  # 12 tokens after, window 4


# -- streaming ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", WITH_VARIANTS)
@pytest.mark.parametrize("size", [1, 4, 7, 23, 40])  # < = > T-ish, not dividing T = 23
def test_streaming_equals_one_shot(name, size):
    mixer = build(name, size)
    T = 23
    x = randn(2, T, DIM)
    y_full, s_full = mixer(x)
    g = torch.Generator().manual_seed(size)
    splits = [
        list(range(1, T)),  # 1-token pieces
        [2, 3, 9, 10, 11, 17],  # inside and across segments/chunks
        [size, 2 * size] if 2 * size < T else [size] if size < T else [11],  # on boundaries
        sorted(set(torch.randint(1, T, (5,), generator=g).tolist())),
    ]
    for cuts in splits:
        state, pieces = None, []
        for a, b in zip([0, *cuts], [*cuts, T]):
            y, state = mixer(x[:, a:b], state)
            pieces.append(y)
        torch.testing.assert_close(torch.cat(pieces, 1), y_full, rtol=1e-9, atol=1e-11)
        assert state.position == s_full.position == T


@pytest.mark.parametrize("name", WITH_VARIANTS)
def test_state_continues_a_stream_and_detaches(name):
    mixer = build(name, 5)
    x = randn(1, 12, DIM)
    _, state = mixer(x[:, :7])
    detached = state.detach()
    assert not any(t.requires_grad for t in _tensors(detached))
    y_a, _ = mixer(x[:, 7:], state)
    y_b, _ = mixer(x[:, 7:], detached)
    torch.testing.assert_close(y_a, y_b, rtol=0, atol=0)


def _tensors(state):
    from titans_seq.mixers.state import iter_tensors

    return list(iter_tensors(state))


# -- backends -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", WITH_VARIANTS)
@pytest.mark.parametrize("memory_depth", [1, 2])
@pytest.mark.parametrize("T", [5, 13])
def test_backends_agree_on_outputs_and_every_parameter_gradient(name, memory_depth, T):
    mixer = build(name, 4, memory_depth=memory_depth)
    with torch.no_grad():  # move zero-initialized weights (MAC's attention_proj) off zero
        for p in mixer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    assert_memory_backends_agree(mixer, randn(2, T, DIM))


@pytest.mark.parametrize("name", WITH_VARIANTS)
def test_backend_does_not_change_parameters_or_state(name):
    a = build(name, backend="reference")
    b = build(name, backend="torch")
    b.load_state_dict(a.state_dict())
    x = randn(1, 9, DIM)
    _, state = a(x[:, :4])
    y_a, _ = a(x[:, 4:], state)
    y_b, _ = b(x[:, 4:], state)  # a state moves across backends
    torch.testing.assert_close(y_a, y_b, rtol=1e-9, atol=1e-12)


# -- bounded state --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mag", "mal"])
def test_window_state_does_not_grow_with_the_stream(name):
    mixer = build(name, 6).float()
    _, s_short = mixer(torch.randn(1, 8, DIM))
    _, s_long = mixer(torch.randn(1, 300, DIM))
    assert isinstance(s_long, WindowHybridState)
    assert s_long.keys.shape[2] == 5  # window - 1
    assert s_short.num_bytes() == s_long.num_bytes()
    state = s_long
    for _ in range(3):  # also when streaming
        _, state = mixer(torch.randn(1, 37, DIM), state)
        assert state.num_bytes() == s_long.num_bytes()


@pytest.mark.parametrize("name", ["mac", "mac[paper]"])
def test_mac_state_is_bounded_by_the_segment(name):
    mixer = build(name, 6).float()
    sizes = {}
    state = None
    for step in range(40):
        _, state = mixer(torch.randn(1, 1 + step % 4, DIM), state)
        assert isinstance(state, MACState)
        offset = state.position % 6
        assert (0 if state.keys is None else state.keys.shape[2]) == offset
        if state.position > 6:  # "segment" retrieval keeps no start state in segment 0
            sizes.setdefault(offset, set()).add(state.num_bytes())
    for offset, values in sizes.items():
        assert len(values) == 1, (offset, values)  # depends on the offset only, not on T
    for T in (299, 300, 301):
        _, s_long = mixer(torch.randn(1, T, DIM))
        assert s_long.num_bytes() == next(iter(sizes[T % 6]))
    # inside a segment: the cached keys/values, and with "segment" retrieval also the
    # retrieved block and the memory state at the segment start (a second memory state)
    factor = 2 if name == "mac" else 3
    assert max(max(v) for v in sizes.values()) < factor * min(min(v) for v in sizes.values())


# -- options --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", HYBRIDS)
def test_option_names_match_the_common_tests(name):
    small = {"mag": dict(chunk_size=4, window=6), "mal": dict(chunk_size=4, window=6)}
    small["mac"] = dict(chunk_size=4, segment_size=6)
    mixer = ts.build_mixer(name, dim=DIM, heads=HEADS, **small[name])
    assert mixer.memory.chunk_size == 4


@pytest.mark.parametrize("name", HYBRIDS)
@pytest.mark.parametrize(
    "options, match",
    [
        (dict(num_persistent=-1), "num_persistent"),
        (dict(num_persistent=1.5), "num_persistent"),
        (dict(chunk_size=0), "chunk_size"),
        (dict(memory_depth=0), "memory_depth"),
        (dict(backend="cuda-magic"), "backend"),
        (dict(head_dim=7), "even head_dim"),
    ],
)
def test_bad_options_raise_value_errors(name, options, match):
    with pytest.raises(ValueError, match=match):
        ts.build_mixer(name, dim=DIM, heads=HEADS, **options)


@pytest.mark.parametrize("name", HYBRIDS)
def test_bad_size_options(name):
    key = "segment_size" if name == "mac" else "window"
    for bad in (0, -3, 2.5, None, True):
        with pytest.raises(ValueError, match=key):
            ts.build_mixer(name, dim=DIM, heads=HEADS, **{key: bad})
    with pytest.raises(ValueError, match="heads=3 does not divide dim=16"):
        ts.build_mixer(name, dim=DIM, heads=3)
    with pytest.raises(TypeError, match="unknown option"):
        ts.build_mixer(name, dim=DIM, **{"segment_size" if key == "window" else "window": 4})


def test_mac_bad_memory_tokens():
    with pytest.raises(ValueError, match="num_memory_tokens"):
        ts.build_mixer("mac", dim=DIM, num_memory_tokens=-1)


def test_mac_without_memory_tokens_or_persistent_tokens():
    mixer = build("mac", 5, num_memory_tokens=0, num_persistent=0)
    x = randn(1, 12, DIM)
    y, _ = mixer(x)
    state, pieces = None, []
    for a, b in ((0, 3), (3, 5), (5, 12)):
        out, state = mixer(x[:, a:b], state)
        pieces.append(out)
    torch.testing.assert_close(torch.cat(pieces, 1), y, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", HYBRIDS)
def test_state_from_another_configuration_is_rejected(name):
    a, b = build(name, 5), build(name, 6)
    _, state = a(randn(1, 4, DIM))
    with pytest.raises(ValueError, match="different mixer configuration"):
        b(randn(1, 4, DIM), state)
    with pytest.raises(ValueError, match="batch size"):
        a(randn(2, 4, DIM), state)


@pytest.mark.parametrize("name", HYBRIDS)
def test_float32_and_no_rope(name):
    torch.manual_seed(0)
    mixer = ts.build_mixer(name, dim=DIM, heads=HEADS, rope_base=None, qk_norm=True)
    y, _ = mixer(torch.randn(2, 9, DIM))
    assert y.dtype == torch.float32 and torch.isfinite(y).all()


# -- MAL layouts ------------------------------------------------------------------------------
def test_mal_two_layers_is_a_memory_layer_then_a_pre_norm_swa_layer():
    """In a Backbone, layout="two_layers" equals the paper's stacking written out as two
    blocks: an "lmm" layer, then a "swa" layer, each pre-norm and residual (same weights)."""
    from titans_seq.backbone import Backbone

    torch.manual_seed(0)
    mal = Backbone(
        DIM, 1, mixer="mal", heads=HEADS, mlp_ratio=0,
        mixer_options=dict(layout="two_layers", num_persistent=0, window=6, chunk_size=4),
    ).double()  # fmt: skip
    stacked = Backbone(
        DIM, 2, mixer=["lmm", "swa"], heads=HEADS, mlp_ratio=0,
        mixer_options=[dict(num_persistent=0, chunk_size=4), dict(window=6)],
    ).double()  # fmt: skip
    mixer = mal.blocks[0].mixer
    with torch.no_grad():
        for p in mal.parameters():  # off the initial values (norm weights of one)
            p.add_(0.1 * torch.randn_like(p))
        lmm, swa = stacked.blocks[0].mixer, stacked.blocks[1].mixer
        lmm.memory.load_state_dict(mixer.memory.state_dict())
        for target, source in (
            (lmm.out_norm, mixer.memory_norm),
            (lmm.out_gate, mixer.memory_gate),
            (lmm.out_proj, mixer.memory_out_proj),
            (stacked.blocks[0].mixer_norm, mixer.memory_input_norm),
            (stacked.blocks[1].mixer_norm, mixer.attention_input_norm),
            (swa.qkv_proj, mixer.attention.qkv_proj),
            (swa.out_proj, mixer.out_proj),
            (stacked.final_norm, mal.final_norm),
        ):
            target.load_state_dict(source.state_dict())
    x = randn(2, 17, DIM)
    torch.testing.assert_close(mal(x)[0], stacked(x)[0], rtol=1e-10, atol=1e-12)


def test_mal_two_layers_reads_the_raw_stream_and_prefixes_the_memory_layer_outputs():
    from titans_seq.backbone import ResidualBlock

    mixer = build("mal", 6)  # the default layout
    assert mixer.layout == "two_layers"
    assert mixer.owns_pre_norm and not build("mal[one_block]", 6).owns_pre_norm
    block = ResidualBlock(DIM, mixer, 0).double()
    seen = []
    mixer.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    x = 5.0 * randn(1, 7, DIM)
    block(x)
    torch.testing.assert_close(seen[0], x, rtol=0, atol=0)  # no norm in front
    # the attention prefix: the memory layer's stream at the persistent positions, kept in
    # the state for the calls that continue the stream
    _, state = mixer(x)
    p = mixer.persistent.unsqueeze(0)
    reads, _ = mixer.memory(p)
    expected = mixer.attention_input_norm(p + mixer._memory_layer(p, reads))[0]
    torch.testing.assert_close(state.prefix[0], expected)
    assert not torch.allclose(expected, mixer.attention_input_norm(mixer.persistent))
    _, later = mixer(randn(1, 3, DIM), state)
    assert later.prefix is state.prefix


def test_mal_bad_layout():
    with pytest.raises(ValueError, match="layout must be one of"):
        ts.build_mixer("mal", dim=DIM, layout="paper")
