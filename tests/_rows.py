"""Corpus, image and prediction rows for hand-worked metric cases (100 x 100 images, one source)."""

from __future__ import annotations


def box(x1, y1, x2, y2, cat=None):
    return {"x1": x1, "y1": y1, "x2": x2, "y2": y2, "category": cat, "is_person": False, "is_body_part": False}


def rel(s, o, p):
    return {"subject": s, "object": o, "predicate": p, "pass": "human", "gate": "kept", "score": None}


def img(iid, boxes, rels=()):
    return {"image_id": iid, "uri": f"mem://{iid}", "width": 100, "height": 100, "source": "t",
            "split": "test", "boxes": boxes, "relations": list(rels)}


def tri(s, o, p, score):
    return {"subject": s, "object": o, "predicate": p, "score": score, "spatial_score": None, "semantic_score": None}
