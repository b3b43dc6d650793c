"""Hydra callbacks used by ``conf/train.yaml``.

This is the one module of the package that imports Hydra; nothing else imports it, so the
library itself stays usable without Hydra.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def unwritable_reason(directory: Path) -> str | None:
    """Why ``directory`` cannot be created or written, or ``None`` if it can."""
    directory = Path(directory).absolute()
    ancestor = directory
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is a file, not a directory"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"{ancestor} is not writable"
    return None


class CheckOutputDir(Callback):
    """Stop before Hydra creates the run (or sweep) directory if it cannot be written.

    Hydra would otherwise fail deep inside ``mkdir`` with a traceback; this says in one sentence
    what is wrong and how to choose another directory.
    """

    def _check(self, directory: str, option: str) -> None:
        reason = unwritable_reason(Path(directory))
        if reason is not None:
            sys.exit(
                f"Error: the output directory {directory} cannot be written ({reason}); "
                f"choose another with {option}=PATH."
            )

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config.hydra.run.dir, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config.hydra.sweep.dir, "hydra.sweep.dir")
