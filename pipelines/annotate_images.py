"""Load an image for annotation, or say precisely why it cannot be annotated.

A corpus of hundreds of thousands of user images always holds a few missing files, truncated
downloads and boxes from another resolution. None of them may stop a run: each becomes an
image-level rejection (one of :data:`relate.annotation_stats.IMAGE_RULES`, with a message naming
the file and the fault) in the rejections table, and the run goes on.
"""

from __future__ import annotations

import math

import numpy as np

from relate.annotation_stats import IMAGE_RULES

__all__ = ["ImageProblem", "load_checked_image", "check_boxes", "IMAGE_RULES"]

_BOX_SLACK = 0.5  # pixels: the same tolerance relate.schema.validate_images grants


class ImageProblem(Exception):
    """Why one image cannot be annotated: ``rule`` (one of IMAGE_RULES) and a message."""

    def __init__(self, rule: str, message: str) -> None:
        if rule not in IMAGE_RULES:
            raise ValueError(f"unknown image rule {rule!r}; valid: {list(IMAGE_RULES)}")
        super().__init__(message)
        self.rule, self.message = rule, message

    def __reduce__(self):
        # pickled whole (a Ray worker to its driver): by default pickle calls the class with the message alone
        return type(self), (self.rule, self.message)


def load_checked_image(uri: str, width: int | None, height: int | None) -> np.ndarray:
    """The image as an RGB array; raises :class:`ImageProblem` for a missing, truncated or
    undecodable file, or one whose size disagrees with the record's ``width``/``height``
    (0 or None means "take the file's size")."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(uri) as im:
            pixels = np.asarray(im.convert("RGB"))
    except FileNotFoundError:
        raise ImageProblem("image_missing", f"{uri}: no such file") from None
    except UnidentifiedImageError as exc:
        raise ImageProblem("image_undecodable", f"{uri}: not an image PIL can decode ({exc})") from None
    except OSError as exc:  # PIL reports a cut-off file as OSError("image file is truncated ...")
        rule = "image_truncated" if "truncat" in str(exc).lower() else "image_undecodable"
        raise ImageProblem(rule, f"{uri}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - decompression bombs, codec bugs: one image, not the run
        raise ImageProblem("image_undecodable", f"{uri}: {type(exc).__name__}: {exc}") from None
    h, w = pixels.shape[:2]
    if (width and width != w) or (height and height != h):
        raise ImageProblem("image_size_mismatch", f"{uri}: the record says {width}x{height}, the file is {w}x{h}")
    return pixels


def check_boxes(uri: str, boxes: list[dict], width: int, height: int) -> None:
    """Every box finite, non-empty and inside the image (within half a pixel), else ImageProblem."""
    for i, b in enumerate(boxes):
        x1, y1, x2, y2 = (b.get(k) for k in ("x1", "y1", "x2", "y2"))
        coords = (x1, y1, x2, y2)
        if any(v is None or not math.isfinite(v) for v in coords) or x2 <= x1 or y2 <= y1:
            raise ImageProblem("boxes_outside_image", f"{uri}: box {i} {coords} is empty, inverted or not finite")
        if min(x1, y1) < 0 or x2 > width + _BOX_SLACK or y2 > height + _BOX_SLACK:
            raise ImageProblem("boxes_outside_image",
                               f"{uri}: box {i} ({x1:g}, {y1:g}, {x2:g}, {y2:g}) falls outside the {width}x{height} image")
