"""Training images per second delivered by the data pipelines on this machine.

    python scripts/bench_data.py              # or: make bench-data
    python scripts/bench_data.py --quick      # a tiny run, to check that it works
    python scripts/bench_data.py --step-rate 2500   # and the cores that feed a model training on
                                                    # 2,500 images/s (make bench-epochs on the GPU)

CIFAR-shaped data (random uint8 [N, 3, 32, 32], labels 0..99; N = 50,000 by default): the
batched pipeline of training (``TensorBatches`` with ``Compose(RandomCropFlip(4, True),
Normalize(CIFAR100_MEAN, CIFAR100_STD), Cutout(8))``, batch 128, shuffled) against the classic
per-image pipeline (:class:`topk.data.reference.PerImageCifar` in a ``DataLoader``, batch 128,
shuffled, 2 worker processes, and 0 for reference). The batched path also runs with one torch
thread, to show what it gains from intra-op threads. The ratio reported is images/s of each
pipeline over the per-image pipeline with 2 workers; the issue's target is at least 5× for the
batched pipeline.

ImageFolder JPEG decoding: a temporary ImageFolder tree of JPEG files (10 classes × 50 images
of 800×600 by default, about 95 KiB each: smooth random colour fields with a little noise, so the
files have photo-like sizes rather than the size of pure noise) read by ``torchvision.datasets.ImageFolder``
with the usual ImageNet training transform (``RandomResizedCrop(224)``,
``RandomHorizontalFlip()``, ``PILToTensor()``) through a ``DataLoader`` with 0 and ``--workers``
(2) workers; the ratio is over 0 workers. The same tree through the project's own loader
(:class:`topk.data.images.ImageBatches`, ``--workers`` workers, ``dataset.train_crop=random_resized``: decode,
``PILToTensor``, ``RandomResizedCrop(224)``, flip) once per ``dataset.decoder`` (``pil``, and
``auto``: torchvision's ``decode_jpeg``; :mod:`topk.data.decoding`); the JPEG target (issue 38)
is ``auto`` at least 1.3× the bare ``ImageFolder`` loader with the same workers. With ``--decode-on cuda``,
also ``dataset.decoder=device`` on the GPU: batches decoded by nvJPEG and cropped there, the
workers only reading the files.

Method: every pipeline first runs one full warm-up epoch (worker start-up, caches), then
``--epochs`` timed full epochs; the pipelines take turns epoch by epoch, so all see the same
machine load, and the table gives the median over epochs of images/s (and the best epoch).
The output also says how much CPU other processes took during the run (from ``/proc/stat``):
on a shared machine, rerun when that is not near zero. ``DataLoader`` workers
are persistent, so the timed epochs exclude their start-up (in a real run it is paid every epoch
unless ``persistent_workers=True``). Only data delivery is timed: no model consumes the batches,
so worker processes here have the cores to themselves, which they would share with training.
The main process uses ``--threads`` torch threads (default: the cores available to it); workers
use one each (``DataLoader``'s default). Writes ``outputs/bench/data.json`` and
``outputs/bench/data.md``.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms

from topk.bench.common import BENCH_OUT, available_cores, parser, write_outputs
from topk.bench.step_time import step_markdown, step_times
from topk.data.batches import TensorBatches
from topk.data.cifar import CIFAR100_MEAN, CIFAR100_STD
from topk.data.images import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageBatches,
    ImageFileSplits,
    read_class_folders,
)
from topk.data.reference import PerImageCifar, per_image_transform
from topk.data.splits import TensorSplit
from topk.data.transforms import Compose, Cutout, Normalize, RandomCropFlip

TARGET_RATIO = 5.0
JPEG_TARGET_RATIO = 1.3  # issue 38: the project's JPEG loader over a bare ImageFolder loader, same workers


@dataclass
class Pipeline:
    """One way of delivering training batches, and the epochs timed on it."""

    benchmark: str
    name: str
    workers: int
    threads: int
    batches: object  # an iterable of (inputs, labels), re-iterable once per epoch
    is_reference: bool = False
    epoch_images: list[int] = field(default_factory=list)
    epoch_seconds: list[float] = field(default_factory=list)

    def run_epoch(self, epoch: int) -> tuple[int, float]:
        """Draw every batch of one epoch; returns (images, seconds)."""
        if hasattr(self.batches, "set_epoch"):
            self.batches.set_epoch(epoch)
        torch.set_num_threads(self.threads)
        images = 0
        started = time.perf_counter()
        for _, labels in self.batches:
            images += len(labels)
        if torch.cuda.is_available():  # batches decoded on the GPU: count the work queued there
            torch.cuda.synchronize()
        return images, time.perf_counter() - started

    @property
    def epoch_rates(self) -> list[float]:
        return [n / s for n, s in zip(self.epoch_images, self.epoch_seconds)]

    @property
    def images_per_second(self) -> float:
        return statistics.median(self.epoch_rates)


def machine_busy_seconds() -> float | None:
    """CPU seconds that all processes of the machine have spent busy since boot (Linux's
    ``/proc/stat``), or ``None`` elsewhere."""
    stat = Path("/proc/stat")
    if not stat.exists():
        return None
    user, nice, system, _idle, _iowait, irq, softirq = stat.read_text().split()[1:8]
    ticks = sum(int(value) for value in (user, nice, system, irq, softirq))
    return ticks / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have ended (the workers)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def cifar_like_split(count: int, seed: int = 0) -> TensorSplit:
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (count, 3, 32, 32), generator=generator, dtype=torch.uint8)
    labels = torch.randint(0, 100, (count,), generator=generator)
    return TensorSplit(images, labels)


def cifar_pipelines(count: int, batch_size: int, threads: int) -> list[Pipeline]:
    split = cifar_like_split(count)
    batched_transform = Compose(
        RandomCropFlip(4, True), Normalize(CIFAR100_MEAN, CIFAR100_STD), Cutout(8)
    )
    per_image = PerImageCifar(
        split.x, split.y, per_image_transform(4, True, 8, CIFAR100_MEAN, CIFAR100_STD)
    )
    pipelines = [
        Pipeline("cifar", "batched (TensorBatches)", 0, threads,
                 TensorBatches(split, batch_size, shuffle=True, transform=batched_transform)),
    ]
    if threads != 1:
        pipelines.append(
            Pipeline("cifar", "batched (TensorBatches)", 0, 1,
                     TensorBatches(split, batch_size, shuffle=True, transform=batched_transform))
        )
    for workers in (2, 0):
        loader = DataLoader(per_image, batch_size=batch_size, shuffle=True, num_workers=workers,
                            persistent_workers=workers > 0,
                            generator=torch.Generator().manual_seed(0))
        pipelines.append(Pipeline("cifar", "per-image (PIL + torchvision)", workers, threads,
                                  loader, is_reference=workers == 2))
    return pipelines


def write_jpeg_tree(root: Path, classes: int, per_class: int, size: int | tuple[int, int], seed: int = 0) -> None:
    """An ImageFolder tree ``root/class_XX/YYYY.jpg`` of smooth random colour images, ``size``
    pixels square or ``(width, height)``."""
    width, height = (size, size) if isinstance(size, int) else size
    rng = np.random.default_rng(seed)
    for label in range(classes):
        folder = root / f"class_{label:02d}"
        folder.mkdir(parents=True)
        for index in range(per_class):
            coarse = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC))
            noisy = smooth.astype(np.int16) + rng.integers(-8, 9, smooth.shape, dtype=np.int16)
            image = Image.fromarray(noisy.clip(0, 255).astype(np.uint8))
            image.save(folder / f"{index:04d}.jpg", quality=90)


def imagefolder_pipelines(root: Path, batch_size: int, threads: int, workers: int = 2,
                          decode_on: str | None = None) -> list[Pipeline]:
    train_transform = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.PILToTensor(),
    ])
    dataset = torchvision.datasets.ImageFolder(str(root), transform=train_transform)
    pipelines = []
    for count in (0, workers):
        loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=count,
                            persistent_workers=count > 0,
                            generator=torch.Generator().manual_seed(0))
        pipelines.append(Pipeline("imagefolder", "ImageFolder JPEG (PIL + torchvision)", count,
                                  threads, loader, is_reference=count == 0))
    decoders = [("pil", "cpu"), ("auto", "cpu")] + ([("device", decode_on)] if decode_on else [])
    for decoder, device in decoders:  # a split each: ImageFileSplits sets its decoder on its splits
        classes, splits = read_class_folders({"train": root}, "benchmark JPEG tree", str(root))
        data = ImageFileSplits(train=splits["train"], val=None, test=splits["train"], num_classes=len(classes),
                               mean=IMAGENET_MEAN, std=IMAGENET_STD, train_crop="random_resized",
                               decoder=decoder)
        batches = ImageBatches(data.train, batch_size, shuffle=True, seed=0, num_workers=workers, device=device,
                               image_transform=data.image_transform(True, random_crop=True, flip=True))
        name = f"ImageBatches JPEG (dataset.decoder={decoder}{', on ' + device if decoder == 'device' else ''})"
        pipelines.append(Pipeline("imagefolder", name, workers, threads, batches))
    return pipelines


def other_processes_note(busy_before: float | None, own_before: float, started: float,
                         cores: int) -> str:
    """A sentence on how much CPU other processes took while the benchmark ran: the machine's
    busy time minus this process's and its workers' CPU time."""
    busy_after = machine_busy_seconds()
    if busy_before is None or busy_after is None:
        return "CPU use of other processes during the run: unknown (no /proc/stat)."
    wall = time.time() - started
    others = max(busy_after - busy_before - (own_cpu_seconds() - own_before), 0.0)
    note = (f"Other processes used {others:.0f} CPU seconds during the {wall:.0f} s run "
            f"({others / wall:.2f} of {cores} cores on average)")
    if others / wall > 0.1:
        return note + "; the numbers are disturbed by that load, rerun on a quiet machine."
    return note + "."


def run_interleaved(pipelines: list[Pipeline], epochs: int) -> None:
    """One warm-up epoch each, then ``epochs`` timed epochs, the pipelines taking turns."""
    for epoch in range(epochs + 1):
        for pipeline in pipelines:
            images, seconds = pipeline.run_epoch(epoch)
            label = "warm-up" if epoch == 0 else f"epoch {epoch}"
            print(f"{pipeline.benchmark:>11} {pipeline.name:<36} workers={pipeline.workers} "
                  f"threads={pipeline.threads} {label}: {images / seconds:10.0f} images/s",
                  flush=True)
            if epoch > 0:
                pipeline.epoch_images.append(images)
                pipeline.epoch_seconds.append(seconds)


def result_rows(pipelines: list[Pipeline]) -> list[dict]:
    rows = []
    for benchmark in dict.fromkeys(p.benchmark for p in pipelines):
        group = [p for p in pipelines if p.benchmark == benchmark]
        reference = next(p for p in group if p.is_reference)
        for pipeline in group:
            rows.append({
                "benchmark": benchmark,
                "pipeline": pipeline.name,
                "workers": pipeline.workers,
                "threads": pipeline.threads,
                "images_per_second": pipeline.images_per_second,
                "best_epoch_images_per_second": max(pipeline.epoch_rates),
                "ratio_to_reference": pipeline.images_per_second / reference.images_per_second,
                "reference": f"{reference.name}, {reference.workers} workers",
                "epoch_images": pipeline.epoch_images,
                "epoch_seconds": pipeline.epoch_seconds,
            })
    return rows


def cores_needed(rows: list[dict], step_rate: float) -> list[dict]:
    """For each image-file pipeline with decoding workers: the images per second one worker
    core delivers (the row's images/s over its workers), and the cores that keep up with a model
    training on ``step_rate`` images per second: that many workers, plus one core for the
    training loop (the rule of ``trainer.num_workers: auto``, :mod:`topk.data.workers`)."""
    needed = []
    for row in rows:
        if row["benchmark"] != "imagefolder" or not row["workers"]:
            continue
        per_core = row["images_per_second"] / row["workers"]
        needed.append({"pipeline": row["pipeline"], "images_per_second_per_core": per_core,
                       "step_rate": step_rate, "cores": math.ceil(step_rate / per_core) + 1})
    return needed


def cores_markdown(needed: list[dict], cores: int) -> list[str]:
    """The table of :func:`cores_needed`, and whether this machine has the cores."""
    if not needed:
        return []
    lines = ["", f"Cores to keep up with a model training on {needed[0]['step_rate']:,.0f} images/s "
             f"(`--step-rate`: `make bench-epochs` on the GPU at hand gives it), this machine having {cores}:",
             "", "| pipeline | images/s per worker core | cores needed | enough here |", "|---|---:|---:|---|"]
    lines += [f"| {row['pipeline']} | {row['images_per_second_per_core']:,.0f} | {row['cores']} | "
              f"{'yes' if row['cores'] <= cores else 'no'} |" for row in needed]
    return lines


def markdown(rows: list[dict], settings: dict, verdict: str) -> str:
    lines = [
        "### Training images per second delivered (median over timed epochs)",
        "",
        f"{settings['cores']} cores available; main process: {settings['threads']} torch "
        f"thread(s) unless the row says 1; DataLoader workers: 1 thread each. "
        f"torch {settings['torch']}, torchvision {settings['torchvision']}, "
        f"Pillow {settings['pillow']}, Python {settings['python']}. "
        f"Load average before the run: {settings['load_average_before']}. "
        f"{settings['other_processes']}",
        "",
        "| benchmark | pipeline | workers | main-process torch threads | images/s "
        "| best epoch | ratio | ratio to |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['benchmark']} | {row['pipeline']} | {row['workers']} | {row['threads']} | "
            f"{row['images_per_second']:,.0f} | {row['best_epoch_images_per_second']:,.0f} | "
            f"{row['ratio_to_reference']:.2f}× | "
            f"{row['reference']} |"
        )
    cifar = settings["cifar"]
    lines += [
        "",
        f"CIFAR-shaped: {cifar['images']:,} random uint8 images 3×32×32, batch "
        f"{cifar['batch_size']}, shuffled; batched = RandomCropFlip(4, flip) → "
        f"Normalize(CIFAR-100) → Cutout(8); per-image = RandomCrop(32, padding=4) → "
        f"RandomHorizontalFlip → ToTensor → Normalize → Cutout(8).",
    ]
    jpeg = settings["imagefolder"]
    if jpeg is not None:
        lines.append(
            f"ImageFolder: {jpeg['classes']} classes × {jpeg['per_class']} JPEGs of "
            f"{jpeg['size'][0]}×{jpeg['size'][1]} ({jpeg['mean_file_kib']:.0f} KiB on average), "
            f"batch {jpeg['batch_size']}, RandomResizedCrop(224) → RandomHorizontalFlip → "
            f"PILToTensor; ImageBatches: decode (PIL or decode_jpeg) → PILToTensor → "
            f"RandomResizedCrop(224) → RandomHorizontalFlip."
        )
    lines += [
        f"One warm-up epoch, then {settings['epochs']} timed epochs per pipeline, taken in turns.",
        *cores_markdown(settings.get("cores_needed") or [], settings["cores"]),
        *(step_markdown(settings["step_time"], *settings["step_model"]) if settings.get("step_time") else []),
        "",
        verdict,
    ]
    return "\n".join(lines) + "\n"


def pixels(text: str) -> tuple[int, int]:
    """``800x600`` -> (800, 600); ``256`` -> (256, 256)."""
    width, _, height = text.lower().partition("x")
    return int(width), int(height or width)


def parse_args(argv=None):
    command = parser(__doc__)
    command.add_argument("--quick", action="store_true",
                         help="a tiny run (5,000 CIFAR images, 2 × 20 JPEGs, 1 timed epoch)")
    command.add_argument("--cifar-images", type=int, default=50_000)
    command.add_argument("--batch-size", type=int, default=128, help="CIFAR batch size")
    command.add_argument("--jpeg-classes", type=int, default=10)
    command.add_argument("--jpeg-per-class", type=int, default=50)
    command.add_argument("--jpeg-size", type=pixels, default=(800, 600), metavar="WxH",
                         help="width x height of the JPEGs, e.g. 800x600 (one number: a square)")
    command.add_argument("--jpeg-batch-size", type=int, default=32)
    command.add_argument("--epochs", type=int, default=3, help="timed epochs after the warm-up")
    command.add_argument("--threads", type=int, default=None,
                         help="torch threads of the main process (default: cores available)")
    command.add_argument("--skip-imagefolder", action="store_true")
    command.add_argument("--workers", type=int, default=2, help="decoding workers of the JPEG pipelines")
    command.add_argument("--step-time", default=None, metavar="MODEL",
                         help="also time a training step of MODEL (e.g. mlp) on the JPEGs with trainer.num_workers "
                              "auto and 4 (topk.bench.step_time)")
    command.add_argument("--step-image-size", type=int, default=64, help="image_size of the --step-time runs")
    command.add_argument("--step-epochs", type=int, default=3, help="epochs of each --step-time run")
    command.add_argument("--decode-on", default=None, metavar="DEVICE",
                         help="also time dataset.decoder=device with batches on DEVICE (cuda: decoded by "
                              "nvJPEG and cropped there), the workers only reading files")
    command.add_argument("--step-rate", type=float, default=None,
                         help="images per second the model trains on (make bench-epochs on the GPU): "
                              "the cores each image-file pipeline needs to keep up")
    command.add_argument("--out", type=Path, default=BENCH_OUT)
    args = command.parse_args(argv)
    if args.decode_on and args.decode_on.startswith("cuda") and not torch.cuda.is_available():
        command.error(f"--decode-on {args.decode_on} needs a CUDA device and this machine has none; "
                      "--decode-on cpu times the same path here.")
    if args.quick:
        args.cifar_images, args.jpeg_classes, args.jpeg_per_class, args.epochs = 5_000, 2, 20, 1
    return args


def run_settings(args, threads: int) -> dict:
    """The machine, the versions and the sizes, for the record and the table's notes."""
    return {
        "cores": available_cores(),
        "threads": threads,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "pillow": Image.__version__,
        "python": platform.python_version(),
        "load_average_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "epochs": args.epochs,
        "cifar": {"images": args.cifar_images, "batch_size": args.batch_size},
        "imagefolder": None,
    }


def add_imagefolder(root: Path, args, threads: int, settings: dict, pipelines: list[Pipeline]) -> None:
    """Write the JPEG tree under ``root`` and add its pipelines; ``settings`` records its sizes."""
    started = time.perf_counter()
    write_jpeg_tree(root, args.jpeg_classes, args.jpeg_per_class, args.jpeg_size)
    files = list(root.rglob("*.jpg"))
    mean_kib = statistics.mean(f.stat().st_size for f in files) / 1024
    print(f"wrote {len(files)} JPEGs ({mean_kib:.0f} KiB on average) in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    settings["imagefolder"] = {"classes": args.jpeg_classes,
                               "per_class": args.jpeg_per_class, "size": args.jpeg_size,
                               "batch_size": args.jpeg_batch_size,
                               "mean_file_kib": mean_kib}
    pipelines += imagefolder_pipelines(root, args.jpeg_batch_size, threads, args.workers, args.decode_on)


def jpeg_verdict(rows: list[dict], workers: int) -> tuple[str, dict] | None:
    """Images per second of ``ImageBatches`` with ``dataset.decoder=auto`` over the bare
    ``ImageFolder`` loader with the same workers (both at ``workers``), against
    :data:`JPEG_TARGET_RATIO`; None without the JPEG rows."""
    ours = [r for r in rows if r["pipeline"] == "ImageBatches JPEG (dataset.decoder=auto)"]
    bare = [r for r in rows if r["pipeline"].startswith("ImageFolder JPEG") and r["workers"] == workers]
    if not ours or not bare or workers == 0:
        return None
    ratio = ours[0]["images_per_second"] / bare[0]["images_per_second"]
    met = ratio >= JPEG_TARGET_RATIO
    text = (f"JPEG target (ImageBatches, decoder=auto, ≥ {JPEG_TARGET_RATIO:g}× the bare ImageFolder loader, "
            f"{workers} workers each): {'met' if met else 'NOT met'}, {ratio:.2f}×.")
    return text, {"ratio": JPEG_TARGET_RATIO, "achieved": ratio, "met": met}


def main(argv=None) -> int:
    args = parse_args(argv)
    threads = args.threads or available_cores()
    torch.set_num_threads(threads)
    settings = run_settings(args, threads)
    print(f"torch threads in the main process: {threads} ({settings['cores']} cores available); "
          f"DataLoader workers: 1 thread each", flush=True)
    busy_before, own_before, run_started = machine_busy_seconds(), own_cpu_seconds(), time.time()
    pipelines = cifar_pipelines(args.cifar_images, args.batch_size, threads)
    with tempfile.TemporaryDirectory(prefix="bench_data_") as temporary:
        if not args.skip_imagefolder:
            add_imagefolder(Path(temporary), args, threads, settings, pipelines)
        run_interleaved(pipelines, args.epochs)
        rows = result_rows(pipelines)
        for pipeline in pipelines:  # ImageBatches' workers ignore SIGTERM: stop them as a run does
            if isinstance(pipeline.batches, ImageBatches):
                pipeline.batches.close()
        del pipelines[:]  # shut the persistent workers down before the folder goes
        if args.step_time and not args.skip_imagefolder:
            settings["step_model"] = (args.step_time, args.step_image_size)
            with tempfile.TemporaryDirectory(prefix="bench_step_") as runs:  # not in the tree: no class
                settings["step_time"] = step_times(Path(temporary), Path(runs), args.step_time,
                                                   args.step_image_size, args.step_epochs)
    settings["other_processes"] = other_processes_note(
        busy_before, own_before, run_started, settings["cores"]
    )
    print(settings["other_processes"], flush=True)

    if args.step_rate:
        settings["cores_needed"] = cores_needed(rows, args.step_rate)
    batched = next(r for r in rows if r["pipeline"].startswith("batched")
                   and r["threads"] == threads)
    met = batched["ratio_to_reference"] >= TARGET_RATIO
    verdict = (f"Target (batched, {threads} thread(s), ≥ {TARGET_RATIO:g}× per-image with 2 "
               f"workers): {'met' if met else 'NOT met'}, {batched['ratio_to_reference']:.2f}×.")
    result = {"settings": settings, "rows": rows,
              "target": {"ratio": TARGET_RATIO, "achieved": batched["ratio_to_reference"],
                         "met": met}}
    if (jpeg := jpeg_verdict(rows, args.workers)) is not None:
        verdict, result["jpeg_target"] = f"{verdict}\n{jpeg[0]}", jpeg[1]
    table = markdown(rows, settings, verdict)
    write_outputs(args.out, "data", result, table)
    print(table)
    return 0
