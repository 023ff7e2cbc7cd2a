"""Look inside the Titans memories of a mixer or a whole model: surprise, gates, clip.

    import titans_seq as ts
    with ts.record_memory(model) as recording:     # any nn.Module holding Titans memories
        model(x)
    recording.summary()                            # per memory: mean surprise, clip share...
    trace = recording.traces[0]                    # MemoryRecord(name, trace [B, T, H] fields)
    ts.plot_memory_trace(recording, "memory.png")  # surprise, loss, gates, clip over tokens

Every `NeuralMemory` inside the model (the `lmm` mixer and the MAC/MAG/MAL hybrids) reports,
per call, the per-token quantities of `titans_seq.ops.lmm.trace.MemoryTrace`: the surprise
||u_t|| (the inner-gradient norm, before any clip), the inner loss, theta/eta/alpha and the
clip factor. A call that continues a stream (a state was passed, e.g. the segments of MAC or
a streamed generation) is appended to the same record along the time axis; a call on a
fresh stream starts a new record (a bidirectional classifier gives one record per reading
direction). Persistent tokens that a mixer prepends are left out.

Recording costs a second, gradient-free pass of each memory; outputs and gradients of the
model are unchanged. From the command line: `titans-seq inspect-memory RUN_FOLDER`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from torch import nn

from .mixers.neural_memory import NeuralMemory
from .ops.lmm.trace import TRACE_FIELDS, MemoryTrace


@dataclasses.dataclass
class MemoryRecord:
    """One stream through one memory: `name` is the memory's module path in the model."""

    name: str
    trace: MemoryTrace


@dataclasses.dataclass
class MemoryRecording:
    """The records of one `record_memory` block, in call order."""

    traces: list[MemoryRecord] = dataclasses.field(default_factory=list)

    def names(self) -> list[str]:
        """Module paths of the memories that were called, in first-call order."""
        return list(dict.fromkeys(r.name for r in self.traces))

    def summary(self) -> dict[str, dict[str, float]]:
        """Per memory (module path): `MemoryTrace.summary()` over all its records."""
        out = {}
        for name in self.names():
            records = [r.trace for r in self.traces if r.name == name]
            merged = _merge_batches(records)
            out[name] = merged.summary()
        return out

    def clip_active(self) -> float:
        """Share of (token, head) writes that the inner-gradient clip scaled, over every
        memory and record (0.0 when nothing was recorded)."""
        total = sum(r.trace.clip_factor.numel() for r in self.traces)
        if total == 0:
            return 0.0
        clipped = sum(int((r.trace.clip_factor < 1).sum()) for r in self.traces)
        return clipped / total


def _merge_batches(traces: list[MemoryTrace]) -> MemoryTrace:
    """Records of different streams flattened to one [1, sum of B*T, H] trace (for means)."""
    import torch

    return MemoryTrace(
        *(
            torch.cat([getattr(t, f).reshape(1, -1, getattr(t, f).shape[-1]) for t in traces], 1)
            for f in TRACE_FIELDS
        )
    )


def memory_modules(model: nn.Module) -> list[tuple[str, NeuralMemory]]:
    """(module path, memory) of every Titans memory inside `model` (model itself included)."""
    return [
        (name or "memory", m) for name, m in model.named_modules() if isinstance(m, NeuralMemory)
    ]


@contextlib.contextmanager
def record_memory(model: nn.Module):
    """Record every Titans memory of `model` while the block runs; yields a MemoryRecording.

    Raises ValueError when the model holds no Titans memory (e.g. an attention baseline).
    """
    modules = memory_modules(model)
    if not modules:
        raise ValueError(
            f"{type(model).__name__} holds no Titans memory (lmm, mac, mag or mal mixer): "
            "there is nothing to record"
        )
    recording = MemoryRecording()
    open_records: dict[int, MemoryRecord] = {}  # memory id -> its record of the current stream

    def recorder_for(name: str):
        def record(module: NeuralMemory, trace: MemoryTrace, continues: bool) -> None:
            current = open_records.get(id(module))
            same_stream = (
                continues
                and current is not None
                and current.trace.surprise.shape[0] == trace.surprise.shape[0]
            )
            if same_stream:
                current.trace = current.trace.cat(trace.cpu())
            else:
                current = MemoryRecord(name, trace.cpu())
                recording.traces.append(current)
                open_records[id(module)] = current

        return record

    previous = [(m, m.recorder) for _, m in modules]
    for name, module in modules:
        module.recorder = recorder_for(name)
    try:
        yield recording
    finally:
        for module, recorder in previous:
            module.recorder = recorder


def plot_memory_trace(
    source: MemoryRecording | MemoryTrace,
    path: str | Path,
    example: int = 0,
    title: str | None = None,
) -> Path:
    """Plot surprise, inner loss, gates and clip factor over the tokens of one example.

    source: a recording (one line per record, mean over heads) or a single trace (one line
    per head); example: which batch row. Writes a PNG (or any format matplotlib infers from
    the suffix) and returns its path.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    if isinstance(source, MemoryTrace):
        series = [(f"head {h}", source, h) for h in range(source.surprise.shape[-1])]
    else:
        if not source.traces:
            raise ValueError("the recording is empty: run the model inside record_memory first")
        series = [(f"{r.name} #{i}", r.trace, None) for i, r in enumerate(source.traces)]

    def row(trace: MemoryTrace, field: str, head):
        values = getattr(trace, field)
        if example >= values.shape[0]:
            raise ValueError(f"example={example} but the batch has {values.shape[0]} rows")
        values = values[example]
        return (values.mean(-1) if head is None else values[:, head]).numpy()

    panels = [
        ("surprise ||u_t||", ["surprise"]),
        ("inner loss ||f(k_t) - v_t||²", ["loss"]),
        ("gates", ["theta", "eta", "alpha"]),
        ("clip factor", ["clip_factor"]),
    ]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 9), sharex=True)
    for ax, (label, fields) in zip(axes, panels):
        for name, trace, head in series:
            for field in fields:
                tag = name if len(fields) == 1 else f"{field} ({name})"
                ax.plot(row(trace, field, head), label=tag, linewidth=0.9)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_yscale("log")
    axes[1].set_yscale("log")
    axes[-1].set_ylim(0, 1.05)
    axes[-1].set_xlabel("token")
    handles, labels = axes[2].get_legend_handles_labels()
    if len(labels) <= 12:
        axes[2].legend(fontsize=7, loc="upper right")
    if len(series) <= 8:
        axes[0].legend(fontsize=7, loc="upper right")
    fig.suptitle(title or "Titans memory: per-token surprise, loss, gates and clip")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
