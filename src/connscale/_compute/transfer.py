"""Double-buffered copies between the device and pinned host memory.

The one copy mechanism of the package, both ways:

* :class:`DeviceToHost` queues each result's copy on a copy stream after the
  compute that produced it, so the copy of batch k runs while batch k + 1 is
  computed. Copies go straight into the caller's pinned destination when
  there is one, otherwise into a ring of pinned staging buffers allocated
  once, grown rarely and reused. A result's host callback runs once its copy
  has finished, at most ``depth`` batches later. Results that must leave a
  reused device buffer first (a triangle extracted from a block) are written
  into :meth:`DeviceToHost.scratch`, whose buffers the compute stream reuses
  only after the copy that read them.
* :class:`HostToDevice` streams pieces of host data (pinned tensors, or a
  callback filling a pinned staging buffer) into two device buffers on a copy
  stream while the previous piece is computed.

Allocating pinned memory runs at 1.6-2.5 GB/s on an H100 host, slower than
computing the result, and copying into freshly allocated pageable memory runs
at ~1.4 GB/s: so buffers are allocated once and reused, and a buffer is handed
out again only after the copy that last used it finished. On the CPU
everything is synchronous and callbacks see the tensors' own memory.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

_ALIGN = 256
# Staging rings kept between calls (small, per thread): {(device, thread): [buffers]}.
_KEPT_STAGING: dict = {}


class PinnedBufferPool:
    """Round-robin pool of host staging buffers.

    Parameters
    ----------
    n_buffers : int
        Number of buffers (2 gives double buffering).
    n_elements : int
        Capacity of each buffer, in elements of ``dtype``.
    dtype : torch.dtype
        Element type.
    device : torch.device
        The device the copies go to or come from; buffers are pinned only
        for CUDA.
    """

    def __init__(
        self, n_buffers: int, n_elements: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        pin = device.type == "cuda"
        self._buffers = [
            torch.empty(n_elements, dtype=dtype, pin_memory=pin) for _ in range(n_buffers)
        ]
        self._events: list[torch.cuda.Event | None] = [None] * n_buffers
        self._next = 0

    @property
    def capacity(self) -> int:
        """Elements per buffer."""
        return self._buffers[0].numel()

    def acquire(self) -> tuple[int, torch.Tensor]:
        """Return the next buffer, waiting for the copy that last used it."""
        index = self._next
        self._next = (self._next + 1) % len(self._buffers)
        self.wait(index)
        return index, self._buffers[index]

    def record(self, index: int, stream: torch.cuda.Stream | None) -> None:
        """Mark buffer ``index`` busy until the work queued on ``stream`` ends."""
        if stream is None:
            return
        event = torch.cuda.Event()
        event.record(stream)
        self._events[index] = event

    def wait(self, index: int) -> None:
        """Block until buffer ``index``'s pending copy has finished."""
        event = self._events[index]
        if event is not None:
            event.synchronize()
            self._events[index] = None


class DeviceToHost:
    """Ordered, overlapped device-to-host copies.

    Parameters
    ----------
    device : torch.device
    depth : int, default=2
        Copies in flight before the oldest is waited for.
    keep_staging : bool, default=False
        Keep the staging ring between copiers of this device and thread (for
        calls made often with small results; a large ring is freed with its
        copier).
    """

    def __init__(self, device: torch.device, depth: int = 2, *, keep_staging: bool = False) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.depth = max(1, depth)
        self._pending: deque = deque()
        key = (str(device), threading.get_ident(), self.depth)
        if keep_staging:
            self._staging = _KEPT_STAGING.setdefault(key, [None] * self.depth)
        else:
            self._staging = [None] * self.depth
        self._scratch: list[torch.Tensor | None] = [None] * self.depth
        self._copied: list[torch.cuda.Event | None] = [None] * self.depth
        self._slot = 0
        self.stream = torch.cuda.Stream(device) if self.cuda else None

    def scratch(self, n_elements: int, dtype: torch.dtype) -> torch.Tensor:
        """Return a device buffer of at least ``n_elements`` for the next :meth:`submit`.

        On CUDA the compute stream waits (on the device) for the copy that
        last read this buffer; on the CPU there is one buffer.
        """
        slot = self._slot if self.cuda else 0
        buffer = self._scratch[slot]
        if buffer is None or buffer.numel() < n_elements or buffer.dtype != dtype:
            buffer = torch.empty(n_elements, dtype=dtype, device=self.device)
            self._scratch[slot] = buffer
        event = self._copied[slot]
        if event is not None:
            torch.cuda.current_stream(self.device).wait_event(event)
        return buffer

    def submit(
        self,
        tensors: Sequence[torch.Tensor],
        callback: Callable[[list[np.ndarray]], None] | None = None,
        destinations: Sequence[torch.Tensor | None] | None = None,
    ) -> None:
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
            if callback is not None:
                callback(arrays)
            return
        if len(self._pending) >= self.depth:
            self._finish_one()
        slot = self._slot
        self._slot = (slot + 1) % self.depth
        staging_bytes = sum(
            _aligned(t.numel() * t.element_size())
            for t, d in zip(tensors, destinations)
            if d is None
        )
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
                    dest = buffer[offset : offset + nbytes].view(tensor.dtype).view(tensor.shape)
                    offset += _aligned(nbytes)
                dest.copy_(tensor, non_blocking=True)
                tensor.record_stream(self.stream)
                views.append(dest)
            event = torch.cuda.Event()
            event.record(self.stream)
        self._copied[slot] = event
        self._pending.append((event, views, callback))

    def _finish_one(self) -> None:
        event, views, callback = self._pending.popleft()
        event.synchronize()
        if callback is not None:
            callback([v.numpy() for v in views])

    def flush(self) -> None:
        """Wait for every queued copy and run its callback."""
        while self._pending:
            self._finish_one()


class HostToDevice:
    """Host pieces streamed into two device buffers, overlapped with compute.

    Parameters
    ----------
    device : torch.device
        A CUDA device.
    n_elements : int
        Capacity of each device buffer (and staging buffer), in elements.
    dtype : torch.dtype
    staging : bool, default=False
        Allocate two pinned staging buffers, for pieces given as a callback
        that fills host memory (pieces given as pinned tensors need none).
    """

    def __init__(
        self, device: torch.device, n_elements: int, dtype: torch.dtype, *, staging: bool = False
    ) -> None:
        self.device = device
        self._buffers = [torch.empty(n_elements, dtype=dtype, device=device) for _ in range(2)]
        self._pool = PinnedBufferPool(2, n_elements, dtype, device) if staging else None
        self.stream = torch.cuda.Stream(device)
        self._ready = [torch.cuda.Event() for _ in range(2)]
        self._done = [torch.cuda.Event() for _ in range(2)]
        self._used = [False, False]

    def _issue(
        self,
        slot: int,
        shape: tuple[int, int],
        source: torch.Tensor | Callable[[np.ndarray], None],
    ) -> None:
        size = shape[0] * shape[1]
        index = None
        if callable(source):
            index, host = self._pool.acquire()
            host_view = host[:size].view(shape)
            source(host_view.numpy())
        else:
            host_view = source
        with torch.cuda.stream(self.stream):
            if self._used[slot]:
                self.stream.wait_event(self._done[slot])  # its last compute has read it
            self._buffers[slot][:size].view(shape).copy_(host_view, non_blocking=True)
            self._ready[slot].record(self.stream)
        if index is not None:
            self._pool.record(index, self.stream)
        self._used[slot] = True

    def blocks(self, pieces: Sequence[tuple[tuple[int, int], object]]) -> Iterator[torch.Tensor]:
        """Yield each piece on the device, the next one's copy in flight.

        ``pieces`` holds ``(shape, source)``: ``source`` is a host tensor of
        that shape (pinned), or a callback writing the piece into a numpy
        array of that shape (a pinned staging buffer). The yielded view is
        valid until the next step of the iteration.
        """
        compute = torch.cuda.current_stream(self.device)
        self._issue(0, *pieces[0])
        for i, (shape, _) in enumerate(pieces):
            slot = i % 2
            compute.wait_event(self._ready[slot])
            yield self._buffers[slot][: shape[0] * shape[1]].view(shape)
            self._done[slot].record(compute)
            if i + 1 < len(pieces):
                self._issue((i + 1) % 2, *pieces[i + 1])


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN
