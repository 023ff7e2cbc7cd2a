"""The causal depthwise conv against F.conv1d, and its streaming cache."""

import torch
import torch.nn.functional as F

from titans_seq.nn.conv import CausalDepthwiseConv1d


def test_matches_grouped_conv1d_forward_and_backward():
    conv = CausalDepthwiseConv1d(6, 4).double()
    x = torch.randn(2, 11, 6, dtype=torch.float64, requires_grad=True)
    y, _ = conv(x)
    ref = F.conv1d(F.pad(x.transpose(1, 2), (3, 0)), conv.weight, conv.bias, groups=6).transpose(
        1, 2
    )
    torch.testing.assert_close(y, ref)
    g = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, conv.weight, conv.bias), g)
    ref_grads = torch.autograd.grad(ref, (x, conv.weight, conv.bias), g)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b)


def test_streaming_cache_equals_one_shot():
    conv = CausalDepthwiseConv1d(3, 4)
    x = torch.randn(2, 9, 3)
    y, _ = conv(x)
    cache, pieces = None, []
    for a, b in ((0, 1), (1, 2), (2, 7), (7, 9)):
        out, cache = conv(x[:, a:b], cache)
        pieces.append(out)
    torch.testing.assert_close(torch.cat(pieces, 1), y)
