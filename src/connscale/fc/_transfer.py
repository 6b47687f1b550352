"""Device-to-host copies on a side stream, overlapped with the next compute.

On CUDA, :class:`HostCopier` queues each result's copy on a dedicated copy
stream after the compute that produced it, so the copy of window batch k
runs while batch k + 1 is computed. Copies go straight into the caller's
pinned destination when there is one, otherwise into a small ring of pinned
staging buffers that are allocated once, grown rarely and reused (never one
host allocation per window). A result's host callback runs once its copy
has finished, at most ``depth`` batches later. On the CPU everything is
synchronous and the callback sees the tensors' own memory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

import numpy as np
import torch

_ALIGN = 256


class HostCopier:
    """Ordered, overlapped device-to-host copies.

    Parameters
    ----------
    device : torch.device
    depth : int, default=2
        Copies in flight before the oldest is waited for.
    """

    def __init__(self, device: torch.device, depth: int = 2) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.depth = max(1, depth)
        self._pending: deque = deque()
        self._staging: list[torch.Tensor | None] = [None] * self.depth
        self._slot = 0
        self.stream = torch.cuda.Stream(device) if self.cuda else None

    def submit(self, tensors: Sequence[torch.Tensor],
               callback: Callable[[list[np.ndarray]], None],
               destinations: Sequence[torch.Tensor | None] | None = None) -> None:
        """Copy ``tensors`` to the host, then call ``callback(arrays)``.

        ``destinations`` may give, per tensor, a host tensor of the same shape
        (pinned for an asynchronous copy) to copy into; None entries go
        through the staging ring.
        """
        destinations = list(destinations) if destinations is not None else [None] * len(tensors)
        if not self.cuda:
            arrays = []
            for tensor, dest in zip(tensors, destinations):
                if dest is not None:
                    dest.copy_(tensor)
                    arrays.append(dest.numpy())
                else:
                    arrays.append(tensor.detach().numpy())
            callback(arrays)
            return
        if len(self._pending) >= self.depth:
            self._finish_one()
        slot = self._slot
        self._slot = (slot + 1) % self.depth
        staging_bytes = sum(_aligned(t.numel() * t.element_size())
                            for t, d in zip(tensors, destinations) if d is None)
        buffer = self._staging[slot]
        if staging_bytes and (buffer is None or buffer.numel() < staging_bytes):
            size = max(staging_bytes, int(1.5 * buffer.numel()) if buffer is not None else 0)
            buffer = torch.empty(size, dtype=torch.uint8, pin_memory=True)
            self._staging[slot] = buffer
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        views = []
        offset = 0
        with torch.cuda.stream(self.stream):
            for tensor, dest in zip(tensors, destinations):
                if dest is None:
                    nbytes = tensor.numel() * tensor.element_size()
                    dest = buffer[offset:offset + nbytes].view(tensor.dtype).view(tensor.shape)
                    offset += _aligned(nbytes)
                dest.copy_(tensor, non_blocking=True)
                tensor.record_stream(self.stream)
                views.append(dest)
            event = torch.cuda.Event()
            event.record(self.stream)
        self._pending.append((event, views, callback))

    def _finish_one(self) -> None:
        event, views, callback = self._pending.popleft()
        event.synchronize()
        callback([v.numpy() for v in views])

    def flush(self) -> None:
        """Wait for every queued copy and run its callback."""
        while self._pending:
            self._finish_one()


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN
