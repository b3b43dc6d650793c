"""Image files decoded to RGB for the crops (``dataset.decoder``: ``auto``, ``pil`` or ``device``).

``pil``: every file through PIL (``Image.open(path).convert("RGB")``), as torchvision's
``ImageFolder`` loader does (``torchvision.datasets.folder.pil_loader``).

``auto`` (the default): a file that starts with a JPEG's first marker bytes ``FF D8 FF`` (the
start-of-image marker and the next marker's lead byte; ITU-T T.81 §B.1.1.2), whatever its
extension, is decoded by ``torchvision.io.decode_jpeg(data, mode=ImageReadMode.RGB)`` straight to
a uint8 ``[3, H, W]`` tensor (libjpeg-turbo, without PIL's image object and its copy to a
tensor), where the installed torchvision decodes a JPEG at all (:func:`jpeg_decoder` tries once
per process). Every other file (PNG, BMP, ...), and any JPEG that ``decode_jpeg`` refuses (a
broken or truncated file, a kind of JPEG it does not read), goes through PIL as under ``pil`` and
is converted to the same tensor; a file that PIL cannot decode either raises PIL's error, so a
broken image stops the run with the same sentence under both decoders
(:class:`topk.data.images.ImageFileDataset`). Both decoders apply no EXIF orientation, as
``Image.open`` applies none. torchvision 0.29 marks its image decoders deprecated in favour of
TorchCodec; ``auto`` silences that warning and falls back to PIL once they are removed.

``device``: the decoding workers only read each JPEG's bytes (:func:`jpeg_bytes`); the training
process decodes a batch of them with one ``decode_jpeg(list, device=...)`` call on the run's device
(nvJPEG's batched decoder on a GPU; libjpeg-turbo on a CPU, where it gives ``auto``'s pixels) and
crops them there (:func:`decode_batch`, :class:`topk.data.images.ImageFileDataset`). Files that
are no JPEG are decoded by the workers as under ``auto``; a JPEG the device refuses is decoded by
the training process as under ``auto``, so a broken one stops the run with the same sentence.
It moves the decoding from the worker cores to the GPU where those are too few to feed it
(``make bench-data --decode-on cuda`` measures both).

Agreement, measured by ``tests/test_decoding.py``: on JPEGs written by PIL (RGB, grey, CMYK)
``decode_jpeg`` with torchvision 0.29.1 and PIL 13.0 gave bit-identical pixels here (Pillow's wheels
also decode with libjpeg-turbo); the tests allow a mean absolute
difference of 1 grey level for other builds.

Reduced-size decoding (PIL's ``Image.draft``: libjpeg's DCT scaling to 1/2, 1/4 or 1/8 before
``Resize``) is not offered. It changes the pixels the crops see: on 800×600 JPEGs of smooth
colour waves (quality 90), ``Resize(256)`` + ``CenterCrop(224)`` after a half-size draft differs
from the same crop of the full-size decode by a mean absolute difference of 0.16 grey levels
(largest 2), and by 0.71 (largest 5) with Gaussian noise of σ = 8 grey levels added (about 0.4 at
1200×900 and 0.3 at 2400×1800, both drafted to 600×450; ``tests/test_decoding.py`` holds the
800×600 case), against 0 between the two decoders. That is not "the same crop statistics" a published
``Resize(256)`` protocol assumes; it would also only apply to the PIL path (``decode_jpeg`` has no
DCT scaling) and only where the first step resizes the whole image (not ``RandomResizedCrop``,
whose box is drawn in full-size pixels).
"""

from __future__ import annotations

import functools
import io
import warnings

import numpy as np
import torch
from PIL import Image

DECODERS = ("auto", "pil", "device")  # dataset.decoder
JPEG_START = b"\xff\xd8\xff"
# the start of torchvision 0.29's warning on each call of its image decoders
_DEPRECATION = "The image decoding and encoding capabilities of TorchVision are deprecated"


def pil_rgb(image: Image.Image) -> Image.Image:
    """An opened PIL image, decoded and converted to RGB (its file closed)."""
    with image:
        return image.convert("RGB")


@functools.cache
def jpeg_decoder():
    """``(decode_jpeg, ImageReadMode.RGB)`` where the installed torchvision decodes a small JPEG
    written by PIL, else None (no image extension, or the decoders removed)."""
    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except ImportError:
        return None
    sample = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 100, 50)).save(sample, "JPEG")
    data = torch.frombuffer(bytearray(sample.getvalue()), dtype=torch.uint8)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_DEPRECATION)
            decoded = decode_jpeg(data, mode=ImageReadMode.RGB)
    except Exception:  # noqa: BLE001  (any failure means: use PIL)
        return None
    return (decode_jpeg, ImageReadMode.RGB) if decoded.shape == (3, 8, 8) else None


def read_jpeg(path: str) -> torch.Tensor | None:
    """The RGB uint8 ``[3, H, W]`` pixels of the JPEG file ``path`` decoded by torchvision, or
    None when the file is no JPEG (by its first bytes) or ``decode_jpeg`` is missing or refuses
    it (the caller then decodes with PIL, which raises PIL's error for a broken file)."""
    decoder = jpeg_decoder()
    if decoder is None:
        return None
    with open(path, "rb") as file:
        if file.read(len(JPEG_START)) != JPEG_START:
            return None
        file.seek(0)
        data = torch.from_numpy(np.fromfile(file, dtype=np.uint8))
    decode_jpeg, rgb = decoder
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_DEPRECATION)
            return decode_jpeg(data, mode=rgb)
    except RuntimeError:  # broken, truncated, or a JPEG libjpeg-turbo's torchvision build refuses
        return None


def decode_file(path: str, open_image, decoder: str):
    """Image file ``path`` decoded to RGB by ``decoder`` (:data:`DECODERS`): under ``pil`` the PIL
    image, under ``auto`` (and ``device``, decoding one file here) a uint8 ``[3, H, W]`` tensor
    (``decode_jpeg`` for JPEGs, PIL for the rest and as the fallback). ``open_image()`` opens it
    with PIL (``ImageFileSplit.open``)."""
    if decoder == "pil":
        return pil_rgb(open_image())
    pixels = read_jpeg(path)
    if pixels is not None:
        return pixels
    from torchvision.transforms.v2.functional import pil_to_tensor

    return pil_to_tensor(pil_rgb(open_image()))


def jpeg_bytes(path: str) -> bytes | None:
    """The bytes of file ``path`` when it is a JPEG (by its first bytes) and torchvision decodes
    JPEGs, for :func:`decode_batch`; else None (the worker decodes it as under ``auto``)."""
    if jpeg_decoder() is None:
        return None
    with open(path, "rb") as file:
        data = file.read()
    return data if data.startswith(JPEG_START) else None


def decode_batch(items: list, device: torch.device, decode_one) -> list[torch.Tensor]:
    """The RGB uint8 ``[3, H, W]`` images of a batch on ``device``: ``items[i]`` is a JPEG's bytes
    (:func:`jpeg_bytes`), decoded with the batch's other JPEGs by one ``decode_jpeg`` call there,
    or pixels a worker decoded (a uint8 array), moved there. Where ``decode_jpeg`` refuses the
    batch, each JPEG is tried alone and one it refuses is decoded by ``decode_one(i)`` (the
    ``auto`` path, which raises PIL's error for a broken file)."""
    decode_jpeg, rgb = jpeg_decoder() or (None, None)
    images: list = [torch.from_numpy(item).to(device) if not isinstance(item, bytes) else None for item in items]
    jpegs = [i for i, item in enumerate(items) if isinstance(item, bytes)]
    data = [torch.frombuffer(bytearray(items[i]), dtype=torch.uint8) for i in jpegs]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_DEPRECATION)
        try:
            decoded = decode_jpeg(data, mode=rgb, device=device) if jpegs else []
        except RuntimeError:  # one file of the batch: find it
            decoded = [_decode_alone(decode_jpeg, rgb, one, device) for one in data]
    for i, image in zip(jpegs, decoded):
        images[i] = image if image is not None else torch.as_tensor(decode_one(i)).to(device)
    return images


def _decode_alone(decode_jpeg, rgb, data: torch.Tensor, device: torch.device) -> torch.Tensor | None:
    try:
        return decode_jpeg(data, mode=rgb, device=device)
    except RuntimeError:
        return None
