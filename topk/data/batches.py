"""Mini-batches over an in-memory split, reproducible per epoch.

The engine only needs an iterable of ``(inputs, labels)`` with a ``set_epoch`` method; the
shuffling order of epoch ``e`` depends only on ``(seed, e)``, so a run resumed at epoch ``e``
sees exactly the batches an uninterrupted run would have seen.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import torch

from topk.data.splits import TensorSplit
from topk.distributed import SINGLE_PROCESS, Distributed, epoch_order, local_batch_size, shard_size


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of epoch ``epoch``'s shuffle: every loader draws its order from it alone.
    ``epoch_seed(seed, 0)`` is the seed given to torch's ``DistributedSampler``, which draws epoch
    ``e``'s permutation from that seed plus ``e``: ``epoch_seed(seed, e)``."""
    return seed * 1_000_003 + epoch


class TensorBatches:
    """Iterate over ``split`` in batches of ``batch_size`` (``None``: the whole split at once).

    The split is moved to ``device`` once. With ``shuffle``, each epoch's order is a permutation
    drawn from ``(seed, epoch)`` as torch's ``DistributedSampler`` draws it
    (:func:`topk.distributed.epoch_order`). ``transform`` (e.g. crop, flip and normalisation from
    :mod:`topk.data.transforms`) is applied to each batch of inputs on the device.

    Under ``distributed`` training (several processes) ``batch_size`` is the global batch: this
    process iterates over its share of it (``pad`` for training, so that every process takes as
    many steps).
    """

    def __init__(
        self,
        split: TensorSplit,
        batch_size: int | None,
        shuffle: bool = False,
        seed: int = 0,
        device: torch.device | str = "cpu",
        transform=None,
        distributed: Distributed = SINGLE_PROCESS,
        pad: bool = False,
    ):
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer or null, got {batch_size}")
        self.x = split.x.to(device)
        self.y = split.y.to(device)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.transform = transform
        self.distributed = distributed
        self.pad = pad

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        if self.batch_size is None:
            return 1
        local_size = shard_size(len(self.y), self.distributed, self.pad)
        return -(-local_size // local_batch_size(self.batch_size, self.distributed))

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for inputs, labels in self._batches():
            yield (inputs if self.transform is None else self.transform(inputs)), labels

    def _batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.y)
        order = None  # in order, by slices
        if self.shuffle or self.distributed.enabled:
            order = epoch_order(n, self.shuffle, epoch_seed(self.seed, 0), self.epoch, self.distributed, self.pad)
            order, n = order.to(self.x.device), len(order)
        elif self.batch_size is None or self.batch_size >= n:
            yield self.x, self.y
            return
        step = local_batch_size(self.batch_size, self.distributed) or n
        for start in range(0, n, step):
            if order is None:
                yield self.x[start : start + step], self.y[start : start + step]
            else:
                index = order[start : start + step]
                yield self.x.index_select(0, index), self.y.index_select(0, index)


class LimitedBatches:
    """The first ``limit`` batches of ``batches`` in every pass (``trainer.limit_batches``): quick
    smoke runs and debugging on a data set of any size.

    For training batches only, which are shuffled every epoch, so that their first batches are a
    random sample. Evaluation splits are often sorted by class: ``topk.build.make_batches`` limits them
    to a class-stratified subset instead (:func:`topk.data.splits.stratified_indices`)."""

    def __init__(self, batches, limit: int):
        if limit < 1:
            raise ValueError(f"trainer.limit_batches must be a positive number of batches, got {limit}")
        self.batches = batches
        self.limit = limit

    def set_epoch(self, epoch: int) -> None:
        self.batches.set_epoch(epoch)

    def __len__(self) -> int:
        return min(self.limit, len(self.batches))

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return itertools.islice(iter(self.batches), self.limit)

    def close(self) -> None:
        close_batches(self.batches)


def close_batches(batches) -> None:
    """Stop the worker processes of ``batches``, where it has any (:class:`topk.data.images.ImageBatches`)."""
    close = getattr(batches, "close", None)
    if close is not None:
        close()
