"""Where the federated loop computes: one ``torch.device`` for the server's state, local training and
evaluation (``RunConfig.device``, ``fedkernels run --device``).

The wire is device-independent: payloads and checkpoints are safetensors bytes of host tensors. A
tensor crosses to the loop's device at three places only: the server's state after it is built or
loaded, a decoded request or checked upload before the strategy folds it in, and a client's decoded
download and data before local training. Seeded draws (initial weights, shuffles, negatives'
seeds) come from host generators, so a run on ``cuda`` starts and samples exactly as on ``cpu``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["DeviceUnavailable", "resolve_device", "state_device", "to_device"]


class DeviceUnavailable(ValueError):
    """The named device does not exist on this machine (no CUDA, or no such GPU index)."""


def resolve_device(spec: str | torch.device | None) -> torch.device:
    """The ``torch.device`` a run names: ``"cpu"``, ``"cuda"`` (the current GPU) or ``"cuda:N"``.

    Raises:
        DeviceUnavailable: CUDA named where torch sees no GPU, or ``cuda:N`` with N out of range.
        ValueError: any other spelling or device type (the loop runs on cpu and cuda only).
    """
    if spec is None:
        return torch.device("cpu")
    if not isinstance(spec, (str, torch.device)):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {spec!r}")
    try:
        dev = torch.device(spec)
    except RuntimeError:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {spec!r}") from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {spec!r}")
    if not torch.cuda.is_available():
        built = (
            "a CPU-only build of torch" if torch.version.cuda is None else f"CUDA {torch.version.cuda}, no GPU visible"
        )
        raise DeviceUnavailable(f"device {str(dev)!r}: torch sees no CUDA GPU here ({built}); use 'cpu'")
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if not 0 <= index < count:
        raise DeviceUnavailable(f"device {str(dev)!r}: this machine has {count} GPU(s), cuda:0 .. cuda:{count - 1}")
    return torch.device("cuda", index)


def state_device(state: Mapping[str, torch.Tensor]) -> torch.device:
    """The device of a state's tensors (``cpu`` for an empty state)."""
    for t in state.values():
        return t.device
    return torch.device("cpu")


def to_device(
    tensors: Mapping[str, torch.Tensor], device: torch.device, non_blocking: bool = False
) -> dict[str, torch.Tensor]:
    """A new dict with every tensor of ``tensors`` on ``device`` (tensors already there are kept, not copied)."""
    return {name: t.to(device, non_blocking=non_blocking) for name, t in tensors.items()}
