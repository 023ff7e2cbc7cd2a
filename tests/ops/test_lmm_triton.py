"""The Triton backend of the memory op against the token-by-token reference.

On CPU the kernel runs under Triton's interpreter. TRITON_INTERPRET must be set before
triton is first imported, and this pytest process may already have imported it (torch does
so lazily), so the interpreter checks run in one subprocess that executes this file as a
script (`python tests/ops/test_lmm_triton.py CASE...`) and reports each case; the pytest
tests then assert on the per-case results. On a GPU the same checks run in-process
(marker `gpu`), with larger shapes.

Tolerances (relative Frobenius error of every output, final state and gradient):
float32 inputs 1e-4 against the float64 reference; bfloat16 inputs 2e-2 against the
reference run on the same bf16-rounded values (the output and input gradients are bf16).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # the interpreter subprocess: before anything imports triton
    os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


import interpreter_helpers
import pytest
import torch
from lmm_helpers import make_inputs, rel_err

TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 1e-2}


def _leaves(xs, dtype, device):
    return [
        None if x is None else x.to(device=device, dtype=dtype).detach().requires_grad_()
        for x in xs
    ]


def _run(backend, gates, weights, state, dtype, chunk, device, **kw):
    """One call plus a loss touching y and the whole final state; returns (y, state, grads)."""
    from titans_seq.ops.lmm import MemoryState, lmm_memory

    sdt = torch.float64 if dtype == torch.float64 else torch.float32
    gates, weights = _leaves(gates, dtype, device), _leaves(weights, sdt, device)
    init = None
    if state is not None:
        init = MemoryState(
            tuple(_leaves(state.weights, sdt, device)),
            tuple(_leaves(state.momentum, sdt, device)),
            tuple(_leaves(state.chunk_weights, sdt, device)),
            state.offset,
        )
    y, st = lmm_memory(
        *gates, weights, chunk_size=chunk, initial_state=init, output_final_state=True,
        backend=backend, **kw,
    )  # fmt: skip
    ramp = torch.linspace(-1, 1, y.numel(), dtype=torch.float64, device=y.device).view_as(y)
    loss = (y.double() * ramp).sum()
    loss = loss + 0.1 * sum((w.double() ** 2).sum() for w in (*st.weights, *st.momentum))
    if st.offset:
        loss = loss + 0.1 * sum(w.double().sum() for w in st.chunk_weights)
    inputs = [x for x in gates if x is not None]
    inputs += list(weights) if init is None else [*init.weights, *init.momentum]
    if init is not None and init.offset:
        inputs += list(init.chunk_weights)
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    return y, st, [torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs)]


def check_against_reference(
    B=2, T=37, H=2, d=16, depth=2, hidden=None, dtype="float32", chunk=16, momentum=True,
    forgetting=True, clip=None, activation="silu", save_every=2, prefix=0, seed=0, device="cpu",
    backward="split", zero_tail=0, dot_precision="ieee", tol=None, regenerate_groups=4,
    theta_max=0.3, state_in_registers=None, overlap_backward=False, forget_toward="zero",
):  # fmt: skip
    """Triton vs reference: y, final state and every gradient (gates, q/k/v, the initial
    weights, or with prefix > 0 the initial state of a call that starts mid-stream).
    zero_tail: the last tokens get k = v = 0 (padding), a zero inner gradient.
    forget_toward="initial" (a linear memory): the kernels on the deviation from W_0."""
    from titans_seq.ops.lmm import lmm_memory
    from titans_seq.ops.lmm.triton import TritonOptions

    dtype = getattr(torch, dtype)
    gates, weights = make_inputs(
        B, prefix + T, H, d, depth, hidden or d, momentum=momentum, forgetting=forgetting,
        seed=seed, theta_max=theta_max,
    )  # fmt: skip
    if zero_tail:
        for x in gates[1:3]:
            x[:, -zero_tail:] = 0
    if dtype != torch.float32:  # compare on the values the kernel actually sees
        gates = [None if x is None else x.to(dtype).double() for x in gates]
    state = None
    if prefix:
        head = [None if x is None else x[:, :prefix] for x in gates]
        _, state = lmm_memory(
            *head, weights, chunk_size=chunk, output_final_state=True, forget_toward=forget_toward
        )
        gates = [None if x is None else x[:, prefix:] for x in gates]
    kw = dict(inner_grad_clip=clip, activation=activation, forget_toward=forget_toward)
    y_ref, s_ref, g_ref = _run(
        "reference", gates, weights, state, torch.float64, chunk, device, **kw
    )
    # a case whose inputs make the memory diverge compares nothing: say so, not "kernel wrong"
    assert all(torch.isfinite(x).all() for x in (y_ref, *g_ref)), "the reference diverges"
    options = TritonOptions(
        save_every=save_every,
        regenerate_groups=regenerate_groups,
        backward=backward,
        dot_precision=dot_precision,
        state_in_registers=state_in_registers,
        overlap_backward=overlap_backward,
    )
    y, s, g = _run(
        "triton", gates, weights, state, dtype, chunk, device, **kw, triton_options=options
    )
    tol = tol or TOL[dtype]
    errors = {"y": rel_err(y, y_ref)}
    assert y.dtype == dtype and s.weights[0].dtype == torch.float32
    assert s.offset == s_ref.offset == (prefix + T) % chunk
    for name, a, b in (
        ("weights", s.weights, s_ref.weights),
        ("momentum", s.momentum, s_ref.momentum),
        ("chunk_weights", s.chunk_weights, s_ref.chunk_weights),
    ):
        for i, (x, r) in enumerate(zip(a, b)):
            errors[f"state.{name}[{i}]"] = rel_err(x, r)
    for i, (x, r) in enumerate(zip(g, g_ref)):
        assert torch.isfinite(x).all(), f"gradient {i} is not finite"
        errors[f"grad[{i}]"] = rel_err(x, r)
    bad = {k: v for k, v in errors.items() if not v < tol}
    assert not bad, f"relative errors above {tol}: {bad}"
    return max(errors.values())


def check_streaming_equals_one_shot(
    B=2, T=45, H=2, d=16, depth=2, chunk=16, cuts=(5, 21, 22), seed=1, device="cpu",
    dot_precision="ieee", tol=1e-5,
):  # fmt: skip
    """Pieces of any length (shorter than a chunk, across chunk boundaries) equal one call,
    also when the pieces alternate between the Triton and torch backends (the states
    interchange in both directions). The one-shot and streamed outputs are each measured
    against the float64 torch backend as well, so a failure says which side is off."""
    from titans_seq.ops.lmm import lmm_memory
    from titans_seq.ops.lmm.triton import TritonOptions

    gates, weights = make_inputs(B, T, H, d, depth, d, seed=seed)
    y_ref, _ = lmm_memory(*gates, weights, chunk_size=chunk, backend="torch")
    gates = [None if x is None else x.float().to(device) for x in gates]
    weights = tuple(w.float().to(device) for w in weights)
    options = TritonOptions(dot_precision=dot_precision)

    def call(part, state, backend):
        kw = {"triton_options": options} if backend == "triton" else {}
        return lmm_memory(
            *part, weights, chunk_size=chunk, initial_state=state, output_final_state=True,
            backend=backend, **kw,
        )  # fmt: skip

    y_full, s_full = call(gates, None, "triton")
    errors = {"one-shot vs float64": rel_err(y_full.cpu().double(), y_ref)}
    bounds = list(zip((0, *cuts), (*cuts, T)))
    n = len(bounds)
    for backends in (["triton"] * n, (["triton", "torch"] * n)[:n]):
        state, pieces = None, []
        for (a, b), backend in zip(bounds, backends):
            y, state = call([None if x is None else x[:, a:b] for x in gates], state, backend)
            pieces.append(y)
        streamed, label = torch.cat(pieces, 1), "/".join(backends)
        errors[f"{label}: streamed vs one-shot"] = rel_err(streamed, y_full)
        errors[f"{label}: streamed vs float64"] = rel_err(streamed.cpu().double(), y_ref)
        final = zip((*state.weights, *state.momentum), (*s_full.weights, *s_full.momentum))
        for i, (a, b) in enumerate(final):
            errors[f"{label}: final state[{i}]"] = rel_err(a, b)
    bad = {k: v for k, v in errors.items() if not v < tol}
    assert not bad, f"relative errors above {tol}: {bad}"
    return max(errors.values())


def check_mixer_backends_agree(T=29, **memory):
    """The lmm mixer (projections, conv, persistent tokens, gates around the op) gives the
    same output, streamed state and parameter gradients with backend triton and torch."""
    import titans_seq as ts

    torch.manual_seed(0)
    mixer = ts.build_mixer("lmm", dim=32, heads=2, memory={"depth": 2, **memory})
    x = torch.randn(2, T, 32)
    results = {}
    for backend in ("torch", "triton"):
        mixer.backend = backend
        mixer.zero_grad()
        y1, state = mixer(x[:, :11])
        y2, _ = mixer(x[:, 11:], state)
        y = torch.cat([y1, y2], 1)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        results[backend] = (y.detach(), [p.grad.clone() for p in mixer.parameters()])
    (y_t, g_t), (y_k, g_k) = results["torch"], results["triton"]
    assert rel_err(y_k, y_t) < 1e-4, rel_err(y_k, y_t)
    for a, b in zip(g_k, g_t):
        assert rel_err(a, b) < 1e-3, rel_err(a, b)


def check_strided_inputs_equal_dense(T=50):
    """Inputs that are views (token ranges of longer buffers, v strided as the mixer's)
    give the output, final state and gradients of their dense copies, with and without
    autograd, over several backward blocks and two batch rows."""
    from titans_seq.ops.lmm import lmm_memory
    from titans_seq.ops.lmm.triton import TritonOptions

    gates, weights = make_inputs(2, T + 10, 2, 16, 2, 16, seed=5)
    weights = tuple(w.float() for w in weights)
    options = TritonOptions(save_every=2, regenerate_groups=1)  # two blocks of two segments
    ramp = torch.linspace(-1, 1, 2 * T * 2 * 16).view(2, T, 2, 16)

    def run(views):
        leaves = [None if x is None else x.float().clone().requires_grad_() for x in gates]
        parts = [None if x is None else x[:, 4 : 4 + T] for x in leaves]
        wide = torch.cat([parts[2], parts[2]], -1)  # v: every other half-row of a wider one
        parts[2] = wide[..., :16]
        if not views:
            parts = [None if x is None else x.contiguous() for x in parts]
        y, st = lmm_memory(
            *parts, weights, backend="triton", triton_options=options, output_final_state=True
        )
        loss = (y * ramp).sum() + sum(w.square().sum() for w in st.weights)
        present = [x for x in leaves if x is not None]
        with torch.no_grad():
            y_inference, _ = lmm_memory(*parts, weights, backend="triton", triton_options=options)
        return [y, y_inference, *st.weights, *torch.autograd.grad(loss, present)]

    for a, b in zip(run(True), run(False)):
        assert rel_err(a, b) < 1e-6, rel_err(a, b)


def check_packed_documents(lengths=(5, 21, 1, 17)):
    """Packed documents (cu_seqlens) through the Triton backend equal each document run
    alone by the reference: output and every gradient."""
    from titans_seq.ops.lmm import lmm_memory
    from titans_seq.packing import cu_seqlens_from_lengths

    gates, weights = make_inputs(1, sum(lengths), 2, 16, 2, 16, seed=4)
    xs, ws = _leaves(gates, torch.float32, "cpu"), _leaves(weights, torch.float32, "cpu")
    y, _ = lmm_memory(*xs, tuple(ws), cu_seqlens=cu_seqlens_from_lengths(lengths), backend="triton")
    ramp = torch.linspace(-1, 1, y.numel()).view_as(y)
    inputs = [x for x in (*xs, *ws) if x is not None]
    grads = torch.autograd.grad((y * ramp).sum(), inputs)
    refs, start = [], 0
    xs_ref, ws_ref = _leaves(gates, torch.float64, "cpu"), _leaves(weights, torch.float64, "cpu")
    for n in lengths:
        part = [None if x is None else x[:, start : start + n] for x in xs_ref]
        refs.append(lmm_memory(*part, tuple(ws_ref), backend="reference")[0])
        start += n
    y_ref = torch.cat(refs, 1)
    inputs_ref = [x for x in (*xs_ref, *ws_ref) if x is not None]
    grads_ref = torch.autograd.grad((y_ref * ramp.double()).sum(), inputs_ref)
    assert rel_err(y, y_ref) < 1e-4, rel_err(y, y_ref)
    for i, (a, b) in enumerate(zip(grads, grads_ref)):
        assert rel_err(a, b) < 1e-4, (i, rel_err(a, b))


def check_kernel_build_failure_falls_back_only_for_auto(T=21):
    """A Triton build error (here a simulated OutOfResources) under backend="auto" warns once
    and computes with the PyTorch form (same output and gradients); an explicit "triton"
    re-raises it. Forward and backward kernels are covered separately."""
    import warnings

    from triton.runtime.errors import OutOfResources

    from titans_seq.ops.lmm import lmm_memory_chunked, lmm_memory_torch
    from titans_seq.ops.lmm.triton import autograd as ta

    gates, weights = make_inputs(1, T, 2, 16, 2, 16)

    def run(fn, **kw):
        xs, ws = _leaves(gates, torch.float32, "cpu"), _leaves(weights, torch.float32, "cpu")
        y, _ = fn(*xs, tuple(ws), chunk_size=16, **kw)
        y.square().sum().backward()
        return y.detach(), [x.grad for x in (*xs, *ws) if x is not None]

    def fail(*args, **kwargs):
        raise OutOfResources(300000, 232448, "shared memory")

    y_ref, g_ref = run(lmm_memory_chunked)
    for kernel, attr in (("forward", "lmm_forward_triton"), ("backward", "_backward_kernels")):
        original = getattr(ta, attr)
        setattr(ta, attr, fail)
        try:
            try:  # not pytest.raises: this runs in the interpreter subprocess
                run(ta.lmm_memory_triton, recompute=lmm_memory_chunked)
                raise AssertionError(f"explicit backend='triton' hid the {kernel} failure")
            except OutOfResources:
                pass
            fallback = ta.KernelFallback(lmm_memory_torch)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                forms = dict(recompute=lmm_memory_chunked, fallback=fallback)
                y, g = run(ta.lmm_memory_triton, **forms)
                run(ta.lmm_memory_triton, **forms)  # reported once, then skipped
            messages = [str(w.message) for w in caught if w.category is RuntimeWarning]
            assert len(messages) == 1 and kernel in messages[0], messages
            assert set(fallback.failures) == {kernel}
            assert rel_err(y, y_ref) < 1e-4
            for a, b in zip(g, g_ref):
                assert rel_err(a, b) < 1e-4, (kernel, rel_err(a, b))
            # a second KernelFallback has seen no failure: it tries the kernel again
            fresh = ta.KernelFallback(lmm_memory_torch)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                run(ta.lmm_memory_triton, recompute=lmm_memory_chunked, fallback=fresh)
            assert len([w for w in caught if w.category is RuntimeWarning]) == 1
        finally:
            setattr(ta, attr, original)
    # backend="auto" shares one process-wide KernelFallback, standing in with "torch"
    from titans_seq.ops.lmm import auto_fallback

    assert auto_fallback() is auto_fallback()
    assert isinstance(auto_fallback(), ta.KernelFallback)
    assert auto_fallback().stand_in is lmm_memory_torch


CASES = {
    # the default (interpreter) grid: tiny shapes, the main features once each
    "d1_T5": dict(depth=1, T=5),
    "d1_T37_save1": dict(depth=1, T=37, save_every=1, B=1),
    "d2_T37_save1": dict(depth=2, T=37, save_every=1, B=1),
    "d2_odd_dims": dict(depth=2, T=21, d=12, hidden=20, B=1, H=3),
    "d2_prefix_state": dict(depth=2, T=30, prefix=7, save_every=1),
    # checkpoint groups regenerated in parallel: 3 per launch over 5 groups (blocks of 3
    # and 2), the first group starting mid-chunk; and one group per launch
    "d2_prefix_groups3": dict(depth=2, T=70, prefix=7, save_every=1, regenerate_groups=3, B=1),
    "d2_groups1": dict(depth=2, T=37, save_every=1, regenerate_groups=1, B=1),
    # two batch rows over blocks of 3 and 2 segments (the kernels read and write each
    # block through views of the full-length tensors, the regeneration walks two segments
    # a group, and the second block starts from the other slot of the carried state
    # gradient), fp32 and bf16 inputs and gradients
    "d2_batch2_blocks": dict(depth=2, T=70, prefix=7, save_every=2, regenerate_groups=2),
    "d2_batch2_blocks_bf16": dict(
        depth=2, T=70, prefix=7, save_every=2, regenerate_groups=2, dtype="bfloat16"
    ),
    "d2_clip": dict(depth=2, T=23, clip=0.05, B=1),
    "d2_no_momentum": dict(depth=2, T=23, momentum=False, B=1),
    "d2_bf16": dict(depth=2, T=37, dtype="bfloat16", B=1),
    # bf16 dots with the state passed through global memory (the default holds it in
    # registers there)
    "d2_bf16_global_state": dict(depth=2, T=37, dtype="bfloat16", B=1, state_in_registers=False),
    "d2_prefix_torch_backward": dict(depth=2, T=30, prefix=7, B=1, backward="torch"),
    # padding rows: the clip's norm at a zero inner gradient, in both backward paths
    "d2_zero_rows_clip": dict(depth=2, T=21, clip=1.0, B=1, zero_tail=9),
    "d2_zero_rows_clip_torch_backward": dict(
        depth=2, T=21, clip=1.0, B=1, zero_tail=9, backward="torch"
    ),
    # tensor-core dot precision (the interpreter computes tf32 as fp32): the split
    # backward's products of a chunk tile by a state tile take the state tile as the left
    # operand there (`triton/helpers.py`, `mm_by_state`)
    "d2_prefix_clip_tf32": dict(
        depth=2, T=30, prefix=7, clip=0.05, save_every=1, B=1, dot_precision="tf32"
    ),
    # the forward kernel holding the running state in registers (also regenerating the
    # entry states of 3 groups per launch, the first starting mid-chunk)
    "d2_prefix_groups3_registers": dict(
        depth=2, T=70, prefix=7, save_every=1, regenerate_groups=3, B=1, state_in_registers=True
    ),
    "d1_T37_registers": dict(depth=1, T=37, save_every=2, B=1, state_in_registers=True),
    # forgetting toward W_0, a linear memory: the kernels on the deviation, a carried state
    # entering mid-chunk, W_0's gradient through the two products outside the kernels
    "d1_toward_initial_prefix": dict(
        depth=1, T=30, prefix=7, save_every=1, clip=0.05, forget_toward="initial"
    ),
    "streaming": "streaming",
    "mixer_toward_initial": "mixer_toward_initial",
    "mixer": "mixer",
    "packed": "packed",
    "strided_inputs": "strided_inputs",
    "build_failure_fallback": "build_failure_fallback",
}
SLOW_CASES = {
    "d2_clip_gelu_torch_backward": dict(
        depth=2, T=23, clip=0.05, activation="gelu", backward="torch"
    ),
    "d1_T1": dict(depth=1, T=1),
    "d2_T16": dict(depth=2, T=16),
    "d2_expansion2": dict(depth=2, T=19, d=16, hidden=32, B=1, H=1),
    "d1_prefix_state": dict(depth=1, T=12, prefix=20),
    "d2_gelu": dict(depth=2, T=20, activation="gelu"),
    "d2_no_forgetting": dict(depth=2, T=23, forgetting=False),
    "d1_plain": dict(depth=1, T=23, momentum=False, forgetting=False),
    "d2_chunk32": dict(depth=2, T=40, chunk=32, B=1),
    "d2_T100_d32": dict(depth=2, T=100, d=32, save_every=2),
    "d1_T100_d32_fp16": dict(depth=1, T=100, d=32, dtype="float16", prefix=9),
    "d2_T64_hidden64": dict(depth=2, T=64, d=32, hidden=64, B=1, save_every=3),
    "d1_odd_dims_tf32": dict(depth=1, T=21, d=12, B=1, H=3, dot_precision="tf32"),
    "d2_odd_dims_no_momentum_tf32": dict(
        depth=2, T=23, d=12, hidden=20, B=1, momentum=False, dot_precision="tf32"
    ),
    "d2_odd_dims_no_momentum_registers": dict(
        depth=2, T=23, d=12, hidden=20, B=1, momentum=False, state_in_registers=True
    ),
    "d2_bf16_clip_registers": dict(
        depth=2, T=37, dtype="bfloat16", clip=0.05, B=1, state_in_registers=True
    ),
    "d2_zero_rows_clip_registers": dict(
        depth=2, T=21, clip=1.0, B=1, zero_tail=9, state_in_registers=True
    ),
    "d1_prefix_plain_registers": dict(
        depth=1, T=12, prefix=20, momentum=False, forgetting=False, state_in_registers=True
    ),
    # two batch rows over several blocks: depth 1 without momentum (no gates pass for eta),
    # and fp16 inputs and gradients with a clip
    "d1_no_momentum_batch2_blocks": dict(
        depth=1, T=70, prefix=7, save_every=2, regenerate_groups=2, momentum=False
    ),
    "d2_fp16_clip_batch2_blocks": dict(
        depth=2, T=70, save_every=2, regenerate_groups=2, dtype="float16", clip=0.05
    ),
    "d1_toward_initial_bf16_blocks": dict(
        depth=1, T=70, save_every=2, regenerate_groups=2, dtype="bfloat16", forget_toward="initial"
    ),
    # the widest tiles the guard takes: head dim 64, expansion 2
    "d2_d64_hidden128": dict(depth=2, T=20, d=64, hidden=128, B=1, H=1),
}


def run_case(name: str) -> str:
    spec = {**CASES, **SLOW_CASES}[name]
    checks = {
        "streaming": check_streaming_equals_one_shot,
        "mixer": check_mixer_backends_agree,
        "mixer_toward_initial": lambda: check_mixer_backends_agree(
            depth=1, forget_toward="initial"
        ),
        "packed": check_packed_documents,
        "strided_inputs": check_strided_inputs_equal_dense,
        "build_failure_fallback": check_kernel_build_failure_falls_back_only_for_auto,
    }
    if isinstance(spec, str):
        checks[spec]()
    else:
        check_against_reference(**spec)
    return "ok"


def _interpreter_results(names):
    return interpreter_helpers.interpreter_results(__file__, names)


@pytest.fixture(scope="module")
def interpreter_results():
    return _interpreter_results(list(CASES))


@pytest.mark.parametrize("name", list(CASES))
def test_triton_interpreter_matches_reference(interpreter_results, name):
    assert interpreter_results[name] == "ok", interpreter_results[name]


@pytest.mark.slow
def test_triton_interpreter_slow_grid():
    results = _interpreter_results(list(SLOW_CASES))
    assert all(r == "ok" for r in results.values()), results


def forward_launch_arguments(monkeypatch, dtype, hidden, options_list) -> list[dict]:
    """The keyword arguments `lmm_forward_triton` gets from a Triton call per options in
    `options_list` (the launch stopped there), on q, k, v in `dtype` with fp32 gates and
    depth-2 fp32 weights of head dim 16 and `hidden`."""
    from titans_seq.ops.lmm import lmm_memory
    from titans_seq.ops.lmm.triton import autograd as triton_autograd

    class Launched(Exception):
        pass

    seen = []

    def forward_kernel(*args, **kwargs):
        seen.append(kwargs)
        raise Launched

    monkeypatch.setattr(triton_autograd, "check_device", lambda q: None)
    monkeypatch.setattr(triton_autograd, "lmm_forward_triton", forward_kernel)
    gates, weights = make_inputs(1, 5, 1, 16, 2, hidden)
    gates = [None if x is None else x.float() for x in gates]
    gates[:3] = [x.to(dtype) for x in gates[:3]]  # q, k, v; gates and weights stay fp32
    weights = tuple(w.float() for w in weights)
    for options in options_list:
        with pytest.raises(Launched):
            lmm_memory(*gates, weights, backend="triton", triton_options=options)
    return seen


@pytest.mark.parametrize(
    "matmul_precision, dtype, expected",
    [
        # PyTorch's default: the inputs decide (bf16 autocast -> bf16 operands)
        ("highest", torch.float32, "ieee"),
        ("highest", torch.bfloat16, "bf16"),
        ("highest", torch.float16, "tf32"),
        # a precision the user asked of every fp32 matmul holds whatever the inputs
        ("high", torch.float32, "tf32"),
        ("high", torch.bfloat16, "tf32"),
        ("medium", torch.float32, "bf16"),
        ("medium", torch.float16, "bf16"),
    ],
)
def test_auto_dot_precision_follows_the_inputs_and_torchs_float32_matmul_precision(
    monkeypatch, matmul_precision, dtype, expected
):
    """`TritonOptions()` ("auto") gives the kernels the precision PyTorch's own switch asks
    of fp32 matmuls when it was moved from "highest", else the precision of q, k, v;
    resolved when a call starts; an explicit choice stays."""
    pytest.importorskip("triton")
    from titans_seq.ops.lmm.triton import TritonOptions, resolve_dot_precision

    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(matmul_precision)
    try:
        options = (None, TritonOptions(dot_precision="ieee"))
        seen = forward_launch_arguments(monkeypatch, dtype, 16, options)
    finally:
        torch.set_float32_matmul_precision(before)
    assert [kwargs["input_precision"] for kwargs in seen] == [expected, "ieee"]
    assert resolve_dot_precision("tf32", torch.bfloat16) == "tf32"


@pytest.mark.parametrize(
    "dtype, hidden, choice, expected",
    [
        # the default: registers for tensor-core dots and tiles up to 64 x 64
        (torch.bfloat16, 16, None, True),
        (torch.float16, 64, None, True),  # tf32 dots
        (torch.float32, 16, None, False),  # fp32 dots: the register variant spills more
        (torch.bfloat16, 128, None, False),  # a 16 x 128 tile
        # an explicit choice stays
        (torch.bfloat16, 16, False, False),
        (torch.float32, 16, True, True),
    ],
)
def test_the_state_stays_in_registers_for_tensor_core_dots_and_small_tiles(
    monkeypatch, dtype, hidden, choice, expected
):
    """`TritonOptions.state_in_registers=None` picks the kernel variant per call from the
    resolved dot precision and the weights' tile sizes."""
    pytest.importorskip("triton")
    from titans_seq.ops.lmm.triton import TritonOptions, resolve_state_in_registers

    options = [TritonOptions(state_in_registers=choice)]
    seen = forward_launch_arguments(monkeypatch, dtype, hidden, options)
    assert [kwargs["state_in_registers"] for kwargs in seen] == [expected]
    assert resolve_state_in_registers(None, "tf32", ((64, 64), (64, 64))) is True
    assert resolve_state_in_registers(None, "bf16", ((128, 64), (64, 128))) is False


def test_token_stride_reads_ranges_of_full_length_buffers():
    """The kernels take [B, T, H, *] arguments that are token ranges of [B, TS, H, *]
    buffers (views) when they share TS, and dense copies otherwise."""
    pytest.importorskip("triton")
    from titans_seq.ops.lmm.triton.launch import token_stride

    x, g = torch.zeros(2, 50, 3, 8), torch.zeros(2, 50, 3)
    assert token_stride((x, g, None)) == 50
    assert token_stride((x[:, 10:30], g[:, 10:30])) == 50  # ranges of one length
    assert token_stride((x[:, 10:30], g[:, :20].clone())) is None  # 50 against 20
    assert token_stride((x[:1, 10:30], g[:1, :20].clone())) == 20  # one row: no batch stride
    assert token_stride((x.transpose(2, 3)[:, :, :3],)) is None  # a row not dense
    assert token_stride((x[:, :, :, :4],)) is None
    assert token_stride((x, g[:, :20])) is None  # lengths differ


@pytest.mark.parametrize("overlap", [False, True])
def test_the_backward_hands_the_kernels_views_of_the_inputs_and_gradients(monkeypatch, overlap):
    """Over several blocks the checkpointed backward reads each block's inputs and writes
    its gradients through views of the full-length tensors (no copy per block), and hands
    the carried state gradient on in one pair of slot buffers, from the slot the last block
    left it in; each block's retrieval pass precedes its state pass, and on one stream the
    next block is prepared only after, once the last block's scratch is released (one
    block's scratch at a time; two with the side stream)."""
    import weakref

    pytest.importorskip("triton")
    from titans_seq.ops.lmm import lmm_memory
    from titans_seq.ops.lmm.triton import TritonOptions
    from titans_seq.ops.lmm.triton import autograd as ta

    T, C, save_every, per_block = 100, 16, 1, 3  # 7 segments: blocks of 1 and 3 and 3
    gates, weights = make_inputs(2, T, 2, 16, 2, 16)
    xs = [x.float().requires_grad_() for x in gates]
    ws = [w.float().requires_grad_() for w in weights]
    events, retrievals, states, passes, live = [], [], [], [], []

    def forward(q, k, v, theta, eta, alpha, W0, S0, G0, **kw):
        B, _, H, d = q.shape
        n_ckpt = -(-(T // C + 1) // kw["save_every"]) if kw["save_every"] else 0
        state = tuple(w.float().clone() for w in W0)
        ckpt = tuple(w.new_zeros(B, H, n_ckpt, *w.shape[2:]) for w in W0)
        return q.clone(), state, state, state, ckpt, ckpt

    def regenerate(q, k, v, theta, eta, alpha, cW, cS, G0, offset, chunk, *args, **kw):
        n = -(-q.shape[1] // chunk)
        return tuple(w.new_zeros(*w.shape[:2], n, *w.shape[3:]) for w in cW), ()

    class Pass:
        def __init__(self, n_seg):
            self.sizes = (n_seg,)

        def tensors(self):
            return []

    def retrieval(*args):
        retrievals.append(args)
        events.append("retrieval")
        live.append(sum(ref() is not None for ref in passes))  # earlier blocks' scratch held
        rp = Pass(args[7][0].shape[2])
        passes.append(weakref.ref(rp))
        return rp

    def state(rp, carried_w, carried_s, parity, dG_last):
        states.append((carried_w, carried_s, parity))
        events.append("state")

    class Streams:  # the side stream's bookkeeping, on the CPU
        def ahead(self, fn, *args):
            return fn(*args), None

        def take(self, queued):
            return queued[0]

    monkeypatch.setattr(ta, "check_device", lambda q: None)
    monkeypatch.setattr(ta, "lmm_forward_triton", forward)
    monkeypatch.setattr(ta, "regenerate_entry_states", regenerate)
    monkeypatch.setattr(ta, "retrieval_pass", retrieval)
    monkeypatch.setattr(ta, "state_pass", state)
    monkeypatch.setattr(ta, "side_stream", lambda device, wanted: Streams() if wanted else None)
    options = TritonOptions(
        save_every=save_every, regenerate_groups=per_block, overlap_backward=overlap
    )
    y, _ = lmm_memory(*xs, tuple(ws), chunk_size=C, backend="triton", triton_options=options)
    y.sum().backward()

    assert len(retrievals) == len(states) == 3
    if overlap:  # the next block's retrieval is queued before the current state pass
        assert events == ["retrieval", "retrieval", "state", "retrieval", "state", "state"]
        assert live == [0, 1, 1]
    else:
        assert events == ["retrieval", "state"] * 3
        assert live == [0, 0, 0]

    def storages(i):  # where argument i (grads: 100 + i) of each retrieval pass lies
        return {
            (args[i] if i < 100 else args[15][i - 100]).untyped_storage().data_ptr()
            for args in retrievals
        }

    for i, full in enumerate(xs):  # the saved inputs themselves, then the gradients
        if full is not None:
            assert storages(i) == {full.untyped_storage().data_ptr()}
            assert len(storages(100 + i)) == 1
    assert len(storages(6)) == 1  # dy made dense once
    assert sum(args[0].shape[1] for args in retrievals) == T
    # the first block walked (the last 3 segments) starts at slot 0; each block leaves the
    # gradient w.r.t. its entry state in slot (parity + its segments) % 2
    assert [parity for _, _, parity in states] == [0, 1, 0]
    assert all(w.shape[0] == 2 for carried_w, carried_s, _ in states for w in carried_w)
    assert len({carried_w[0].data_ptr() for carried_w, _, _ in states}) == 1  # one pair


def test_triton_options_are_validated():
    pytest.importorskip("triton")
    from titans_seq.ops.lmm import lmm_memory
    from titans_seq.ops.lmm.triton import TritonOptions

    for bad, match in (
        (dict(save_every=0), "save_every"),
        (dict(regenerate_groups=0), "regenerate_groups"),
        (dict(dot_precision="fp8"), "dot_precision"),
        (dict(backward="cuda"), "backward"),
        (dict(backward="fused"), "backward"),  # the one-pass form, removed
        (dict(state_in_registers=1), "state_in_registers"),
        (dict(overlap_backward=None), "overlap_backward"),
    ):
        with pytest.raises(ValueError, match=match):
            TritonOptions(**bad)
    gates, weights = make_inputs(1, 5, 1, 16, 2, 16)
    with pytest.raises(TypeError, match="TritonOptions"):
        lmm_memory(*[x.float() for x in gates], weights, backend="triton", triton_options={})


def test_unsupported_configurations_raise_clear_errors():
    pytest.importorskip("triton")
    from titans_seq.ops.lmm import lmm_memory

    gates, weights = make_inputs(1, 5, 1, 16, 2, 16)
    with pytest.raises(ValueError, match="float64"):
        lmm_memory(*gates, weights, backend="triton")
    gates = [x.float() for x in gates]
    with pytest.raises(ValueError, match="chunk_size=4"):
        lmm_memory(*gates, weights, chunk_size=4, backend="triton")
    g3, w3 = make_inputs(1, 5, 1, 16, 3, 16)
    with pytest.raises(ValueError, match="memory_depth=3"):
        lmm_memory(*[x.float() for x in g3], w3, backend="triton")
    # tiles wider than the kernels take (their shared memory is checked by triton/offline.py)
    g, w = make_inputs(1, 5, 1, 64, 2, 256)
    with pytest.raises(ValueError, match="shared memory"):
        lmm_memory(*[x.float() for x in g], w, backend="triton")


def test_triton_on_cpu_without_the_interpreter_raises():
    pytest.importorskip("triton")
    from titans_seq.ops.lmm import lmm_memory
    from titans_seq.ops.lmm.triton import autograd as triton_autograd

    if triton_autograd.interpreter_active():
        pytest.skip("this process runs Triton in the interpreter")
    gates, weights = make_inputs(1, 5, 1, 16, 1, 16)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        lmm_memory(*[x.float() for x in gates], weights, backend="triton")


def test_auto_picks_torch_on_cpu_and_triton_only_where_supported():
    from titans_seq.ops.lmm import resolve_backend

    assert resolve_backend("auto", torch.device("cpu")) == "torch"
    pytest.importorskip("triton")
    q = torch.zeros(1, 4, 1, 16)
    w2 = (torch.zeros(1, 16, 16), torch.zeros(1, 16, 16))
    assert resolve_backend("auto", torch.device("cuda"), q, w2, 16) == "triton"
    assert resolve_backend("auto", torch.device("cuda"), q, w2, 8) == "torch"
    assert resolve_backend("auto", torch.device("cuda"), q.double(), w2, 16) == "torch"


# many blocks of odd segment counts (bf16 inputs, two batch rows by default)
MANY_BLOCKS = {"depth": 2, "T": 300, "d": 64, "save_every": 1, "regenerate_groups": 3}
MANY_BLOCKS |= {"prefix": 5, "dtype": "bfloat16"}
GPU_CASES = [
    dict(depth=d, T=T, d=hd, dtype=dt, B=2, H=2, save_every=s)
    for d in (1, 2)
    for T, hd, s in ((1, 32, 8), (77, 64, 2), (300, 40, 8), (129, 48, 3))
    for dt in ("float32", "bfloat16")
] + [
    # a wide memory over 213 tokens: theta up to 0.3 diverges (NaN in float64 as well)
    dict(depth=2, T=200, d=32, hidden=128, prefix=13, theta_max=0.2),
    dict(depth=2, T=150, d=64, clip=0.05, activation="gelu"),
    dict(depth=1, T=150, d=48, momentum=False, chunk=32),
    dict(depth=2, T=129, d=48, save_every=3, prefix=5, dtype="bfloat16"),
    # on one stream, and with the next block's regeneration and retrieval on a side stream
    MANY_BLOCKS,
    {**MANY_BLOCKS, "overlap_backward": True},
]


@pytest.mark.gpu
@pytest.mark.parametrize("spec", GPU_CASES, ids=str)
def test_triton_gpu_matches_reference(spec):
    pytest.importorskip("triton")
    check_against_reference(**spec, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize("state_in_registers", [None, False], ids=["default", "global"])
def test_triton_gpu_bf16_dot_operands_stay_near_the_reference(depth, state_in_registers):
    """bf16 dot operands (fp32 accumulation and state): output, state and every gradient
    within 3e-2 relative of the float64 reference over 300 tokens, with the state held in
    registers (the default there) and passed through global memory."""
    pytest.importorskip("triton")
    error = check_against_reference(
        depth=depth, T=300, d=64, B=2, H=2, dot_precision="bf16", tol=3e-2, device="cuda",
        state_in_registers=state_in_registers,
    )  # fmt: skip
    print(f"bf16 dot operands, depth {depth}: largest relative error {error:.2e}")


@pytest.mark.gpu
@pytest.mark.parametrize("depth", [1, 2])
def test_triton_gpu_overlapped_backward_equals_one_stream(depth):
    """The backward with the next block's regeneration and retrieval pass on a side stream
    gives the gradients of the one-stream backward bit for bit (the same kernels on the
    same values), over many blocks, one sequence and four heads as at long context."""
    pytest.importorskip("triton")
    from titans_seq.ops.lmm import lmm_memory
    from titans_seq.ops.lmm.triton import TritonOptions

    gates, weights = make_inputs(1, 1000, 4, 64, depth, 64, seed=7)
    results = []
    for overlap in (False, True):
        xs = _leaves(gates, torch.bfloat16, "cuda")
        ws = _leaves(weights, torch.float32, "cuda")
        options = TritonOptions(save_every=2, regenerate_groups=2, overlap_backward=overlap)
        y, _ = lmm_memory(*xs, tuple(ws), backend="triton", triton_options=options)
        loss = (y.float() * torch.linspace(-1, 1, y.numel(), device="cuda").view_as(y)).sum()
        inputs = [x for x in (*xs, *ws) if x is not None]
        results.append(torch.autograd.grad(loss, inputs))
    for a, b in zip(*results):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("dot_precision, tol", [("ieee", 1e-5), ("tf32", 5e-2)])
def test_triton_gpu_streaming_equals_one_shot(dot_precision, tol):
    """The interpreter's streaming check at GPU shapes (300 tokens, 4 heads of 64).

    tf32's tolerance: on an H200 (Triton 3.6) tf32 dots gave 6.9e-3 on y against float64
    and up to 2.6e-2 between the final states of a one-shot call and of pieces alternating
    tf32 Triton and fp32 torch: some fifty times tf32's unit roundoff (2^-11), the growth
    that 300 tokens of the memory's recurrence give a rounding error on these inputs. A
    kernel error shows as O(1). The interpreter computes tf32 as fp32, so only a GPU shows
    this."""
    pytest.importorskip("triton")
    check_streaming_equals_one_shot(
        T=300, H=4, d=64, cuts=(5, 150, 151), seed=3, device="cuda",
        dot_precision=dot_precision, tol=tol,
    )  # fmt: skip


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    interpreter_helpers.report_cases(run_case, sys.argv[1:])
