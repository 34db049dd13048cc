import math

import pyarrow as pa
import pytest

from relate.data.synthetic import SyntheticConfig, make_scene
from relate.schema import (CORPUS_SCHEMA, PREDICTIONS_SCHEMA, SchemaError, to_table, validate_corpus,
                           validate_predictions)


def _rows(n=3):
    cfg = SyntheticConfig()
    rows = []
    for i in range(n):
        s = make_scene(i, cfg)
        rows.append(dict(image_id=s.image_id, uri=f"/tmp/{s.image_id}.png", width=s.width, height=s.height,
                         source="synthetic", split="train", boxes=s.boxes,
                         relations=[dict(subject=r["subject"], object=r["object"], predicate=r["predicate"],
                                         gate="kept", score=None, **{"pass": "human"}) for r in s.relations]))
    return rows


def test_valid_corpus_passes():
    validate_corpus(to_table(_rows(), CORPUS_SCHEMA))


@pytest.mark.parametrize("mutate, field, needle", [
    (lambda r: r["boxes"][1].update(x1=-3.0), "boxes.x1", "negative"),
    (lambda r: r["boxes"][2].update(x2=r["boxes"][2]["x1"] - 1), "boxes.x2", "inverted"),
    (lambda r: r["boxes"][0].update(y1=math.nan), "boxes.y1", "NaN"),
    (lambda r: r["relations"][0].update(object=99), "relations.object", "out of range"),
    (lambda r: r["relations"][1].update(object=r["relations"][1]["subject"]), "relations", "self-loop"),
    (lambda r: r["relations"][0].update(predicate="  "), "relations.predicate", "empty"),
    (lambda r: r["relations"][0].update(score=math.nan), "relations.score", "NaN"),
    (lambda r: r["relations"][0].update(**{"pass": "guess"}), "relations.pass", "one of"),
    (lambda r: r.update(width=0), "width", "positive"),
])
def test_bad_record_names_field_and_row(mutate, field, needle):
    rows = _rows()
    mutate(rows[2])
    with pytest.raises(SchemaError) as exc:
        validate_corpus(to_table(rows, CORPUS_SCHEMA), name="corpus.parquet")
    msg = str(exc.value)
    assert "corpus.parquet row 2" in msg and rows[2]["image_id"] in msg
    assert field in msg and needle in msg


def test_list_position_is_named():
    rows = _rows()
    rows[1]["boxes"][3]["x1"] = -1.0
    with pytest.raises(SchemaError, match=r"row 1 .*boxes\.x1\[3\]"):
        validate_corpus(to_table(rows, CORPUS_SCHEMA))


def test_missing_field_and_wrong_type_are_clear():
    rows = _rows(1)
    del rows[0]["boxes"]
    with pytest.raises(SchemaError, match=r"row 0: missing field\(s\) \['boxes'\]"):
        to_table(rows, CORPUS_SCHEMA)
    rows = _rows(1)
    rows[0]["width"] = "wide"
    with pytest.raises(SchemaError, match="wrong type"):
        to_table(rows, CORPUS_SCHEMA)


def test_duplicate_image_ids_rejected():
    rows = _rows(2)
    rows[1]["image_id"] = rows[0]["image_id"]
    with pytest.raises(SchemaError, match="duplicate image_id"):
        validate_corpus(to_table(rows, CORPUS_SCHEMA))


def test_predictions_validation():
    good = [dict(image_id="a", triplets=[dict(subject=0, object=1, predicate="on", score=0.5,
                                              spatial_score=0.1, semantic_score=0.2)])]
    validate_predictions(to_table(good, PREDICTIONS_SCHEMA), {"a": 2})
    bad = [dict(image_id="a", triplets=[dict(subject=0, object=4, predicate="on", score=0.5,
                                             spatial_score=None, semantic_score=None)])]
    with pytest.raises(SchemaError, match=r"preds.parquet row 0 .*triplets.object\[0\] = 4"):
        validate_predictions(to_table(bad, PREDICTIONS_SCHEMA), {"a": 2}, name="preds.parquet")
    nan = [dict(image_id="a", triplets=[dict(subject=0, object=1, predicate="on", score=math.nan,
                                             spatial_score=None, semantic_score=None)])]
    with pytest.raises(SchemaError, match="triplets.score.*NaN"):
        validate_predictions(to_table(nan, PREDICTIONS_SCHEMA))
    with pytest.raises(SchemaError, match="missing column"):
        validate_predictions(pa.table({"image_id": ["a"]}))
