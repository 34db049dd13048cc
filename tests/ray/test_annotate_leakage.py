"""Leakage filter: explicit id maps both ways, same ids, and perceptual near-duplicates, with ids
namespaced by dataset (COCO 4242 and VG 4242 are different images)."""

from __future__ import annotations

import csv

import numpy as np
import pyarrow.parquet as pq
import pytest
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
    assert links == {"vg:123": {"coco:456"}, "coco:456": {"vg:123"}}
    (tmp_path / "ns.csv").write_text("vg:7,coco:0008\n")  # no header: each id names its dataset
    assert load_id_map(tmp_path / "ns.csv") == {"vg:7": {"coco:8"}, "coco:8": {"vg:7"}}
    (tmp_path / "old.csv").write_text("123,456\n")  # an old map: which dataset is 123 in?
    with pytest.raises(ValueError, match="bare ids and no header"):
        load_id_map(tmp_path / "old.csv")


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
    # two training images with the same digits, one from VG (vg150) and one from COCO (psg, zero-padded)
    for i, (iid, source) in enumerate([("4242", "vg150"), ("004242", "psg")]):
        s = make_scene(20 + i, world)
        uri = tmp_path / f"{source}_{iid}.png"
        Image.fromarray(s.image).save(uri)
        rows.append(dict(image_id=iid, uri=str(uri), width=s.image.shape[1], height=s.image.shape[0],
                         source=source, split="train", boxes=s.boxes, relations=[]))
    pq.write_table(to_table(rows, CORPUS_SCHEMA), tmp_path / "corpus" / "train" / "part-0.parquet")
    ids = [r["image_id"] for r in rows]
    Image.fromarray(make_scene(50, world).image).save(tmp_path / "eval" / f"{ids[0]}.png")  # same id, other pixels
    (tmp_path / "eval_ids.txt").write_text("coco:0777\ncoco:4242  # COCO's 4242, not VG's\n")
    with open(tmp_path / "syn_coco.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([["synthetic_id", "coco_id"], [ids[4], "777"]])
    cfg = LeakageConfig(corpus_dir=str(tmp_path), eval_image_dirs=[f"synthetic={tmp_path / 'eval'}"],
                        eval_ids_files=[str(tmp_path / "eval_ids.txt")], id_maps=[str(tmp_path / "syn_coco.csv")],
                        out_dir=str(tmp_path / "leak"))
    res = main(cfg)
    key = [f"synthetic:{i}" for i in ids[:6]]
    assert res.excluded[key[0]] == "same_id"
    assert res.excluded[key[4]] == "id_map:syn_coco.csv:coco:777"
    assert res.excluded[key[2]].startswith("near_duplicate:synthetic:val_000999:")
    # the COCO image 4242 is an evaluation image; the VG image with the same digits is not
    assert res.excluded["coco:4242"] == "same_id" and "vg:4242" not in res.excluded
    assert set(res.excluded) == {key[0], key[2], key[4], "coco:4242"}
    lines = (tmp_path / "leak" / "excluded_ids.csv").read_text().splitlines()
    assert lines[0] == "image_id,reason" and len(lines) == 5 and "coco:4242,same_id" in lines
    assert res.summary["by_reason"] == {"same_id": 2, "id_map": 1, "near_duplicate": 1}

    # the list it wrote, read back by a reader's exclusion step, drops COCO's 4242 and keeps VG's
    from relate.data.readers import BenchmarkData, exclude_images, load_exclusions

    table = to_table(rows, CORPUS_SCHEMA)
    kept = exclude_images(BenchmarkData("mixed", table, None, ()), load_exclusions(tmp_path / "leak" / "excluded_ids.csv"))
    assert sorted(zip(kept.corpus.column("source").to_pylist(), kept.corpus.column("image_id").to_pylist())) == \
        sorted([("synthetic", ids[1]), ("synthetic", ids[3]), ("synthetic", ids[5]), ("vg150", "4242")])


def test_leakage_inputs_without_a_dataset_are_refused_with_the_fix(tmp_path):
    (tmp_path / "corpus" / "train").mkdir(parents=True)
    pq.write_table(to_table([], CORPUS_SCHEMA), tmp_path / "corpus" / "train" / "part-0.parquet")
    (tmp_path / "eval").mkdir()
    with pytest.raises(ValueError, match=r"names no dataset; write NAMESPACE=FOLDER, e.g. vg="):
        main(LeakageConfig(corpus_dir=str(tmp_path), eval_image_dirs=[str(tmp_path / "eval")], out_dir=str(tmp_path / "o")))
    (tmp_path / "old_ids.txt").write_text("0777\n")  # an eval_ids.txt from before namespaces
    with pytest.raises(ValueError, match=r"old_ids.txt line 1: image id '0777' names no dataset; write <namespace>:<id>"):
        main(LeakageConfig(corpus_dir=str(tmp_path), eval_ids_files=[str(tmp_path / "old_ids.txt")],
                           out_dir=str(tmp_path / "o")))
