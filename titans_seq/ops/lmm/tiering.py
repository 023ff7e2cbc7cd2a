"""When `backend="auto"` on a CPU moves a memory layer from eager to compiled chunk steps.

The "compiled" backend runs a call's full chunks through Inductor-compiled code (on a CPU
one loop per direction, `chunk_scan.py`): 1.4-3x faster per training call than the eager
"torch" steps, after a one-off compilation of 35-70 s per layout on a 2-core CPU (about
15 s when Inductor's on-disk cache already holds the compiled code;
benchmarks/results/NOTES.md). Whether that pays depends on how much training the layer
will still do.

A training run knows: the loop tells each layer how many training calls the run will make
(`plan_compilation`), and the layer compiles from its first training call when that call's
work times the planned calls exceeds the threshold. Without a plan (a custom loop, a
notebook) `CompileTier` answers as a ski-rental rule does: a layer stays eager until the
training work it has done eagerly is about what a cold compilation costs, then compiles.
A short call or a small fit never pays for a compilation; a long run pays it once.

Work is counted, not timed, so the switch happens at the same call on every machine and a
resumed run switches where the uninterrupted one did (the training loop checkpoints the
counts; the plan is read at the first training call only): tokens x heads x memory weights
per head, summed over the calls that trained (gradients on, at least one full chunk).
Inference (no gradients) stays eager: evaluation batch sizes differ from training's, and
each new batch size is another compilation. Nothing changes on a GPU ("auto" takes the
Triton kernels there) or for an explicit backend.
"""

from __future__ import annotations

import dataclasses

import torch

# Work units (tokens x heads x memory weights per head) of training that weigh one cold
# compilation of a layer's steps (35-85 s on a 2-core CPU): eager training
# costs about 9 ns a unit (2 threads, heads of 16-64, depth 2). Without a plan a layer
# compiles after this much eager work (ski rental: never more than twice the cost of the
# better choice). With a plan it compiles from the first call when the planned work exceeds
# this; the compiled steps save about half of each unit or more, so a first run on a cold
# cache about breaks even and every later one (a warm cache compiles in about 15 s) gains.
DEFAULT_WORK_BEFORE_COMPILING = 9.0e9


@dataclasses.dataclass
class CompileTier:
    """A memory layer's eager-or-compiled state under `backend="auto"` on a CPU.

    work_before_compiling: training work (units above) that pays for a compilation: eager
        work after which the layer compiles, or planned work from which it compiles at once;
        0 compiles from the first training call, `math.inf` never does.
    work: eager training work done so far.
    compiled: whether the layer has switched (it never switches back).
    planned_calls: training calls the current run will make (`plan_compilation`), read at
        the layer's first training call; None: no plan, the ski-rental rule alone.
    """

    work_before_compiling: float = DEFAULT_WORK_BEFORE_COMPILING
    work: float = 0.0
    compiled: bool = False
    planned_calls: int | None = None

    def backend(
        self,
        requested: str,
        q_shape: torch.Size | tuple[int, ...],
        device: torch.device,
        weights,
        chunk_size: int,
    ) -> str:
        """The backend a call runs: `requested` unless it is "auto" on a CPU and this call
        trains with at least one full chunk (q_shape: [B, T, H, d]), in which case "compiled"
        from the first such call when this call's work times `planned_calls` exceeds
        `work_before_compiling`, else once the layer's eager work has; "auto" (eager
        steps) before. weights: the layer's memory weights, [H, out, in] each."""
        if requested != "auto" or torch.device(device).type != "cpu":
            return requested
        B, T, H = q_shape[0], q_shape[1], q_shape[2]
        if not torch.is_grad_enabled() or T < chunk_size or torch.compiler.is_compiling():
            return "auto"
        if self.compiled:
            return "compiled"
        weights_per_head = sum(w[0].numel() for w in weights)
        call_work = float(B) * T * H * weights_per_head
        planned = self.planned_calls if self.work == 0 else None  # the first call decides
        if planned is not None and call_work * planned > self.work_before_compiling:
            self.compiled = True
            return "compiled"
        self.work += call_work
        if self.work > self.work_before_compiling:
            self.compiled = True
            return "compiled"
        return "auto"

    def state_dict(self) -> dict:
        return {"work": self.work, "compiled": self.compiled}

    def load_state_dict(self, state: dict) -> None:
        self.work, self.compiled = float(state["work"]), bool(state["compiled"])


def memory_tiers(model: torch.nn.Module):
    """(module name, `CompileTier`) of every memory layer in `model`."""
    for name, module in model.named_modules():
        tier = getattr(module, "compile_tier", None)
        if isinstance(tier, CompileTier):
            yield name, tier


def plan_compilation(model: torch.nn.Module, calls: int | None) -> None:
    """Tell every memory layer of `model` how many training calls the coming run makes (per
    layer: optimizer steps x micro-batches); None withdraws the plan. A layer that has
    already trained keeps its course, so a resumed run follows the uninterrupted one."""
    for _, tier in memory_tiers(model):
        tier.planned_calls = calls


def tier_states(model: torch.nn.Module) -> dict[str, dict]:
    """Every memory layer's `CompileTier` state, by module name (for a checkpoint)."""
    return {name: tier.state_dict() for name, tier in memory_tiers(model)}


def load_tier_states(model: torch.nn.Module, states: dict[str, dict]) -> None:
    """Restore `tier_states` into the layers of the same names (others keep theirs)."""
    for name, tier in memory_tiers(model):
        if name in states:
            tier.load_state_dict(states[name])
