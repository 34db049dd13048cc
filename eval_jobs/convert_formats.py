"""Readers of other systems' saved scene-graph outputs (the formats of eval_jobs.convert).

Each returns per-image dicts of numpy arrays (``boxes`` (n, 4) pixels, ``labels``, ``scores``, and
``pairs`` (m, 2) with dense ``pair_scores`` (m, P) and/or sparse ``triplets``) and the predicate
list naming the score columns; eval_jobs.convert turns them into the scene-graphs layout. Pickled
outputs are read by unpicklers that admit tensors, arrays and containers only (torch's weights-only
loader for SGB's files, a named allowlist for OpenPSG's) and stand in for the producing project's
classes: its code is not needed, and nothing else in the file is executed.
"""

from __future__ import annotations

import json
import pickle
import re
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from relate.schema import SchemaError

__all__ = ["read_sgb", "iter_sgb", "sgb_files", "sgb_dicts", "read_openpsg", "read_openpsg_pkl", "read_vlm", "map_predicates", "ranked_scores"]


def ranked_scores(n: int) -> np.ndarray:
    """Scores for a list ranked best first without scores: position r of n scores 1 - r / n."""
    return 1.0 - np.arange(n) / max(n, 1)


# --------------------------------------------------------------------------- sgb

# what a pickle of numpy arrays and plain containers needs, by name; nothing callable beyond it
_ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
            ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"), ("numpy", "ndarray"),
            ("numpy", "dtype"), ("_codecs", "encode"), ("copyreg", "_reconstructor"), ("builtins", "object"),
            ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "slice"), ("builtins", "complex"),
            ("collections", "OrderedDict")}


class _StandIn:
    """Takes the place of a class of the producing project (SGB's BoxList, OpenPSG's Result):
    keeps the pickled attributes and nothing else."""


def _unpickler(path: str, foreign: str) -> type:
    """A pickle.Unpickler admitting numpy arrays and containers; classes of the package
    ``foreign`` become _StandIn objects; anything else is refused with the file's name."""

    class _Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if module.split(".")[0] == foreign:
                return _StandIn
            if (module, name) in _ALLOWED or module == "numpy.dtypes":
                return super().find_class(module, name)
            raise pickle.UnpicklingError(f"{path}: refusing to unpickle {module}.{name} (not a {foreign} output)")

    return _Unpickler


def _torch_load(path: str, classes: Sequence[str], mmap: bool = False) -> Any:
    """torch.load with torch's own weights-only unpickler (tensors and containers), where the
    producing project's ``classes`` (dotted names) load as _StandIn objects holding their fields."""
    import torch  # only here: a torch-saved file needs torch's own loader

    stand_ins = [type(n.rpartition(".")[2], (_StandIn,), {"__module__": n.rpartition(".")[0],
                                                          "__qualname__": n.rpartition(".")[2]}) for n in classes]
    try:
        with torch.serialization.safe_globals(stand_ins):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        msg = next((ln for ln in str(exc).splitlines() if "GLOBAL" in ln or "Unsupported" in ln), str(exc)[:300])
        raise SchemaError(f"{path}: refusing to load it: it holds more than tensors, containers and "
                          f"{list(classes)}: {msg.strip()}") from None


def _arr(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


SGB_CLASSES = ["maskrcnn_benchmark.structures.bounding_box.BoxList"]
SGB_SUFFIXES = (".pytorch", ".pth", ".pt")


def sgb_files(path: str) -> list[Path]:
    """The files of an SGB output in image order: ``eval_results.pytorch`` itself, or a folder of
    shards (each saved like it, or a bare list of BoxLists, or one BoxList: a per-image file),
    ordered by name with digit runs compared as numbers (``part_2`` before ``part_10``)."""
    p = Path(path)
    if not p.is_dir():
        return [p]
    key = lambda f: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", f.name)]  # noqa: E731
    files = sorted((f for f in p.iterdir() if f.is_file() and f.suffix in SGB_SUFFIXES), key=key)
    if not files:
        raise SchemaError(f"{path}: a folder of SGB outputs needs shard files ending in {list(SGB_SUFFIXES)}; none found")
    return files


def _sgb_predictions(path: Path) -> list:
    """The BoxLists of one file, loaded memory-mapped where torch's zip format allows it: the
    tensors of a whole-split ``eval_results.pytorch`` are then read one image at a time."""
    obj = _torch_load(str(path), SGB_CLASSES, mmap=zipfile.is_zipfile(path))
    preds = obj["predictions"] if isinstance(obj, dict) and "predictions" in obj else obj
    return preds if isinstance(preds, (list, tuple)) else [preds]


def sgb_dicts(dicts: str) -> tuple[dict[int, str], list[str]]:
    """(label index -> name, predicates in classifier order) from the dataset's dicts JSON."""
    d = json.loads(Path(dicts).read_text())
    idx_to_pred = {int(k): v for k, v in d["idx_to_predicate"].items()}
    return {int(k): v for k, v in d["idx_to_label"].items()}, [idx_to_pred[i] for i in sorted(idx_to_pred)]


def iter_sgb(path: str, dicts: str, max_scores: int = 1 << 24) -> Iterator[list[dict]]:
    """Per-image dicts (boxes, labels, scores, pairs, pair_scores), a chunk at a time: a chunk
    ends at a file's end or once it holds about ``max_scores`` pair scores, so a full sgdet
    split (34 GB of scores) passes through a bounded amount of memory."""
    idx_to_label, predicates = sgb_dicts(dicts)
    pos = 0
    for f in sgb_files(path):
        chunk, n_scores = [], 0
        for b in _sgb_predictions(f):
            im = _sgb_image(b, pos, str(f), idx_to_label, len(predicates), dicts)
            chunk.append(im)
            pos += 1
            n_scores += im["pair_scores"].size
            if n_scores >= max_scores:
                yield chunk
                chunk, n_scores = [], 0
        if chunk:
            yield chunk


def read_sgb(path: str, dicts: str) -> tuple[list[dict], list[str]]:
    """Per-image dicts (boxes, labels, scores, pairs, pair_scores) and the predicate list, all at once."""
    return [im for chunk in iter_sgb(path, dicts) for im in chunk], sgb_dicts(dicts)[1]


def _sgb_image(b: Any, i: int, path: str, idx_to_label: dict[int, str], P: int, dicts: str) -> dict:
    f = getattr(b, "extra_fields", None)
    if f is None or "pred_rel_scores" not in f:
        raise SchemaError(f"{path}: prediction {i} is not an SGB relation BoxList (no extra_fields "
                          f"'pred_rel_scores'; have {sorted(f) if f else None})")
    box = _arr(b.bbox).astype(np.float64).reshape(-1, 4)
    if getattr(b, "mode", "xyxy") == "xywh":  # SGB's xywh spans w - 1 pixels
        box = np.concatenate([box[:, :2], box[:, :2] + box[:, 2:] - 1], axis=1)
    lab = _arr(f["pred_labels"]).astype(np.int64).reshape(-1)
    unknown = sorted(set(lab.tolist()) - set(idx_to_label))
    if unknown:
        raise SchemaError(f"{path}: prediction {i}: pred_labels {unknown[:5]} are not in {dicts}'s idx_to_label")
    # a view of the (memory-mapped) file: its one copy is into the chunk's score matrix
    rel = _arr(f["pred_rel_scores"]).astype(np.float32, copy=False)
    if rel.ndim != 2 or rel.shape[1] != P + 1:
        raise SchemaError(f"{path}: prediction {i}: pred_rel_scores has shape {rel.shape}; need (pairs, "
                          f"{P + 1}): background + the {P} predicates of {dicts}")
    return {"boxes": box, "labels": [idx_to_label[k] for k in lab.tolist()],
            "scores": _arr(f["pred_scores"]).astype(np.float32).reshape(-1),
            "pairs": _arr(f["rel_pair_idxs"]).astype(np.int64).reshape(-1, 2),
            "pair_scores": rel[:, 1:]}


# --------------------------------------------------------------------------- openpsg

def read_openpsg(folder: str, psg_json: str) -> tuple[list[dict], list[str]]:
    """Per-image dicts (boxes from the panoptic PNG, labels, triplets ranked by list order)."""
    from relate.data.readers.psg import segment_boxes

    classes, predicates = _psg_lists(psg_json)
    root = Path(folder)
    entries = json.loads((root / "relation.json").read_text())
    images = []
    for i, e in enumerate(entries):
        seg = e["segments_info"]
        cats = [int(s["category_id"]) for s in seg]
        bad = [c for c in cats if not 1 <= c <= len(classes)]
        rels = np.asarray(e["relations"], dtype=np.int64).reshape(-1, 3)
        badp = rels[(rels[:, 2] < 1) | (rels[:, 2] > len(predicates)), 2]
        if bad or badp.size:
            raise SchemaError(f"{root / 'relation.json'} entry {i}: category_id {bad[:3]} / predicate "
                              f"{badp[:3].tolist()} outside 1..{len(classes)} / 1..{len(predicates)} (1-based)")
        boxes = segment_boxes(root / "panseg" / e["pan_seg_file_name"], [int(s["id"]) for s in seg]) if seg \
            else np.zeros((0, 4))
        score = ranked_scores(len(rels))
        images.append({"boxes": boxes, "labels": [classes[c - 1] for c in cats], "scores": np.ones(len(seg), np.float32),
                       "triplets": [(s, o, predicates[p - 1], x) for (s, o, p), x in zip(rels.tolist(), score)]})
    return images, predicates


def _psg_lists(psg_json: str) -> tuple[list[str], list[str]]:
    doc = json.loads(Path(psg_json).read_text())
    return list(doc["thing_classes"]) + list(doc["stuff_classes"]), list(doc["predicate_classes"])


def read_openpsg_pkl(path: str, psg_json: str) -> tuple[list[dict], list[str]]:
    """OpenPSG's ``tools/test.py --out results.pkl``: one Result per test image with
    ``refine_bboxes`` (n, 5: box and score), 1-based ``labels``, ``rel_pair_idxes`` and
    ``rel_dists`` (column 0 = no relation, dropped). The pair scores stay dense."""
    classes, predicates = _psg_lists(psg_json)
    with open(path, "rb") as fh:
        results = _unpickler(path, "openpsg")(fh).load()
    if not isinstance(results, list):
        raise SchemaError(f"{path}: expected a list of OpenPSG Results, got {type(results).__name__}")
    images = []
    for i, r in enumerate(results):
        missing = [k for k in ("refine_bboxes", "labels", "rel_pair_idxes", "rel_dists") if getattr(r, k, None) is None]
        if missing:
            raise SchemaError(f"{path}: result {i} lacks {missing} (not a relation Result)")
        box = _arr(r.refine_bboxes).astype(np.float64).reshape(-1, 5)
        lab = _arr(r.labels).astype(np.int64).reshape(-1)
        dist = _arr(r.rel_dists).astype(np.float32)
        if lab.size and (lab.min() < 1 or lab.max() > len(classes)):
            raise SchemaError(f"{path}: result {i}: labels outside 1..{len(classes)} (1-based into {psg_json})")
        if dist.ndim != 2 or dist.shape[1] != len(predicates) + 1:
            raise SchemaError(f"{path}: result {i}: rel_dists has shape {dist.shape}; need (pairs, "
                              f"{len(predicates) + 1}): no-relation + the {len(predicates)} predicates")
        images.append({"boxes": box[:, :4], "labels": [classes[k - 1] for k in lab.tolist()], "scores": box[:, 4],
                       "pairs": _arr(r.rel_pair_idxes).astype(np.int64).reshape(-1, 2), "pair_scores": dist[:, 1:]})
    return images, predicates


# --------------------------------------------------------------------------- vlm

def map_predicates(strings: Sequence[str], predicates: Sequence[str], embed, matcher) -> dict[str, str | None]:
    """Each distinct string -> the benchmark predicate it names: an exact (case- and space-
    insensitive) match, else the closest predicate whose cosine reaches the matcher's calibrated
    threshold, else None (unmapped)."""
    from relate.metrics.openvocab import _unit

    exact = {p.strip().lower(): p for p in predicates}
    out: dict[str, str | None] = {s: exact.get(s.strip().lower()) for s in strings}
    todo = [s for s, p in out.items() if p is None]
    if todo:
        ok = matcher.match_matrix(embed, todo, list(predicates), space=matcher.space)
        cos = _unit(embed(todo)) @ _unit(embed(list(predicates))).T
        cos = np.where(ok, cos, -np.inf)
        best = cos.argmax(axis=1)
        for s, j, row in zip(todo, best, cos):
            out[s] = predicates[j] if np.isfinite(row[j]) else None
    return out


def _vlm_lines(path: str) -> list[dict]:
    rows = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError as exc:
            raise SchemaError(f"{path} line {n}: not JSON: {exc}") from None
        if not isinstance(r, dict) or "image_id" not in r or not isinstance(r.get("triplets"), list):
            raise SchemaError(f"{path} line {n}: need an object with 'image_id' and a 'triplets' list")
        for t in r["triplets"]:
            if not isinstance(t, dict) or not {"subject", "object", "predicate"} <= set(t):
                raise SchemaError(f"{path} line {n} (image_id={r['image_id']!r}): a triplet needs subject, object "
                                  f"and predicate; got {t!r}")
        rows.append(r)
    return rows


def _unusable(t: dict, n_boxes: int) -> str | None:
    s, o = t["subject"], t["object"]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (s, o)):
        return "index not an integer"
    if not (0 <= s < n_boxes and 0 <= o < n_boxes):
        return "index out of range"
    return "subject == object" if s == o else None


def read_vlm(path: str, bench, embed, matcher) -> tuple[list[str], list[dict], dict]:
    """(image ids, per-image dicts with mapped sparse triplets, the mapping report)."""
    rows = _vlm_lines(path)
    gt = {r["image_id"]: r["boxes"] for r in bench.corpus.select(["image_id", "boxes"]).to_pylist()}
    counts = Counter(str(t["predicate"]) for r in rows for t in r["triplets"])
    mapping = map_predicates(sorted(counts), list(bench.predicates), embed, matcher)
    ids, images, dropped = [], [], Counter()
    for r in rows:
        iid = str(r["image_id"])
        if "objects" in r:
            o = r["objects"]
            im = {"boxes": np.array([x["box"] for x in o], np.float64).reshape(-1, 4),
                  "labels": [x.get("label") for x in o], "scores": np.array([x.get("score", 1.0) for x in o])}
        elif iid in gt:  # predcls: the indices name the benchmark's own boxes
            b = gt[iid]
            im = {"boxes": np.array([[x["x1"], x["y1"], x["x2"], x["y2"]] for x in b]).reshape(-1, 4),
                  "labels": [x["category"] for x in b], "scores": np.ones(len(b))}
        else:
            raise SchemaError(f"{path}: image_id {iid!r} has no 'objects' and is not in the benchmark")
        rank = ranked_scores(len(r["triplets"]))
        im["triplets"] = []
        for t, x in zip(r["triplets"], rank):
            why = _unusable(t, len(im["labels"]))
            if why:  # a free-text answer naming a box the image lacks, or the box itself: counted
                dropped[why] += 1
            elif mapping[str(t["predicate"])] is not None:
                im["triplets"].append((int(t["subject"]), int(t["object"]), mapping[str(t["predicate"])],
                                       float(t.get("score", x))))
        ids.append(iid)
        images.append(im)
    unmapped = {s: c for s, c in counts.most_common() if mapping[s] is None}
    report = {"threshold": matcher.threshold, "space": matcher.space, "n_triplets": sum(counts.values()),
              "n_unmapped_triplets": sum(unmapped.values()), "n_strings": len(counts),
              "unmapped": unmapped, "mapping": {s: p for s, p in mapping.items() if p is not None},
              "dropped": dict(dropped)}
    return ids, images, report


