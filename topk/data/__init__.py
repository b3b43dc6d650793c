"""Data sets as in-memory splits and the batch iterators the engine consumes."""

from topk.data.batches import TensorBatches
from topk.data.splits import DataSplits, TensorSplit

__all__ = ["DataSplits", "TensorSplit", "TensorBatches"]
