"""RelateAnything: pixels + regions + a [V, D] text bank -> scored ordered pairs (§ 3.2).

No class label is an input. ``forward`` takes images in [0, 1] (normalisation comes from the
backbone's own pretrained config), pixel boxes padded to (B, N, 4) with a validity mask, and the
unit-norm bank. Optional masks (B, N, H, W) replace boxes as pooling priors and fill the four
mask slots of g_ij.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from relate.geometry import contact_box, union_box
from relate.model.backbone import Preprocessing, create_backbone
from relate.model.branches import BranchScores, ScoringMatrix, TwoBranchHead
from relate.model.config import RelationModelConfig
from relate.model.deformable import DeformableRead
from relate.model.glimpse import RegionGlimpse
from relate.model.occlusion import OcclusionCue
from relate.model.pair_head import PairEncoder, PairTransformer, geometry_features, scene_tokens
from relate.model.pooling import PairRegionPool, gather_pairs
from relate.model.queries import RegionQueryPool
from relate.model.region_pixels import RegionPixelCue
from relate.model.sampler import PairSampler, SampledPairs

__all__ = ["RelationModel", "RelationOutput", "create_relation_model"]


@dataclass
class RelationOutput:
    sampled: SampledPairs  # which pairs were scored, and both sampler stages' logits
    scores: BranchScores  # per kept pair x predicate: cosines, alpha, mixed cosine, l_pred
    grounding: torch.Tensor  # (B, N, text_dim) unit-norm pooled region features for grounding

    @property
    def pairs(self) -> torch.Tensor:
        return self.sampled.pairs

    @property
    def l_pred(self) -> torch.Tensor:
        return self.scores.logits

    @property
    def l_pair(self) -> torch.Tensor:
        return self.sampled.l_pair


def _mask_slots(masks: torch.Tensor, boxes_n: torch.Tensor, side: int = 32) -> torch.Tensor:
    """(B, N, H, W) masks -> (B, N*N, 4) mask slots of every ordered pair (as geometry.mask_features)."""
    b, n = masks.shape[:2]
    m = F.adaptive_avg_pool2d(masks.float().flatten(0, 1).unsqueeze(1), (side, side)).view(b, n, -1)
    a = m.sum(-1) / (side * side)  # mask areas as image fractions
    inter = torch.einsum("bis,bjs->bij", m, m) / (side * side)
    union = a[:, :, None] + a[:, None, :] - inter
    box_a = ((boxes_n[..., 2] - boxes_n[..., 0]) * (boxes_n[..., 3] - boxes_n[..., 1])).clamp(min=1e-6)
    bs, bo = boxes_n[:, :, None], boxes_n[:, None, :]
    ix = (torch.minimum(bs[..., 2], bo[..., 2]) - torch.maximum(bs[..., 0], bo[..., 0])).clamp(min=0)
    iy = (torch.minimum(bs[..., 3], bo[..., 3]) - torch.maximum(bs[..., 1], bo[..., 1])).clamp(min=0)
    box_inter = ix * iy
    box_iou = box_inter / (box_a[:, :, None] + box_a[:, None, :] - box_inter + 1e-6)
    box_cover = box_inter / box_a[:, :, None]
    fill = (a / box_a)
    slots = torch.stack([fill[:, :, None].expand(-1, -1, n), fill[:, None, :].expand(-1, n, -1),
                         inter / union.clamp(min=1e-6) - box_iou, inter / a[:, :, None].clamp(min=1e-6) - box_cover], -1)
    return slots.flatten(1, 2)


class RelationModel(nn.Module):
    def __init__(self, cfg: RelationModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        self.backbone = create_backbone(cfg.backbone)
        self.proj = nn.Linear(self.backbone.out_dim, d)
        self.box_pool = RegionQueryPool(d, cfg.heads, cfg.fourier_bands, cfg.region_prior_scale)
        self.pair_pool = PairRegionPool(d, cfg.heads, cfg.fourier_bands, cfg.region_prior_scale)
        self.sampler = PairSampler(d, cfg.sampler.hidden, cfg.sampler.geometry_keep, cfg.sampler.learned_keep)
        self.pair_enc = PairEncoder(d, cfg.geometry_hidden, cfg.dropout)
        self.pair_tf = PairTransformer(d, cfg.heads, cfg.pair_layers, cfg.joint_layers, cfg.fourier_bands, cfg.dropout)
        self.deformable = DeformableRead(d, cfg.deformable) if cfg.deformable.enabled else None
        self.occlusion = None if cfg.occlusion_cue == "off" else OcclusionCue(d, cfg.occlusion_cue, cfg.occlusion_grid)
        self.region_pixels = RegionPixelCue(d, cfg.region_pixels, cfg.region_colour_bins,
                                            ownership=cfg.region_ownership) if cfg.region_pixels else None
        self.glimpse = RegionGlimpse(d, cfg.region_glimpse) if cfg.region_glimpse else None
        self.head = TwoBranchHead(d, cfg.text_dim, cfg.gate_hidden, cfg.tau_init, cfg.beta_init, cfg.dropout)
        self.grounding = nn.Linear(d, cfg.text_dim)

    @property
    def preprocessing(self) -> Preprocessing:
        return self.backbone.preprocessing

    def backbone_parameters(self) -> list[nn.Parameter]:
        return list(self.backbone.vit.parameters())

    def head_parameters(self) -> list[nn.Parameter]:
        ids = {id(p) for p in self.backbone_parameters()}
        return [p for p in self.parameters() if id(p) not in ids]

    def forward(self, images: torch.Tensor, boxes: torch.Tensor, box_valid: torch.Tensor, bank: torch.Tensor,
                alpha: torch.Tensor | None = None, masks: torch.Tensor | None = None,
                force: torch.Tensor | None = None, scoring: ScoringMatrix | None = None) -> RelationOutput:
        """images (B, 3, H, W) in [0, 1]; boxes (B, N, 4) pixels; box_valid (B, N); bank (V, text_dim);
        ``alpha`` and ``scoring`` (``head.scoring_matrix``) are per-vocabulary caches."""
        _check_inputs(images, boxes, box_valid, bank, self.cfg.text_dim)
        b, n = box_valid.shape
        H, W = images.shape[-2:]
        pixels = self.preprocessing.normalise(images)
        fmap = self.proj(self.backbone(pixels).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        grid = (fmap.shape[2], fmap.shape[3])
        tokens = fmap.flatten(2).transpose(1, 2)
        scale = boxes.new_tensor([W, H, W, H])
        boxes_n = boxes / scale
        v = self.box_pool(tokens, grid, boxes_n, masks)
        if self.glimpse is not None:
            v = v + self.glimpse(images, boxes)
        g_all = geometry_features(boxes[:, :, None].expand(-1, -1, n, -1), boxes[:, None].expand(-1, n, -1, -1),
                                  None if masks is None else _mask_slots(masks, boxes_n).view(b, n, n, 4))
        g_all = g_all.flatten(1, 2)
        sampled = self.sampler(g_all, v, box_valid, force)
        g = torch.gather(g_all, 1, sampled.flat[..., None].expand(-1, -1, g_all.shape[-1]))
        v_s, v_o = gather_pairs(v, sampled.pairs)
        v_u, v_c = self.pair_pool(tokens, grid, boxes_n, sampled.pairs, masks)
        x = self.pair_enc(v_s, v_o, v_u, v_c, g)
        bs, bo = gather_pairs(boxes_n, sampled.pairs)
        if self.occlusion is not None:
            x = x + self.occlusion(tokens, grid, pixels, bs, bo)
        if self.region_pixels is not None:
            x = x + self.region_pixels(images, boxes, sampled.pairs)
        x = self.pair_tf(x, scene_tokens(fmap, self.cfg.scene_grid), bs, bo, ~sampled.valid,
                         corners=self.pair_tf.pair_corners(boxes_n, sampled.pairs))
        if self.deformable is not None:
            anchors = torch.stack([bs, bo, union_box(bs, bo), contact_box(bs, bo)], dim=-2)
            x = self.deformable(x, fmap, anchors)
        scores = self.head(x, self.pair_enc.geometry(g), bank, alpha, scoring)
        return RelationOutput(sampled, scores, F.normalize(self.grounding(v), dim=-1))


def _check_inputs(images, boxes, box_valid, bank, text_dim: int) -> None:
    if images.dim() != 4 or images.shape[1] != 3:
        raise ValueError(f"images must be (B, 3, H, W), got {tuple(images.shape)}")
    if boxes.dim() != 3 or boxes.shape[-1] != 4 or boxes.shape[0] != images.shape[0]:
        raise ValueError(f"boxes must be (B, N, 4) with B={images.shape[0]}, got {tuple(boxes.shape)}")
    if box_valid.shape != boxes.shape[:2]:
        raise ValueError(f"box_valid must be {tuple(boxes.shape[:2])}, got {tuple(box_valid.shape)}")
    if bank.dim() != 2 or bank.shape[1] != text_dim:
        raise ValueError(f"text bank must be (V, {text_dim}), got {tuple(bank.shape)}")


def create_relation_model(cfg: RelationModelConfig) -> RelationModel:
    """Build the model from its config (random head; backbone weights per cfg.backbone)."""
    return RelationModel(cfg)
