"""``relate predict``: relation graphs for your own images, one JSON and one PNG per image.

    relate predict photo.jpg --checkpoint CKPT --boxes boxes.json --vocabulary "on,holding,next to"
    relate predict photos/ --checkpoint CKPT --detector DETECTOR --vocabulary-file predicates.txt --out graphs/

Images: files, folders (their .jpg/.jpeg/.png/.webp/.bmp files; ``--recursive`` for subfolders) or
glob patterns (``"shots/**/*.jpg"``). They are decoded as the Serve API decodes uploads
(``relate.inputs.decode_image``): the EXIF orientation is applied, greyscale, palette, RGBA,
CMYK and 16-bit images become 8-bit RGB. Boxes are in pixels of the image as displayed (after the
EXIF rotation), the same coordinates the API takes.

Regions come from a boxes file or a detector:

* ``--boxes FILE.json``: an object mapping an image to its boxes, each ``[x1, y1, x2, y2]`` or
  ``{"x1": .., "y1": .., "x2": .., "y2": .., "label": "person"}`` (label optional)::

      {"photo.jpg": [[10, 20, 200, 300], {"x1": 150, "y1": 40, "x2": 400, "y2": 260, "label": "dog"}]}

* ``--boxes FILE.csv``: a header ``image,x1,y1,x2,y2`` (optionally ``,label``), one box per row.

  An image is matched by the path as given on the command line, then by its path relative to the
  folder it was found in, then by its file name (refused when two inputs share it).

* ``--detector MODEL``: an open-vocabulary detector (``relate.detector``: OWLv2, OWL-ViT or
  Grounding DINO, by hub id or local folder; with ``HF_HUB_OFFLINE=1`` only local or cached ones),
  with ``--queries``, ``--detector-threshold`` and ``--max-boxes``.

Vocabulary: ``--vocabulary "on,holding,next to"`` (comma-separated), ``--vocabulary-file FILE``
(one string per line, blank lines and ``#`` comments skipped), or neither for the checkpoint's
own bank. ``--runtime onnxruntime`` (or ``openvino``) runs the graph written by ``relate export --format onnx``
(or ``--format openvino``).

Output, per image, under ``--out`` (default ``relate_out``, mirroring the input folders):
``NAME.json`` with the body of ``POST /v1/graph`` (width, height, regions, bank, vocabulary_size,
calibrated, triplets, layout, content; a region from a boxes file has score 1.0 and its label or
"") and ``NAME.png`` (``relate.render``). A file that cannot be read, decoded or scored is
reported on stderr with its reason and the others are still processed; the exit status is 0 when
every image succeeded, 1 when any failed (a summary lists them), 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from relate.inputs import InputError, check_boxes, decode_image
from relate.job_inputs import MissingInputError, require_checkpoint

__all__ = ["add_arguments", "run", "main", "collect_images", "read_boxes_file", "read_vocabulary", "ImageJob",
           "IMAGE_SUFFIXES"]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")
# A photo on disk may be larger than an upload the API accepts; PIL's own bomb guard still applies.
_MAX_PIXELS, _MAX_SIDE, _MAX_REGIONS = 178_956_970, 65_500, 1000


class UsageError(ValueError):
    """A bad command line or input file: reported once, exit status 2."""


@dataclass
class ImageJob:
    path: Path  # the file
    rel: Path  # its path relative to the folder it came from (or its name): output names mirror it
    given: str  # the path as typed or expanded


def collect_images(inputs: Sequence[str], recursive: bool = False) -> list[ImageJob]:
    """Files, folders and glob patterns -> image jobs, in order, each file once. A named file that
    does not exist still becomes a job (its error is reported with the others)."""
    jobs: list[ImageJob] = []
    seen: set[Path] = set()

    def add(p: Path, rel: Path, given: str) -> None:
        key = p.resolve() if p.exists() else p
        if key not in seen:
            seen.add(key)
            jobs.append(ImageJob(p, rel, given))

    for raw in inputs:
        p = Path(raw)
        if p.is_dir():
            pattern = "**/*" if recursive else "*"
            files = sorted(f for f in p.glob(pattern) if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES)
            if not files:
                raise UsageError(f"{raw}: folder holds no {'/'.join(IMAGE_SUFFIXES)} files"
                                 f"{'' if recursive else ' (use --recursive for subfolders)'}")
            for f in files:
                add(f, f.relative_to(p), str(f))
        elif any(c in raw for c in "*?[") and not p.exists():
            matches = sorted(Path(m) for m in glob.glob(raw, recursive=True))
            files = [m for m in matches if m.is_file()]
            if not files:
                raise UsageError(f"{raw}: pattern matches no file")
            for f in files:
                add(f, Path(f.name), str(f))
        else:
            add(p, Path(p.name), raw)
    if not jobs:
        raise UsageError("no input images")
    return jobs


def _box(entry: Any, where: str) -> tuple[list[float], str]:
    if isinstance(entry, dict):
        missing = [k for k in ("x1", "y1", "x2", "y2") if k not in entry]
        if missing:
            raise UsageError(f"{where}: box object lacks {missing}")
        coords, label = [entry["x1"], entry["y1"], entry["x2"], entry["y2"]], entry.get("label") or ""
    elif isinstance(entry, (list, tuple)) and len(entry) == 4:
        coords, label = list(entry), ""
    else:
        raise UsageError(f"{where}: a box is [x1, y1, x2, y2] or an object with x1, y1, x2, y2, got {entry!r:.80}")
    try:
        return [float(c) for c in coords], str(label)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: box coordinates must be numbers, got {coords!r:.80}") from None


def read_boxes_file(path: str | Path) -> dict[str, list[tuple[list[float], str]]]:
    """A JSON or CSV boxes file (format in the module doc) -> {image key: [(box, label), ...]}."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--boxes {path}: no such file")
    out: dict[str, list[tuple[list[float], str]]] = {}
    if path.suffix.lower() == ".csv":
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            need = {"image", "x1", "y1", "x2", "y2"}
            if reader.fieldnames is None or not need <= set(reader.fieldnames):
                raise UsageError(f"{path}: a boxes CSV needs the header image,x1,y1,x2,y2[,label]; got "
                                 f"{reader.fieldnames}")
            for line, row in enumerate(reader, start=2):
                out.setdefault(row["image"], []).append(_box(row, f"{path}:{line}"))
        return out
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a boxes JSON is an object mapping image names to lists of boxes")
    for key, boxes in data.items():
        if not isinstance(boxes, list):
            raise UsageError(f"{path}: {key!r} must map to a list of boxes")
        out[key] = [_box(b, f"{path}: {key!r}[{i}]") for i, b in enumerate(boxes)]
    return out


def _match_boxes(boxes: dict, jobs: Sequence[ImageJob]) -> dict[int, list]:
    """Boxes per job index: by the path as given, then the relative path, then the file name; a
    relative path or name that several inputs share is refused (key those by the path as given)."""
    claims: dict[str, int] = {}
    for j in jobs:
        for key in {j.rel.as_posix(), j.path.name}:
            claims[key] = claims.get(key, 0) + 1
    found: dict[int, list] = {}
    for i, j in enumerate(jobs):
        for key in (j.given, str(j.path)):
            if key in boxes:
                found[i] = boxes[key]
                break
        else:
            for key in (j.rel.as_posix(), j.path.name):
                if key in boxes:
                    if claims[key] > 1:
                        raise UsageError(f"boxes file key {key!r} names {claims[key]} inputs; key them by their "
                                         "paths as given on the command line")
                    found[i] = boxes[key]
                    break
    return found


def read_vocabulary(inline: str | None, path: str | None) -> list[str] | None:
    if inline is not None and path is not None:
        raise UsageError("give --vocabulary or --vocabulary-file, not both")
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise UsageError(f"--vocabulary-file {path}: no such file")
        strings = [ln.strip() for ln in p.read_text().splitlines()]
        strings = [s for s in strings if s and not s.startswith("#")]
    elif inline is not None:
        strings = [s.strip() for s in inline.split(",") if s.strip()]
    else:
        return None
    if not strings:
        raise UsageError("the vocabulary is empty")
    dup = sorted({s for s in strings if strings.count(s) > 1})
    if dup:
        raise UsageError(f"the vocabulary repeats {dup[:5]}")
    return strings


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("inputs", nargs="+", help="image files, folders or glob patterns")
    ap.add_argument("--checkpoint", required=True, help="relation checkpoint folder or URI")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--boxes", help="boxes file, .json or .csv (format: relate.predict's doc)")
    src.add_argument("--detector", help="open-vocabulary detector: hub id or local folder (OWLv2, OWL-ViT, Grounding DINO)")
    ap.add_argument("--queries", help="detector text queries, comma-separated (default: the detector's)")
    ap.add_argument("--detector-threshold", type=float, default=None, help="detector confidence threshold")
    ap.add_argument("--max-boxes", type=int, default=None, help="most detected boxes per image")
    ap.add_argument("--vocabulary", help="predicates, comma-separated (default: the checkpoint's bank)")
    ap.add_argument("--vocabulary-file", help="predicates, one per line")
    ap.add_argument("--out", default="relate_out", help="output folder (default: relate_out)")
    ap.add_argument("--topk", type=int, default=50, help="triplets kept per graph (default 50)")
    ap.add_argument("--threshold", type=float, default=None, help="keep scores >= this (calibrated checkpoints only)")
    ap.add_argument("--runtime", choices=["torch", "onnxruntime", "openvino"], default="torch",
                    help="forward runtime (onnxruntime, openvino: the graph from 'relate export')")
    ap.add_argument("--onnx", default=None, help="exported graph for onnxruntime (default: CHECKPOINT/relation.onnx)")
    ap.add_argument("--ir", default=None, help="OpenVINO IR for openvino (default: CHECKPOINT/relation.xml)")
    ap.add_argument("--no-png", action="store_true", help="write only the JSON graphs")
    ap.add_argument("--recursive", action="store_true", help="also read images in subfolders of a folder")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")


def _progress(items, quiet: bool):
    if quiet or len(items) < 2:
        return items, (lambda msg: print(msg, file=sys.stderr))
    try:
        from tqdm import tqdm
    except ImportError:  # a plain progress line instead
        def plain():
            for i, it in enumerate(items):
                print(f"\r[{i + 1}/{len(items)}] {it.path.name}", end="", file=sys.stderr, flush=True)
                yield it
            print(file=sys.stderr)
        return plain(), (lambda msg: print("\n" + msg, file=sys.stderr))
    bar = tqdm(items, unit="image", file=sys.stderr, dynamic_ncols=True)
    return bar, bar.write


def _out_stem(job: ImageJob, out: Path, taken: set[Path]) -> Path:
    stem = out / job.rel.with_suffix("")
    cand, n = stem, 2
    while cand in taken:
        cand = stem.with_name(f"{stem.name}-{n}")
        n += 1
    taken.add(cand)
    return cand


def run(args: argparse.Namespace) -> int:
    import torch

    require_checkpoint(args.checkpoint, "checkpoint (--checkpoint)")
    jobs = collect_images(args.inputs, args.recursive)
    vocabulary = read_vocabulary(args.vocabulary, args.vocabulary_file)
    if args.topk <= 0:
        raise UsageError(f"--topk must be positive, got {args.topk}")
    boxes_for = _match_boxes(read_boxes_file(args.boxes), jobs) if args.boxes else None
    if args.threads:
        torch.set_num_threads(args.threads)

    from relate.api import load_model

    predictor = load_model(args.checkpoint, runtime=args.runtime, onnx_path=args.onnx, ir_path=args.ir)
    if args.threshold is not None and not predictor.calibration.fitted:
        raise UsageError("--threshold needs a calibrated checkpoint (its Platt a, b are not fitted); use --topk")
    detector = queries = None
    if args.detector:
        from relate.detector import Detector, DetectorConfig

        detector = Detector(DetectorConfig(mode="transformers", model=args.detector))
        queries = [q.strip() for q in args.queries.split(",") if q.strip()] if args.queries else None
    if vocabulary is not None:
        from relate.text.vocabulary import vocabulary_key

        strings, label = tuple(predictor.add_vocabulary(vocabulary)), "request:" + vocabulary_key(vocabulary)[:12]
    else:
        strings, label = predictor.vocabulary, "default"
    out = Path(args.out)
    taken: set[Path] = set()
    failures: list[tuple[str, str]] = []
    written = 0
    items, report = _progress(jobs, args.quiet)
    index = {id(j): i for i, j in enumerate(jobs)}
    for job in items:
        idx = index[id(job)]
        try:
            body, image = _one(job, idx, predictor, strings, label, vocabulary, boxes_for, detector, queries, args)
        except _Skip as exc:
            failures.append((job.given, str(exc)))
            report(f"error: {job.given}: {exc}")
            continue
        stem = _out_stem(job, out, taken)
        stem.parent.mkdir(parents=True, exist_ok=True)
        stem.with_suffix(".json").write_text(json.dumps(body, indent=1) + "\n")
        if not args.no_png:
            from relate.render import render_graph_png

            boxes = np.array([[r["x1"], r["y1"], r["x2"], r["y2"]] for r in body["regions"]], dtype=float)
            names = [r["label"] for r in body["regions"]]
            stem.with_suffix(".png").write_bytes(render_graph_png(image, boxes, body["triplets"], names))
        written += 1
    print(f"wrote {written} graph(s) to {out}/" + (f"; {len(failures)} of {len(jobs)} image(s) failed:" if failures
                                                   else ""), file=sys.stderr)
    for given, why in failures:
        print(f"  {given}: {why}", file=sys.stderr)
    return 1 if failures else 0


class _Skip(Exception):
    """This image cannot be processed; the message says why."""


def _one(job, idx, predictor, strings, label, vocabulary, boxes_for, detector, queries, args):
    try:
        data = job.path.read_bytes()
    except OSError as exc:
        raise _Skip(f"cannot read the file ({exc.strerror or exc})") from None
    try:
        image = decode_image(data, _MAX_PIXELS, _MAX_SIDE, field="image")
    except InputError as exc:
        raise _Skip(str(exc)) from None
    h, w = image.shape[:2]
    if boxes_for is not None:
        if idx not in boxes_for:
            raise _Skip(f"no boxes for this image in {args.boxes}")
        given = boxes_for[idx]
        try:
            arr = check_boxes([b for b, _ in given], w, h, _MAX_REGIONS, field=f"boxes for {job.given}")
        except InputError as exc:
            raise _Skip(str(exc)) from None
        regions = [{"x1": float(b[0]), "y1": float(b[1]), "x2": float(b[2]), "y2": float(b[3]), "score": 1.0,
                    "label": lab} for (b, lab) in given]
    else:
        try:
            dets = detector.detect(image, queries, args.detector_threshold, args.max_boxes)
        except ValueError as exc:
            raise _Skip(f"detector: {exc}") from None
        regions = [{k: (float(d[k]) if k != "label" else str(d[k])) for k in ("x1", "y1", "x2", "y2", "score", "label")}
                   for d in dets]
        arr = np.array([[r["x1"], r["y1"], r["x2"], r["y2"]] for r in regions], dtype=np.float64).reshape(-1, 4)
    body = {"width": int(w), "height": int(h), "regions": regions}
    if len(regions) < 2:  # as /v1/graph answers when the detector finds fewer than two boxes
        body.update({"bank": label, "vocabulary_size": len(strings), "calibrated": bool(predictor.calibration.fitted),
                     "triplets": [], "layout": [], "content": []})
        return body, image
    try:
        scores = predictor.score_images([image], [arr], vocabulary)[0]
    except ValueError as exc:
        raise _Skip(f"scoring failed: {exc}") from None
    body.update(predictor.graph(scores, strings, args.topk, args.threshold, label))
    return body, image


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="relate predict", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    args = ap.parse_args(argv)
    return run_cli(args)


def run_cli(args: argparse.Namespace) -> int:
    from relate.checkpoint import CheckpointError
    from relate.export import ExportError

    try:
        return run(args)
    except (UsageError, CheckpointError, ExportError, MissingInputError) as exc:
        print(f"relate predict: error: {exc}", file=sys.stderr)
        return 2
