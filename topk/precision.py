"""Speed switches of a run: mixed precision (``trainer.amp``), channels-last memory layout
(``trainer.channels_last``) and ``torch.compile`` (``trainer.compile``).

Mixed precision autocasts the model's forward pass to bfloat16 or float16; the scores are cast
back to float32 before the loss, so every loss is computed in float32 whatever the autocast dtype
(the log-space sums of smooth SVM and the perturbations of the noised losses need the range).
float16 gradients go through a ``GradScaler``; bfloat16 needs none.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from topk.errors import ConfigError

AMP_DTYPES = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}


_NO_AUTOCAST = contextlib.nullcontext()  # reusable: it holds no state


class MixedPrecision:
    """``trainer.amp=off|bf16|fp16`` on ``device``: the forward pass's autocast and the
    backward/step (with loss scaling for fp16)."""

    def __init__(self, mode: str = "off", device: torch.device | str = "cpu"):
        mode = "off" if mode in (False, None, "False", "false") else mode  # YAML reads a bare off as false
        if mode not in AMP_DTYPES:
            raise ConfigError(f"trainer.amp must be one of {', '.join(AMP_DTYPES)}, got {mode!r}.")
        self.mode = mode
        self.dtype = AMP_DTYPES[mode]
        self.device_type = torch.device(device).type
        self.scaler = torch.amp.GradScaler(self.device_type) if mode == "fp16" else None

    def autocast(self):
        if self.dtype is None:  # entering a disabled autocast still costs tens of microseconds
            return _NO_AUTOCAST
        return torch.autocast(self.device_type, dtype=self.dtype)

    def forward(self, model: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
        """``model``'s forward pass as training calls it: the model itself when autocast is off
        (no context entered per batch), else the model under autocast with its scores cast back
        to float32."""
        if self.dtype is None:
            return model

        def autocast_forward(inputs: torch.Tensor) -> torch.Tensor:
            with self.autocast():
                return model(inputs).float()

        return autocast_forward

    def backward_and_step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        self.backward(loss)
        self.step(optimizer)

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, of the loss scaled by the fp16 gradient scaler."""
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def step(self, optimizer: torch.optim.Optimizer, before_step: Callable[[], None] | None = None) -> None:
        """``optimizer.step()``; ``before_step`` (gradient clipping) sees the true gradients: with
        fp16 the scaler unscales them first, as torch's AMP recipe for clipping says
        (https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping), and its
        ``step`` skips an update whose gradients overflowed."""
        if self.scaler is None:
            if before_step is not None:
                before_step()
            optimizer.step()
            return
        if before_step is not None:
            self.scaler.unscale_(optimizer)
            before_step()
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict:
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)


def channels_last(images: torch.Tensor) -> torch.Tensor:
    """Image batches ``[B, C, H, W]`` in channels-last layout (other shapes unchanged)."""
    return images.contiguous(memory_format=torch.channels_last) if images.dim() == 4 else images


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model itself under ``torch.compile``'s and DistributedDataParallel's wrappers, whose
    state-dict keys are the ones checkpoints keep (so compile on or off resume alike)."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model
