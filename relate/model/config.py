"""The relation model's configuration: every architectural constant is a field (Table 14, App. A)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from relate.config import StrictConfig

__all__ = ["BackboneConfig", "DeformableConfig", "SamplerConfig", "RelationModelConfig"]


class BackboneConfig(StrictConfig):
    """Which timm model encodes the pixels and where its patch features are read."""

    name: str = Field("vit_small_plus_patch16_dinov3", description="timm model name (§ 3.2: DINOv3 ViT-S/16+)")
    pretrained: bool = Field(False, description="load timm's pretrained weights (needs the hub or a local file)")
    checkpoint_path: str | None = Field(None, description="local weight file for the backbone, loaded by timm")
    img_size: int = Field(448, gt=0, description="base input side in pixels (Table 14: 448)")
    keep_aspect: bool = Field(False, description="scale the image by its longer side and pad the rest of the square "
                              "(boxes scale alike on both axes) instead of stretching it to a square; the geometry "
                              "the model reads then keeps the image's proportions (relate.api.input_scale)")
    depth: int | None = Field(None, gt=0, description="override the number of transformer blocks (tiny test models)")
    embed_dim: int | None = Field(None, gt=0, description="override the token width (tiny test models)")
    num_heads: int | None = Field(None, gt=0, description="override the attention head count (tiny test models)")
    patch_size: int | None = Field(None, gt=0, description="override the patch side (finer grids for tiny inputs)")
    taps: list[int] = Field([-6, -3, -1], min_length=1, description="block indices read and fused (§ 3.2: -6, -3, -1)")


class DeformableConfig(StrictConfig):
    """The zero-initialised gated scene read of App. A.2."""

    enabled: bool = Field(True, description="build the deformable read (a flag that changes the weight keys)")
    heads: int = Field(8, gt=0, description="sampling heads (A.2: 8)")
    points: int = Field(4, gt=0, description="points per head per anchor (A.2: 4)")
    null_slots: int = Field(2, ge=0, description="learned null values a head may attend to instead of a read (A.2: 2)")
    ring_min: float = Field(0.5, gt=0, description="smallest initial ring radius, in anchor half-extents")
    ring_max: float = Field(1.5, gt=0, description="largest initial ring radius, in anchor half-extents")


class SamplerConfig(StrictConfig):
    """The two-stage pair sampler of § 3.2."""

    geometry_keep: int = Field(400, gt=0, description="ordered pairs kept by the geometry pre-scorer")
    learned_keep: int = Field(128, gt=0, description="ordered pairs kept by the learned relatedness stage")
    hidden: int = Field(128, gt=0, description="hidden width of both scorers")

    @model_validator(mode="after")
    def _order(self) -> "SamplerConfig":
        if self.learned_keep > self.geometry_keep:
            raise ValueError(f"learned_keep ({self.learned_keep}) must not exceed geometry_keep ({self.geometry_keep})")
        return self


class RelationModelConfig(StrictConfig):
    """The RelateAnything architecture. Vocabulary enters only as a [V, text_dim] unit-norm matrix."""

    backbone: BackboneConfig = Field(default_factory=BackboneConfig, description="the pixel encoder")
    dim: int = Field(512, gt=0, description="model width d (Table 14: 512)")
    heads: int = Field(8, gt=0, description="attention heads in the query pooling and pair transformer")
    text_dim: int = Field(384, gt=0, description="width of the text bank the model scores against")
    fourier_bands: int = Field(16, gt=0, description="frequency bands of the Fourier box encoding")
    geometry_hidden: int = Field(128, gt=0, description="hidden width of MLP(g_ij)")
    pair_layers: int = Field(3, ge=0, description="pair-transformer layers (self-attn over pairs + cross-attn)")
    joint_layers: int = Field(2, ge=0, description="joint self-attention blocks over pairs and scene tokens")
    scene_grid: int = Field(14, gt=0, description="scene tokens are the patch map pooled to this grid side")
    region_prior_scale: float = Field(4.0, ge=0, description="initial weight of the inside-region log prior in pooling")
    dropout: float = Field(0.2, ge=0, lt=1, description="dropout in the pair head (Table 14: 0.2)")
    gate_hidden: int = Field(128, gt=0, description="hidden width of the predicate gate g(e_p)")
    tau_init: float = Field(10.0, gt=0, description="initial logit scale tau of Eq. 2")
    beta_init: float = Field(-2.0, description="initial logit bias beta of Eq. 2")
    pair_weight: float = Field(1.0, ge=0, description="w in Eq. 6: weight of the relatedness logit in the score")
    occlusion_cue: Literal["off", "tokens", "pixels"] = Field(
        "off", description="add the explicit overlap-agreement feature of relate.model.occlusion, computed "
        "from the patch tokens or the input pixels (not in the paper; for backbones trained from scratch)")
    occlusion_grid: int = Field(48, gt=0, description="cells a side the pixels are pooled to for occlusion_cue: pixels")
    region_pixels: int = Field(
        0, ge=0, description="add the region pixel cue of relate.model.region_pixels: each pair's regions pooled from "
        "the input pixels to this many cells a side and compared (not in the paper; for backbones trained from "
        "scratch); 0: off")
    region_colour_bins: int = Field(
        0, ge=0, description="with region_pixels: levels a channel of each region's soft RGB histogram (bins ** 3 "
        "features a region); 0: no histogram")
    region_ownership: bool = Field(
        False, description="with region_colour_bins: add where each region's own colours show, point by point, in "
        "the pair's overlap and in both boxes (relate.model.region_pixels, ownership maps)")
    region_glimpse: int = Field(
        0, ge=0, description="add relate.model.glimpse to each box feature: the box cropped from the input pixels to "
        "this many pixels a side and read by a small CNN, trained by the grounding loss (not in the paper; for "
        "backbones trained from scratch at low resolution); 0: off")
    converse_scoring: bool = Field(
        False, description="at inference, average each predicate logit with its converse statement's (the inverse "
        "group on the reversed pair, or the same group for a symmetric one; relate.converse); training is unchanged")
    deformable: DeformableConfig = Field(default_factory=DeformableConfig, description="App. A.2 scene read")
    sampler: SamplerConfig = Field(default_factory=SamplerConfig, description="§ 3.2 two-stage pair sampler")

    @model_validator(mode="after")
    def _heads_divide(self) -> "RelationModelConfig":
        for name, h in (("heads", self.heads), ("deformable.heads", self.deformable.heads)):
            if self.dim % h:
                raise ValueError(f"dim ({self.dim}) must be divisible by {name} ({h})")
        return self
