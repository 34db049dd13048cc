"""The whole relation model, its checkpoint folder and the Python API on a tiny random model."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F
import yaml
from safetensors.torch import load_file, save_file

from _browser import in_ci
from relate.api import RelationPredictor, load_model
from relate.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from relate.losses import LossConfig, PredicateSpace, force_mask, relation_objective
from relate.model import Calibration, RelationModelConfig, create_relation_model, relation_score
from relate.model.config import BackboneConfig, DeformableConfig, SamplerConfig
from relate.text.bank import TextBank

D = 384  # the packaged MiniLM's width, so set_vocabulary can embed real strings


def tiny_cfg(**kw) -> RelationModelConfig:
    base = dict(backbone=BackboneConfig(name="vit_tiny_patch16_224", img_size=32, depth=2, taps=[-2, -1], patch_size=8),
                dim=32, heads=4, text_dim=D, fourier_bands=4, geometry_hidden=16, scene_grid=2, gate_hidden=8,
                pair_layers=1, joint_layers=1, dropout=0.0, deformable=DeformableConfig(heads=4, points=2),
                sampler=SamplerConfig(geometry_keep=12, learned_keep=6))
    base.update(kw)
    return RelationModelConfig(**base)


def random_bank(strings, seed=0) -> TextBank:
    g = torch.Generator().manual_seed(seed)
    return TextBank(strings=tuple(strings), matrix=F.normalize(torch.randn(len(strings), D, generator=g), dim=-1).numpy(),
                    encoder="minilm")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return create_relation_model(tiny_cfg()).eval()


def _batch():
    torch.manual_seed(1)
    images = torch.rand(2, 3, 32, 32)
    boxes = torch.tensor([[[0, 0, 12, 12], [8, 8, 30, 28], [16, 2, 31, 14], [0, 0, 0, 0]],
                          [[2, 2, 20, 30], [10, 4, 30, 20], [0, 0, 0, 0], [0, 0, 0, 0]]], dtype=torch.float32)
    valid = torch.tensor([[True, True, True, False], [True, True, False, False]])
    return images, boxes, valid


def test_forward_backward_finite_and_masks_accepted(model):
    images, boxes, valid = _batch()
    bank = torch.from_numpy(random_bank(list("abcde")).matrix)
    m = create_relation_model(tiny_cfg()).train()
    out = m(images, boxes, valid, bank)
    assert out.l_pred.shape == (2, 6, 5) and torch.isfinite(out.l_pred).all()
    kept = out.pairs[out.sampled.valid]
    assert (kept[:, 0] != kept[:, 1]).all() and out.sampled.valid[1].sum() == 2  # 2 boxes -> 2 ordered pairs
    out.l_pred.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)
    masks = torch.zeros(2, 4, 32, 32)
    masks[:, 0, :12, :12] = 1
    masks[:, 1, 8:28, 8:30] = 1
    masks[0, 2, 2:14, 16:31] = 1
    with torch.no_grad():
        outm = model(images, boxes, valid, bank, masks=masks)
    assert torch.isfinite(outm.l_pred).all()
    with pytest.raises(ValueError, match="text bank"):
        model(images, boxes, valid, bank[:, :10])


def _objective_inputs():
    va = 4
    bank = random_bank(["left of", "to the left of", "right of", "near"])
    rels = torch.tensor([[[0, 1, 0], [2, 0, 2], [-1, -1, -1]], [[1, 0, 3], [-1, -1, -1], [-1, -1, -1]]])
    cats = torch.tensor([[0, 1, 0, -1], [1, 0, -1, -1]])
    inverse = torch.zeros(va, va, dtype=torch.bool)
    inverse[0, 2] = inverse[2, 0] = inverse[1, 2] = inverse[2, 1] = True
    space = PredicateSpace(torch.tensor([0, 0, 1, 2]), inverse, torch.tensor([1.0, 1.0, 1.0, 0.0]),
                           torch.zeros(va, va), torch.eye(va) + 0.5 * (1 - torch.eye(va)), torch.arange(va),
                           F.normalize(torch.randn(2, D), dim=-1), torch.full((2, 2), 0.5))
    return bank, rels, cats, space


def test_objective_runs_and_every_term_is_finite():
    images, boxes, valid = _batch()
    m = create_relation_model(tiny_cfg()).train()
    bank, rels, cats, space = _objective_inputs()
    out = m(images, boxes, valid, bank.tensor(), force=force_mask(rels, 4))
    terms = relation_objective(out, rels, cats, valid, space, LossConfig())
    assert set(terms) == {"infonce", "sigmoid", "swap", "background", "grounding", "geometry", "relatedness", "total"}
    assert all(torch.isfinite(v) for v in terms.values()) and terms["infonce"] > 0
    terms["total"].backward()


def test_checkpoint_roundtrip_and_strict_errors(model, tmp_path):
    bank = random_bank(["on", "under", "near"])
    folder = save_checkpoint(tmp_path / "ck", model, bank)
    ck = load_checkpoint(folder)
    images, boxes, valid = _batch()
    with torch.no_grad():
        a = model(images, boxes, valid, bank.tensor()).l_pred
        b = ck.model(images, boxes, valid, ck.bank.tensor()).l_pred
    assert torch.equal(a, b) and not ck.calibration.fitted
    assert json.loads((folder / "calibration.json").read_text()) == {"a": None, "b": None}
    # a missing key (in a checkpoint without file digests, which would refuse the edited file first)
    sd = load_file(str(folder / "model.safetensors"))
    save_file({k: v for k, v in sd.items() if k != "head.beta"}, str(folder / "model.safetensors"))
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "sha256"}))
    with pytest.raises(CheckpointError, match="missing.*head.beta"):
        load_checkpoint(folder)
    # an unexpected key (a module created by a flag the config does not have)
    save_checkpoint(folder, model, bank)
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    cfg["deformable"]["enabled"] = False
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(CheckpointError, match="unexpected.*deformable"):
        load_checkpoint(folder)
    # a bank that is not the one the checkpoint was saved with
    save_checkpoint(folder, model, bank)
    random_bank(["on", "under", "near"], seed=5).save(folder / "text_bank.npz")
    with pytest.raises(CheckpointError, match="bank"):
        load_checkpoint(folder)


def _image_and_boxes():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 255, size=(48, 64, 3), dtype=np.uint8)
    boxes = np.array([[2, 2, 30, 30], [20, 10, 60, 44], [40, 2, 62, 20]], np.float32)
    return img, boxes


def test_api_predict_threshold_decompose_and_parity(model, tmp_path):
    folder = save_checkpoint(tmp_path / "ck", model, random_bank(["on", "under", "near", "holding"]))
    pred = load_model(folder)
    img, boxes = _image_and_boxes()
    trip = pred.predict(img, boxes, topk=5)
    assert len(trip) == 5 and trip == sorted(trip, key=lambda t: -t["score"])
    assert {"subject", "object", "predicate", "score", "spatial_score", "semantic_score"} <= set(trip[0])
    with pytest.raises(ValueError, match="calibrat"):
        pred.predict(img, boxes, threshold=0.5)
    graphs = pred.predict(img, boxes, topk=3, decompose=True)
    assert set(graphs) == {"layout", "content"} and len(graphs["layout"]) == 3
    # parity: API triplet == Eq. 6 on the raw model outputs == evaluation table row
    raw = pred.score_images([img], [boxes])[0]
    s, o, p = trip[0]["subject"], trip[0]["object"], pred.vocabulary.index(trip[0]["predicate"])
    row = int(np.flatnonzero((raw.pairs[:, 0] == s) & (raw.pairs[:, 1] == o))[0])
    direct = relation_score(raw.l_pred[row], raw.l_pair[row], model.cfg.pair_weight)[p]
    assert trip[0]["score"] == pytest.approx(float(direct), rel=1e-6)
    img_path = tmp_path / "im.png"
    __import__("PIL.Image", fromlist=["Image"]).fromarray(img).save(img_path)
    table = pa.table({"image_id": ["x"], "uri": [str(img_path)],
                      "boxes": [[dict(x1=float(b[0]), y1=float(b[1]), x2=float(b[2]), y2=float(b[3])) for b in boxes]]})
    ev = pred.predict_table(table, per_pair=1).column("triplets").to_pylist()[0]
    match = [t for t in ev if t["subject"] == s and t["object"] == o]
    assert match[0]["predicate"] == trip[0]["predicate"] and match[0]["score"] == pytest.approx(trip[0]["score"], rel=1e-5)
    # a calibrated predictor filters by threshold
    cal = RelationPredictor(model, pred.bank, Calibration(1.0, -100.0))
    assert cal.predict(img, boxes, threshold=0.5) == []


def test_api_masks_in_place_of_boxes_and_bad_regions(model, tmp_path):
    pred = RelationPredictor(model, random_bank(["on", "near"]))
    img, boxes = _image_and_boxes()
    masks = np.zeros((3, 48, 64), bool)
    for m, (x1, y1, x2, y2) in zip(masks, boxes.astype(int)):
        m[y1:y2, x1:x2] = True
    assert len(pred.predict(img, masks, topk=4)) == 4
    with pytest.raises(ValueError, match="inverted"):
        pred.predict(img, np.array([[10, 10, 5, 20], [0, 0, 5, 5]]))


def test_set_vocabulary_embeds_unseen_strings_with_the_checkpoint_encoder(model):
    pred = RelationPredictor(model, random_bank(["on", "near"]))
    img, boxes = _image_and_boxes()
    pred.set_vocabulary(["perched upon", "adjacent to", "clutching"])
    trip = pred.predict(img, boxes, topk=9)
    assert {t["predicate"] for t in trip} <= {"perched upon", "adjacent to", "clutching"}
    once = pred.predict(img, boxes, vocabulary=["perched upon"], topk=3)
    assert all(t["predicate"] == "perched upon" for t in once)


def test_actor_scores_a_plain_batch_like_ray_data_would_pass_it(model, tmp_path):
    from actors.relation import RelationPredictorActor

    folder = save_checkpoint(tmp_path / "ck", model, random_bank(["on", "near"]))
    actor = RelationPredictorActor(str(folder), per_pair=1)
    img, boxes = _image_and_boxes()
    batch = {"image_id": np.array(["a", "b"], dtype=object), "image": [img, img],
             "boxes": [[dict(x1=float(b[0]), y1=float(b[1]), x2=float(b[2]), y2=float(b[3])) for b in boxes], boxes]}
    out = actor(batch)
    assert out["image_id"].tolist() == ["a", "b"]
    a, b = out["triplets"]
    assert len(a) == 6  # 3 boxes -> 6 ordered pairs, one predicate each
    key = lambda t: (t["subject"], t["object"])  # noqa: E731
    for x, y in zip(sorted(a, key=key), sorted(b, key=key)):  # dict boxes and array boxes agree
        assert key(x) == key(y) and x["score"] == pytest.approx(y["score"], abs=1e-5)
    with pytest.raises(KeyError, match="boxes"):
        actor({"image_id": np.array(["a"])})


def test_fused_inference_scoring_equals_the_training_path(model):
    """Without gradients the head folds Eq. 2's mixing into one product against the scoring matrix;
    it must give the training path's logits, and its lazy cosines the same values."""
    images, boxes, valid = _batch()
    bank = torch.from_numpy(random_bank(list("abcdefg")).matrix)
    with torch.enable_grad():
        slow = model(images, boxes, valid, bank).scores
    with torch.no_grad():
        fast = model(images, boxes, valid, bank, scoring=model.head.scoring_matrix(bank)).scores
    torch.testing.assert_close(fast.logits, slow.logits.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast.mixed, slow.mixed.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.cos_spa, slow.cos_spa.detach(), rtol=1e-5, atol=1e-6)
    sm = model.head.scoring_matrix(bank)
    assert sm.weight_t.shape == (2 * D, 7) and sm.weight_t.is_contiguous() and sm.num_predicates == 7


def test_partial_sort_matches_a_full_stable_sort():
    from relate.api import _top_columns, _top_flat

    rng = np.random.default_rng(3)
    for trial in range(30):
        score = rng.integers(0, 5, size=(int(rng.integers(1, 6)), int(rng.integers(1, 9)))).astype(np.float64)
        k = int(rng.integers(1, score.size + 3))
        full = np.argsort(-score, axis=None, kind="stable")[:k]
        assert _top_flat(score, k).tolist() == full.tolist(), (trial, score, k)
        per = int(rng.integers(1, score.shape[1] + 2))
        cols = np.argsort(-score, axis=1, kind="stable")[:, :per]
        assert _top_columns(score, per).tolist() == cols.tolist(), (trial, score, per)
    assert _top_flat(np.ones((2, 2)), 0).size == 0


def test_branch_logits_at_cells_equal_the_full_decomposition(model):
    pred = RelationPredictor(model, random_bank(["on", "under", "near", "holding", "behind"]))
    img, boxes = _image_and_boxes()
    raw = pred.score_images([img], [boxes])[0]
    rows, cols = np.array([0, 1, 1, 2]), np.array([4, 0, 3, 2])
    spa, sem = raw.branch_logits(rows, cols)
    np.testing.assert_allclose(spa, raw.l_spa[rows, cols], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sem, raw.l_sem[rows, cols], rtol=1e-5, atol=1e-6)
    trip = pred.predict(img, boxes, topk=4)
    graphs = pred.predict(img, boxes, topk=4, decompose=True)
    # the spatial score attached to a triplet is the layout graph's own score for that cell
    layout = {(t["subject"], t["object"], t["predicate"]): t["score"] for t in graphs["layout"]}
    for t in trip:
        key = (t["subject"], t["object"], t["predicate"])
        if key in layout:
            assert t["spatial_score"] == pytest.approx(layout[key], rel=1e-5)


def test_vocabulary_cache_add_drop_and_default_kept(model):
    pred = RelationPredictor(model, random_bank(["on", "under"]))
    key = pred.add_vocabulary([" near ", "far from"])
    assert key == ("near", "far from") and pred.has_vocabulary(key)
    assert pred.vocabulary_strings(key) == key and pred.vocabulary_strings() == ("on", "under")
    assert pred.drop_vocabulary(key) and not pred.has_vocabulary(key)
    assert not pred.drop_vocabulary(["on", "under"]) and pred.has_vocabulary(["on", "under"])
    with pytest.raises(ValueError, match="at least one"):
        pred.add_vocabulary([])


def test_ddp_with_unused_parameter_search_reaches_every_head_parameter(tmp_path):
    """The trainer wraps the model in DDP(find_unused_parameters=True), which finds the output's
    tensors by walking dataclass fields: a score holder it cannot walk hides tau and beta, DDP
    marks them unused, and backward fails with 'marked ready twice'."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        raw = create_relation_model(tiny_cfg()).train()
        ddp = DistributedDataParallel(raw, find_unused_parameters=True)
        images, boxes, valid = _batch()
        bank, rels, cats, space = _objective_inputs()
        bank = bank.tensor()
        for _ in range(2):  # the failure shows on the step after the first
            out = ddp(images, boxes, valid, bank, force=force_mask(rels, valid.shape[1]))
            relation_objective(out, rels, cats, valid, space, LossConfig())["total"].backward()
        assert raw.head.beta.grad is not None and raw.head.log_tau.grad is not None
    finally:
        dist.destroy_process_group()


def test_packed_cpu_scoring_equals_the_blas_product(model):
    """On CPU the cached vocabulary is also packed for oneDNN's linear; its logits must equal the
    plain BLAS product (same fp32 values up to summation order) for any number of pairs."""
    if not torch.backends.mkldnn.is_available() and not in_ci():  # under CI its absence is a failure
        pytest.skip("torch built without oneDNN (fails instead when CI is set)")
    bank = torch.from_numpy(random_bank([f"p{i}" for i in range(37)]).matrix)
    packed, plain = model.head.scoring_matrix(bank), model.head.scoring_matrix(bank, pack=False)
    assert packed.packed is not None and plain.packed is None
    beta = torch.tensor(-1.5)
    for rows in (1, 5, 128, 300):
        z = torch.randn(rows, 2 * D) * 10
        expect = z.double() @ plain.weight_t.double() - 1.5
        got, blas = packed.logits(z, beta), plain.logits(z, beta)
        assert got.shape == (rows, 37)
        torch.testing.assert_close(got.double(), expect, rtol=0, atol=1e-4)
        torch.testing.assert_close(got, blas, rtol=0, atol=1e-4)
    z = torch.randn(2, 4, 2 * D)  # leading dims kept
    assert packed.logits(z, beta).shape == (2, 4, 37)


def test_scoring_matrix_mismatch_is_an_error(model):
    images, boxes, valid = _batch()
    bank = torch.from_numpy(random_bank(list("abcdefg")).matrix)
    other = model.head.scoring_matrix(bank[:5])
    with torch.no_grad(), pytest.raises(ValueError, match="5 predicates, bank has 7"):
        model(images, boxes, valid, bank, scoring=other)
    with torch.no_grad(), pytest.raises(TypeError, match="ScoringMatrix"):
        model(images, boxes, valid, bank, scoring=other.weight_t)
