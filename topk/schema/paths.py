"""The output folders a config names, held to what a file system can create.

Hydra creates ``hydra.run.dir`` (a run) or ``hydra.sweep.dir`` / ``hydra.sweep.subdir`` (each
job of a sweep) itself, after the callbacks' checks and outside ``train.py``, so a name it
cannot create ends in its traceback. :func:`output_dir_problem` says it in one sentence first
(:class:`topk.hydra_callbacks.CheckOutputDir` calls it before anything is written):

- a folder name longer than the file system allows (255 bytes on Linux file systems);
- an interpolation of a whole config group (``hydra.sweep.subdir=${loss}``), which names a
  folder after the group's settings (``{'_target_': ...}``) or cannot be made a name at all.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

NAME_MAX = 255  # bytes in one folder name where the file system does not say
PLAIN_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")  # ${loss}, ${hydra.job.num}; not ${now:...}


def output_dir_problem(config: DictConfig, multirun: bool) -> str | None:
    """One sentence if the run's (``multirun``: the sweep's) output folder cannot be named as
    configured, else ``None``. The sweep's job folder is checked as the first job's would be
    named (:func:`first_job`)."""
    keys = ["hydra.sweep.dir", "hydra.sweep.subdir"] if multirun else ["hydra.run.dir"]
    config = first_job(config) if multirun else config
    for key in keys:
        problem = group_interpolation_problem(config, key) or long_name_problem(config, key)
        if problem is not None:
            return problem
    return None


def first_job(config: DictConfig) -> DictConfig:
    """A copy of the sweep's ``config`` with the first job's number and id, as Hydra's basic
    launcher sets them, so that a subdir of ``${hydra.job.num}`` resolves."""
    job = copy.deepcopy(config)
    with open_dict(job):
        job.hydra.job.num = 0
        job.hydra.job.id = "job_id_for_0"
    return job


def written_value(config: DictConfig, key: str) -> str:
    """``key``'s value as written, its interpolations unresolved (``${loss}``)."""
    parent_key, _, name = key.rpartition(".")
    parent = OmegaConf.select(config, parent_key)
    return str(parent._get_node(name)._value())


def group_interpolation_problem(config: DictConfig, key: str) -> str | None:
    """``hydra.sweep.subdir=${loss}``: the folder would be named after a whole config node (the
    loss's settings), not a value; the sentence points to the option's name,
    ``${hydra.runtime.choices.loss}``, for a config group."""
    written = written_value(config, key)
    for reference in PLAIN_INTERPOLATION.findall(written):
        try:
            value = OmegaConf.select(config, reference, throw_on_missing=False)
        except OmegaConfBaseException:
            continue  # an interpolation Hydra reports itself
        if not isinstance(value, (DictConfig, ListConfig)):
            continue
        choices = OmegaConf.select(config, "hydra.runtime.choices") or {}
        if reference in choices:
            named = written.replace(f"${{{reference}}}", f"${{hydra.runtime.choices.{reference}}}")
            return (f"{key}={written} puts the whole {reference} config (its settings, not a name) in a "
                    f"folder name; name the folder after the {reference} option with {key}={named}.")
        return (f"{key}={written} puts the whole {reference} node (a group of settings, not a value) in a "
                f"folder name; interpolate one of its values instead, e.g. ${{{reference}.<key>}}.")
    return None


def long_name_problem(config: DictConfig, key: str) -> str | None:
    """A folder name of ``key``'s resolved path longer than its file system allows (``None``
    where the value does not resolve yet, e.g. a subdir of ``${hydra.job.num}``)."""
    try:
        path = OmegaConf.select(config, key, throw_on_missing=True)
    except OmegaConfBaseException:
        return None
    if not isinstance(path, (str, int)):
        return None
    limit = name_limit(Path(str(path)))
    for name in Path(str(path)).parts:
        size = len(os.fsencode(name))
        if size > limit:
            return (f"{key} holds a folder name of {size} bytes ({name[:16]}...), more than the {limit} "
                    f"bytes a name may have on this file system; choose a shorter {key}=PATH.")
    return None


def name_limit(path: Path) -> int:
    """The longest folder name, in bytes, that the file system holding ``path`` (its nearest
    existing folder) allows."""
    existing = path.absolute()
    while existing != existing.parent and not _is_folder(existing):
        existing = existing.parent
    try:
        return int(os.pathconf(existing, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return NAME_MAX


def _is_folder(path: Path) -> bool:
    """Whether ``path`` is an existing folder (a name too long to look up is not)."""
    try:
        return path.is_dir()
    except OSError:
        return False
