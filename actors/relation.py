"""RelationPredictorActor: the relation model as a callable class for Ray Data and Ray Serve.

Heavy state (checkpoint, text bank, calibration) is loaded once in ``__init__``; ``__call__``
scores a batch of rows with columns ``image_id``, ``uri`` (or ``image``) and ``boxes`` and returns
``image_id`` plus ``triplets`` in the predictions schema, through ``relate.api`` so the score is
the one of Eq. 6 that evaluation and training validation use.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from relate.api import load_model

__all__ = ["RelationPredictorActor"]


class RelationPredictorActor:
    def __init__(self, checkpoint: str, vocabulary: Sequence[str] | None = None, device: str = "cpu",
                 per_pair: int = 3, batch_size: int = 8) -> None:
        self.predictor = load_model(checkpoint, device=device, batch_size=batch_size)
        if vocabulary is not None:
            self.predictor.set_vocabulary(list(vocabulary))
        self.per_pair = per_pair

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        for col in ("image_id", "boxes"):
            if col not in batch:
                raise KeyError(f"RelationPredictorActor needs column {col!r}; got {sorted(batch)}")
        images = batch["image"] if "image" in batch else batch.get("uri")
        if images is None:
            raise KeyError("RelationPredictorActor needs an 'image' or 'uri' column")
        boxes = [_boxes(b) for b in batch["boxes"]]
        scores = self.predictor.score_images(list(images), boxes)
        table = self.predictor.scores_to_table([str(i) for i in batch["image_id"]], scores, None, self.per_pair)
        return {"image_id": np.asarray(table.column("image_id").to_pylist(), dtype=object),
                "triplets": np.asarray(table.column("triplets").to_pylist() + [None], dtype=object)[:-1]}


def _boxes(b) -> np.ndarray:
    """Boxes from a list of dicts (corpus rows) or an (N, 4) array."""
    if len(b) and isinstance(b[0], dict):
        return np.array([[x["x1"], x["y1"], x["x2"], x["y2"]] for x in b], np.float32)
    return np.asarray(list(b), np.float32).reshape(-1, 4)
