"""Region glimpse: each box cropped from the input pixels at a fixed size and read by a small CNN.

The paper's box features are the backbone's patch tokens pooled over the box (``RegionQueryPool``).
With a pretrained DINOv3 at 448 px a cup is a dozen patches of features that already name it. A
backbone trained from scratch on a CPU reads 96 px pictures in 8 px patches, so a 10 px cup is one
or two tokens, and the relations that hinge on *what* an object is go with it: on the synthetic
world a ball in a box against a cup in a person's box (containment), or how much of a back object's
drawn shape a front one hides (depth). At the CPU budget the truth-trained model named a box's
category right 58% of the time through its grounding head, ball and box each under 25%
(docs/jobs/training.md, "Recognition, the region glimpse").

The glimpse is the classic two-stage answer: ``roi_align`` resamples every box to ``side`` x
``side`` pixels whatever its size, and three small convolutions (the last two at stride 2) read the
crop's shape and colours into the model width. The result is added to the box feature v_i, so the
object-text grounding loss (App. B.1) trains it to recognise, and the pair encoder and the
pair transformer read it through v_s and v_o. It is not part of the paper's architecture and is off
in the released recipe.
"""

from __future__ import annotations

import torch
from torch import nn

from relate.model.region_pixels import region_cells

__all__ = ["RegionGlimpse", "glimpse_crops"]


def glimpse_crops(images: torch.Tensor, boxes: torch.Tensor, side: int) -> torch.Tensor:
    """images (B, C, H, W); boxes (B, N, 4) in its pixels -> (B * N, C, side, side): each box
    resampled to ``side`` x ``side``, the region pixel cue's cells at ``side`` a side
    (``region_pixels.region_cells``: a crop of a large box is its mean over each cell)."""
    b, n = boxes.shape[:2]
    return region_cells(images, boxes, side).view(b * n, images.shape[1], side, side)


class RegionGlimpse(nn.Module):
    """A fixed-size crop of each box, read by a small CNN into the model width (added to v_i)."""

    def __init__(self, dim: int, side: int, width: int = 32, channels: int = 3) -> None:
        super().__init__()
        if side < 4:
            raise ValueError(f"a region glimpse needs a crop of at least 4 pixels a side, got {side}")
        self.side = side
        self.net = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1), nn.GELU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.GELU(),
            nn.Conv2d(2 * width, 2 * width, 3, stride=2, padding=1), nn.GELU(),
            nn.Flatten(), nn.Linear(2 * width * ((side + 3) // 4) ** 2, dim))

    def forward(self, images: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) in [0, 1]; boxes (B, N, 4) in its pixels -> (B, N, d)."""
        b, n = boxes.shape[:2]
        crops = glimpse_crops(images, boxes, self.side)
        return self.net(crops * 2 - 1).view(b, n, -1)
