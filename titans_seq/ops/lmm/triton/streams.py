"""A second CUDA stream that the memory op's backward queues independent work on.

The checkpointed backward walks its blocks last first. A block's regeneration and
retrieval pass need only checkpoints, inputs and dy, not the state gradient that the
sequential pass carries from the block after, so they can run on a side stream while the
sequential pass walks the block after (`TritonOptions.overlap_backward`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class SideStream:
    """Work queued on a second stream, ordered after everything the current stream had
    queued when this was made, and handed back to the current stream by an event.

    `ahead(fn, *args)` runs fn on the side stream and returns its result with an event;
    `take(queued)` makes the current stream wait for that event and marks every tensor of
    the result (`result.tensors()`) as used by the current stream, so that the caching
    allocator does not hand their memory to later side-stream work before the current
    stream is done with them."""

    def __init__(self, device: torch.device):
        self.main = torch.cuda.current_stream(device)
        self.side = torch.cuda.Stream(device)
        self.side.wait_stream(self.main)

    def ahead(self, fn: Callable, *args):
        with torch.cuda.stream(self.side):
            result = fn(*args)
        return result, self.side.record_event()

    def take(self, queued):
        result, event = queued
        self.main.wait_event(event)
        for tensor in result.tensors():
            tensor.record_stream(self.main)
        return result


def side_stream(device: torch.device, wanted: bool) -> SideStream | None:
    """A `SideStream` when wanted on a CUDA device outside a CUDA graph capture (a capture
    would need the side stream forked from it); None otherwise: one stream."""
    if not wanted or device.type != "cuda" or torch.cuda.is_current_stream_capturing():
        return None
    return SideStream(device)
