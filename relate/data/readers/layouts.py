"""Where each benchmark's files come from, the layout its reader expects, and a structural check
that names every missing or malformed file (and every malformed entry in it) instead of stopping
at the first. Used by ``python -m eval_jobs.prepare``; Ray-free like the readers themselves.

No checksum of these files is published by their distributors that we could find, so nothing
here pins a hash; the prepare job records the hashes it finds in a manifest and can verify a
later copy against that manifest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

__all__ = ["Layout", "LAYOUTS", "check_layout", "describe_layout"]

MAX_ENTRY_PROBLEMS = 50  # per file; the count of the rest is reported


@dataclass(frozen=True)
class Layout:
    name: str
    axis: str                          # the OV-SGG-Bench axis this benchmark scores by default
    source: str                        # where the files come from, in our words
    tree: str                          # the expected layout under --root
    files: Callable[[dict], list[str]]  # annotation files (relative to root) for the reader options
    check: Callable[[Path, dict, list[str]], None]  # appends every problem found


class _Problems:
    """Per-file problem collector that caps entry-level listings but always counts them."""

    def __init__(self, out: list[str], path: Path) -> None:
        self.out, self.path, self.n = out, path, 0

    def add(self, msg: str) -> None:
        self.n += 1
        if self.n <= MAX_ENTRY_PROBLEMS:
            self.out.append(f"{self.path}: {msg}")

    def close(self) -> None:
        if self.n > MAX_ENTRY_PROBLEMS:
            self.out.append(f"{self.path}: ... and {self.n - MAX_ENTRY_PROBLEMS} more malformed entries")


def _json(path: Path, problems: list[str]) -> Any:
    if not path.is_file():
        problems.append(f"{path}: missing")
        return None
    try:
        return json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        problems.append(f"{path}: not valid JSON ({exc})")
        return None


def _keys(obj: Any, keys: tuple[str, ...], p: _Problems, where: str) -> bool:
    if not isinstance(obj, dict):
        p.add(f"{where} is a {type(obj).__name__}, expected an object")
        return False
    miss = [k for k in keys if k not in obj]
    if miss:
        p.add(f"{where} lacks {miss}")
    return not miss


# ------------------------------------------------------------------------ Scene-Graph-Benchmark h5

_H5_IMAGE = ("split", "img_to_first_box", "img_to_last_box", "img_to_first_rel", "img_to_last_rel")


def _check_vg(root: Path, opts: dict, problems: list[str]) -> None:
    from relate.data.readers.vg150 import align_image_data

    h5_name, dicts_name = opts["h5_name"], opts["dicts_name"]
    image_data_name = opts.get("image_data_name", "image_data.json")
    n_images = None
    h5p = root / h5_name
    if not h5p.is_file():
        problems.append(f"{h5p}: missing")
    else:
        n_images = _check_h5(h5p, int(opts.get("box_scale", 1024)), problems)
    dicts = _json(root / dicts_name, problems)
    if dicts is not None:
        p = _Problems(problems, root / dicts_name)
        _keys(dicts, ("idx_to_label", "idx_to_predicate"), p, "the top level")
        p.close()
    meta = _json(root / image_data_name, problems)
    if meta is None:
        return
    p = _Problems(problems, root / image_data_name)
    if not isinstance(meta, list):
        p.add("expected a list of images")
    else:
        for i, m in enumerate(meta):
            _keys(m, ("image_id", "width", "height"), p, f"entry {i}")
        if n_images is not None and p.n == 0:
            try:
                align_image_data(meta, n_images, root / image_data_name)
            except ValueError as exc:
                problems.append(str(exc))
    p.close()


def _check_h5(path: Path, box_scale: int, problems: list[str]) -> int | None:
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        problems.append(f"{path}: not a readable HDF5 file ({exc})")
        return None
    with f:
        need = _H5_IMAGE + ("labels", f"boxes_{box_scale}", "relationships", "predicates")
        miss = [k for k in need if k not in f]
        if miss:
            problems.append(f"{path}: lacks dataset(s) {miss}")
            return None
        lens = {k: f[k].shape[0] for k in need}
        if len({lens[k] for k in _H5_IMAGE}) != 1:
            problems.append(f"{path}: per-image arrays differ in length {({k: lens[k] for k in _H5_IMAGE})}")
        if lens["labels"] != lens[f"boxes_{box_scale}"]:
            problems.append(f"{path}: {lens['labels']} labels but {lens[f'boxes_{box_scale}']} boxes")
        if lens["relationships"] != lens["predicates"]:
            problems.append(f"{path}: {lens['relationships']} relationships but {lens['predicates']} predicates")
        return int(lens["split"])


# ------------------------------------------------------------------------------- PSG and Haystack

def _check_psg_like(root: Path, name: str, *, haystack: bool, problems: list[str]) -> None:
    doc = _json(root / name, problems)
    if doc is None:
        return
    p = _Problems(problems, root / name)
    top = ("thing_classes", "stuff_classes", "predicate_classes", "data") + (() if haystack else ("test_image_ids",))
    if not _keys(doc, top, p, "the top level"):
        return p.close()
    n_cls, n_pred = len(doc["thing_classes"]) + len(doc["stuff_classes"]), len(doc["predicate_classes"])
    for i, d in enumerate(doc["data"]):
        where = f"data[{i}]"
        if not _keys(d, ("image_id", "file_name", "width", "height", "annotations", "relations"), p, where):
            continue
        where = f"data[{i}] (image_id={d['image_id']!r})"
        nb = len(d["annotations"])
        for a in d["annotations"]:
            if len(a.get("bbox", ())) != 4 or not 0 <= int(a.get("category_id", -1)) < n_cls:
                p.add(f"{where}: annotation {a} needs a 4-number bbox and a category_id below {n_cls}")
                break
        for key in ("relations", "neg_relations"):
            for t in d.get(key) or []:
                ok = len(t) == 3 and 0 <= t[0] < nb and 0 <= t[1] < nb and (-1 <= t[2] < n_pred if haystack else 0 <= t[2] < n_pred)
                if not ok:
                    p.add(f"{where}: {key} triple {t} outside its {nb} annotations / {n_pred} predicates")
    p.close()


# ------------------------------------------------------------------------------------ HICO-DET

def _check_hico(root: Path, opts: dict, problems: list[str], split: str) -> None:
    from relate.data.readers.hico import _FILES, NO_INTERACTION, read_name_list

    verbs, objects = {}, None
    vp = root / opts.get("verb_list", "hico_list_vb.txt")
    if not vp.is_file():
        problems.append(f"{vp}: missing")
    else:
        try:
            verbs = read_name_list(vp)
            if NO_INTERACTION not in verbs.values():
                problems.append(f"{vp}: no '{NO_INTERACTION}' verb; is this HICO's verb list?")
        except ValueError as exc:
            problems.append(str(exc))
    cats = _json(root / opts.get("object_categories", "coco_categories.json"), problems)
    if cats is not None:
        try:
            objects = {int(c["id"]) for c in cats}
        except (TypeError, KeyError, ValueError):
            problems.append(f"{root / opts.get('object_categories', 'coco_categories.json')}: expected a list of "
                            "{id, name} objects")
    ann_path = root / "annotations" / _FILES[split][0]
    ann = _json(ann_path, problems)
    if ann is None:
        return
    p = _Problems(problems, ann_path)
    for i, d in enumerate(ann if isinstance(ann, list) else [ann]):
        if not _keys(d, ("file_name", "annotations", "hoi_annotation"), p, f"entry {i}"):
            continue
        nb = len(d["annotations"])
        for a in d["annotations"]:
            if len(a.get("bbox", ())) != 4 or (objects is not None and int(a.get("category_id", -1)) not in objects):
                p.add(f"entry {i} ({d['file_name']}): annotation {a} needs a 4-number bbox and a known category_id")
                break
        for h in d["hoi_annotation"]:
            if not (0 <= int(h.get("subject_id", -1)) < nb and int(h.get("object_id", -1)) < nb
                    and (not verbs or int(h.get("category_id", 0)) in verbs)):
                p.add(f"entry {i} ({d['file_name']}): hoi {h} outside its {nb} boxes / {len(verbs)} verbs")
    p.close()


# ---------------------------------------------------------------------------------- SpatialSense

def _check_spatialsense(root: Path, opts: dict, problems: list[str]) -> None:
    name = opts.get("json_name", "annotations.json")
    doc = _json(root / name, problems)
    if doc is None:
        return
    p = _Problems(problems, root / name)
    for i, d in enumerate(doc if isinstance(doc, list) else [doc]):
        if not _keys(d, ("url", "width", "height", "split", "annotations"), p, f"entry {i}"):
            continue
        for a in d["annotations"]:
            ents = [a.get("subject"), a.get("object")]
            if "predicate" not in a or "label" not in a or not all(
                    isinstance(e, dict) and "name" in e and len(e.get("bbox", ())) == 4 for e in ents):
                p.add(f"entry {i} ({d['url']}): relation {a.get('_id')!r} needs predicate, label and "
                      "subject/object with a name and a 4-number bbox")
    p.close()


# --------------------------------------------------------------------------------- the six layouts

def _vg_layout(name: str, source: str, h5: str, dicts: str) -> Layout:
    """A Scene-Graph-Benchmark h5 + dicts layout whose file names default to h5 and dicts."""
    def opts(o: dict) -> dict:
        return {"h5_name": h5, "dicts_name": dicts, **o}
    return Layout(name, "A1", source, _VG_TREE.format(root="{root}", h5=h5, dicts=dicts),
                  lambda o: [opts(o)["h5_name"], opts(o)["dicts_name"], o.get("image_data_name", "image_data.json")],
                  lambda root, o, pr: _check_vg(root, opts(o), pr))


_VG_TREE = """{root}/
  {h5:<29} the scene graphs of every split (split codes 0 train, 2 test)
  {dicts:<29} idx_to_label, idx_to_predicate
  image_data.json               per image: image_id, width, height (+4 corrupted VG ids the h5 lacks)
  images/<image_id>.jpg         the Visual Genome pixels (reader option image_dir; SGB calls it VG_100K)"""

LAYOUTS: dict[str, Layout] = {
    "vg150": _vg_layout(
        "vg150",
        "Images: Visual Genome 1.2 from Stanford (the VG_100K and VG_100K_2 archives). Annotations: the "
        "VG150 split of Xu et al. 2017, re-packed with attributes by Scene-Graph-Benchmark.pytorch; its "
        "DATASET.md links VG-SGG-with-attri.h5, VG-SGG-dicts-with-attri.json and image_data.json.",
        "VG-SGG-with-attri.h5", "VG-SGG-dicts-with-attri.json"),
    "indoorvg": _vg_layout(
        "indoorvg",
        "IndoorVG: indoor Visual Genome images with annotations released in the same Scene-Graph-Benchmark "
        "h5 + dicts layout; the file names below are the reader's defaults (reader options h5_name, "
        "dicts_name). Images are Visual Genome's.",
        "IndoorVG.h5", "IndoorVG-dicts.json"),
    "psg": Layout(
        "psg", "A1",
        "psg.json from the OpenPSG release (github.com/Jingkang50/OpenPSG, data/psg/). Pixels and panoptic "
        "PNGs are COCO 2017's; file_name and pan_seg_file_name in psg.json are relative to the COCO folder.",
        "{root}/\n  psg.json                     classes, predicates, test_image_ids, per-image data\n"
        "  images/<file_name>           COCO images (e.g. a link to the COCO folder: images/val2017/...)\n"
        "  <pan_seg_file_name>          panoptic PNGs, only for boxes_from=segments",
        lambda o: [o.get("json_name", "psg.json")],
        lambda root, o, pr: _check_psg_like(root, o.get("json_name", "psg.json"), haystack=False, problems=pr)),
    "haystack": Layout(
        "haystack", "A2",
        "Haystack v1 (Lorenz et al. 2023): annotation_v1.json and its images, from the download linked in "
        "github.com/lorjul/haystack. PSG's classes and predicates; neg_relations are adjudicated negatives; "
        "a predicate of -1 marks an unusable triple.",
        "{root}/\n  annotation_v1.json           PSG layout + neg_relations (haystack.json is also accepted)\n"
        "  images/<file_name>           the images",
        lambda o: [o["json_name"]] if o.get("json_name") else ["annotation_v1.json"],
        lambda root, o, pr: _check_psg_like(root, o.get("json_name") or _haystack_name(root), haystack=True,
                                            problems=pr)),
    "hico_det": Layout(
        "hico_det", "A1",
        "HICO-DET (hico_20160224_det): the images and hico_list_vb.txt from the original release; the json "
        "annotations trainval_hico.json / test_hico.json as converted and distributed by PPDM, CDN and "
        "GEN-VLKT. coco_categories.json is a list of {id, name} for the COCO object ids those files use. "
        "The json stores no image size: it comes from image_sizes.json {file_name: [w, h]}, else from the "
        "release's anno_bbox.mat (its 'size' field), else from the image files.",
        "{root}/\n  annotations/trainval_hico.json, annotations/test_hico.json\n  hico_list_vb.txt"
        "             '<id> <verb>' lines, no_interaction among them\n  coco_categories.json\n"
        "  images/train2015/, images/test2015/\n  anno_bbox.mat                optional: the release's true image sizes\n"
        "  image_sizes.json             optional: {{file_name: [w, h]}}",
        lambda o: ["annotations/trainval_hico.json", "annotations/test_hico.json",
                   o.get("verb_list", "hico_list_vb.txt"), o.get("object_categories", "coco_categories.json"),
                   o.get("sizes", "image_sizes.json"), "anno_bbox.mat"],
        lambda root, o, pr: _check_hico(root, o, pr, o.get("split", "test"))),
    "spatialsense": Layout(
        "spatialsense", "A6",
        "SpatialSense (Yang et al. 2019): annotations.json and images.tar.gz from the release on Zenodo "
        "(DOI 10.5281/zenodo.8104370, linked from github.com/princeton-vl/SpatialSense). Images are read from "
        "the unpacked archive, never from their Flickr url.",
        "{root}/\n  annotations.json             per image: url, width, height, split, annotations\n"
        "  images/flickr/<last part of the url>   Flickr images\n"
        "  images/nyu/<last part of the url>      NYU images",
        lambda o: [o.get("json_name", "annotations.json")],
        lambda root, o, pr: _check_spatialsense(root, o, pr)),
}


def _haystack_name(root: Path) -> str:
    from relate.data.readers.psg import HAYSTACK_JSON_NAMES

    return next((n for n in HAYSTACK_JSON_NAMES if (root / n).is_file()), HAYSTACK_JSON_NAMES[0])


def describe_layout(name: str, root: str | Path) -> str:
    """Where the files come from and the tree expected under ``root``."""
    lay = _layout(name)
    return f"{name}: {lay.source}\n\nexpected layout:\n{lay.tree.format(root=root)}"


def check_layout(name: str, root: str | Path, options: dict | None = None, split: str = "test") -> list[str]:
    """Every structural problem of the benchmark's annotation files under ``root`` (empty: all good)."""
    lay, root = _layout(name), Path(root)
    if not root.is_dir():
        return [f"{root}: not a folder"]
    problems: list[str] = []
    lay.check(root, {**(options or {}), "split": split}, problems)
    return problems


def _layout(name: str) -> Layout:
    if name not in LAYOUTS:
        raise KeyError(f"unknown benchmark {name!r}; valid names: {', '.join(sorted(LAYOUTS))}")
    return LAYOUTS[name]
