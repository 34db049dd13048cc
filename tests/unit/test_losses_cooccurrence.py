"""P(q|p) for the Eq. 3 discount: counting multiply-annotated pairs, the Elkan-Noto corrected
estimate, and the sparse file format."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from train_jobs.cooccurrence import estimate_cooccurrence, load_cooccurrence, multi_annotated_sets, save_cooccurrence


def _rel(s, o, p):
    return {"subject": s, "object": o, "predicate": p}


def test_multi_annotated_sets_keeps_only_pairs_with_two_predicates():
    table = pa.table({"relations": [[_rel(0, 1, "on"), _rel(0, 1, "touching"), _rel(1, 0, "under")],
                                    [_rel(0, 1, "on"), _rel(0, 1, "on")]]})
    assert multi_annotated_sets(table) == [{"on", "touching"}]


def test_estimate_orders_cells_by_co_annotation_and_corrects_upward():
    strings = ["on", "touching", "near", "holding"]
    emb = np.eye(4, dtype=np.float32)
    sets = [{"on", "touching"}] * 6 + [{"on", "near"}] * 2 + [{"on", "holding"}] * 1 + [{"touching", "near"}] * 1
    mat, c = estimate_cooccurrence(sets, strings, emb, neighbours=0, cap=0.95)
    p = mat.toarray()
    assert 0 < c <= 1  # Elkan-Noto label frequency
    assert p[0, 1] > p[0, 2] > p[0, 3] > 0
    rate = 6 / 9  # "touching" stated on 6 of the 9 multiply-annotated pairs carrying "on"
    assert p[0, 1] >= rate - 0.1  # dividing by c corrects the stated rate upward, not down
    assert p.max() <= 0.95 and np.all(np.diag(p) == 0)


def test_no_multi_annotation_gives_an_empty_matrix_and_roundtrip(tmp_path):
    mat, c = estimate_cooccurrence([], ["a", "b"], np.eye(2), neighbours=1)
    assert mat.nnz == 0 and np.isnan(c)
    mat, _ = estimate_cooccurrence([{"a", "b"}] * 3 + [{"a", "c"}], ["a", "b", "c"], np.eye(3), neighbours=0)
    path = save_cooccurrence(tmp_path / "p.npz", mat, ["a", "b", "c"])
    strings, back = load_cooccurrence(path)
    assert strings == ["a", "b", "c"] and np.allclose(back.toarray(), mat.toarray())
    (tmp_path / "p.npz.strings.json").write_text('["a"]')
    with pytest.raises(ValueError, match="does not fit"):
        load_cooccurrence(path)
