"""The training engine shared by every domain: config, loop, checkpoints, distribution.

    from titans_seq.training import load_config, train
    result = train(load_config("synthetic/tiny", ["optim.lr=3e-3"]))

Domains plug in by registering a `Task` (see `titans_seq.training.tasks`).
"""

from .checkpoint import Checkpoint, CheckpointError, latest_checkpoint, load_checkpoint
from .config import (
    ConfigError,
    EvalConfig,
    OptimConfig,
    RunConfig,
    TrainConfig,
    apply_overrides,
    from_dict,
    load_config,
    read_recipe,
)
from .divergence import TrainingDiverged
from .loop import Trainer, TrainResult, train
from .tasks import BatchDataset, Task, TensorDataset, get_task, list_tasks, register_task

__all__ = [
    "BatchDataset",
    "Checkpoint",
    "CheckpointError",
    "ConfigError",
    "EvalConfig",
    "OptimConfig",
    "RunConfig",
    "Task",
    "TensorDataset",
    "TrainConfig",
    "TrainResult",
    "TrainingDiverged",
    "Trainer",
    "apply_overrides",
    "from_dict",
    "get_task",
    "latest_checkpoint",
    "list_tasks",
    "load_checkpoint",
    "load_config",
    "read_recipe",
    "register_task",
    "train",
]
