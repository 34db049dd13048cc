"""What the model analyses (eval_jobs.attribution, eval_jobs.representation) read: a relation model
and synthetic scenes turned into batches of ground-truth pairs, plus the writers every analysis
shares (Parquet + Markdown table, resolved config).

A model is a checkpoint folder (weights, config and text bank together), or a checkpoint's
architecture and bank with fresh random weights (``random_like``: the "initial" end of a CKA
comparison), or, with neither, a tiny random test architecture scoring against a random bank of the
synthetic world's surface forms (what the tests use), or any architecture from a YAML model config
with random weights (``architecture``: the quick benchmark uses the demo recipe's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from pydantic import Field, model_validator

from relate.config import StrictConfig, read_yaml
from relate.data.lexicon import all_surface_forms
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.model.config import BackboneConfig, DeformableConfig, RelationModelConfig
from relate.model.model import RelationModel, create_relation_model
from relate.probe.model_inputs import ModelBatch, batches_from_scenes
from relate.storage import LocationValue

__all__ = ["ModelSourceConfig", "ScenesConfig", "load_analysis_model", "scene_batches", "write_table", "markdown_table",
           "TINY_CONFIG"]

TINY_CONFIG = RelationModelConfig(
    backbone=BackboneConfig(name="vit_tiny_patch16_224", img_size=48, depth=3, patch_size=8, taps=[-2, -1]),
    dim=32, heads=4, text_dim=16, pair_layers=1, joint_layers=1, scene_grid=2, deformable=DeformableConfig(heads=4, points=2))


class ModelSourceConfig(StrictConfig):
    checkpoint: str | None = Field(None, description="checkpoint folder (relate.checkpoint) to analyse")
    random_like: str | None = Field(None, description="checkpoint folder whose architecture and text bank are used "
                                    "with fresh random weights (seeded by 'seed')")
    architecture: LocationValue | None = Field(
        None, description="YAML model config (a RelationModelConfig, or a training config whose 'model' section is "
        "one) built with random weights and a random bank over the synthetic world's surface forms")
    seed: int = Field(0, description="torch seed of random weights (random_like, architecture, or the tiny test model)")
    label: str | None = Field(None, description="name of this model in tables; default: derived from the source")

    @model_validator(mode="after")
    def _one_source(self) -> "ModelSourceConfig":
        given = [k for k in ("checkpoint", "random_like", "architecture") if getattr(self, k)]
        if len(given) > 1:
            raise ValueError(f"give one model source, got {given}")
        return self

    def name(self) -> str:
        if self.label:
            return self.label
        if self.checkpoint:
            return Path(self.checkpoint).name
        if self.random_like:
            return f"random init ({Path(self.random_like).name})"
        if self.architecture:
            return f"random {Path(self.architecture).stem} (seed {self.seed})"
        return f"tiny random (seed {self.seed})"


class ScenesConfig(StrictConfig):
    images: int = Field(24, ge=2, description="synthetic scenes analysed")
    first_index: int = Field(100_000, ge=0, description="index of the first scene (far from training indices)")
    world_seed: int = Field(0, description="synthetic world seed")
    batch_size: int = Field(8, ge=2, description="images per forward pass (the pixel lesion borrows within a batch)")
    side: int | None = Field(None, gt=7, description="input side in pixels; default: the backbone's img_size")


def load_analysis_model(src: ModelSourceConfig) -> tuple[RelationModel, torch.Tensor, list[str]]:
    """(model in eval mode, bank tensor, bank strings)."""
    from relate.checkpoint import load_checkpoint

    if src.checkpoint:
        ck = load_checkpoint(src.checkpoint)
        return ck.model.eval(), ck.bank.tensor(), list(ck.bank.strings)
    if src.random_like:
        ck = load_checkpoint(src.random_like)
        torch.manual_seed(src.seed)
        bare = ck.config.backbone.model_copy(update={"pretrained": False, "checkpoint_path": None})
        model = create_relation_model(ck.config.model_copy(update={"backbone": bare}))
        return model.eval(), ck.bank.tensor(), list(ck.bank.strings)
    cfg = TINY_CONFIG
    if src.architecture:
        tree = read_yaml(Path(src.architecture).read_text())
        if not isinstance(tree, dict):
            raise ValueError(f"{src.architecture}: expected a mapping (a model config), got {type(tree).__name__}")
        cfg = RelationModelConfig.model_validate(tree.get("model", tree))
    torch.manual_seed(src.seed)
    model = create_relation_model(cfg).eval()
    if model.deformable is not None:
        with torch.no_grad():  # open the zero-initialised deformable gate so every part of the head carries signal
            model.deformable.gate.fill_(1.0)
    strings = all_surface_forms()
    bank = torch.nn.functional.normalize(torch.randn(len(strings), cfg.text_dim,
                                                     generator=torch.Generator().manual_seed(1234)), dim=-1)
    return model, bank, strings


def scene_batches(cfg: ScenesConfig, model: RelationModel, bank: torch.Tensor, strings: Sequence[str]) -> list[ModelBatch]:
    world = SyntheticConfig(seed=cfg.world_seed)
    scenes = [make_scene(cfg.first_index + i, world) for i in range(cfg.images)]
    side = cfg.side or model.cfg.backbone.img_size
    return batches_from_scenes(scenes, bank, strings, side=side, batch_size=cfg.batch_size)


def _cell(v) -> str:
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.4g}"
    return "" if v is None else str(v)


def markdown_table(rows: Sequence[dict]) -> str:
    if not rows:
        return "(no rows)"
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def write_table(rows: Sequence[dict], out: Path, name: str) -> Path:
    """``name``.parquet in ``out``; returns its path."""
    path = out / f"{name}.parquet"
    pq.write_table(pa.Table.from_pylist(list(rows)), path)
    return path
