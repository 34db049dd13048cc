"""relate.api on CUDA: ``load_model(folder, device="cuda")`` predicts what ``device="cpu"`` predicts.

One tiny checkpoint (random weights) whose text encoder is a 2-layer random BERT saved next to it
(``hf:<folder>``), so request vocabularies are embedded for real with no model hub and no MiniLM
package. Every image here has at most 5 regions, so all ordered pairs are kept on both devices and
all P x V cells are compared. Scores are Eq. 6 sigmoids: equal within 1e-4 (a logit difference of
4e-4 at most moves a sigmoid by 1e-4; the fp32 parity bounds of test_cuda_model are below that for
l_pred + l_pair at this width), and the order of the triplets equal up to swaps of scores closer
than twice that.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from _gpu_common import save_tiny_hf_encoder, tiny_model, unit_rows

SCORE_TOL = 1e-4
VOCAB = ("on", "under", "near", "holding", "behind", "above")
REQUEST = ("perched upon", "adjacent to", "clutching", "riding", "to the left of")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from relate.checkpoint import save_checkpoint
    from relate.text.bank import TextBank

    root = tmp_path_factory.mktemp("cuda_api")
    encoder = save_tiny_hf_encoder(root / "encoder", dim=32)
    bank = TextBank(VOCAB, unit_rows(len(VOCAB), 32, seed=11), encoder)
    return save_checkpoint(root / "ck", tiny_model(seed=2, text_dim=32).eval(), bank)


@pytest.fixture(scope="module")
def predictors(checkpoint, dev):
    from relate.api import load_model

    return load_model(checkpoint, device="cpu"), load_model(checkpoint, device=str(dev), batch_size=2)


def _images():
    """Three images of different sizes with 5, 3 and 2 regions (pixel boxes)."""
    rng = np.random.default_rng(0)
    out = []
    for (h, w), n in (((48, 64), 5), ((40, 40), 3), ((72, 50), 2)):
        img = rng.integers(0, 255, size=(h, w, 3), dtype=np.uint8)
        xy = rng.uniform(0, 0.6, size=(n, 2)) * [w, h]
        wh = rng.uniform(0.2, 0.4, size=(n, 2)) * [w, h]
        out.append((img, np.concatenate([xy, np.minimum(xy + wh, [w, h])], 1).astype(np.float32)))
    return out


def _assert_same_triplets(got: list[dict], ref: list[dict], what: str) -> None:
    key = lambda t: (t["subject"], t["object"], t["predicate"])  # noqa: E731
    assert len(got) == len(ref), f"{what}: {len(got)} triplets vs {len(ref)}"
    by_key = {key(t): t for t in ref}
    assert set(by_key) == {key(t) for t in got}, f"{what}: different triplets"
    for t in got:
        r = by_key[key(t)]
        for field in ("score", "spatial_score", "semantic_score"):
            assert abs(t[field] - r[field]) <= SCORE_TOL, f"{what}: {key(t)} {field} {t[field]:.7f} vs {r[field]:.7f}"
    # the device's order is the reference's order up to swaps of near-equal scores
    ref_scores = [by_key[key(t)]["score"] for t in got]
    for k in range(len(ref_scores) - 1):
        assert ref_scores[k] >= max(ref_scores[k + 1:]) - 2 * SCORE_TOL, f"{what}: order differs at rank {k}"


def test_model_and_vocabulary_caches_live_on_the_device(predictors, dev):
    _, pred = predictors
    assert all(p.device.type == dev.type for p in pred.model.parameters())
    assert all(b.device.type == dev.type for b in pred.model.buffers())
    pred.add_vocabulary(REQUEST)
    for strings in (VOCAB, REQUEST):
        bank, mat, alpha, scoring, bank_np = pred._banks[tuple(strings)]
        assert mat.device.type == dev.type and mat.dtype == torch.float32 and mat.shape == (len(strings), 32)
        assert alpha.device.type == dev.type and alpha.shape == (len(strings),)
        assert scoring.weight_t.device.type == dev.type and scoring.num_predicates == len(strings)
        if dev.type == "cuda":
            assert scoring.packed is None
        assert isinstance(bank_np, np.ndarray) and bank_np.shape == (len(strings), 32)


@pytest.mark.parametrize("form", ["boxes", "box_dicts", "masks", "decompose"])
def test_predict_equals_the_cpu_predictor(predictors, form):
    cpu, dut = predictors
    for i, (img, boxes) in enumerate(_images()):
        regions, kw = boxes, {}
        if form == "box_dicts":
            regions = [dict(x1=float(b[0]), y1=float(b[1]), x2=float(b[2]), y2=float(b[3])) for b in boxes]
        elif form == "masks":
            regions = np.zeros((len(boxes), *img.shape[:2]), bool)
            for m, (x1, y1, x2, y2) in zip(regions, boxes.astype(int)):
                m[y1:y2 + 1, x1:x2 + 1] = True
        elif form == "decompose":
            kw = {"decompose": True}
        cells = len(boxes) * (len(boxes) - 1) * len(VOCAB)  # every cell: no top-k boundary to fall on
        got, ref = dut.predict(img, regions, topk=cells, **kw), cpu.predict(img, regions, topk=cells, **kw)
        if form == "decompose":
            for part in ("layout", "content"):
                _assert_same_triplets(got[part], ref[part], f"image {i}, {part}")
        else:
            assert len(ref) == cells
            _assert_same_triplets(got, ref, f"image {i}, {form}")


def test_request_vocabulary_strings_are_embedded_and_scored_on_the_device(predictors):
    """A vocabulary passed as strings: embedded by the checkpoint's encoder, cached on the device."""
    cpu, dut = predictors
    img, boxes = _images()[0]
    cells = 20 * len(REQUEST)
    got = dut.predict(img, boxes, vocabulary=list(REQUEST), topk=cells)
    assert {t["predicate"] for t in got} == set(REQUEST)
    _assert_same_triplets(got, cpu.predict(img, boxes, vocabulary=list(REQUEST), topk=cells), "request vocabulary")
    # the default vocabulary is untouched by the request
    _assert_same_triplets(dut.predict(img, boxes, topk=20 * len(VOCAB)), cpu.predict(img, boxes, topk=20 * len(VOCAB)),
                          "default vocabulary after a request")


def test_batched_scores_and_evaluation_table_equal_the_cpu(predictors, tmp_path):
    """score_images batches images of different sizes and box counts (batch_size 2 on the device,
    8 on the CPU); predict_table reads the same images from files."""
    import pyarrow as pa
    from PIL import Image

    cpu, dut = predictors
    images = _images()
    got = dut.score_images([im for im, _ in images], [b for _, b in images])
    ref = cpu.score_images([im for im, _ in images], [b for _, b in images])
    for i, (g, r) in enumerate(zip(got, ref)):
        assert np.array_equal(g.pairs, r.pairs) or sorted(map(tuple, g.pairs)) == sorted(map(tuple, r.pairs))
        order_g = np.lexsort((g.pairs[:, 1], g.pairs[:, 0]))
        order_r = np.lexsort((r.pairs[:, 1], r.pairs[:, 0]))
        for name, tol in (("l_pred", 1e-3), ("l_pair", 2.5e-4), ("z_spa", 2.5e-4), ("z_sem", 2.5e-4)):
            np.testing.assert_allclose(getattr(g, name)[order_g], getattr(r, name)[order_r], rtol=0, atol=tol,
                                       err_msg=f"image {i}: {name}")
        assert g.tau == pytest.approx(r.tau, rel=1e-6) and g.beta == pytest.approx(r.beta, rel=1e-6)
    rows = []
    for i, (img, boxes) in enumerate(images):
        Image.fromarray(img).save(tmp_path / f"{i}.png")
        rows.append({"image_id": str(i), "uri": str(tmp_path / f"{i}.png"),
                     "boxes": [dict(x1=float(b[0]), y1=float(b[1]), x2=float(b[2]), y2=float(b[3])) for b in boxes]})
    table = pa.Table.from_pylist(rows)
    a = dut.predict_table(table, per_pair=2).to_pylist()
    b = cpu.predict_table(table, per_pair=2).to_pylist()
    assert [r["image_id"] for r in a] == [r["image_id"] for r in b] == ["0", "1", "2"]
    for ra, rb in zip(a, b):
        # per pair the two best predicates; a near-tie for second place may swap, so compare the best ones
        best = lambda rs: {(t["subject"], t["object"]): t for t in rs}  # noqa: E731
        first_a = best(sorted(ra["triplets"], key=lambda t: t["score"]))
        first_b = best(sorted(rb["triplets"], key=lambda t: t["score"]))
        assert set(first_a) == set(first_b)
        for k in first_a:
            assert abs(first_a[k]["score"] - first_b[k]["score"]) <= SCORE_TOL, (ra["image_id"], k)


def test_repeated_predictions_on_the_device_agree(predictors):
    """The cached vocabulary is reused: a second call gives the same triplets (no state drifts)."""
    _, dut = predictors
    img, boxes = _images()[1]
    a, b = dut.predict(img, boxes, topk=10), dut.predict(img, boxes, topk=10)
    key = lambda t: (t["subject"], t["object"], t["predicate"])  # noqa: E731
    assert [key(t) for t in a] == [key(t) for t in b]
    assert max(abs(x["score"] - y["score"]) for x, y in zip(a, b)) <= 1e-6
