"""Stratified audit sampler: strata, buckets, determinism, batch files, corpus checks."""

from __future__ import annotations

import collections

import pyarrow as pa
import pytest

from relate.audit.sampler import (AuditSampleConfig, bucket_of, family_of, load_audit_batch, relation_table,
                                  sample_audit_batch, verify_batch, write_audit_batch)
from relate.config import ConfigError, load_config
from relate.schema import CORPUS_SCHEMA, SchemaError, to_table

_BOX = dict(x1=1.0, y1=1.0, x2=5.0, y2=5.0, category="thing", is_person=False, is_body_part=False)


def _corpus(spec: dict[str, int], n_images: int = 7, passes=("semantic", "spatial"), gates=("kept", "swapped")):
    """``spec`` maps predicate -> total count, spread round-robin over the images; pass and gate
    alternate so every predicate lands in several strata."""
    rels: list[list[dict]] = [[] for _ in range(n_images)]
    j = 0
    for pred, count in spec.items():
        for _ in range(count):
            rels[j % n_images].append({"subject": 0, "object": 1, "predicate": pred, "pass": passes[j % len(passes)],
                                       "gate": gates[(j // 2) % len(gates)], "score": None})
            j += 1
    rows = [dict(image_id=f"img{i:03d}", uri=f"/x/img{i:03d}.png", width=10, height=10, source="t", split=
                 ("train", "val")[i % 2], boxes=[_BOX, _BOX], relations=r) for i, r in enumerate(rels)]
    return to_table(rows, CORPUS_SCHEMA, table="fixture")


SPEC = {"left of": 501, "holding": 60, "Above": 49, "floating by": 3}


def test_family_lexicon_user_map_and_other():
    assert family_of("Left Of") == "spatial"
    assert family_of("  hidden   behind ") == "depth"
    assert family_of("floating by") == "other"
    assert family_of("Floating  By", {"floating by": "motion"}) == "motion"
    assert family_of("left of", {"left of": "layout"}) == "layout"  # the user map wins
    assert family_of("left of", use_lexicon=False) == "other"


@pytest.mark.parametrize("count,bucket", [(0, "rare"), (49, "rare"), (50, "common"), (500, "common"),
                                          (501, "frequent")])
def test_bucket_boundaries(count, bucket):
    assert bucket_of(count) == bucket


def test_relation_table_strata_and_counts():
    rel = relation_table(_corpus(SPEC), AuditSampleConfig())
    assert rel.num_rows == sum(SPEC.values())
    by_pred = {r["predicate"]: (r["family"], r["bucket"]) for r in rel.to_pylist()}
    assert by_pred == {"left of": ("spatial", "frequent"), "holding": ("action", "common"),
                       "Above": ("spatial", "rare"), "floating by": ("other", "rare")}
    ids = rel.column("item_id").to_pylist()
    assert len(set(ids)) == len(ids)
    row = rel.to_pylist()[0]
    assert row["stratum"] == f"pass={row['pass']}|gate={row['gate']}|family={row['family']}|bucket={row['bucket']}"


def test_sample_caps_each_stratum_and_is_deterministic():
    corpus = _corpus(SPEC)
    cfg = AuditSampleConfig(seed=3, per_stratum=4)
    batch = sample_audit_batch(corpus, cfg)
    per = collections.Counter(batch.items.column("stratum").to_pylist())
    assert set(per) == set(batch.corpus_strata)
    for s, n in per.items():
        assert n == min(4, batch.corpus_strata[s])
    assert sum(batch.corpus_strata.values()) == sum(SPEC.values())
    assert batch.items.column("position").to_pylist() == list(range(batch.items.num_rows))
    # Same seed on a reordered corpus: the same items in the same order.
    shuffled = corpus.take(pa.array(list(reversed(range(corpus.num_rows)))))
    again = sample_audit_batch(shuffled, cfg)
    assert again.items.column("item_id").to_pylist() == batch.items.column("item_id").to_pylist()
    assert again.fingerprint == batch.fingerprint and again.corpus_strata == batch.corpus_strata
    other = sample_audit_batch(corpus, AuditSampleConfig(seed=4, per_stratum=4))
    assert set(other.items.column("item_id").to_pylist()) != set(batch.items.column("item_id").to_pylist())
    # The display order interleaves strata rather than listing them as blocks.
    strata = batch.items.column("stratum").to_pylist()
    assert strata != sorted(strata)


def test_fewer_strata_and_split_filter():
    corpus = _corpus(SPEC)
    batch = sample_audit_batch(corpus, AuditSampleConfig(strata=("family",), per_stratum=2, split="val"))
    assert set(batch.corpus_strata) == {"family=spatial", "family=action", "family=other"}
    assert all(i.split(":")[0] in {"img001", "img003", "img005"} for i in batch.items.column("item_id").to_pylist())


@pytest.mark.parametrize("suffix", [".json", ".parquet"])
def test_batch_round_trip(tmp_path, suffix):
    batch = sample_audit_batch(_corpus(SPEC), AuditSampleConfig(per_stratum=2, family_map={"floating by": "motion"}))
    path = write_audit_batch(batch, tmp_path / f"b{suffix}")
    back = load_audit_batch(path)
    assert back.items.to_pylist() == batch.items.to_pylist()
    assert back.corpus_strata == batch.corpus_strata and back.fingerprint == batch.fingerprint
    assert back.config == batch.config
    assert any("family=motion" in s for s in back.corpus_strata)


def test_verify_batch_refuses_a_changed_corpus():
    batch = sample_audit_batch(_corpus(SPEC), AuditSampleConfig(per_stratum=2))
    assert verify_batch(batch, _corpus(SPEC)) == batch.corpus_strata
    with pytest.raises(ValueError, match="does not match the audit batch"):
        verify_batch(batch, _corpus({**SPEC, "holding": 61}))


def test_bad_inputs_are_named(tmp_path):
    with pytest.raises(ConfigError, match="strata"):
        load_config(AuditSampleConfig, overrides=["strata=[pass, colour]"])
    with pytest.raises(ConfigError, match="rare_below"):
        load_config(AuditSampleConfig, overrides=["rare_below=600"])
    with pytest.raises(ConfigError, match="per_stratum"):
        load_config(AuditSampleConfig, overrides=["per_stratum=0"])
    with pytest.raises(SchemaError, match="relations"):
        relation_table(pa.table({"image_id": ["a"]}), AuditSampleConfig())
    with pytest.raises(ValueError, match="no relations"):
        sample_audit_batch(_corpus({}), AuditSampleConfig())
    with pytest.raises(ValueError, match="suffix"):
        write_audit_batch(sample_audit_batch(_corpus(SPEC), AuditSampleConfig()), tmp_path / "b.csv")
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(SchemaError, match="not an audit batch"):
        load_audit_batch(tmp_path / "x.json")


def test_main_reads_the_corpus_folder_and_writes_the_batch(tmp_path, capsys):
    import pyarrow.parquet as pq

    from relate.audit.sampler import main

    (tmp_path / "run" / "corpus" / "train").mkdir(parents=True)
    pq.write_table(_corpus(SPEC), tmp_path / "run" / "corpus" / "train" / "part-0.parquet")
    batch = main(AuditSampleConfig(corpus=str(tmp_path / "run"), out=str(tmp_path / "b.parquet"), per_stratum=1))
    assert load_audit_batch(tmp_path / "b.parquet").items.to_pylist() == batch.items.to_pylist()
    assert f"wrote {batch.items.num_rows} items" in capsys.readouterr().out
    with pytest.raises(ValueError, match="corpus=DIR and out=FILE"):
        main(AuditSampleConfig())
