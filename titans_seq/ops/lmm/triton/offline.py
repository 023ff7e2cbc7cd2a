"""Ahead-of-time compilation of the Triton memory kernels for a GPU that is not here.

Triton compiles for any CUDA target on a CPU machine (`triton.compile(ASTSource(...),
target=GPUTarget("cuda", 90, 32))`); the cubin then tells what a first GPU run would meet:
registers, spill stack, shared memory, and the SASS instruction mix (`cuobjdump` and
`nvdisasm`, bundled with Triton's NVIDIA backend). This is how the support guard
(`autograd.unsupported_reason`) is kept honest: every variant it accepts must fit in
the shared memory of the target (a test compiles them), and `benchmarks/triton_resources.py`
prints the table.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile
from pathlib import Path

# Hopper (sm_90): 227 KB of shared memory per block at most (the opt-in maximum)
SHARED_MEMORY_LIMIT = {90: 227 * 1024}


@dataclasses.dataclass(frozen=True)
class KernelVariant:
    """One compiled specialisation: kernel "forward", "regenerate" (the forward without
    retrieval, as the backward launches it to rebuild segment-entry states),
    "backward-retrieval", "backward" and "backward-gates" (the backward's three passes: the
    retrieval's adjoint parallel over segments, the sequential walk, the gate gradients
    parallel over segments), padded tiles D (head dim) and HID (hidden width; = D at depth
    1), memory depth, chunk size C, dot precision, and the dtype of q/k/v (and y/dy);
    `VARIANT_KERNELS` name the optional variants of the forward and the regeneration."""

    kernel: str
    D: int
    HID: int
    depth: int = 2
    chunk: int = 16
    precision: str = "ieee"
    io_dtype: str = "bf16"

    def constexprs(self) -> dict:
        shared = dict(
            C=self.chunk,
            D=self.D,
            HID=self.HID,
            DEPTH=self.depth,
            HAS_ETA=True,
            HAS_ALPHA=True,
            HAS_CLIP=True,
            EXACT=True,
            ACT=0,
            PREC=self.precision,
        )
        if self.kernel in ("forward", "forward-registers"):
            return shared | dict(SAVE=True, SAVE_EVERY=4, RETRIEVE=True, FIRST_G0=False)
        if self.kernel in ("regenerate", "regenerate-registers"):
            return shared | dict(SAVE=True, SAVE_EVERY=1, RETRIEVE=False, FIRST_G0=False)
        if self.kernel == "backward-retrieval":
            return shared | dict(FIRST_G0=False)
        if self.kernel == "backward-gates":
            from .backward import GATES_CONSTEXPRS

            return {name: shared[name] for name in GATES_CONSTEXPRS}
        return shared | dict(FIRST_G0=False, LAST_DG=False, PTX=True)


KERNELS = (
    "forward",
    "regenerate",
    "backward-retrieval",
    "backward",
    "backward-gates",
)
# kernel variants behind an option (`TritonOptions.state_in_registers`, by default on for
# bf16 or tf32 dots and tiles up to 64 x 64): the forward and the regeneration with the
# running state held in registers across chunk steps
VARIANT_KERNELS = ("forward-registers", "regenerate-registers")


def _kernel(name: str):
    from . import backward, forward

    if name in ("forward", "regenerate"):
        return forward._lmm_fwd_kernel
    if name in VARIANT_KERNELS:
        return forward._lmm_fwd_registers_kernel
    if name == "backward-retrieval":
        return backward._lmm_bwd_retrieval_kernel
    if name == "backward-gates":
        return backward._lmm_bwd_gates_kernel
    if name == "backward":
        return backward._lmm_bwd_kernel
    raise ValueError(f"kernel must be one of {KERNELS}, got {name!r}")


def _signature(kernel, constexprs: dict, io_dtype: str) -> dict[str, str]:
    """Triton type strings of the kernel's arguments: q/k/v/y/dy and their gradients
    dq/dk/dv in `io_dtype`, every other pointer fp32 (gates, states, state gradients,
    scratch), `clip` fp32, the sizes i32."""
    signature = {}
    for name in kernel.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            io = name[: -len("_ptr")] in ("q", "k", "v", "y", "dy", "dq", "dkout", "dv")
            signature[name] = f"*{io_dtype}" if io else "*fp32"
        elif name == "clip":
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
    return signature


def compile_variant(variant: KernelVariant, arch: int = 90):
    """The variant compiled for CUDA sm_`arch` (no GPU needed), with the launch options the
    launchers use (num_stages=1, see `launch.NUM_STAGES`; the warps; the backward
    kernels' register budget, `backward.BACKWARD_MAX_REGISTERS`)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .launch import NUM_STAGES, num_warps

    kernel = _kernel(variant.kernel)
    constexprs = variant.constexprs()
    source = ASTSource(kernel, _signature(kernel, constexprs, variant.io_dtype), constexprs)
    from .backward import BACKWARD_MAX_REGISTERS, GATES_NUM_WARPS

    options = {"num_warps": num_warps(variant.D, variant.HID), "num_stages": NUM_STAGES}
    if variant.kernel == "backward-gates":
        options["num_warps"] = GATES_NUM_WARPS
    elif variant.kernel.startswith("backward"):
        options["maxnreg"] = BACKWARD_MAX_REGISTERS
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def _tool(name: str) -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def resource_usage(compiled) -> dict[str, int]:
    """registers and spill stack per thread (bytes), shared memory per block (bytes), and
    the static SASS counts of the kernel (instructions, spill stores STL, spill loads LDL) and
    of its segment loop (instructions, spill stores, spill loads and barriers per chunk step
    per warp:
    a value spilled before the loop and re-loaded in every step counts as a load; a kernel
    without a loop, one segment per program, counts its whole code as one step)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as handle:
        handle.write(compiled.asm["cubin"])
        path = handle.name
    try:
        usage = subprocess.run(
            [_tool("cuobjdump"), "--dump-resource-usage", path],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        sass = subprocess.run(
            [_tool("nvdisasm"), path], capture_output=True, text=True, check=True
        ).stdout
    finally:
        os.unlink(path)
    registers = re.search(r"REG:(\d+)", usage)
    stack = re.search(r"STACK:(\d+)", usage)
    instructions, loop = sass_instructions(sass)
    loop = loop or instructions
    return {
        "registers": int(registers.group(1)) if registers else -1,
        "spill_stack_bytes": int(stack.group(1)) if stack else -1,
        "shared_bytes": int(compiled.metadata.shared),
        "instructions": len(instructions),
        "spill_stores": sum(is_opcode(text, "STL") for _, text in instructions),
        "spill_loads": sum(is_opcode(text, "LDL") for _, text in instructions),
        "loop_instructions": len(loop),
        "loop_spill_stores": sum(is_opcode(text, "STL") for _, text in loop),
        "loop_spill_loads": sum(is_opcode(text, "LDL") for _, text in loop),
        "loop_barriers": sum(is_opcode(text, "BAR") for _, text in loop),
    }


def is_opcode(text: str, opcode: str) -> bool:
    """Whether the instruction (predicate and all) is `opcode` (any width: STL.64, ...)."""
    return re.match(rf"(@!?U?P\w+\s+)?{opcode}\b", text) is not None


_INSTRUCTION = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(\S.*)$")


def sass_instructions(sass: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """The (address, text) of every instruction of the kernel's `.text` section (the cubin's
    debug and info sections hold lines of the same shape, so they are skipped), and those of
    its longest loop (the segment loop, from the target of its backward branch to the
    branch): the instructions one chunk step executes per warp."""
    instructions, labels, in_text, pending = [], {}, False, []
    for line in sass.splitlines():
        if line.lstrip().startswith(".section"):
            in_text = ".text." in line
            continue
        if not in_text:
            continue
        label = re.match(r"^(\.L\w+):", line)
        if label:
            pending.append(label.group(1))
            continue
        match = _INSTRUCTION.match(line)
        if match:
            address = int(match.group(1), 16)
            for name in pending:
                labels[name] = address
            pending = []
            instructions.append((address, match.group(2)))
    loop: list[tuple[int, str]] = []
    for address, text in instructions:
        target = re.search(r"BRA\s+`?\(?(\.L\w+)", text)
        start = labels.get(target.group(1)) if target else None
        if start is not None and start < address:
            body = [(a, t) for a, t in instructions if start <= a <= address]
            loop = body if len(body) > len(loop) else loop
    return instructions, loop


def accepted_variants(kernels=KERNELS) -> list[KernelVariant]:
    """Every tile shape and chunk size the support guard accepts (depth 1: HID = D)."""
    from .autograd import tiles_supported

    sizes = (16, 32, 64, 128)  # padded tiles and chunk sizes alike
    found = []
    for kernel in kernels:
        for depth in (1, 2):
            for D in sizes:
                for HID in sizes if depth == 2 else (D,):
                    for chunk in sizes:
                        if tiles_supported(D, HID, chunk):
                            found.append(KernelVariant(kernel, D, HID, depth, chunk))
    return found


def maximal_variants(variants: list[KernelVariant]) -> list[KernelVariant]:
    """The variants no other one of the same kernel and depth exceeds in every size (D, HID,
    chunk): shared memory grows with each, so these bound the others' use."""

    def dominated(v: KernelVariant, w: KernelVariant) -> bool:
        same = (v.kernel, v.depth) == (w.kernel, w.depth) and v != w
        return same and w.D >= v.D and w.HID >= v.HID and w.chunk >= v.chunk

    return [v for v in variants if not any(dominated(v, w) for w in variants)]
