"""The Python API: load a trained relation model and score (subject, predicate, object) triplets.

``load_model(folder_or_uri)`` returns a ``RelationPredictor``; ``predict(image, regions, vocabulary=None,
topk=50, threshold=None, decompose=False)`` scores ordered region pairs against any vocabulary of
strings, and ``set_vocabulary(strings)`` swaps the default one (embedded with the checkpoint's own
text encoder). ``predict_table`` scores a corpus table for evaluation and training validation, so
serving, evaluation and validation all reach the one score of Eq. 6 through the same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import torch
import torch.nn.functional as F

from relate.converse import ConverseMap, converse_logits, converse_map
from relate.model.model import RelationModel
from relate.model.score import Calibration, relation_score
from relate.schema import PREDICTIONS_SCHEMA

__all__ = ["RelationPredictor", "load_model", "prepare_image", "input_scale", "ImageScores", "RUNTIMES", "LETTERBOX_FILL"]

RUNTIMES = ("torch", "onnxruntime", "openvino")


def _as_array(image) -> np.ndarray:
    """A path, PIL image or array -> uint8 (H, W, 3)."""
    if isinstance(image, (str, Path)):
        from PIL import Image

        with Image.open(image) as im:
            return np.asarray(im.convert("RGB"))
    if hasattr(image, "convert"):
        return np.asarray(image.convert("RGB"))
    return np.asarray(image)


# What fills the square beyond a kept-aspect image (mid grey: near zero once normalised).
LETTERBOX_FILL = 0.5


def input_scale(height: int, width: int, size: int, keep_aspect: bool = False) -> tuple[float, float]:
    """(sx, sy): how an image of ``height`` x ``width`` maps onto the model's ``size`` square, so
    that a box (x1, y1, x2, y2) in its pixels is (x1 * sx, y1 * sy, x2 * sx, y2 * sy) in the input.
    Stretched, each axis has its own factor and the image's proportions are lost: a pair whose gap
    is 30 px across and 20 px down in a 224 x 128 picture is 13 and 15 input pixels apart at 96 px,
    so "left of" against "above" and "near" (a gap against a diagonal) are no longer decided by
    what the model sees. Kept (``keep_aspect``), both axes take ``size / max(height, width)``."""
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got {width} x {height}")
    if keep_aspect:
        s = size / max(height, width)
        return s, s
    return size / width, size / height


def _content_size(height: int, width: int, size: int, keep_aspect: bool) -> tuple[int, int]:
    """(rows, columns) of the square the picture itself fills: all of it when stretched."""
    if not keep_aspect:
        return size, size
    s = input_scale(height, width, size, True)[0]
    return min(size, max(1, round(height * s))), min(size, max(1, round(width * s)))


def prepare_image(image, size: int, interpolation: str = "bicubic", keep_aspect: bool = False) -> torch.Tensor:
    """uint8 (H, W, 3) array, PIL image or path -> float (3, size, size) in [0, 1]: stretched to the
    square, or with ``keep_aspect`` scaled by its longer side into the top-left corner and the rest
    filled with ``LETTERBOX_FILL`` (boxes then need only ``input_scale``, no offset)."""
    arr = _as_array(image)
    if arr.ndim != 3 or arr.shape[2] != 3:
        raise ValueError(f"image must be (H, W, 3) RGB, got shape {arr.shape}")
    mode = interpolation if interpolation in ("bilinear", "bicubic") else "bilinear"
    # A large picture one channel at a time: the float copy of the full-size picture is the peak of a
    # forward on a large image (a 5000 x 5000 one: 300 MB at once, 100 MB this way). A small one in
    # one call: three calls cost three times the per-op overhead (a training row's 200 px picture).
    # The resize treats channels independently, so the result is bit-identical either way. The
    # contiguous copy also makes read-only inputs (zero-copy object-store arrays) safe for torch.
    oh, ow = _content_size(arr.shape[0], arr.shape[1], size, keep_aspect)
    out = torch.full((3, size, size), LETTERBOX_FILL) if (oh, ow) != (size, size) else torch.empty(3, size, size)
    if arr.shape[0] * arr.shape[1] <= _WHOLE_PICTURE_PIXELS:
        t = torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1))).float().div_(255.0)
        out[:, :oh, :ow] = F.interpolate(t[None], size=(oh, ow), mode=mode, antialias=True, align_corners=False)[0]
        return out.clamp_(0, 1)
    for c in range(3):
        t = torch.from_numpy(np.ascontiguousarray(arr[..., c])).float().div_(255.0)
        out[c, :oh, :ow] = F.interpolate(t[None, None], size=(oh, ow), mode=mode, antialias=True, align_corners=False)[0, 0]
    return out.clamp_(0, 1)


# Pictures up to this many pixels are resized in one call (12 MB of float at the bound).
_WHOLE_PICTURE_PIXELS = 1 << 20


def _regions(regions, h: int, w: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Boxes (N, 4) pixels, list of box dicts, or boolean masks (N, H, W) -> (boxes, masks)."""
    if isinstance(regions, list) and regions and isinstance(regions[0], dict):
        regions = [[r["x1"], r["y1"], r["x2"], r["y2"]] for r in regions]
    arr = np.asarray(regions)
    if arr.ndim == 3:
        if arr.shape[1:] != (h, w):
            raise ValueError(f"masks must be (N, {h}, {w}) to match the image, got {arr.shape}")
        masks = arr.astype(bool)
        boxes = np.zeros((len(masks), 4), np.float32)
        for i, m in enumerate(masks):
            ys, xs = np.nonzero(m)
            if xs.size == 0:
                raise ValueError(f"mask {i} is empty")
            boxes[i] = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        return boxes, masks
    if arr.ndim != 2 or (arr.size and arr.shape[1] != 4):
        raise ValueError(f"regions must be boxes (N, 4), box dicts or masks (N, H, W); got shape {arr.shape}")
    boxes = arr.astype(np.float32).reshape(-1, 4)
    bad = (boxes[:, 2] <= boxes[:, 0]) | (boxes[:, 3] <= boxes[:, 1])
    if bad.any():
        raise ValueError(f"regions {np.flatnonzero(bad).tolist()[:10]} are empty or inverted (need x2 > x1, y2 > y1)")
    return boxes, None


@dataclass
class ImageScores:
    """Raw per-image outputs over the kept pairs (numpy): everything Eq. 6 and decompose need.

    The branch logits ``l_spa``/``l_sem`` are (P, V) matrices as large as ``l_pred``; they are
    computed from the branch embeddings only when read (decompose), and ``branch_logits`` gives
    them at a few cells for the triplets a caller keeps.
    """

    pairs: np.ndarray  # (P, 2)
    l_pred: np.ndarray  # (P, V)
    l_pair: np.ndarray  # (P,)
    z_spa: np.ndarray  # (P, D) unit spatial-branch embeddings
    z_sem: np.ndarray  # (P, D) unit semantic-branch embeddings
    bank: np.ndarray  # (V, D) the vocabulary's unit text embeddings (shared, not copied)
    tau: float
    beta: float

    @cached_property
    def l_spa(self) -> np.ndarray:  # (P, V) tau * cos_spa + beta
        return self.tau * (self.z_spa @ self.bank.T) + self.beta

    @cached_property
    def l_sem(self) -> np.ndarray:  # (P, V) tau * cos_sem + beta
        return self.tau * (self.z_sem @ self.bank.T) + self.beta

    def branch_logits(self, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(spatial, semantic) logits at the cells (rows[k], cols[k]) only."""
        e = self.bank[cols]
        return (self.tau * np.einsum("kd,kd->k", self.z_spa[rows], e) + self.beta,
                self.tau * np.einsum("kd,kd->k", self.z_sem[rows], e) + self.beta)


def _top_flat(score: np.ndarray, k: int) -> np.ndarray:
    """Flat indices of the k best cells, best first, ties by index: what a stable full argsort
    gives, by partial selection (with 19,103 predicates a full sort of the (P, V) matrix costs more
    than the forward pass)."""
    flat = score.reshape(-1)
    k = min(k, flat.size)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    kth = flat[np.argpartition(-flat, k - 1)[k - 1]]
    above = np.flatnonzero(flat > kth)
    sel = np.concatenate([above, np.flatnonzero(flat == kth)[: k - above.size]])
    return sel[np.lexsort((sel, -flat[sel]))]


def _top_columns(score: np.ndarray, k: int) -> np.ndarray:
    """(P, k) column indices of each row's k best cells, best first, ties by index (as _top_flat)."""
    k = min(k, score.shape[1])
    if k <= 0:
        return np.zeros((score.shape[0], 0), dtype=np.int64)
    kth = np.take_along_axis(score, np.argpartition(-score, k - 1, axis=1)[:, k - 1:k], axis=1)
    above = score > kth
    ties = score == kth
    keep = above | (ties & (np.cumsum(ties, axis=1) <= k - above.sum(axis=1, keepdims=True)))
    cols = np.nonzero(keep)[1].reshape(score.shape[0], k)
    order = np.lexsort((cols, -np.take_along_axis(score, cols, axis=1)), axis=1)
    return np.take_along_axis(cols, order, axis=1)


class RelationPredictor:
    """A trained model, its text encoder and bank, and its calibration, ready to score images.

    The model is set up in place: moved to ``device``, put in eval mode and, on CPU with the torch
    runtime, converted to oneDNN's packed kernels (``relate.model.onednn.prepack_cpu``)."""

    def __init__(self, model: RelationModel, bank, calibration: Calibration = Calibration(),
                 device: str = "cpu", batch_size: int = 8, runtime: str = "torch", onnx_path=None,
                 ir_path=None, converse: bool | None = None) -> None:
        self.model = model.to(device).eval()
        # converse scoring (relate.converse): the checkpoint's model.converse_scoring unless told otherwise
        self.converse = bool(model.cfg.converse_scoring if converse is None else converse)
        # runtime "onnxruntime" | "openvino": the forward runs the exported graph (relate.export), vocabulary
        # as input; both sessions answer run(output_names, feed)
        self.runtime = runtime
        self._session = None
        if runtime == "onnxruntime":
            from relate.export import onnx_session

            if onnx_path is None:
                raise ValueError("runtime 'onnxruntime' needs the exported model (relate export --format onnx)")
            self._session = onnx_session(onnx_path)
        elif runtime == "openvino":
            from relate.export import openvino_session

            if ir_path is None:
                raise ValueError("runtime 'openvino' needs the exported model (relate export --format openvino)")
            self._session = openvino_session(ir_path)
        elif runtime != "torch":
            raise ValueError(f"runtime must be one of {list(RUNTIMES)}, got {runtime!r}")
        elif torch.device(device).type == "cpu":  # every linear on oneDNN's prepacked fp32 kernels
            from relate.model.onednn import prepack_cpu

            prepack_cpu(self.model)
        self.device = device
        self.calibration = calibration
        self.batch_size = batch_size
        self.text_encoder = bank.encoder
        self._banks: dict[tuple[str, ...], tuple] = {}
        self._converse: dict[tuple[str, ...], ConverseMap] = {}
        self.bank = bank
        self._default = self._install(bank)

    @property
    def vocabulary(self) -> tuple[str, ...]:
        return tuple(self._default[0].strings)

    def _install(self, bank):
        """Cache the bank tensor, its gate alpha_p = g(e_p) and the fused scoring matrix, once per vocabulary."""
        key = tuple(bank.strings)
        if key not in self._banks:
            mat = bank.tensor(self.device)
            with torch.no_grad():
                alpha = self.model.head.gate(mat)
                scoring = self.model.head.scoring_matrix(mat, alpha)
            self._banks[key] = (bank, mat, alpha, scoring, mat.float().cpu().numpy())
        return self._banks[key]

    def _bank_for(self, vocabulary: Sequence[str] | None):
        if vocabulary is None:
            return self._default
        key = tuple(str(s).strip() for s in vocabulary)
        if key not in self._banks:
            from relate.text.bank import build_bank

            self._install(build_bank(key, encoder_name=self.text_encoder))
        return self._banks[key]

    def converse_table(self, vocabulary: Sequence[str] | None = None) -> ConverseMap | None:
        """The converse table scores over ``vocabulary`` (None: the default one) are averaged by
        (``model.converse_scoring`` or the ``converse`` argument, relate.converse), else None. Built
        from the strings alone: nothing is embedded."""
        if not self.converse:
            return None
        key = self.vocabulary if vocabulary is None else tuple(str(s).strip() for s in vocabulary)
        if key not in self._converse:  # never across the line between trained and untrained groups
            self._converse[key] = converse_map(key, trained=self.bank.strings)
        return self._converse[key]

    def _converse_for(self, bank) -> ConverseMap | None:
        return self.converse_table(bank.strings)

    def add_vocabulary(self, strings: Sequence[str]) -> tuple[str, ...]:
        """Embed ``strings`` with the checkpoint's encoder and cache them (no-op when cached);
        returns the cache key, the stripped strings, which ``vocabulary=`` arguments may then use."""
        if not strings:
            raise ValueError("a vocabulary needs at least one string")
        key = tuple(str(s).strip() for s in strings)
        self._bank_for(key)
        return key

    def has_vocabulary(self, strings: Sequence[str]) -> bool:
        return tuple(str(s).strip() for s in strings) in self._banks

    def drop_vocabulary(self, strings: Sequence[str]) -> bool:
        """Free a cached vocabulary (the default one stays); True when something was dropped."""
        key = tuple(str(s).strip() for s in strings)
        if key == self.vocabulary:
            return False
        self._converse.pop(key, None)
        return self._banks.pop(key, None) is not None

    def vocabulary_strings(self, vocabulary: Sequence[str] | None = None) -> tuple[str, ...]:
        """The strings scores are indexed by for ``vocabulary`` (None: the default vocabulary)."""
        return tuple(self._bank_for(vocabulary)[0].strings)

    def set_vocabulary(self, strings: Sequence[str]) -> None:
        """Make ``strings`` the default vocabulary (embedded by the checkpoint's encoder)."""
        if not strings:
            raise ValueError("set_vocabulary needs at least one string")
        self._default = self._bank_for(strings)

    @torch.no_grad()
    def score_images(self, images: Sequence, regions: Sequence, vocabulary: Sequence[str] | None = None
                     ) -> list[ImageScores]:
        """Forward a list of images with their regions; returns raw logits per image."""
        size = self.model.preprocessing.img_size
        interp = self.model.preprocessing.interpolation
        bank, mat, alpha, scoring, bank_np = self._bank_for(vocabulary)
        vocab = (mat, alpha, scoring, bank_np, self._converse_for(bank))
        out: list[ImageScores] = []
        for start in range(0, len(images), self.batch_size):
            chunk = list(range(start, min(start + self.batch_size, len(images))))
            out.extend(self._score_chunk([images[i] for i in chunk], [regions[i] for i in chunk], size, interp, vocab))
        return out

    def _score_chunk(self, images, regions, size, interp, vocab) -> list[ImageScores]:
        mat, alpha, scoring, bank_np, converse = vocab
        arrays = [_as_array(im) for im in images]
        parsed = [_regions(r, a.shape[0], a.shape[1]) for r, a in zip(regions, arrays)]
        n = max(max((len(b) for b, _ in parsed), default=0), 2)
        keep = self.model.preprocessing.keep_aspect
        imgs = torch.stack([prepare_image(a, size, interp, keep) for a in arrays]).to(self.device)
        boxes = torch.zeros(len(arrays), n, 4)
        valid = torch.zeros(len(arrays), n, dtype=torch.bool)
        use_masks = any(m is not None for _, m in parsed)
        masks = torch.zeros(len(arrays), n, size, size) if use_masks else None
        for k, ((bx, m), a) in enumerate(zip(parsed, arrays)):
            sx, sy = input_scale(a.shape[0], a.shape[1], size, keep)
            boxes[k, : len(bx)] = torch.from_numpy(bx * np.array([sx, sy, sx, sy], np.float32))
            valid[k, : len(bx)] = True
            if m is not None:
                oh, ow = _content_size(a.shape[0], a.shape[1], size, keep)
                masks[k, : len(bx), :oh, :ow] = F.interpolate(torch.from_numpy(m).float()[None], size=(oh, ow))[0]
            elif masks is not None:  # boxes only for this image: rasterise the boxes
                for i, (x1, y1, x2, y2) in enumerate(boxes[k, : len(bx)].round().long().tolist()):
                    masks[k, i, y1:max(y2, y1 + 1), x1:max(x2, x1 + 1)] = 1
        if self._session is not None:
            if masks is not None:
                raise ValueError(f"the {self.runtime} runtime scores boxes only; use runtime 'torch' for masks")
            from relate.export import run_onnx

            pairs, ok_all, logits, l_pair, z_spa, z_sem = run_onnx(self._session, imgs, boxes, valid, bank_np)
        else:
            res = self.model(imgs, boxes.to(self.device), valid.to(self.device), mat, alpha=alpha, scoring=scoring,
                             masks=None if masks is None else masks.to(self.device))
            pairs, ok_all, logits, l_pair, z_spa, z_sem = (
                t.float().cpu().numpy() if t.is_floating_point() else t.cpu().numpy()
                for t in (res.pairs, res.sampled.valid, res.scores.logits, res.l_pair, res.scores.z_spa,
                          res.scores.z_sem))
        tau, beta = float(self.model.head.tau), float(self.model.head.beta)
        out = []
        for k in range(len(arrays)):
            ok = ok_all[k]
            l_pred = logits[k][ok] if converse is None else converse_logits(pairs[k][ok], logits[k][ok], converse)
            out.append(ImageScores(pairs[k][ok], l_pred, l_pair[k][ok], z_spa[k][ok], z_sem[k][ok],
                                   bank_np, tau, beta))
        return out

    def graph(self, s: ImageScores, strings, topk: int, threshold: float | None, bank_label: str) -> dict:
        """The body of ``/v1/relations`` for one image's scores, less width and height: the bank label,
        vocabulary size, calibration flag and the triplets, layout and content graphs (the one builder
        the Serve deployment and ``relate predict`` share)."""
        empty = s.pairs.shape[0] == 0
        trip = self.triplets
        return {"bank": bank_label, "vocabulary_size": len(strings), "calibrated": bool(self.calibration.fitted),
                "triplets": [] if empty else trip(s, strings, s.l_pred, topk, threshold),
                "layout": [] if empty else trip(s, strings, s.l_spa, topk, threshold),
                "content": [] if empty else trip(s, strings, s.l_sem, topk, threshold)}

    def triplets(self, s: ImageScores, strings, l_pred, topk: int, threshold: float | None,
                  per_pair: int | None = None) -> list[dict]:
        w = self.model.cfg.pair_weight
        score = relation_score(l_pred, s.l_pair, w, self.calibration)
        if per_pair is not None:  # each pair's best predicates (what graph-constrained recall reads)
            cols = _top_columns(score, per_pair)
            rows = np.repeat(np.arange(score.shape[0]), cols.shape[1])
            cols = cols.reshape(-1)
        else:
            rows, cols = np.unravel_index(_top_flat(score, topk), score.shape)
        l_spa, l_sem = s.branch_logits(rows, cols)
        spa = relation_score(l_spa[:, None], s.l_pair[rows], w, self.calibration)[:, 0]
        sem = relation_score(l_sem[:, None], s.l_pair[rows], w, self.calibration)[:, 0]
        trip = [{"subject": int(s.pairs[r, 0]), "object": int(s.pairs[r, 1]), "predicate": strings[c],
                 "score": float(score[r, c]), "spatial_score": float(spa[k]), "semantic_score": float(sem[k])}
                for k, (r, c) in enumerate(zip(rows, cols))]
        return [t for t in trip if threshold is None or t["score"] >= threshold]

    def predict(self, image, regions, vocabulary: Sequence[str] | None = None, topk: int = 50,
                threshold: float | None = None, decompose: bool = False):
        """Scored triplets, best first; with ``decompose`` a {"layout", "content"} pair of graphs."""
        if threshold is not None and not self.calibration.fitted:
            raise ValueError("threshold needs a calibrated checkpoint: this one's Platt (a, b) are not fitted "
                             "(scores rank correctly but are not probabilities); pass threshold=None")
        if topk <= 0:
            raise ValueError(f"topk must be positive, got {topk}")
        bank = self._bank_for(vocabulary)[0]
        s = self.score_images([image], [regions], vocabulary)[0]
        if s.pairs.shape[0] == 0:
            return {"layout": [], "content": []} if decompose else []
        if decompose:
            return {"layout": self.triplets(s, bank.strings, s.l_spa, topk, threshold),
                    "content": self.triplets(s, bank.strings, s.l_sem, topk, threshold)}
        return self.triplets(s, bank.strings, s.l_pred, topk, threshold)

    def predict_table(self, table: pa.Table, vocabulary: Sequence[str] | None = None, per_pair: int = 3) -> pa.Table:
        """Score every image of a corpus table (GT boxes) -> PREDICTIONS_SCHEMA table."""
        uris, boxes = table.column("uri").to_pylist(), table.column("boxes").to_pylist()
        scores = self.score_images(uris, boxes, vocabulary)
        return self.scores_to_table(table.column("image_id").to_pylist(), scores, vocabulary, per_pair)

    def scores_to_table(self, image_ids: Sequence[str], scores: Sequence[ImageScores],
                        vocabulary: Sequence[str] | None = None, per_pair: int = 3) -> pa.Table:
        """Each kept pair contributes its ``per_pair`` best predicates (Eq. 6 scores); graph-constrained
        metrics read only the first of each pair."""
        strings = self._bank_for(vocabulary)[0].strings
        rows = [{"image_id": i, "triplets": self.triplets(s, strings, s.l_pred, 0, None, per_pair)
                 if s.pairs.shape[0] else []} for i, s in zip(image_ids, scores)]
        return pa.Table.from_pylist(rows, schema=PREDICTIONS_SCHEMA)


def load_model(source: str | Path, device: str = "cpu", batch_size: int = 8, filesystem=None,
               runtime: str = "torch", onnx_path: str | Path | None = None,
               ir_path: str | Path | None = None, converse: bool | None = None) -> RelationPredictor:
    """Load a checkpoint (config, weights, bank, calibration) into a predictor, from a local folder or
    a URI string (``s3://``, ``gs://``, ``file://``: see ``relate.checkpoint.load_checkpoint`` and, for
    endpoints and credentials, ``relate.storage``), file digests verified. With a pyarrow ``filesystem``
    (e.g. a Ray Train checkpoint's), ``source`` is a path on it.

    ``runtime="onnxruntime"`` runs the forward through the graph ``relate export`` wrote (``onnx_path``,
    default ``<folder>/relation.onnx``), refused when it was exported from other weights; ``runtime="openvino"``
    runs the OpenVINO IR ``relate export --format openvino`` wrote (``ir_path``, default
    ``<folder>/relation.xml``) in exact fp32, refused likewise. ``converse`` overrides the checkpoint's
    ``model.converse_scoring`` (relate.converse); its Platt map was fitted with the checkpoint's own setting."""
    from relate.checkpoint import load_checkpoint

    ck = load_checkpoint(source, map_location="cpu", filesystem=filesystem)
    if runtime == "onnxruntime":
        from relate.export import check_onnx_matches, default_onnx_path

        onnx_path = Path(onnx_path) if onnx_path is not None else default_onnx_path(source)
        check_onnx_matches(onnx_path, source)
    elif runtime == "openvino":
        from relate.export import check_ir_matches, default_ir_path

        ir_path = Path(ir_path) if ir_path is not None else default_ir_path(source)
        check_ir_matches(ir_path, source)
    return RelationPredictor(ck.model, ck.bank, ck.calibration, device=device, batch_size=batch_size,
                             runtime=runtime, onnx_path=onnx_path, ir_path=ir_path, converse=converse)
