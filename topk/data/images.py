"""Image data sets stored as files: the common part of ImageNet, Pl@ntNet-300K and ImageNet-LT.

A split is a list of image paths with int64 labels (:class:`ImageFileSplit`); images are decoded
by :class:`ImageBatches`, a ``torch.utils.data.DataLoader`` with worker processes, and reach the
device as uint8 ``[B, 3, H, W]`` (``[B, 10, 3, H, W]`` for ten-crop testing), where they are
normalised (and Cutout applied) as CIFAR batches are. Per-image transforms are torchvision's:

* training, ``augment=standard|cutout``, ``train_crop=resize_then_random`` (B18 §5.2: "Images are
  resized so that their smaller dimension is 256 [...] At training time, we take random crops of
  224 × 224 and randomly flip the images horizontally"): ``Resize(resize_size)`` +
  ``RandomCrop(image_size)``, then the flip where ``augment.images.flip``;
* the same with ``train_crop=random_resized``: ``RandomResizedCrop(image_size)`` (scale 0.08–1,
  aspect 3/4–4/3: torchvision's ImageNet recipe, which none of the papers' protocols uses);
* training without a random crop, and testing: ``Resize(resize_size)`` + ``CenterCrop(image_size)``;
* ``ten_crop``: ``Resize(resize_size)`` + ``TenCrop(image_size)`` (B18 §5.2's ImageNet test).

Reproducibility: every sample of epoch ``e`` draws its random crop and flip from a generator
seeded with ``(seed, e, index)``, so the images a run sees do not depend on the number of workers
and a resumed run sees exactly what an uninterrupted one would have seen.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Sampler
from tqdm import tqdm

from topk.data.batches import epoch_seed
from topk.data.decoding import DECODERS, decode_batch, decode_file, jpeg_bytes
from topk.data.splits import DataSplits, refuse_untrained_classes
from topk.distributed import SINGLE_PROCESS, Distributed, epoch_order, local_batch_size, shard_size
from topk.errors import ConfigError, DataError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
TRAIN_CROPS = ("resize_then_random", "random_resized")  # dataset.train_crop


@dataclass
class ImageFileSplit:
    """One split of an image data set on disk: ``paths[i]`` has label ``y[i]``; ``decoder``
    (``dataset.decoder``, :mod:`topk.data.decoding`) decodes its files."""

    paths: list[str]
    y: torch.Tensor
    decoder: str = field(default="auto", kw_only=True)

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, positions: torch.Tensor) -> ImageFileSplit:
        """The images at ``positions``, in that order."""
        return ImageFileSplit([self.paths[i] for i in positions.tolist()], self.y[positions].clone(),
                              decoder=self.decoder)

    def open(self, index: int) -> Image.Image:
        """Image ``index``, opened by PIL (decoded lazily); ``paths[index]`` names it in errors.
        A split whose images are not files (:class:`topk.data.torchvision_sets.DatasetSplit`)
        overrides this."""
        return Image.open(self.paths[index])

    def decode(self, index: int):
        """Image ``index`` decoded to RGB by ``self.decoder``: a PIL image (``pil``) or a uint8
        ``[3, H, W]`` tensor (``auto``), which the transforms take alike
        (:func:`topk.data.decoding.decode_file`); a broken file raises its decoder's error."""
        return decode_file(self.paths[index], lambda: self.open(index), self.decoder)


@dataclass
class ImageFileSplits(DataSplits):
    """``DataSplits`` whose splits are image files, with the settings of their transforms.

    ``image_size``: side of the crops the model sees; ``resize_size``: the shorter side images
    are resized to before a centre crop, ten-crop or (``train_crop=resize_then_random``) the
    training crop; ``train_crop``: the random training crop, ``resize_then_random`` (B18 §5.2) or
    ``random_resized`` (``RandomResizedCrop``); ``ten_crop``: score the test split on ten crops
    per image, combined through B18's top-``marginal_k`` marginal probabilities (Appendix C), and
    the validation split on one centre crop as B18's code selects its model (B18 §5.2: "At test
    time, we use the standard ten-crop procedure");
    ``class_names``: readable class names where the data set has them; ``decoder``: how the
    splits' files are decoded (``dataset.decoder``, :data:`topk.data.decoding.DECODERS`), set on
    each split here.
    """

    image_size: int = 224
    resize_size: int = 256
    train_crop: str = "resize_then_random"
    ten_crop: bool = False
    marginal_k: int = 5
    class_names: list[str] = field(default_factory=list)
    decoder: str = "auto"

    def __post_init__(self):
        super().__post_init__()
        if self.decoder not in DECODERS:
            raise ConfigError(f"dataset.decoder must be one of {', '.join(DECODERS)}, got {self.decoder!r}.")
        for split in (self.train, self.val, self.test):
            if isinstance(split, ImageFileSplit):
                split.decoder = self.decoder
        for name, key in (("image_size", "image_size"), ("resize_size", "dataset.resize_size")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{key} must be a whole number of pixels of at least 1, got {value!r}.")
        if self.resize_size < self.image_size:
            raise ConfigError(f"dataset.resize_size={self.resize_size} is smaller than image_size="
                              f"{self.image_size}: crops are taken from the resized image, so choose "
                              "a resize_size of at least image_size (B18: 256 for 224 crops).")
        if self.train_crop not in TRAIN_CROPS:
            raise ConfigError(f"dataset.train_crop must be one of {', '.join(TRAIN_CROPS)}, "
                              f"got {self.train_crop!r}.")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (3, self.image_size, self.image_size)

    def image_transform(self, training: bool, random_crop: bool = False, flip: bool = False,
                        ten_crop: bool | None = None):
        """The per-image (worker-side) transform of the training or evaluation images; evaluation
        images are ten crops where ``ten_crop`` (default: ``self.ten_crop``), else a centre crop."""
        # imported here, for image data only: with the torch._dynamo it imports, slow at each start
        # (docs/benchmarks.md, 'Code choices and the timings behind them')
        from torchvision.transforms import v2

        ten_crop = self.ten_crop if ten_crop is None else ten_crop
        if training and random_crop and self.train_crop == "random_resized":
            steps = [v2.RandomResizedCrop(self.image_size, antialias=True)]
        elif training and random_crop:  # resize_then_random
            steps = [v2.Resize(self.resize_size, antialias=True), v2.RandomCrop(self.image_size)]
        else:
            steps = [v2.Resize(self.resize_size, antialias=True)]
            if not training and ten_crop:
                steps.append(v2.TenCrop(self.image_size))
                return v2.Compose([v2.PILToTensor(), *steps, _StackCrops()])
            steps.append(v2.CenterCrop(self.image_size))
        if training and flip:
            steps.append(v2.RandomHorizontalFlip())
        # PILToTensor turns a PIL image (decoder=pil) into a tensor and passes a tensor as it is
        return v2.Compose([v2.PILToTensor(), *steps])


class _StackCrops:
    """TenCrop's tuple of crops as one tensor ``[10, C, H, W]``."""

    def __call__(self, crops):
        return torch.stack(list(crops))


def where_expected(layout: str, source: str) -> str:
    """The end of every missing-data error: the layout expected and where to get the data."""
    return f"set dataset.root to a folder with {layout} (download: {source})"


def list_image_folder(folder: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """Class folders (sorted, as ``ImageFolder``) and ``(path, class folder)`` of every image.
    A folder that cannot be read raises its ``OSError`` (naming it): ``os.walk`` would otherwise
    pass over it, and its class would look empty."""
    classes = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    samples = []
    for name in classes:
        for root, _, files in sorted(os.walk(folder / name, onerror=_raise, followlinks=True)):
            for file in sorted(files):
                if file.lower().endswith(IMAGE_EXTENSIONS):
                    samples.append((os.path.join(root, file), name))
    return classes, samples


def _raise(error: OSError) -> None:
    """``os.walk``'s ``onerror``: stop on a folder it cannot read, instead of passing over it."""
    raise error


def labelled_split(
    samples: Sequence[tuple[str, str]], class_index: dict[str, int], where: str
) -> ImageFileSplit:
    """Turn ``(path, class name)`` pairs into a split; a class unknown to training is an error."""
    unknown = sorted({name for _, name in samples if name not in class_index})
    if unknown:
        shown = ", ".join(unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        raise ConfigError(
            f"{where} has {len(unknown)} class(es) that the training split lacks ({shown}); "
            "every evaluated class needs training images, so check dataset.root."
        )
    paths = [path for path, _ in samples]
    labels = torch.tensor([class_index[name] for _, name in samples], dtype=torch.int64)
    return ImageFileSplit(paths, labels)


def read_class_folders(folders: dict[str, Path], what: str, where: str
                       ) -> tuple[list[str], dict[str, ImageFileSplit]]:
    """The labelled splits of ImageFolder trees, one per split (``folders``: split name -> its
    folder, ``train`` among them), as torchvision's ``ImageFolder`` reads one: the classes are the
    training folder's sub-folders in sorted order (``find_classes``), the images every file below
    a class folder with one of its extensions (``IMG_EXTENSIONS``; :func:`list_image_folder`).
    A training folder without images, and a class of another split that training lacks
    (:func:`labelled_split`), stop with one sentence; ``what`` names the data set, ``where`` ends
    the sentence (:func:`where_expected`)."""
    classes, train_samples = list_image_folder(folders["train"])
    if not train_samples:
        raise ConfigError(f"{what} training folder {folders['train']} holds no images; {where}.")
    class_index = {name: index for index, name in enumerate(classes)}
    splits = {name: labelled_split(train_samples if name == "train" else list_image_folder(folder)[1],
                                   class_index, str(folder))
              for name, folder in folders.items()}
    return classes, splits


def check_splits(splits: Sequence[ImageFileSplit | None], classes: list[str], train_where: str,
                 check_images: bool) -> None:
    """The checks every image data set's splits get once drawn: each class has training images
    (:func:`topk.data.splits.refuse_untrained_classes`, ``train_where`` saying where the training
    split was read) and, where ``check_images``, every image can be opened
    (:func:`check_image_files`). ``splits[0]`` is the training split."""
    refuse_untrained_classes(splits[0].y, len(classes), train_where, classes)
    if check_images:
        check_image_files(splits)


def check_image_files(splits: Sequence[ImageFileSplit | None], workers: int = 16) -> None:
    """Open every image's header (no decoding) so that a missing or unreadable file stops the run
    before training, naming the file; reading a header costs one small read per file."""
    items = [(split, index) for split in splits if split is not None for index in range(len(split))]
    paths = [split.paths[index] for split, index in items]

    def problem(item: tuple[ImageFileSplit, int]) -> str | None:
        try:
            with item[0].open(item[1]) as image:
                image.size  # noqa: B018  (the header is parsed on open; size proves it)
        except Exception as error:  # PIL raises several types for broken files
            return f"{type(error).__name__}: {error}"
        return None

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = pool.map(problem, items, chunksize=256)
        progress = tqdm(results, total=len(paths), desc="checking images", unit="img",
                        disable=len(paths) < 20000, leave=False)
        for path, reason in zip(paths, progress):
            if reason is not None:
                raise ConfigError(
                    f"image {path} cannot be read ({reason}); replace or delete it, "
                    "or set dataset.check_images=false to skip this check."
                )


class ImageFileDataset(Dataset):
    """Decode ``split.paths[index]`` to RGB (:meth:`ImageFileSplit.decode`) and apply ``transform``,
    seeding the transform's random draws with the sample seed the sampler hands over with the index.

    Under ``dataset.decoder=device`` a worker only reads a JPEG's bytes (:meth:`undecoded`), and
    the training process decodes and transforms the batch on its device (:meth:`on_device`), each
    image's draws seeded alike."""

    def __init__(self, split: ImageFileSplit, transform):
        self.split = split
        self.transform = transform

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, index_and_seed: tuple[int, int]):
        index, sample_seed = index_and_seed
        if self.split.decoder == "device":
            return self.undecoded(index), self.split.y[index], index, sample_seed
        return self.seeded(self.decoded(index), sample_seed), self.split.y[index]

    def decoded(self, index: int):
        """Image ``index`` decoded here, or the sentence that names the broken file."""
        try:
            return self.split.decode(index)
        except Exception as error:  # PIL raises several types for broken files
            raise DataError(
                f"image {self.split.paths[index]} cannot be decoded ({type(error).__name__}: {error}); "
                "replace or delete it."
            ) from None

    def seeded(self, image, sample_seed: int):
        """``transform(image)``, its random draws seeded with ``sample_seed``."""
        with torch.random.fork_rng(devices=[]):  # leaves the caller's random stream untouched
            torch.manual_seed(sample_seed)
            return self.transform(image)

    def undecoded(self, index: int):
        """A JPEG file's bytes, or any other image decoded here (a uint8 ``[3, H, W]`` array)."""
        data = None
        if type(self.split).decode is ImageFileSplit.decode:  # a file of ours, not a torchvision item
            try:
                data = jpeg_bytes(self.split.paths[index])
            except OSError:
                data = None  # decoded() names the file
        if data is not None:
            return data
        image = self.decoded(index)
        if isinstance(image, Image.Image):  # a torchvision data set's item
            from torchvision.transforms.v2.functional import pil_to_tensor

            image = pil_to_tensor(image)
        return image.numpy()

    def on_device(self, batch, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of :meth:`__getitem__`'s ``decoder=device`` samples decoded on ``device``
        (:func:`topk.data.decoding.decode_batch`) and transformed there, image by image."""
        items, labels, indices, seeds = batch
        images = decode_batch(items, device, lambda i: self.decoded(indices[i]))
        return torch.stack([self.seeded(image, seed) for image, seed in zip(images, seeds)]), labels


def undecoded_batch(samples):
    """``decoder=device`` samples as lists (bytes and images differ in size) and a label tensor."""
    items, labels, indices, seeds = zip(*samples)
    return list(items), torch.stack(list(labels)), list(indices), list(seeds)


class EpochSampler(Sampler):
    """Indices of one epoch, each with the seed of its random transform.

    With ``shuffle`` the order is a permutation drawn from ``(seed, epoch)`` by torch's
    ``DistributedSampler``, as in :class:`topk.data.TensorBatches`; under ``distributed``
    training this process takes its share of it (:func:`topk.distributed.epoch_order`). The
    sample seed mixes ``(seed, epoch, index)``, so a sample is cropped alike whichever process
    loads it.
    """

    def __init__(self, size: int, shuffle: bool, seed: int, distributed: Distributed = SINGLE_PROCESS,
                 pad: bool = False):
        self.size, self.shuffle, self.seed = size, shuffle, seed
        self.distributed, self.pad = distributed, pad
        self.epoch = 0

    def __len__(self) -> int:
        return shard_size(self.size, self.distributed, self.pad)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        order = epoch_order(self.size, self.shuffle, epoch_seed(self.seed, 0), self.epoch, self.distributed, self.pad)
        sample_seeds = epoch_seed(self.seed, self.epoch) * 10_000_019
        for index in order.tolist():
            yield index, (sample_seeds + index) % (2**63 - 1)


def leave_stops_to_the_main_process(worker_id: int) -> None:
    """Decoding workers ignore Ctrl-C, SIGTERM and a submitit job's preemption signal. These reach
    every process of the group or of the job (a terminal's Ctrl-C, ``timeout``, SLURM at a time
    limit or preemption): a worker killed by one ended the run with "DataLoader worker ... killed
    by signal" before the main process could stop at its next batch boundary and save
    (:class:`topk.engine.StopRequests`). The main process stops them itself
    (:meth:`ImageBatches.close`); they also end if it dies (torch's watchdog)."""
    from topk.stopping import preemption_signal

    for number in (signal.SIGINT, signal.SIGTERM, preemption_signal()):
        if number is not None:
            signal.signal(number, signal.SIG_IGN)


_open_batches: weakref.WeakSet = weakref.WeakSet()  # ImageBatches whose workers may be running


@atexit.register
def _close_open_batches() -> None:
    """Stop every decoding worker still running when the interpreter ends, before
    multiprocessing's own exit handler would wait for them: they ignore its SIGTERM. A stop
    signal arriving now (a second SIGTERM from a scheduler, a second Ctrl-C) is ignored: the run
    has ended and said so, and an interruption here would leave workers that multiprocessing's
    exit handler waits for forever."""
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_IGN)
    for batches in list(_open_batches):
        batches.close()


class ImageBatches:
    """Batches of decoded images on ``device``, for the engine (the ``TensorBatches`` interface).

    ``image_transform`` runs per image in ``num_workers`` worker processes; ``device_transform``
    (normalisation, Cutout) runs per batch on the device, on each crop of ten-crop test batches
    ``[B, 10, C, H, W]`` (which evaluation scores with :func:`topk.engine.multi_crop_scores`).
    Under ``distributed``
    training ``batch_size`` is the global batch, of which this process loads its share.
    """

    def __init__(
        self,
        split: ImageFileSplit,
        batch_size: int | None,
        shuffle: bool = False,
        seed: int = 0,
        device: torch.device | str = "cpu",
        image_transform=None,
        device_transform=None,
        num_workers: int = 0,
        distributed: Distributed = SINGLE_PROCESS,
        pad: bool = False,
    ):
        if batch_size is None:
            raise ConfigError(
                "trainer.batch_size and trainer.eval_batch_size must be numbers for image files "
                "(null, one batch of the whole split, is for in-memory data); set e.g. 64."
            )
        self.device = torch.device(device)
        self.sampler = EpochSampler(len(split), shuffle, seed, distributed, pad)
        self.device_transform = device_transform
        from torchvision.transforms import v2  # see ImageFileSplits.image_transform

        self.on_device = split.decoder == "device"
        self.dataset = ImageFileDataset(split, image_transform or v2.PILToTensor())
        self.loader = DataLoader(
            self.dataset,
            batch_size=local_batch_size(batch_size, distributed),
            sampler=self.sampler,
            num_workers=num_workers,
            collate_fn=undecoded_batch if self.on_device else None,
            pin_memory=self.device.type == "cuda" and not self.on_device,
            persistent_workers=num_workers > 0,
            worker_init_fn=leave_stops_to_the_main_process,
        )
        _open_batches.add(self)

    def set_epoch(self, epoch: int) -> None:
        self.sampler.epoch = epoch

    def close(self) -> None:
        """Stop the decoding workers now (``train.run`` does when a run ends, however it ends):
        torch's shutdown, then SIGKILL for any still running, which ignore SIGTERM
        (:func:`leave_stops_to_the_main_process`). A later pass starts new workers."""
        iterator = getattr(self.loader, "_iterator", None)  # the persistent workers' iterator
        if iterator is None:
            return
        try:
            iterator._shutdown_workers()
        finally:  # also when a second Ctrl-C or SIGTERM interrupts it: no worker may outlive the run
            for worker in getattr(iterator, "_workers", []):
                if worker.is_alive():
                    worker.kill()
                    worker.join()
            self.loader._iterator = None

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        try:
            for batch in self.loader:
                images, labels = self.dataset.on_device(batch, self.device) if self.on_device else batch
                images = images.to(self.device, non_blocking=True)
                labels = labels.to(self.device, non_blocking=True)
                if self.device_transform is not None and images.dim() == 5:  # ten crops per image
                    batch, crops = images.shape[:2]
                    images = self.device_transform(images.flatten(0, 1)).unflatten(0, (batch, crops))
                elif self.device_transform is not None:
                    images = self.device_transform(images)
                yield images, labels
        except DataError as error:  # re-raised from a worker with its traceback: keep the sentence
            raise DataError(str(error).strip().splitlines()[-1].split("DataError: ")[-1]) from None
