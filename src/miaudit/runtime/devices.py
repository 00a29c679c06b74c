"""Which torch device a run uses, and how work gets onto it.

``resolve_device`` turns a config's ``device`` (``auto``, ``cpu``, ``cuda[:N]``) into the one to
use. The rest is what a CUDA device needs to be used well, written so that every function runs
unchanged (and does nothing special) on a CPU-only machine:

* :func:`to_device`: a host tensor goes to a CUDA device from pinned (page-locked) memory with
  ``non_blocking=True``, so the copy overlaps the host's next work; anywhere else it is a plain
  ``.to()`` (no pinning: without CUDA ``pin_memory`` fails, and on the CPU it is a no-op copy).
* :func:`autocast`: the recipe's ``precision``. ``fp32`` is a no-op context (the code path is the
  one without autocast, so CPU weights do not move by a bit); ``bf16`` is
  ``torch.autocast(<device type>, dtype=torch.bfloat16)``: on a CUDA device, or on a CPU that
  computes bfloat16 natively (AVX-512 BF16 or AMX, where oneDNN's bf16 products run 2-3x
  faster than float32's). :func:`check_precision` refuses it on any other CPU, where bfloat16 is
  emulated and slower than float32.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from miaudit.errors import ConfigError

if TYPE_CHECKING:  # torch is imported by the functions that use it: checking a config (its
    import torch  # PRECISIONS) loads no torch

# A recipe's compute precision: float32 throughout, or the forward pass and loss under
# bfloat16 autocast (weights, gradients and optimizer state stay float32).
PRECISIONS = ("fp32", "bf16")
DEFAULT_PRECISION = "fp32"
BF16_NOT_NATIVE = ("bf16 autocast needs a CUDA device or a CPU with native bfloat16 (AVX-512 "
                   "BF16 or AMX); set precision: fp32 or device: cuda")


def native_bf16(device: str | torch.device) -> bool:
    """Whether ``device`` computes bfloat16 natively: any CUDA device, or a CPU with AVX-512
    BF16 or AMX tiles (oneDNN's bf16 kernels; elsewhere torch emulates bf16, slower than
    float32)."""
    import torch

    if is_cuda(device):
        return True
    if torch.device(device).type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def resolve_device(name: str) -> str:
    """``auto``: ``cuda`` when a CUDA device is available, else ``cpu``; ``cuda[:N]`` is refused
    (ConfigError) when none is; any other name is returned as given."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"device '{name}' asked for, but no CUDA device is available here; use device: "
            "auto (the GPU when there is one, else the CPU) or device: cpu."
        )
    return name


def is_cuda(device: str | torch.device) -> bool:
    """Whether ``device`` names a CUDA device (``cuda``, ``cuda:1``, ...)."""
    import torch

    found: bool = torch.device(device).type == "cuda"
    return found


def pins_for(tensor: torch.Tensor, device: str | torch.device) -> bool:
    """Whether :func:`to_device` copies ``tensor`` to ``device`` from pinned memory, without
    blocking: a host tensor going to a CUDA device, with CUDA available."""
    import torch

    return tensor.device.type == "cpu" and is_cuda(device) and torch.cuda.is_available()


def to_device(tensor: torch.Tensor, device: str | torch.device) -> torch.Tensor:
    """``tensor`` on ``device``. Host to CUDA: pinned first (unless it already is) and copied
    with ``non_blocking=True``, so the caller's next host work overlaps the copy (the pinned
    block is kept by torch's caching host allocator until the copy is done, so the caller may
    drop its reference at once; it must not write to a tensor it passed pinned until the
    device has used the copy). Otherwise a plain ``tensor.to(device)`` (no copy when it is
    there already)."""
    if pins_for(tensor, device):
        if not tensor.is_pinned():
            tensor = tensor.pin_memory()
        return tensor.to(device, non_blocking=True)
    return tensor.to(device)


def check_precision(precision: str, device: str | torch.device) -> None:
    """ConfigError unless ``precision`` is one of :data:`PRECISIONS` and runs on ``device``
    (``bf16`` only where :func:`native_bf16`)."""
    if precision not in PRECISIONS:
        raise ConfigError(
            f"precision {precision!r} is unknown; use one of {', '.join(PRECISIONS)}."
        )
    if precision == "bf16" and not native_bf16(device):
        import torch

        raise ConfigError(f"precision bf16 on device '{torch.device(device)}': {BF16_NOT_NATIVE}.")


def autocast(device: str | torch.device, precision: str
             ) -> contextlib.AbstractContextManager[Any]:  # fmt: skip
    """The context a forward pass and loss of ``precision`` run in on ``device``: nothing for
    ``fp32``, the device's bfloat16 autocast for ``bf16`` (refused where it is not native, see
    :func:`check_precision`)."""
    check_precision(precision, device)
    if precision == DEFAULT_PRECISION:
        return contextlib.nullcontext()
    import torch

    context: contextlib.AbstractContextManager[Any] = torch.autocast(
        torch.device(device).type, dtype=torch.bfloat16)
    return context
