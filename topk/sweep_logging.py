"""A sweep's log in Hydra's plain lines only: no set-up chatter of the libraries Hydra's Optuna
sweeper imports, no colour codes (``conf/train.yaml``'s ``hydra.callbacks.sweep_logging``).

Two libraries write to a tuning sweep's console on their own terms once the Optuna sweeper is
set up (which Hydra does after its ``on_multirun_start`` callbacks, ``hydra/_internal/hydra.py``):

- Optuna 2's RDB storage imports alembic, whose plugin registry logs one INFO line per built-in
  plugin as it is imported (``setup plugin alembic.autogenerate.schemas``, seven of them:
  ``alembic/runtime/plugins.py``); Hydra's root logger, at INFO, prints each.
- Optuna gives its ``optuna`` logger a handler of its own on stderr whose colorlog formatter
  wraps every line in ANSI colour codes, and stops it propagating
  (``optuna.logging._configure_library_root_logger``): "A new study created in memory ..."
  reached a captured log as ``\\x1b[32m[I ...]\\x1b[0m``.

:class:`PlainSweepLogs` sets the ``alembic`` logger to WARNING (its warnings and errors still
show) and hands Optuna's records to the root logger instead of Optuna's handler
(``optuna.logging.disable_default_handler`` and ``enable_propagation``, Optuna's documented
switches), so they are written once, in Hydra's format, wherever Hydra's logging writes. Like
:mod:`topk.hydra_callbacks`, this module runs under Hydra only; it imports Optuna only for a sweep
whose sweeper is Optuna's.
"""

from __future__ import annotations

import logging

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

QUIET_LOGGERS = ("alembic",)  # libraries whose INFO lines are set-up chatter in a sweep's log


def uses_optuna(config: DictConfig) -> bool:
    """Whether the sweep's sweeper is Hydra's Optuna sweeper (``hydra/sweeper=optuna`` or ``tune``)."""
    return "optuna" in str(config.hydra.sweeper.get("_target_", "")).lower()


def plain_optuna_logs() -> None:
    """Optuna's records through the root logger (Hydra's handlers and format), not through its
    own coloured stderr handler; its INFO lines ("A new study created ...") kept."""
    import optuna  # imported here: a sweep without Optuna never pays for it

    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()


class PlainSweepLogs(Callback):
    """Before a sweep's sweeper is set up: the quiet loggers at WARNING, Optuna's lines plain."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        if uses_optuna(config):
            plain_optuna_logs()
