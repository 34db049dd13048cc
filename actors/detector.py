"""Open-vocabulary box detector from Hugging Face transformers (OWLv2 / OWL-ViT / Grounding DINO).

The detector fixes which regions the relation model ever sees, so its confidence threshold and
its box cap set the ceiling on pair recall (seed 001, A4 is normalised by exactly that ceiling).
Both are config defaults that a caller may override per call. The model is loaded by name or
from a local folder (``AutoProcessor`` + ``AutoModelForZeroShotObjectDetection``), never
downloaded implicitly when ``HF_HUB_OFFLINE=1``.

``DetectorActor`` is a callable class: ``detect`` serves one image (Ray Serve), ``__call__`` a
batch dict with an ``image`` column (Ray Data ``map_batches``).
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field, model_validator

from relate.config import StrictConfig

__all__ = ["DetectorConfig", "DetectorActor", "Detection"]


class DetectorConfig(StrictConfig):
    """Which detector runs and its default operating point."""

    mode: Literal["none", "transformers"] = Field(
        "none", description="'none': clients send their own regions and detection requests are refused; "
                            "'transformers': load an open-vocabulary detector")
    model: str | None = Field(None, description="hub id or local folder of a zero-shot detector "
                                                "(e.g. google/owlv2-base-patch16-ensemble, IDEA-Research/grounding-dino-tiny)")
    queries: list[str] = Field(default_factory=lambda: ["person", "object"], min_length=1,
                               description="default text queries (categories) when a request names none")
    threshold: float = Field(0.1, ge=0, le=1, description="default confidence threshold (sets the pair-recall ceiling)")
    max_boxes: int = Field(20, ge=1, le=1000, description="default cap on boxes per image, best first")
    text_threshold: float = Field(0.25, ge=0, le=1, description="Grounding DINO token threshold (ignored by OWL models)")
    device: str = Field("cpu", description="torch device")
    torch_threads: int | None = Field(None, ge=1, description="torch intra-op threads in this process (None: leave as is)")

    @model_validator(mode="after")
    def _model_given(self) -> "DetectorConfig":
        if self.mode == "transformers" and not self.model:
            raise ValueError("detector mode 'transformers' needs 'model' (a hub id or a local folder)")
        return self


class Detection(dict):
    """One box: x1, y1, x2, y2 (pixels), score, label (the query it matched)."""


class DetectorActor:
    """Loads the detector once; ``detect(image, queries, threshold, max_boxes)`` -> list of boxes."""

    def __init__(self, cfg: DetectorConfig | dict[str, Any]) -> None:
        self.cfg = DetectorConfig.model_validate(cfg) if isinstance(cfg, dict) else cfg
        self.model = self.processor = None
        self.family = "none"
        if self.cfg.mode == "none":
            return
        import torch
        from transformers import AutoModelForZeroShotObjectDetection, AutoProcessor

        if self.cfg.torch_threads:
            torch.set_num_threads(self.cfg.torch_threads)
        self.processor = AutoProcessor.from_pretrained(self.cfg.model)
        self.model = AutoModelForZeroShotObjectDetection.from_pretrained(self.cfg.model).to(self.cfg.device).eval()
        mtype = getattr(self.model.config, "model_type", "")
        self.family = "grounding_dino" if "grounding" in mtype else "owl" if "owl" in mtype else mtype
        if self.family not in ("owl", "grounding_dino"):
            raise ValueError(f"detector {self.cfg.model!r} has model_type {mtype!r}; supported: owlv2, owlvit, grounding-dino")

    @property
    def enabled(self) -> bool:
        return self.model is not None

    def detect(self, image: np.ndarray, queries: Sequence[str] | None = None, threshold: float | None = None,
               max_boxes: int | None = None) -> list[Detection]:
        """Boxes for one (H, W, 3) uint8 image, best first, at most ``max_boxes``, score >= threshold."""
        if not self.enabled:
            raise ValueError("no detector is configured (detector.mode='none'): send regions to /v1/relations instead")
        import torch

        queries = [q.strip() for q in (queries or self.cfg.queries)]
        if not image.flags.writeable:  # decoded images are often read-only views; torch warns on those
            image = np.array(image)
        thr = self.cfg.threshold if threshold is None else float(threshold)
        cap = self.cfg.max_boxes if max_boxes is None else int(max_boxes)
        h, w = image.shape[:2]
        with torch.inference_mode():
            if self.family == "owl":
                scores, labels, boxes = self._owl(image, queries)
            else:
                scores, labels, boxes = self._grounding_dino(image, queries, thr)
        boxes[:, 0::2] = boxes[:, 0::2].clip(0, w)
        boxes[:, 1::2] = boxes[:, 1::2].clip(0, h)
        ok = (scores >= thr) & (boxes[:, 2] - boxes[:, 0] >= 1) & (boxes[:, 3] - boxes[:, 1] >= 1)
        order = [i for i in np.argsort(-scores, kind="stable") if ok[i]][:cap]
        return [Detection(x1=float(boxes[i, 0]), y1=float(boxes[i, 1]), x2=float(boxes[i, 2]), y2=float(boxes[i, 3]),
                          score=float(scores[i]), label=str(labels[i])) for i in order]

    def _owl(self, image: np.ndarray, queries: list[str]):
        import torch

        inputs = self.processor(text=[queries], images=[image], return_tensors="pt", padding="max_length",
                                truncation=True).to(self.cfg.device)
        out = self.model(**inputs)
        best = out.logits[0].max(dim=-1)
        scores = torch.sigmoid(best.values).float().cpu().numpy()
        cx, cy, bw, bh = out.pred_boxes[0].float().cpu().numpy().T
        # OWLv2 pads the image to a square at the bottom/right before resizing, so its relative
        # boxes are fractions of the longer side (OWL-ViT stretches: fractions of each side)
        h, w = image.shape[:2]
        sx, sy = (max(h, w), max(h, w)) if self.model.config.model_type == "owlv2" else (w, h)
        boxes = np.stack([(cx - bw / 2) * sx, (cy - bh / 2) * sy, (cx + bw / 2) * sx, (cy + bh / 2) * sy], 1)
        return scores, [queries[i] for i in best.indices.cpu().tolist()], boxes.astype(np.float64)

    def _grounding_dino(self, image: np.ndarray, queries: list[str], thr: float):
        # Grounding DINO reads one caption with the categories separated by periods
        text = " . ".join(q.lower() for q in queries) + " ."
        inputs = self.processor(images=[image], text=[text], return_tensors="pt").to(self.cfg.device)
        out = self.model(**inputs)
        res = self.processor.post_process_grounded_object_detection(
            out, inputs["input_ids"], threshold=thr, text_threshold=self.cfg.text_threshold,
            target_sizes=[image.shape[:2]])[0]
        labels = res.get("text_labels") or res.get("labels")
        return (res["scores"].float().cpu().numpy(), [str(x) for x in labels],
                res["boxes"].float().cpu().numpy().astype(np.float64))

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Ray Data: ``image`` column (H, W, 3 arrays) -> adds ``detections`` (list of box dicts)."""
        batch = dict(batch)
        batch["detections"] = [self.detect(np.asarray(im)) for im in batch["image"]]
        return batch
