"""A stand-in for CUDA streams and events, so copy paths written for CUDA run on the CPU."""


class FakeStreamOrEvent:
    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, *args):
        pass

    def wait_event(self, *args):
        pass

    def record(self, *args):
        pass

    def synchronize(self):
        pass


def fake_cuda_copies(monkeypatch) -> None:
    """Run :class:`~connscale._compute.transfer.DeviceToHost`'s CUDA branch on
    the CPU: streams and events faked, pinned allocations made pageable."""
    import contextlib

    import torch

    from connscale._compute import transfer

    original_init = transfer.DeviceToHost.__init__
    original_empty = torch.empty

    def fake_init(self, device, depth=2, **kwargs):
        original_init(self, device, depth, **kwargs)
        self.cuda, self.stream = True, FakeStreamOrEvent()

    monkeypatch.setattr(transfer.DeviceToHost, "__init__", fake_init)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStreamOrEvent)
    monkeypatch.setattr(torch.cuda, "Event", FakeStreamOrEvent)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeStreamOrEvent())
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, stream: None)
    monkeypatch.setattr(torch, "empty", lambda *a, pin_memory=False, **k: original_empty(*a, **k))
