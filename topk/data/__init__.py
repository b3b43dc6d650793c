"""Data sets as in-memory splits and the batch iterators the engine consumes."""

from topk.data.splits import DataSplits, TensorSplit
from topk.data.batches import TensorBatches

__all__ = ["DataSplits", "TensorSplit", "TensorBatches"]
