"""Region pixel cue: each pair's regions read straight from the input pixels, and compared.

Appearance relations (brighter than, same colour as) compare two regions' colours. That is a
comparison of two pooled colours, bilinear in what the concatenation of Eq. 1 sees, and a small
backbone trained from scratch for minutes barely learns it: on the synthetic world ``same colour
as`` stayed near AP 0.1 and appearance as a family near 0.6 in every CPU run (docs, "What the
model learns"). This module gives the pair head the comparison outright, from the input image in
[0, 1], which does not drift as the backbone trains:

* **cells**: each region pooled by torchvision's ``roi_align`` to ``cells`` x ``cells`` mean
  colours, for the subject, the object and their contact region (``relate.geometry.contact_box``:
  the overlap, or the gap between them);
* **colour histogram**: each region's soft joint RGB histogram (``bins`` levels a channel,
  triangular weights, over ``roi_align`` point samples), the classic region colour descriptor:
  two regions of one colour share their dominant bins whatever their shapes, which a few mean
  cells over a shape and its background do not show;

and for the ordered pair: both, their difference and its magnitude, the histograms' overlap, and
the contact region's histogram with its overlap with each region's (where two regions overlap,
the shared pixels show the front one's colours: an occlusion-order cue that, unlike
``relate.model.occlusion``'s pooled means, is not diluted by background and shading), embedded
and added to the pair vector.

* **ownership maps** (``ownership``): each box's own colours are its histogram less the overlap's
  (``own_colours``: what only that box covers); every point sample of the overlap and of both boxes
  is weighed against the subject's own colours and against the object's. Where the drawn shapes
  overlap, the front one's colour fills the overlap, and a box's own map traces its visible shape:
  the point-by-point reading a box-level histogram averages away. On the synthetic world it lifts
  depth direction from 0.86 to 0.90 and depth AP from 0.76 to 0.83 at the CPU budget
  (docs/jobs/training.md, "Ownership maps").

It is not part of the paper's architecture (a pretrained DINOv3 carries colour in its tokens), so
it is off in the released recipe and on in the CPU recipes that train a backbone from scratch.
"""

from __future__ import annotations

import torch
from torch import nn
from torchvision.ops import roi_align

from relate.geometry import contact_box
from relate.model.pooling import gather_pairs

__all__ = ["RegionPixelCue", "region_cells", "colour_weights", "colour_bins", "colour_corners", "corners_mean",
           "corners_dot", "colour_histogram", "own_colours", "pair_colour_features", "HISTOGRAM_SAMPLES"]

# point samples a side per region for the histogram (bilinear, one at each sub-cell centre)
HISTOGRAM_SAMPLES = 8
# own colours weighing less than this share of their box's area are round-off, not a region (own_colours):
# 1e-4 is ~15x the largest residue of 64 bins at float32 and ~100x under one point sample's weight (1 / 64)
OWN_FLOOR = 1e-4


def _rois(boxes: torch.Tensor) -> torch.Tensor:
    """(B, N, 4) boxes -> (B * N, 5) roi_align rows (batch index first)."""
    b, n = boxes.shape[:2]
    idx = torch.arange(b, device=boxes.device, dtype=boxes.dtype).repeat_interleave(n)[:, None]
    return torch.cat([idx, boxes.reshape(b * n, 4)], dim=1)


def _point_samples(images: torch.Tensor, boxes: torch.Tensor, samples: int) -> torch.Tensor:
    """(B * N, C, samples, samples): each box's bilinear samples, one at each sub-cell's centre."""
    return roi_align(images, _rois(boxes).to(images.dtype), (samples, samples), spatial_scale=1.0, sampling_ratio=1,
                     aligned=True)


def region_cells(pixels: torch.Tensor, boxes: torch.Tensor, cells: int) -> torch.Tensor:
    """pixels (B, C, H, W); boxes (B, N, 4) in pixels of that image -> (B, N, C * cells * cells):
    the mean of each of the box's cells x cells sub-rectangles (roi_align's adaptive sampling: about one
    bilinear sample per pixel, so a cell of whole pixels is their exact mean)."""
    b, n = boxes.shape[:2]
    pooled = roi_align(pixels, _rois(boxes).to(pixels.dtype), (cells, cells), spatial_scale=1.0, sampling_ratio=0,
                       aligned=True)
    return pooled.view(b, n, -1)


def colour_weights(images: torch.Tensor, boxes: torch.Tensor, bins: int,
                   samples: int = HISTOGRAM_SAMPLES) -> torch.Tensor:
    """images (B, 3, H, W) in [0, 1]; boxes (B, N, 4) -> (B, N, samples ** 2, 3, bins): each of
    ``samples`` x ``samples`` point samples of each box (row-major), each channel's soft bin weights
    (each sums to 1). A channel value v weighs the level centres c_l = (l + 0.5) / bins by
    max(0, 1 - |v - c_l| * bins), renormalised (a value beyond the outer centres belongs wholly to the
    outer level)."""
    b, n = boxes.shape[:2]
    pts = _point_samples(images, boxes, samples)  # (B*N, 3, s, s)
    v = pts.flatten(2).transpose(1, 2).clamp(0, 1)  # (B*N, S, 3)
    centres = (torch.arange(bins, device=images.device, dtype=images.dtype) + 0.5) / bins
    w = (1 - (v[..., None] - centres).abs() * bins).clamp(min=0)  # (B*N, S, 3, bins)
    w = w / w.sum(-1, keepdim=True).clamp(min=1e-6)
    return w.view(b, n, samples * samples, 3, bins)


def colour_bins(images: torch.Tensor, boxes: torch.Tensor, bins: int,
                samples: int = HISTOGRAM_SAMPLES) -> torch.Tensor:
    """images (B, 3, H, W) in [0, 1]; boxes (B, N, 4) -> (B, N, samples ** 2, bins ** 3): each of
    ``samples`` x ``samples`` point samples of each box (row-major) as its soft joint RGB bin weights
    (each sums to 1): the product of its three channels' ``colour_weights``, bin (r, g, b) at
    r * bins ** 2 + g * bins + b."""
    w = colour_weights(images, boxes, bins, samples)
    b, n, s = w.shape[:3]
    joint = torch.einsum("sa,sb,sc->sabc", w[..., 0, :].flatten(0, 2), w[..., 1, :].flatten(0, 2),
                         w[..., 2, :].flatten(0, 2))
    return joint.reshape(b, n, s, bins ** 3)


def colour_corners(images: torch.Tensor, boxes: torch.Tensor, bins: int,
                   samples: int = HISTOGRAM_SAMPLES) -> tuple[torch.Tensor, torch.Tensor]:
    """The same point samples' joint RGB bin weights as ``colour_bins``, kept sparse: (B, N, 8, S) bins
    and (B, N, 8, S) weights, samples last. A channel's triangular weights are linear interpolation
    between the two level centres around its value (a value beyond the outer centres wholly the outer
    level), so a sample's joint weights are trilinear: eight bins at most carry weight, the corners of
    the colour cell it falls in. What the region pixel cue reads of a contact region (its histogram,
    its samples against keys) is a sum over those eight instead of over all bins ** 3: the dense
    weights of every contact region's every sample were the cue's largest tensor (cpu_long: 26 MB a
    step) and most of its time. Samples are the last, contiguous axis, so every element-wise op runs
    along them."""
    b, n = boxes.shape[:2]
    pts = _point_samples(images, boxes, samples)  # (B*N, 3, s, s)
    x = (pts.flatten(2).clamp(0, 1) * bins - 0.5).clamp(0, bins - 1)  # (B*N, 3, S) in level units
    lo = x.floor().clamp(max=max(bins - 2, 0))
    up = x - lo  # the upper level's weight (0 with one level)
    level = torch.stack([lo, (lo + 1).clamp(max=bins - 1)], dim=2)  # (B*N, 3, 2, S), whole numbers
    weight = torch.stack([1 - up, up], dim=2)
    r, g, bl = (t[:, :, None, None] for t in level.unbind(1))  # (B*N, 2, 1, 1, S) ...
    idx = r * (bins * bins) + g.transpose(1, 2) * bins + bl.transpose(1, 3)  # (B*N, 2, 2, 2, S)
    wr, wg, wb = (t[:, :, None, None] for t in weight.unbind(1))
    wt = wr * wg.transpose(1, 2) * wb.transpose(1, 3)
    s = samples * samples
    return idx.long().view(b, n, 8, s), wt.reshape(b, n, 8, s)


def corners_mean(idx: torch.Tensor, wt: torch.Tensor, bins: int) -> torch.Tensor:
    """``colour_corners``' (B, N, 8, S) bins and weights -> (B, N, bins ** 3): the samples' mean joint
    weights, ``colour_histogram``."""
    b, n, _, s = idx.shape
    return wt.new_zeros(b, n, bins ** 3).scatter_add_(-1, idx.flatten(2), wt.flatten(2)) / s


def corners_dot(idx: torch.Tensor, wt: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``colour_corners``' (B, N, 8, S) bins and weights, keys (B, N, bins ** 3, T) -> (B, N, S, T): each
    sample's joint weights dotted with each of its box's T keys (``colour_bins`` against ``keys``)."""
    b, n, c, s = idx.shape
    t = keys.shape[-1]
    at = keys.transpose(-1, -2).gather(-1, idx.reshape(b, n, 1, c * s).expand(b, n, t, c * s))
    return (at.view(b, n, t, c, s) * wt[:, :, None]).sum(3).transpose(-1, -2)


def colour_histogram(images: torch.Tensor, boxes: torch.Tensor, bins: int,
                     samples: int = HISTOGRAM_SAMPLES) -> torch.Tensor:
    """images (B, 3, H, W) in [0, 1]; boxes (B, N, 4) -> (B, N, bins ** 3) soft joint RGB histogram
    of ``samples`` x ``samples`` point samples of each box (each sums to 1): ``colour_bins`` averaged."""
    return colour_bins(images, boxes, bins, samples).mean(2)


def own_colours(h_box: torch.Tensor, area_box: torch.Tensor, h_x: torch.Tensor, area_x: torch.Tensor) -> torch.Tensor:
    """A box's histogram less its overlap with the other box: (area_box * h_box - area_x * h_x),
    clamped at zero and scaled to a peak of 1, the colours of the part only this box covers; none
    (zeros) where what is left weighs under ``OWN_FLOOR`` of the box's area. A box the overlap covers
    whole has no colours of its own, but its histogram and the overlap's, summed in different orders,
    leave a residue of float32 round-off (about 1e-7 of the area a bin) that the scaling to a peak of
    1 would turn into a full-strength map of noise."""
    own = (area_box[..., None] * h_box - area_x[..., None] * h_x).clamp(min=0)
    own = own * (own.sum(-1, keepdim=True) > OWN_FLOOR * area_box[..., None])
    return own / own.amax(-1, keepdim=True).clamp(min=1e-6)


def pair_colour_features(r_s: torch.Tensor, r_o: torch.Tensor) -> torch.Tensor:
    """Subject and object descriptors (..., F) -> (..., 4F): both, their difference and its magnitude
    (``same colour as`` is a small magnitude, ``brighter than`` a signed difference)."""
    diff = r_s - r_o
    return torch.cat([r_s, r_o, diff, diff.abs()], dim=-1)


class RegionPixelCue(nn.Module):
    """Embeds the pair's regions, read from the input pixels, into the pair width d (added to x_ij)."""

    def __init__(self, dim: int, cells: int, bins: int = 0, channels: int = 3, ownership: bool = False) -> None:
        super().__init__()
        if cells < 1:
            raise ValueError(f"region pixel cue needs at least 1 cell a side, got {cells}")
        if bins < 0:
            raise ValueError(f"colour histogram levels must be >= 0 (0: none), got {bins}")
        if ownership and not bins:
            raise ValueError("the ownership maps compare colour histograms: they need colour bins (bins > 0)")
        self.cells, self.bins, self.ownership = cells, bins, ownership
        width = (5 * channels * cells * cells + (8 * bins ** 3 if bins else 0)
                 + (6 * HISTOGRAM_SAMPLES ** 2 if ownership else 0))
        self.embed = nn.Sequential(nn.Linear(width, dim), nn.GELU(), nn.Linear(dim, dim))

    def forward(self, images: torch.Tensor, boxes: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        """images (B, 3, H, W) in [0, 1]; boxes (B, N, 4) in its pixels; pairs (B, P, 2) -> (B, P, d)."""
        b, p = pairs.shape[:2]
        r_s, r_o = gather_pairs(region_cells(images, boxes, self.cells), pairs)
        bs, bo = gather_pairs(boxes, pairs)
        contact = contact_box(bs, bo)  # (B, P, 4): the overlap, or the gap between the boxes
        r_c = region_cells(images, contact, self.cells)
        feats = [pair_colour_features(r_s, r_o), r_c]
        if self.bins:
            per_box, contact_bins = colour_bins(images, boxes, self.bins), colour_corners(images, contact, self.bins)
            h_s, h_o = gather_pairs(per_box.mean(2), pairs)
            h_c = corners_mean(*contact_bins, self.bins)
            # whose colours the overlap shows: the front region's (occlusion order)
            feats += [pair_colour_features(h_s, h_o), torch.minimum(h_s, h_o), h_c, torch.minimum(h_c, h_s),
                      torch.minimum(h_c, h_o)]
            if self.ownership:
                feats += _ownership_maps(per_box, contact_bins, h_s, h_o, h_c, bs, bo, pairs)
        return self.embed(torch.cat(feats, dim=-1))


def _area(boxes: torch.Tensor) -> torch.Tensor:
    return (boxes[..., 2] - boxes[..., 0]).clamp(min=0) * (boxes[..., 3] - boxes[..., 1]).clamp(min=0)


def _ownership_maps(per_box, contact_bins, h_s, h_o, h_c, bs, bo, pairs) -> list[torch.Tensor]:
    """Where each of the pair's own colours shows: every point sample of the contact region (its
    ``colour_corners``), the subject's box and the object's box (``colour_bins``), weighed against the
    colours only the subject's box shows and those only the object's shows (``own_colours``), six
    maps of ``HISTOGRAM_SAMPLES`` ** 2."""
    inter = torch.cat([torch.maximum(bs[..., :2], bo[..., :2]), torch.minimum(bs[..., 2:], bo[..., 2:])], dim=-1)
    a_x = _area(inter)
    k_s, k_o = own_colours(h_s, _area(bs), h_c, a_x), own_colours(h_o, _area(bo), h_c, a_x)
    keys = torch.stack([k_s, k_o], dim=-1)  # (B, P, K, 2)
    return [corners_dot(*contact_bins, keys).flatten(-2), *_box_maps(per_box, keys, pairs)]


def _box_maps(per_box: torch.Tensor, keys: torch.Tensor, pairs: torch.Tensor) -> list[torch.Tensor]:
    """The subject's and the object's box samples (per_box (B, N, S, K), rows of ``pairs``) against
    their pair's keys (B, P, K, 2) -> two (B, P, S * 2).

    With no more boxes than bins (N <= K), every box against every pair of its image is one matrix
    product per image whose result is no larger than the pairs' gathered samples (B, P, S, K), and the
    two maps are picked from it: the same sums without copying each box's samples to every pair it is
    in (cpu_long: 2 x 26 MB a step). Otherwise the samples are gathered to the pairs."""
    b, n, s, k = per_box.shape
    p = pairs.shape[1]
    if n > k:
        return [torch.einsum("bpsk,bpkt->bpst", region, keys).flatten(-2) for region in gather_pairs(per_box, pairs)]
    every = torch.bmm(per_box.reshape(b, n * s, k), keys.permute(0, 2, 1, 3).reshape(b, k, p * 2))
    every = every.view(b, n, s, p, 2)
    rows = torch.arange(b, device=pairs.device)[:, None].expand(b, p)
    cols = torch.arange(p, device=pairs.device)[None, :].expand(b, p)
    return [every[rows, pairs[..., i].clamp(min=0), :, cols].flatten(-2) for i in (0, 1)]
