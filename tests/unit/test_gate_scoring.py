"""The gate scored against the scripted annotator's injected errors, end to end without Ray.

Synthetic scenes -> markers -> three scripted passes -> parse -> gate -> top-up -> shard
balancing, then the acceptance properties of seed 001 §4.1 are checked on what would be written.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from pipelines.annotate import AnnotateConfig, annotate_local
from pipelines.annotate_stages import merge_counters
from relate import geometry as G
from relate.annotation_stats import annotation_statistics, direction_balance
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.gate_canonical import default_map
from relate.schema import CORPUS_SCHEMA, REJECTIONS_SCHEMA, to_table, validate_corpus


def synthetic_records(tmp_path, n: int, seed: int = 11, shard_size: int = 64) -> pa.Table:
    world = SyntheticConfig(seed=seed)
    rows = []
    for i in range(n):
        s = make_scene(i, world)
        uri = tmp_path / f"{s.image_id}.png"
        Image.fromarray(s.image).save(uri)
        row = s.to_record(str(uri), "train")
        row["reference"] = row.pop("relations")  # the truth the scripted annotator starts from
        rows.append(dict(row, shard=f"train/part-{i // shard_size:05d}"))
    return pa.Table.from_pylist(rows)


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    records = synthetic_records(tmp_path_factory.mktemp("world"), 160)
    return annotate_with_statistics(records, AnnotateConfig(duplicate_person_rate=0.3, cpu_batch_size=40))


def annotate_with_statistics(records: pa.Table, cfg: AnnotateConfig) -> tuple[list[dict], pa.Table, dict]:
    """The annotation stages in this process: output rows, the kept corpus and its statistics."""
    rows = annotate_local(records, cfg)
    counters = {}
    for r in rows:
        counters = merge_counters(counters, json.loads(r["counters_json"]))
    kept = to_table([{k: r.get(k) for k in CORPUS_SCHEMA.names} for r in rows], CORPUS_SCHEMA)
    rej = to_table([{"image_id": r["image_id"], "rejected": r["rejected"]} for r in rows], REJECTIONS_SCHEMA)
    return rows, kept, annotation_statistics(kept, rej, counters)


def test_every_error_kind_is_injected_and_decided_correctly(annotated):
    _, _, stats = annotated
    per_kind = stats["gate_scoring"]["per_error_kind"]
    geometric = ["contact_disjoint", "containment_no_overlap", "proximity_far", "wrong_direction", "not_layout",
                 "body_part_spatial", "body_part_subject", "body_part_object", "semantic_disjoint",
                 "person_duplicate", "bad_index", "repeated_pair"]
    for kind in geometric:
        assert per_kind[kind]["injected"] > 0, kind
        assert per_kind[kind]["recall"] == 1.0, (kind, per_kind[kind])
    # geometry cannot see a reversed depth order: it must pass, counted as unchecked
    assert per_kind["depth_flip"]["injected"] > 0 and per_kind["depth_flip"]["recall"] == 1.0
    for rule, d in stats["gate_scoring"]["per_rule"].items():
        assert d["precision"] == 1.0, (rule, d)
    assert stats["unusable_outputs"].get("no_json", 0) > 0  # malformed outputs were counted, not fatal


def test_after_gating_the_corpus_has_the_promised_properties(annotated):
    rows, kept, stats = annotated
    validate_corpus(kept)
    cm = default_map()
    n_contact = n_contact_disjoint = n_cont = n_cont_bad = 0
    for r in rows:
        b = np.array([[x["x1"], x["y1"], x["x2"], x["y2"]] for x in r["boxes"]])
        triples = [(x["subject"], x["predicate"], x["object"]) for x in r["relations"]]
        assert len(set(triples)) == len(triples)                   # no duplicate triples
        for s, p, o in triples:
            assert s != o                                          # no self-loops
            cid, rev = cm.lookup(p)
            if cid < 0:
                continue
            f = cm.forms[cid]
            if f.contact:
                n_contact += 1
                n_contact_disjoint += G.gap(b[s], b[o]) > 0
            if f.kind == "containment":
                n_cont += 1
                n_cont_bad += G.intersection_area(b[s], b[o]) <= 0
    assert n_contact > 50 and n_cont > 5
    assert n_cont_bad == 0 and n_contact_disjoint / n_contact <= 0.001
    audit = stats["geometry_audit"]  # the run's own audit agrees with this independent count
    assert audit["contact"] == n_contact and audit["containment"] == n_cont
    assert audit["containment_disjoint"] == 0 and audit["duplicate_triples"] == 0 and audit["self_loops"] == 0
    bal = stats["direction_balance"]
    for axis in ("left of/right of", "above/below"):
        assert bal[axis]["rel_gap"] <= 0.02 + 2.0 / max(sum(v for k, v in bal[axis].items() if k != "rel_gap"), 1), bal


def test_balancing_undoes_the_annotator_bias(annotated):
    rows, _, _ = annotated
    # the scripted annotator states every horizontal relation as "left of" (direction_bias=1)
    bal = direction_balance([x["predicate"] for r in rows for x in r["relations"]])
    assert bal["left of/right of"]["right of"] > 0.4 * bal["left of/right of"]["left of"]
    gates = {x["gate"] for r in rows for x in r["relations"]}
    assert {"kept", "swapped", "restated"} <= gates


def test_statistics_read_a_shard_at_a_time_equal_those_of_the_whole_corpus(annotated):
    """The job's final statistics read one shard at a time (memory flat in the corpus size); every
    figure equals that of the whole corpus at once, the degree mean and the shares included."""
    from relate.annotation_stats import AnnotationTally

    rows, kept, stats = annotated
    counters = {}
    for r in rows:
        counters = merge_counters(counters, json.loads(r["counters_json"]))
    rej = to_table([{"image_id": r["image_id"], "rejected": r["rejected"]} for r in rows], REJECTIONS_SCHEMA)
    tally = AnnotationTally()
    for a in range(0, kept.num_rows, 23):  # uneven shards, the last one short
        tally.add(kept.slice(a, 23), rej.slice(a, 23))
    tally.add(kept.slice(0, 0), rej.slice(0, 0))  # an empty shard changes nothing
    assert tally.statistics(counters) == stats
    assert stats["relations"] > 0 and stats["rejections_per_rule"] and stats["geometry_audit"]["contact"] > 0
