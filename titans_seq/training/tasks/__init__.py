"""Tasks: what a domain plugs into the shared training loop (interface + registry)."""

from .base import BatchDataset, Task, TensorDataset, batch_size_of, fetch_batch
from .registry import get_task, list_tasks, register_task

__all__ = [
    "BatchDataset",
    "Task",
    "TensorDataset",
    "batch_size_of",
    "fetch_batch",
    "get_task",
    "list_tasks",
    "register_task",
]
