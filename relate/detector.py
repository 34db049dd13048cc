"""Open-vocabulary box detector from Hugging Face transformers (OWLv2 / OWL-ViT / Grounding DINO).

The detector fixes which regions the relation model ever sees, so its confidence threshold and
its box cap set the ceiling on pair recall (seed 001, A4 is normalised by exactly that ceiling).
Both are config defaults that a caller may override per call. The model is loaded by name or
from a local folder (``AutoProcessor`` + ``AutoModelForZeroShotObjectDetection``), never
downloaded implicitly when ``HF_HUB_OFFLINE=1``.

``Detector.detect`` serves one image, ``detect_batch`` several in one forward pass. ``relate
predict`` uses it directly; ``actors.detector.DetectorActor`` adds the Ray Data batch call and
is what the Serve deployment holds.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field, model_validator

from relate.config import StrictConfig

__all__ = ["DetectorConfig", "Detector", "Detection"]


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


class Detector:
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
        return self.detect_batch([image], queries, threshold, max_boxes)[0]

    def detect_batch(self, images: Sequence[np.ndarray], queries: Sequence[str] | None = None,
                     threshold: float | None = None, max_boxes: int | None = None) -> list[list[Detection]]:
        """``detect`` for several images sharing one query list and operating point, in one forward
        pass (OWL); Grounding DINO batches only equally sized images, because the processor pads a
        mixed batch and the padding shifts its scores. Each image's boxes equal ``detect`` alone."""
        if not self.enabled:
            raise ValueError("no detector is configured (detector.mode='none'): send regions to /v1/relations instead")
        import torch

        queries = [q.strip() for q in (queries or self.cfg.queries)]
        # decoded images are often read-only views; torch warns on those
        images = [im if im.flags.writeable else np.array(im) for im in images]
        thr = self.cfg.threshold if threshold is None else float(threshold)
        cap = self.cfg.max_boxes if max_boxes is None else int(max_boxes)
        groups = ([list(range(len(images)))] if self.family == "owl" else
                  list(_indices_by(lambda i: images[i].shape[:2], len(images)).values()))
        out: list[list[Detection]] = [[] for _ in images]
        with torch.inference_mode():
            for idx in groups:
                group = [images[i] for i in idx]
                raw = self._owl(group, queries) if self.family == "owl" else self._grounding_dino(group, queries, thr)
                for i, (scores, labels, boxes) in zip(idx, raw):
                    out[i] = _select(scores, labels, boxes, images[i].shape[:2], thr, cap)
        return out

    def _owl(self, images: list[np.ndarray], queries: list[str]) -> list[tuple]:
        import torch

        inputs = self.processor(text=[queries] * len(images), images=images, return_tensors="pt",
                                padding="max_length", truncation=True).to(self.cfg.device)
        out = self.model(**inputs)
        best = out.logits.max(dim=-1)
        scores = torch.sigmoid(best.values).float().cpu().numpy()
        labels = best.indices.cpu().numpy()
        pred = out.pred_boxes.float().cpu().numpy()
        res = []
        for k, image in enumerate(images):
            cx, cy, bw, bh = pred[k].T
            # OWLv2 pads the image to a square at the bottom/right before resizing, so its relative
            # boxes are fractions of the longer side (OWL-ViT stretches: fractions of each side)
            h, w = image.shape[:2]
            sx, sy = (max(h, w), max(h, w)) if self.model.config.model_type == "owlv2" else (w, h)
            boxes = np.stack([(cx - bw / 2) * sx, (cy - bh / 2) * sy, (cx + bw / 2) * sx, (cy + bh / 2) * sy], 1)
            res.append((scores[k], [queries[i] for i in labels[k].tolist()], boxes.astype(np.float64)))
        return res

    def _grounding_dino(self, images: list[np.ndarray], queries: list[str], thr: float) -> list[tuple]:
        # Grounding DINO reads one caption with the categories separated by periods
        text = " . ".join(q.lower() for q in queries) + " ."
        inputs = self.processor(images=images, text=[text] * len(images), return_tensors="pt").to(self.cfg.device)
        out = self.model(**inputs)
        results = self.processor.post_process_grounded_object_detection(
            out, inputs["input_ids"], threshold=thr, text_threshold=self.cfg.text_threshold,
            target_sizes=[im.shape[:2] for im in images])
        res = []
        for r in results:
            labels = r.get("text_labels") or r.get("labels")
            res.append((r["scores"].float().cpu().numpy(), [str(x) for x in labels],
                        r["boxes"].float().cpu().numpy().astype(np.float64)))
        return res


def _indices_by(key, n: int) -> dict:
    groups: dict = {}
    for i in range(n):
        groups.setdefault(key(i), []).append(i)
    return groups


def _select(scores: np.ndarray, labels: list[str], boxes: np.ndarray, size: tuple[int, int], thr: float,
            cap: int) -> list[Detection]:
    """Clip to the image, keep boxes of at least one pixel scoring >= thr, best first, at most cap."""
    h, w = size
    boxes[:, 0::2] = boxes[:, 0::2].clip(0, w)
    boxes[:, 1::2] = boxes[:, 1::2].clip(0, h)
    ok = (scores >= thr) & (boxes[:, 2] - boxes[:, 0] >= 1) & (boxes[:, 3] - boxes[:, 1] >= 1)
    order = [i for i in np.argsort(-scores, kind="stable") if ok[i]][:cap]
    return [Detection(x1=float(boxes[i, 0]), y1=float(boxes[i, 1]), x2=float(boxes[i, 2]), y2=float(boxes[i, 3]),
                      score=float(scores[i]), label=str(labels[i])) for i in order]
