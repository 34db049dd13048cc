"""Leakage filter: explicit id maps both ways, same ids, and perceptual near-duplicates."""

from __future__ import annotations

import csv

import numpy as np
import pyarrow.parquet as pq
from PIL import Image

from pipelines.leakage import LeakageConfig, load_id_map, main, near_duplicates, phash_uint64
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.schema import CORPUS_SCHEMA, to_table


def test_hash_distance_and_id_map_helpers(tmp_path):
    a = tmp_path / "a.png"
    img = make_scene(0, SyntheticConfig(seed=9)).image
    Image.fromarray(img).save(a)
    Image.fromarray(img).resize((img.shape[1] // 2, img.shape[0] // 2)).save(tmp_path / "b.jpg", quality=70)
    Image.fromarray(make_scene(1, SyntheticConfig(seed=9)).image).save(tmp_path / "c.png")
    h = np.array([phash_uint64(str(tmp_path / n)) for n in ("a.png", "b.jpg", "c.png")], np.uint64)
    near, dist = near_duplicates(h[:1], h[1:], max_hamming=6)
    assert near[0] == 0 and dist[0] <= 6
    near, _ = near_duplicates(h[2:], h[:1], max_hamming=6)
    assert near[0] == -1
    (tmp_path / "map.csv").write_text("vg_id,coco_id\n000123,456\n")
    links = load_id_map(tmp_path / "map.csv")
    assert links["123"] == {"456"} and links["456"] == {"123"}


def test_leakage_job_excludes_by_id_map_same_id_and_pixels(ray_session, tmp_path):
    world = SyntheticConfig(seed=5)
    (tmp_path / "corpus" / "train").mkdir(parents=True)
    (tmp_path / "eval").mkdir()
    rows = []
    for i in range(6):
        s = make_scene(i, world)
        uri = tmp_path / f"{s.image_id}.png"
        Image.fromarray(s.image).save(uri)
        rows.append(dict(image_id=s.image_id, uri=str(uri), width=s.image.shape[1], height=s.image.shape[0],
                         source="synthetic", split="train", boxes=s.boxes, relations=[]))
        if i == 2:  # a re-encoded, resized copy under an unrelated name
            Image.fromarray(s.image).resize((s.image.shape[1] * 3 // 4, s.image.shape[0] * 3 // 4)).save(
                tmp_path / "eval" / "val_000999.jpg", quality=80)
    pq.write_table(to_table(rows, CORPUS_SCHEMA), tmp_path / "corpus" / "train" / "part-0.parquet")
    ids = [r["image_id"] for r in rows]
    Image.fromarray(make_scene(50, world).image).save(tmp_path / "eval" / f"{ids[0]}.png")  # same id, other pixels
    (tmp_path / "eval_ids.txt").write_text("0777\n")
    with open(tmp_path / "vg_coco.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([["vg_id", "coco_id"], [ids[4], "777"]])
    cfg = LeakageConfig(corpus_dir=str(tmp_path), eval_image_dirs=[str(tmp_path / "eval")],
                        eval_ids_files=[str(tmp_path / "eval_ids.txt")], id_maps=[str(tmp_path / "vg_coco.csv")],
                        out_dir=str(tmp_path / "leak"))
    res = main(cfg)
    assert res.excluded[ids[0]] == "same_id"
    assert res.excluded[ids[4]] == "id_map:vg_coco.csv:777"
    assert res.excluded[ids[2]].startswith("near_duplicate:val_000999:")
    assert set(res.excluded) == {ids[0], ids[2], ids[4]}
    lines = (tmp_path / "leak" / "excluded_ids.csv").read_text().splitlines()
    assert lines[0] == "image_id,reason" and len(lines) == 4
    assert res.summary["by_reason"] == {"same_id": 1, "id_map": 1, "near_duplicate": 1}
