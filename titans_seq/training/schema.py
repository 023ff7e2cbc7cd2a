"""The run configuration's schema: the engine's sections (`optim`, `train`, `eval`) and
`RunConfig`, the validated recipe.

`model` and `data` belong to the task, which declares their dataclasses (see
`titans_seq.training.tasks`); recipe files are read by `titans_seq.training.recipe_files`
and validated into a `RunConfig` by `titans_seq.training.config`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import yaml

from ..errors import ConfigError
from ..typed_config import to_plain

__all__ = [
    "ENGINE_SECTIONS",
    "TOP_LEVEL_KEYS",
    "ConfigError",
    "EvalConfig",
    "OptimConfig",
    "RunConfig",
    "StreamsConfig",
    "TrainConfig",
]


@dataclasses.dataclass
class OptimConfig:
    """AdamW with decoupled weight decay and a linear-warmup + cosine learning-rate schedule."""

    lr: float = 1e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    warmup_steps: int = 100
    # the cosine decays from lr to lr * min_lr_ratio at train.max_steps
    min_lr_ratio: float = 0.1
    # global gradient-norm clipping; null disables it
    grad_clip: float | None = 1.0
    # parameters whose name contains one of these substrings get no weight decay (1-D
    # parameters such as norms and biases never get any)
    no_decay: list[str] = dataclasses.field(default_factory=lambda: ["persistent"])
    # evaluate, keep as best and hand on an exponential moving average of the trained
    # weights over about 1 / (1 - ema_decay) steps (`weight_average.py`); null: the trained
    # weights themselves
    ema_decay: float | None = None


@dataclasses.dataclass
class TrainConfig:
    """How long and how to train; `batch_size` is the global batch of one optimizer step."""

    max_steps: int = 1000
    # start from trained weights: a run folder (its best weights, else its newest checkpoint)
    # or a .safetensors file of the same model (the optimizer and schedule start fresh);
    # null: the task's initialisation. A resumed run continues from its checkpoint instead
    init_from: str | None = None
    # examples per optimizer step, summed over processes and accumulation micro-steps
    batch_size: int = 32
    grad_accum: int = 1
    seed: int = 0
    deterministic: bool = False
    # "auto": bf16 autocast on a GPU that supports it, fp16 (+ loss scaling) on older GPUs,
    # fp32 on CPU
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    # "auto": cuda:LOCAL_RANK when CUDA is available, else cpu
    device: str = "auto"
    # CPU threads: "auto" uses the cores other work leaves free when the run starts (at
    # most torch's own count); a number pins it (for the same rounding on any machine load)
    threads: int | Literal["auto"] = "auto"
    # torch.set_float32_matmul_precision for the run (restored after it): "high" = tf32 and
    # "medium" = bf16 operands for fp32 matmuls, the Triton memory kernels' dots included;
    # null leaves the process's setting ("highest" unless set)
    float32_matmul_precision: Literal["highest", "high", "medium"] | None = None
    # torch.compile the model for the training steps (evaluation stays eager): "auto" on a
    # CUDA device for runs of at least 500 steps, which repay the one-off compilation (not
    # for a model sharded with FSDP)
    compile: bool | Literal["auto"] = "auto"
    # multi-process strategy under torchrun: "ddp" replicates, "fsdp" shards (FSDP2)
    distributed: Literal["ddp", "fsdp"] = "ddp"
    log_every: int = 10
    checkpoint_every: int = 100
    keep_checkpoints: int = 2
    # "{name}" is replaced by the recipe name
    out_dir: str = "runs/{name}"
    progress: bool = True
    # TensorBoard event files in <run>/tensorboard: "auto" when the tensorboard package is
    # installed, true asks for them (a warning says so when the package is missing), false
    # never; the CSV logs are written in every case
    tensorboard: bool | Literal["auto"] = "auto"
    # experiment trackers beside the CSV logs, each an optional package (trackers.py):
    # "mlflow" (into mlflow_uri; null: sqlite:///<run>/mlflow.db) and "wandb" (wandb_mode)
    trackers: list[Literal["mlflow", "wandb"]] = dataclasses.field(default_factory=list)
    mlflow_uri: str | None = None
    wandb_mode: Literal["offline", "online"] = "offline"
    plot: bool = True
    # peak FLOP/s of one device for the model-FLOPs-utilization log (e.g. 989.0e12 for an
    # H100 SXM in bf16); null: looked up for known GPUs (`logs.peak_flops`), else no MFU
    peak_flops: float | None = None
    # steps with a NaN/inf loss or gradient norm that are skipped (no optimizer step) before
    # the run stops with TrainingDiverged; 0: stop at the first one
    skip_nonfinite: int = 0


@dataclasses.dataclass
class EvalConfig:
    """Periodic validation and early stopping on one of the task's metrics."""

    every: int = 100
    # examples per validation batch; null: train.batch_size
    batch_size: int | None = None
    # at most this many validation batches per evaluation; null: the whole validation split
    max_batches: int | None = None
    metric: str = "loss"
    mode: Literal["min", "max"] = "min"
    # stop after this many evaluations without an improvement of at least min_delta; 0: never
    patience: int = 0
    min_delta: float = 0.0


@dataclasses.dataclass
class StreamsConfig:
    """Training with the model's state carried through long streams (`streams.py`).

    Each training example becomes a stream of `segments` consecutive segments of
    `segment_length` tokens; the model reads them one call at a time, its state carried
    from each segment to the next, so its memory learns to serve tokens far past one
    segment. The defaults (one segment, no state passing) train every example in one call
    from a fresh state.
    """

    # segments per stream; the stream is segments x segment_length tokens
    segments: int = 1
    # tokens per segment (one model call); null: the task's training length (`lm`:
    # data.seq_len; `lm_passkey` and `lm_suite`: data.train_length)
    segment_length: int | None = None
    # back-propagate through up to this many consecutive segments; the state is detached
    # between such blocks (truncated BPTT); null: through the whole stream
    bptt: int | None = None
    # stages [[from_step, segments], ...] of growing segment counts (the first from step
    # 0), which replace `segments`; empty: `segments` throughout
    curriculum: list[list[int]] = dataclasses.field(default_factory=list)
    # each step draws its segment count uniformly from 1 .. the stage's (seeded by step)
    random_segments: bool = False
    # probability that a step's streams start from the final states the previous step's
    # streams left (state passing) instead of a fresh state
    state_passing: float = 0.0

    @property
    def enabled(self) -> bool:
        return self.segments > 1 or bool(self.curriculum) or self.state_passing > 0


ENGINE_SECTIONS = {
    "optim": OptimConfig,
    "train": TrainConfig,
    "eval": EvalConfig,
    "streams": StreamsConfig,
}
TOP_LEVEL_KEYS = (
    "name",
    "task",
    "model",
    "data",
    "optim",
    "train",
    "eval",
    "streams",
    "search_space",
)


@dataclasses.dataclass
class RunConfig:
    """A validated recipe. `model` and `data` are instances of the task's dataclasses."""

    name: str
    task: str
    model: Any
    data: Any
    optim: OptimConfig
    train: TrainConfig
    eval: EvalConfig
    streams: StreamsConfig = dataclasses.field(default_factory=StreamsConfig)
    search_space: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain YAML/JSON-ready dict; `from_dict(cfg.to_dict())` gives back an equal config."""
        return {
            "name": self.name,
            "task": self.task,
            "model": to_plain(self.model),
            "data": to_plain(self.data),
            "optim": to_plain(self.optim),
            "train": to_plain(self.train),
            "eval": to_plain(self.eval),
            # only a run that carries state has the section: older recipes and checkpoints
            # round-trip unchanged
            **({"streams": to_plain(self.streams)} if self.streams.enabled else {}),
            **({"search_space": to_plain(self.search_space)} if self.search_space else {}),
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def run_dir(self) -> Path:
        return Path(self.train.out_dir.replace("{name}", self.name.replace("/", "_")))
