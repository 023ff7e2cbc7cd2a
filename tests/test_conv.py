"""The causal depthwise conv against F.conv1d, and its streaming cache."""

import pytest
import torch
import torch.nn.functional as F

from titans_seq.nn.conv import CausalDepthwiseConv1d


@pytest.mark.parametrize("kernel_size", [1, 2, 4])
@pytest.mark.parametrize("T", [1, 3, 11])
@pytest.mark.parametrize("with_cache", [False, True])
def test_matches_grouped_conv1d_forward_and_backward(kernel_size, T, with_cache):
    """The hand-written backward against autograd through F.conv1d: the gradients of the
    input, the cache (the past), the weight and the bias."""
    K = kernel_size
    conv = CausalDepthwiseConv1d(6, K).double()
    x = torch.randn(2, T, 6, dtype=torch.float64, requires_grad=True)
    cache = torch.randn(2, K - 1, 6, dtype=torch.float64, requires_grad=True)
    y, new_cache = conv(x, cache if with_cache else None)
    past = cache if with_cache else torch.zeros_like(cache)
    padded = torch.cat([past, x], dim=1).transpose(1, 2)
    ref = F.conv1d(padded, conv.weight, conv.bias, groups=6).transpose(1, 2)
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(new_cache, padded.transpose(1, 2)[:, T:])
    g = torch.randn_like(y)
    inputs = (x, conv.weight, conv.bias, *((cache,) if with_cache and K > 1 else ()))
    grads = torch.autograd.grad(y, inputs, g)
    ref_grads = torch.autograd.grad(ref, inputs, g)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b)


def test_float32_and_bfloat16_inputs_match_float64():
    conv = CausalDepthwiseConv1d(5, 4)
    x = torch.randn(3, 13, 5)
    ref, _ = conv.double()(x.double())
    conv = conv.float()
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 3e-2)):
        y, _ = conv(x.to(dtype))
        assert y.dtype == dtype
        torch.testing.assert_close(y.double(), ref, rtol=tol, atol=tol)


def test_streaming_cache_equals_one_shot():
    conv = CausalDepthwiseConv1d(3, 4)
    x = torch.randn(2, 9, 3)
    y, _ = conv(x)
    cache, pieces = None, []
    for a, b in ((0, 1), (1, 2), (2, 7), (7, 9)):
        out, cache = conv(x[:, a:b], cache)
        pieces.append(out)
    torch.testing.assert_close(torch.cat(pieces, 1), y)
