"""Checks on what a caller hands the relation model: encoded image bytes and pixel boxes.

The Serve ingress (``serve_apps.security``) and ``relate predict`` both read images and boxes
through these functions, so a file the command line accepts is one the API accepts, decoded to
the same pixels. Images are opened lazily and their header size is checked before any pixel is
decoded, so a decompression bomb (a tiny PNG declaring 50,000 x 50,000 pixels) costs nothing;
PIL's own bomb guard is kept as a second line. A refusal is an ``InputError`` whose ``code``
names the kind of problem; the ingress turns codes into HTTP statuses.
"""

from __future__ import annotations

import io
import struct
import warnings
from typing import Sequence

import numpy as np

__all__ = ["InputError", "IMAGE_FORMATS", "INPUT_ERROR_CODES", "decode_image", "check_boxes"]

IMAGE_FORMATS = frozenset({"PNG", "JPEG", "WEBP", "BMP"})
INPUT_ERROR_CODES = ("bad_image", "unsupported_image", "image_too_large", "invalid_regions", "too_many_regions")


class InputError(ValueError):
    """An image or box list the model must not see; ``code`` is one of ``INPUT_ERROR_CODES``."""

    def __init__(self, code: str, message: str) -> None:
        if code not in INPUT_ERROR_CODES:
            raise ValueError(f"input error code {code!r} is not one of {list(INPUT_ERROR_CODES)}")
        super().__init__(message)
        self.code = code

    def __reduce__(self):
        # pickled whole (a Ray worker to its driver): by default pickle calls the class with the message alone
        return type(self), (self.code, str(self))


def decode_image(data: bytes, max_pixels: int, max_side: int, field: str = "image") -> np.ndarray:
    """Encoded bytes -> (H, W, 3) uint8, refusing unknown formats and oversized images before decoding.

    Images arrive as a camera or a browser writes them: the EXIF orientation is applied (so boxes
    are checked against the picture the client sees), and 16-bit greyscale is scaled to 8 bits,
    not clipped to white as PIL's own conversion does."""
    from PIL import Image, ImageOps

    if not data:
        raise InputError("bad_image", f"{field}: empty file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data))
            fmt, (w, h) = im.format, im.size
            if fmt not in IMAGE_FORMATS:
                raise InputError("unsupported_image",
                                 f"{field}: format {fmt} not accepted; use one of {sorted(IMAGE_FORMATS)}")
            if w * h > max_pixels or max(w, h) > max_side:
                raise InputError("image_too_large", f"{field}: {w}x{h} exceeds the limit of "
                                                    f"{max_pixels} pixels / {max_side} px per side")
            im.load()
            im = ImageOps.exif_transpose(im)
            return _to_rgb8(im)
    except InputError:  # before the ValueError clause below: an InputError is a ValueError
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise InputError("image_too_large", f"{field}: rejected as a decompression bomb ({exc})") from None
    except Image.UnidentifiedImageError:  # PIL's message names the buffer object ('<_io.BytesIO ...>')
        raise InputError("bad_image", f"{field}: not a decodable image (no known image format; accepted: "
                                      f"{sorted(IMAGE_FORMATS)})") from None
    except (OSError, SyntaxError, ValueError, EOFError, MemoryError, TypeError, struct.error) as exc:
        raise InputError("bad_image", f"{field}: not a decodable image ({type(exc).__name__}: {exc})") from None


def _to_rgb8(im) -> np.ndarray:
    """(H, W, 3) uint8 from any decoded mode; 16-bit and 32-bit integer greyscale are rescaled."""
    if im.mode.startswith("I;16") or im.mode == "I":
        grey = np.asarray(im).astype(np.int64)
        if im.mode == "I" and grey.max(initial=0) > 65535:  # 32-bit data: scale by its own range
            grey = grey * 65535 // max(int(grey.max()), 1)
        grey = ((np.clip(grey, 0, 65535) + 128) // 257).astype(np.uint8)  # 65535 -> 255, 0 -> 0
        return np.repeat(grey[:, :, None], 3, axis=2)
    return np.asarray(im.convert("RGB"))


def check_boxes(boxes: Sequence[Sequence[float]], width: int, height: int, max_regions: int,
                field: str = "boxes", min_count: int = 2) -> np.ndarray:
    """``[x1, y1, x2, y2]`` rows -> (N, 4) float array; every box finite, non-empty and inside the
    image, else an ``InputError`` naming the box."""
    if len(boxes) < min_count:
        raise InputError("invalid_regions", f"{field}: need at least {min_count} regions, got {len(boxes)}")
    if len(boxes) > max_regions:
        raise InputError("too_many_regions", f"{field}: {len(boxes)} regions exceed the limit of {max_regions}")
    arr = np.array([list(b) for b in boxes], dtype=np.float64).reshape(-1, 4)
    for i, (x1, y1, x2, y2) in enumerate(arr):
        if not np.isfinite([x1, y1, x2, y2]).all():
            raise InputError("invalid_regions", f"{field}[{i}]: coordinates must be finite numbers")
        if not (0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height):
            raise InputError("invalid_regions", f"{field}[{i}] = ({x1:g}, {y1:g}, {x2:g}, {y2:g}): must satisfy "
                                                f"0 <= x1 < x2 <= {width} and 0 <= y1 < y2 <= {height} (image size)")
    return arr
