"""The support guard against the kernels compiled ahead of time for Hopper (sm_90), on CPU:
every variant `unsupported_reason` accepts must fit in the GPU's shared memory."""

import pytest

pytest.importorskip("triton")

from titans_seq.ops.lmm.triton.autograd import tiles_supported  # noqa: E402
from titans_seq.ops.lmm.triton.offline import (  # noqa: E402
    SHARED_MEMORY_LIMIT,
    KernelVariant,
    accepted_variants,
    compile_variant,
    is_opcode,
    maximal_variants,
    resource_usage,
    sass_instructions,
)

LIMIT = SHARED_MEMORY_LIMIT[90]


def fits(variant):
    usage = resource_usage(compile_variant(variant))
    assert usage["registers"] > 0 and usage["instructions"] > 0
    return usage["shared_bytes"], usage


@pytest.mark.parametrize(
    "variant",
    [
        KernelVariant("backward", 64, 64, 2, 16),
        KernelVariant("backward", 32, 128, 2, 16),
        KernelVariant("backward-retrieval", 64, 64, 2, 16),
        KernelVariant("forward", 64, 64, 2, 16),
        KernelVariant("regenerate", 64, 64, 2, 16),
        KernelVariant("backward-gates", 64, 64, 2, 16),
    ],
    ids=lambda v: f"{v.kernel}-{v.D}x{v.HID}-C{v.chunk}",
)
def test_the_largest_default_tiles_fit_hopper_shared_memory(variant):
    assert tiles_supported(variant.D, variant.HID, variant.chunk)
    shared, usage = fits(variant)
    assert shared <= LIMIT, usage


@pytest.mark.parametrize("kernel", ["backward", "backward-retrieval"])
def test_fp32_dot_backward_kernels_get_the_pinned_register_budget(kernel):
    """Left to choose, ptxas built these (fp32 "ieee" dots, d = h = 64) with 32 registers
    and thousands of spill stores per chunk step; launched with
    `triton.backward.BACKWARD_MAX_REGISTERS` they keep the full budget."""
    from titans_seq.ops.lmm.triton.backward import BACKWARD_MAX_REGISTERS

    _, usage = fits(KernelVariant(kernel, 64, 64, 2, 16, "ieee"))
    assert usage["registers"] == BACKWARD_MAX_REGISTERS, usage


@pytest.mark.parametrize(
    "kernel, precision",
    [("backward", "bf16"), ("backward", "tf32"), ("backward-retrieval", "bf16"),
     ("backward-retrieval", "tf32")],
)  # fmt: skip
def test_the_split_backward_has_no_spill_stores_per_chunk_step(kernel, precision):
    """The split backward's register choices (`mm_by_state`, `state_tiles_at`, the
    retrieval's shares read after the carried adjoint, the segment index through
    `opaque_index`, the token tiles and addresses rebuilt late in a step) took its spill
    stores per chunk step from 131 to 0 (sequential, bf16), 158 to 0 (tf32), and the
    retrieval pass's from 19 and 52 to 0 (sm_90, Triton 3.9, benchmarks/results/NOTES.md). The
    bound of 2 leaves room for another Triton's register allocation but not for undoing one
    of the last choices (each was worth 4-30 spill stores per step)."""
    _, usage = fits(KernelVariant(kernel, 64, 64, 2, 16, precision))
    assert usage["loop_spill_stores"] <= 2, usage


@pytest.mark.parametrize("kernel", ["forward-registers", "regenerate-registers"])
def test_the_state_in_registers_variants_fit_without_spills_at_bf16_dots(kernel):
    """The forward and the regeneration holding the state in registers
    (`TritonOptions.state_in_registers`): at d = h = 64 with bf16 dot operands, the
    precision a bf16-autocast model runs, the four state tiles fit the register file
    beside a chunk step's work (sm_90: no spill stores; fewer instructions per step than
    the two-slot kernel, which reads and writes the state every step)."""
    _, usage = fits(KernelVariant(kernel, 64, 64, 2, 16, "bf16"))
    _, default = fits(KernelVariant(kernel.removesuffix("-registers"), 64, 64, 2, 16, "bf16"))
    assert usage["loop_spill_stores"] <= 2, usage
    assert usage["loop_instructions"] < default["loop_instructions"], (usage, default)


@pytest.mark.parametrize("kernel", ["forward", "backward"])
def test_bf16_dot_operands_compile_with_less_shared_memory_and_code(kernel):
    """The bf16-operand option (`TritonOptions(dot_precision="bf16")`) builds for sm_90 and
    is leaner than fp32 operands (its numerics are a GPU test: the interpreter's bf16 dots
    are not exact enough to judge)."""
    _, bf16 = fits(KernelVariant(kernel, 64, 64, 2, 16, "bf16"))
    _, ieee = fits(KernelVariant(kernel, 64, 64, 2, 16, "ieee"))
    assert bf16["shared_bytes"] < ieee["shared_bytes"] <= LIMIT
    assert bf16["instructions"] < ieee["instructions"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "variant",
    maximal_variants(accepted_variants()),
    ids=lambda v: f"{v.kernel}-d{v.depth}-{v.D}x{v.HID}-C{v.chunk}",
)
def test_every_accepted_variant_fits_hopper_shared_memory(variant):
    shared, usage = fits(variant)
    assert shared <= LIMIT, usage


@pytest.mark.slow
def test_chunks_of_128_are_refused_for_what_they_cost():
    """At chunk 128 the gate pass's fp32 broadcast-and-sum over [C, C, C] (2^21 elements)
    is over Triton's tensor limit of 2^20, and the kernels that do build spill thousands of
    values per chunk step: the guard refuses the chunk."""
    from triton.compiler.errors import CompilationError

    assert not tiles_supported(32, 32, 128)
    with pytest.raises(CompilationError) as raised:
        fits(KernelVariant("backward-gates", 32, 32, 1, 128))
    causes, error = [], raised.value
    while error is not None:  # the tensor-size error is the innermost cause
        causes.append(str(error))
        error = error.__cause__
    assert any("numel" in cause for cause in causes), causes[-1]
    for kernel in ("regenerate", "backward"):
        _, usage = fits(KernelVariant(kernel, 32, 32, 1, 128))
        assert usage["loop_spill_stores"] > 1000, (kernel, usage)


def test_the_guard_accepts_the_documented_shapes():
    assert tiles_supported(64, 64, 32) and tiles_supported(128, 32, 16)
    assert tiles_supported(64, 128, 16) and tiles_supported(128, 128, 32)
    assert not tiles_supported(256, 64, 16) and not tiles_supported(64, 256, 16)
    assert not tiles_supported(32, 32, 64)  # the chunk's tiles push the backward over
    assert {(v.D, v.HID) for v in accepted_variants(("forward",)) if v.depth == 1} == {
        (16, 16),
        (32, 32),
        (64, 64),
        (128, 128),
    }


def test_sass_counts_read_only_the_kernel_text_and_find_the_segment_loop():
    """Debug and info sections hold `/*addr*/` lines too: they are not instructions. The
    loop is the span from its backward branch's target to the branch."""
    sass = "\n".join(
        [
            '\t.section\t.nv_debug_ptx_txt,"",@progbits',
            "        /*0000*/ \t.byte\t0x2f, 0x2f",
            '\t.section\t.text._lmm_bwd_kernel,"ax",@progbits',
            "        /*0000*/                   LDC R1, c[0x0][0x28] ;",
            "        /*0010*/                   STL [R1+0x8], R2 ;",
            ".L_x_0:",
            "        /*0020*/                   FFMA R2, R3, R4, R2 ;",
            "        /*0030*/              @P0 STL.64 [R1+0x10], R6 ;",
            "        /*0040*/                   LDL R7, [R1+0x8] ;",
            "        /*0050*/              @P1 BRA `(.L_x_0) ;",
            "        /*0060*/                   EXIT ;",
            ".L_x_1:",
            "        /*0070*/                   BRA `(.L_x_1);",
            '\t.section\t.nv.info,"",@"SHT_CUDA_INFO"',
            "        /*0004*/ \t.word\tindex@(_lmm_bwd_kernel)",
        ]
    )
    instructions, loop = sass_instructions(sass)
    assert [address for address, _ in instructions] == [0, 16, 32, 48, 64, 80, 96, 112]
    assert [address for address, _ in loop] == [32, 48, 64, 80]
    assert sum(is_opcode(text, "STL") for _, text in instructions) == 2
    assert sum(is_opcode(text, "STL") for _, text in loop) == 1


@pytest.mark.parametrize("kernel", ["forward", "backward"])
@pytest.mark.parametrize("io_dtype", ["bf16", "fp32"])
def test_causal_conv_kernels_do_not_spill_on_hopper(kernel, io_dtype):
    """The convolution's tiles are sized so that neither kernel spills registers on sm_90
    (larger tiles did, in both)."""
    from titans_seq.ops.causal_conv.offline import compile_kernel

    usage = resource_usage(compile_kernel(kernel, io_dtype, K=4))
    assert 0 < usage["registers"] <= 255 and usage["spill_stores"] == 0, usage


@pytest.mark.parametrize("io_dtype", ["bf16", "fp32"])
def test_causal_conv_backward_walks_its_strip_without_barriers(io_dtype):
    """The backward sums the weight and bias gradients over time once per strip, not per
    tile: its time loop holds no barrier, and in a training step (no cache) it takes at
    most 128 registers, so two blocks of 8 warps share a multiprocessor of sm_90."""
    from titans_seq.ops.causal_conv.offline import compile_kernel

    usage = resource_usage(compile_kernel("backward", io_dtype, K=4, cache=False))
    assert usage["loop_barriers"] == 0 and usage["spill_stores"] == 0, usage
    assert usage["registers"] <= 128, usage
