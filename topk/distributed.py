"""Data-parallel training over several processes with torch's own distributed engine.

``torchrun --nproc_per_node=N train.py ...`` starts N processes with ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` and a rendezvous address in their environment; :func:`setup` joins them into one
process group, the model is wrapped in ``DistributedDataParallel`` (gradients averaged across
processes after every backward pass), and the engine asks a :class:`Distributed` for the few
collective operations it needs. Without torchrun everything here is a no-op (one process).

Batches (``topk.data``): ``trainer.batch_size`` is the **global** batch, as in the papers. Every
process takes its share of epoch ``e``'s order from torch's ``DistributedSampler`` (seeded from
the run's seed, ``set_epoch(e)``): the permutation a single process trains on, padded to a
multiple of N by repeating its first samples (at most N - 1 repeats per epoch), every N-th
sample from position ``rank``, in batches of ``batch_size / N``: its batch ``b`` is its share of
the global batch ``b`` a single process would see (:func:`epoch_order`). Evaluation splits are
shared without padding (every sample counted once) and their counts summed exactly.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

from topk.errors import ConfigError

BACKENDS = ("auto", "gloo", "nccl")


@dataclass(frozen=True)
class Distributed:
    """This process's place among the training processes (one process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the run record, TensorBoard events and checkpoints."""
        return self.rank == 0

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over all processes, in place (exact for integer counts)."""
        if self.enabled:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def any(self, flag: bool, device: torch.device | str = "cpu") -> bool:
        """Whether ``flag`` is true in any process (every process must call it)."""
        if not self.enabled:
            return flag
        return bool(self.sum_(torch.tensor([float(flag)], device=device)).item() > 0)

    def broadcast(self, value):
        """Rank 0's ``value`` (any picklable object), in every process."""
        if not self.enabled:
            return value
        holder = [value]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def gather(self, value) -> list:
        """Every process's ``value``, in rank order (every process gets the list)."""
        if not self.enabled:
            return [value]
        values = [None] * self.world_size
        dist.all_gather_object(values, value)
        return values

    def gather_concat(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every process's 1-D ``tensor`` (of any length), concatenated in rank order, in every
        process (every process must call it). ``all_gather`` needs one length: each is padded to
        the longest and cut back after (two all-gathers and one read of the lengths)."""
        if not self.enabled:
            return tensor
        length = torch.tensor([tensor.numel()], dtype=torch.int64, device=tensor.device)
        lengths = [torch.zeros_like(length) for _ in range(self.world_size)]
        dist.all_gather(lengths, length)
        lengths = torch.cat(lengths).tolist()
        padded = tensor.new_zeros(max(lengths))
        padded[: tensor.numel()] = tensor
        parts = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(parts, padded)
        return torch.cat([part[:length] for part, length in zip(parts, lengths)])

    def sync_buffers(self, model: torch.nn.Module) -> None:
        """Copy rank 0's buffers (batch-norm running statistics) to every process, so that all
        evaluate the model rank 0 saves: each process updates them on its own share of a batch."""
        if self.enabled:
            for buffer in model.buffers():
                dist.broadcast(buffer.data, src=0)


SINGLE_PROCESS = Distributed()


def process_seed(seed: int, context: Distributed) -> int:
    """The seed of this process's random draws during training (noise of the noised losses,
    Mixup, in-memory augmentation): different in every process, so that N processes draw N
    independent noise samples, as one process with the global batch would."""
    return seed * 1_000_003 + 7_919 * (context.rank + 1)


def from_environment() -> Distributed:
    """Rank and world size that torchrun put in the environment (one process without it)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return SINGLE_PROCESS
    return Distributed(
        rank=int(os.environ["RANK"]), world_size=world_size, local_rank=int(os.environ.get("LOCAL_RANK", "0"))
    )


def resolve_backend(name: str, device: torch.device) -> str:
    """``auto``: NCCL for processes on CUDA devices, gloo on CPUs."""
    if name not in BACKENDS:
        raise ConfigError(f"trainer.distributed_backend={name!r} is not one of {', '.join(BACKENDS)}.")
    if name == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    return name


def setup(backend: str, device: torch.device) -> tuple[Distributed, torch.device]:
    """Join the process group torchrun set up (when there is one); returns this process's
    :class:`Distributed` and its device (``cuda:LOCAL_RANK`` on GPUs: one device per process).

    The group is made once per process and left at exit: the jobs of a sweep (``-m``) run one
    after the other in the same processes and share it (a second ``init_process_group`` in the
    same processes, after ``destroy_process_group``, failed here in 3 of 6 sweeps: gloo's
    connection refused)."""
    context = from_environment()
    if not context.enabled:
        return context, device
    if device.type == "cuda":
        gpus = torch.cuda.device_count()
        if context.local_rank >= gpus:
            raise ConfigError(f"torchrun started {context.local_rank + 1} or more processes on this node but "
                              f"{gpus} GPU(s) are visible: start at most {gpus} (--nproc_per_node={gpus}), one "
                              "per GPU, or train on the CPU with trainer.device=cpu.")
        device = torch.device("cuda", context.local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend=resolve_backend(backend, device))
        atexit.register(teardown)
    return context, device


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def check_global_batch(batch_size: int | None, context: Distributed) -> None:
    """A global batch must split evenly over the processes (each then sees ``batch_size / N``)."""
    if batch_size is not None and batch_size % context.world_size:
        raise ConfigError(
            f"trainer.batch_size={batch_size} is the global batch and must be divisible by the "
            f"{context.world_size} processes; use a multiple of {context.world_size}."
        )


def epoch_order(size: int, shuffle: bool, seed: int, epoch: int, context: Distributed, pad: bool) -> torch.Tensor:
    """The indices of the samples this process takes in epoch ``epoch``, in order.

    They come from torch's ``DistributedSampler`` over ``size`` samples, with ``seed`` and
    ``set_epoch(epoch)``: with ``shuffle`` a permutation drawn from ``seed + epoch`` (else
    ``0 .. size - 1``). With ``pad`` (training) the sampler shares it among the processes: the
    order, extended with its own first samples to a multiple of N (so that every process takes as
    many steps, which DDP needs), every N-th sample from position ``rank``; with one process that
    is the whole order. Without ``pad`` (evaluation) every sample goes to exactly one process: the
    one-process order, every N-th sample from position ``rank``, unpadded (the sampler always
    pads, which would count some samples twice).
    """
    if not context.enabled:
        # what the sampler gives one process, drawn as it draws it but without its round trip
        # through a Python list, a visible share of an S20 epoch (docs/benchmarks.md, 'Code
        # choices and the timings behind them')
        if not shuffle:
            return torch.arange(size)
        return torch.randperm(size, generator=torch.Generator().manual_seed(seed + epoch))
    sampler = DistributedSampler(
        range(size), num_replicas=context.world_size if pad else 1, rank=context.rank if pad else 0,
        shuffle=shuffle, seed=seed,
    )
    sampler.set_epoch(epoch)
    order = torch.tensor(list(sampler), dtype=torch.long)
    return order if pad else order[context.rank :: context.world_size]


def shard_size(size: int, context: Distributed, pad: bool) -> int:
    """``len(epoch_order(size, ..., context, pad))``."""
    if pad:
        return -(-size // context.world_size)
    return len(range(context.rank, size, context.world_size))


def local_batch_size(batch_size: int | None, context: Distributed) -> int | None:
    """Samples per process per step for a global ``batch_size`` (rounded up for evaluation)."""
    if batch_size is None:
        return None
    return -(-batch_size // context.world_size)


SCRATCH_PREFIX = "topk_rank"
SCRATCH_ENV = "TOPK_WORKER_SCRATCH"  # the scratch directory of this process, set by worker_argv
_HYDRA_OUTPUT_KEYS = ("hydra.run.dir=", "hydra.sweep.dir=", "hydra.output_subdir=", "hydra/job_logging=")


def worker_argv(argv: list[str]) -> list[str]:
    """The command line of a process torchrun started after the first: its Hydra output
    (configuration copy, log file) goes to an empty scratch directory instead of the run
    directory, and its log to the console. The run directory is rank 0's, which ``train.py``
    broadcasts; other processes never write in it. The scratch directory's path is left in the
    environment (``SCRATCH_ENV``) for :func:`remove_worker_scratch`. Unchanged for rank 0 and
    without torchrun."""
    context = from_environment()
    if not context.enabled or context.is_main:
        return argv
    scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{context.rank}_")
    os.environ[SCRATCH_ENV] = scratch
    kept = [arg for arg in argv if not arg.lstrip("+~").startswith(_HYDRA_OUTPUT_KEYS)]
    return kept + [f"hydra.run.dir={scratch}", f"hydra.sweep.dir={scratch}", "hydra.output_subdir=null",
                   "hydra/job_logging=stdout"]


def remove_worker_scratch() -> None:
    """Delete the scratch directory :func:`worker_argv` gave this process (ranks after the first),
    once the run directory is known. In a sweep (``-m``) it is Hydra's sweep directory, where
    Hydra makes each job's directory again: every job removes it."""
    scratch = os.environ.get(SCRATCH_ENV)
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when present, else the CPU; ``cpu``, ``cuda`` and ``cuda:N`` name one.
    Anything else (``gpu``, ``cuda:x``) is one sentence listing what is allowed."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ConfigError(f"trainer.device={name} is not a device this framework trains on; choose "
                          "auto, cpu, cuda or cuda:N.")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device=cuda but no CUDA device is visible; use auto or cpu.")
    return device
