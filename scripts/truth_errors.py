"""Where a truth-trained model's best cells go wrong, per family, and what boxes alone would find.

Three readings behind docs/jobs/training.md's "Three causes found by reading what the model gets
wrong":

* ``--work DIR``: a ``train_jobs.learnability`` folder (``--set work_dir=DIR``; it keeps the final
  EMA weights) and the overrides it was trained with. For each of ``--families`` (default
  appearance, depth and containment), the
  false cells among each family's 2 x |truth| best on the held-out split, by concept, by category
  pair, with a body part, and by what does hold on the pair; and the true cells ranked below |truth|.
* ``--boxes N``: without any model, the AP of finding depth and containment pairs from the boxes
  alone (over the first N scenes of the standard world): box overlap over the smaller box (no
  depth where one box all but covers the other) and box cover, each given which boxes are body
  parts, which take no such relation in the world.
* ``--pixels N``: how often one colour comparison orders the depth pairs of the first N scenes,
  given the drawn shapes (at full size and at the model's 96 px) or the boxes alone.
* ``--checkpoint DIR --world ROOT``: the same for any checkpoint folder, on the first ``--images``
  of a world folder's test split; for proximity and spatial it also counts the errors at |truth|
  that the picture's stretch to the square explains.
* ``--checkpoint DIR --world ROOT --depth-margins``: where that checkpoint's depth errors at |truth|
  sit against the world's own visibility rule (``occlusion_visible``): each pair's shared drawn
  pixels over the threshold, reversed directions, body parts, and pairs one box all but covers.
* ``--naming`` with ``--work`` or ``--checkpoint``: how often the model names each box's category,
  its grounding embedding's nearest category name (the object-text grounding of App. B.1, over the
  categories of the scored split), per category and the commonest confusions.
* ``--stretch N``: how many of the world's ``near`` and spatial decisions over the first N scenes
  change when its rules are applied to the boxes as the model receives them: the picture stretched
  to the 96 px square, against one scale for both axes (``model.backbone.keep_aspect``).

    python scripts/truth_errors.py --boxes 400
    python scripts/truth_errors.py --pixels 400
    python scripts/truth_errors.py --stretch 600
    python scripts/truth_errors.py --work /tmp/lw --overrides model.region_pixels=4
    python scripts/truth_errors.py --checkpoint RUN/checkpoint_... --world /tmp/w6k_full --families proximity
    python scripts/truth_errors.py --checkpoint RUN/checkpoint_... --world /tmp/w6k_full --depth-margins
    python scripts/truth_errors.py --work /tmp/lw --overrides model.region_glimpse=16 --naming
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FAMILIES = ("appearance", "depth", "containment")


def box_ceiling(scenes: int) -> dict[str, float]:
    """AP of finding depth and containment pairs from the boxes (and body-part flags) alone."""
    import numpy as np
    from sklearn.metrics import average_precision_score

    from relate import geometry as G
    from relate.data.synthetic import SyntheticConfig, make_scene

    world = SyntheticConfig(coverage="full")
    depth_s, depth_l, cont_s, cont_l = [], [], [], []
    for i in range(scenes):
        sc = make_scene(i, world)
        b = np.array([[x["x1"], x["y1"], x["x2"], x["y2"]] for x in sc.boxes])
        part = np.array([x["is_body_part"] for x in sc.boxes])
        held = sc.true_concepts()
        inter, area = G.intersection_area(b[:, None], b[None]), G.area(b)
        for s in range(len(b)):
            for o in range(len(b)):
                if s == o:
                    continue
                c = held.get((s, o), set())
                cover = max(inter[s, o] / area[s], inter[s, o] / area[o])
                penalty = 1.0 if part[s] or part[o] else 0.0
                depth_l.append(bool(c & {"in_front_of", "behind"}))
                depth_s.append((inter[s, o] / min(area[s], area[o]) if cover < 0.9 else 0.0) - penalty)
                cont_l.append(bool(c & {"inside", "contains"}))
                cont_s.append(inter[s, o] / area[s] + inter[s, o] / area[o] - penalty)
    return {"depth_pair_ap_boxes": float(average_precision_score(depth_l, depth_s)), "depth_pairs": int(sum(depth_l)),
            "containment_pair_ap_boxes": float(average_precision_score(cont_l, cont_s)),
            "containment_pairs": int(sum(cont_l)), "ordered_pairs": len(depth_l)}


def pixel_direction(scenes: int, side: int = 96) -> dict[str, float]:
    """How often one colour comparison orders a depth pair: the mean colour where the two shapes
    overlap against each shape's own visible part (the front one's colour shows there), given the
    drawn shapes at the image's resolution, the same shapes at the model's input ``side``, and the
    boxes alone at ``side`` (what ``relate/model/occlusion.py`` compares). A reading of what the
    pixels hold, not a model: shadows, stripes and same-coloured pairs defeat the rule."""
    from unittest import mock

    import numpy as np
    from PIL import Image

    import relate.data.synthetic as synthetic
    from relate.data.synthetic import SyntheticConfig, make_scene

    def fronts(img, x, a, b):  # does the overlap look like a's own part rather than b's?
        if not (x.any() and a.any() and b.any()):
            return False
        c = img[x].mean(0)
        return bool(np.linalg.norm(c - img[a].mean(0)) < np.linalg.norm(c - img[b].mean(0)))

    def small(m):
        return np.asarray(Image.fromarray(m.astype(np.uint8) * 255).resize((side, side), Image.BILINEAR)) > 127

    world, draw, masks = SyntheticConfig(coverage="full"), synthetic.shape_mask, []

    def keep(o, w, h):  # the world draws each shape once, in object order; keep them
        masks.append(draw(o, w, h))
        return masks[-1]

    right = {"shapes_full": 0, f"shapes_{side}px": 0, f"boxes_{side}px": 0}
    pairs = same = 0
    grid = np.mgrid[0:side, 0:side] + 0.5
    with mock.patch.object(synthetic, "shape_mask", keep):
        for i in range(scenes):
            masks.clear()
            sc = make_scene(i, world)
            img = sc.image.astype(np.float32)
            img_s = np.asarray(Image.fromarray(sc.image).resize((side, side), Image.BILINEAR)).astype(np.float32)
            h, w = img.shape[:2]
            for f, b in {(r["subject"], r["object"]) for r in sc.true_relations if r["concept"] == "in_front_of"}:
                pairs += 1
                same += sc.colours[f] == sc.colours[b]
                x, fo, bo = masks[f] & masks[b], masks[f] & ~masks[b], masks[b] & ~masks[f]
                right["shapes_full"] += fronts(img, x, fo, bo)
                right[f"shapes_{side}px"] += fronts(img_s, small(x), small(fo), small(bo))
                inb = [(grid[1] >= q["x1"] * side / w) & (grid[1] < q["x2"] * side / w)
                       & (grid[0] >= q["y1"] * side / h) & (grid[0] < q["y2"] * side / h) for q in (sc.boxes[f], sc.boxes[b])]
                right[f"boxes_{side}px"] += fronts(img_s, inb[0] & inb[1], inb[0] & ~inb[1], inb[1] & ~inb[0])
    return {**{k: v / max(pairs, 1) for k, v in right.items()}, "same_colour_share": same / max(pairs, 1),
            "depth_pairs": pairs}


def stretch_flips(scenes: int, side: int = 96) -> dict[str, float]:
    """The world's near and spatial rules (``PairRules``) over whole-object pairs, on the picture's
    boxes against the same boxes mapped to the model's square by ``relate.api.input_scale``,
    stretched and kept."""
    import numpy as np

    from relate.api import input_scale
    from relate.data.synthetic import SyntheticConfig, make_scene
    from relate.data.synthetic_truth import PairRules

    def decide(b):
        r = PairRules(b, [np.zeros((1, 1), bool)] * len(b))
        pairs = [(i, j) for i in range(len(b)) for j in range(len(b)) if i != j]
        return [r.near(i, j) for i, j in pairs], [r.spatial(i, j) for i, j in pairs]

    world = SyntheticConfig(coverage="full")
    out = {"pairs": 0, "near": 0, "spatial": 0, "near_changed_stretched": 0, "spatial_changed_stretched": 0,
           "near_changed_kept": 0, "spatial_changed_kept": 0}
    for i in range(scenes):
        sc = make_scene(i, world)
        h, w = sc.image.shape[:2]
        b = np.array([[x["x1"], x["y1"], x["x2"], x["y2"]] for x in sc.boxes if not x["is_body_part"]], float)
        if len(b) < 2:
            continue
        near, spatial = decide(b)
        out["pairs"] += len(near)
        out["near"] += sum(near)
        out["spatial"] += sum(s is not None for s in spatial)
        for name, keep in (("stretched", False), ("kept", True)):
            sx, sy = input_scale(h, w, side, keep)
            n2, s2 = decide(b * [sx, sy, sx, sy])
            out[f"near_changed_{name}"] += sum(x != y for x, y in zip(near, n2))
            out[f"spatial_changed_{name}"] += sum(x != y for x, y in zip(spatial, s2))
    return out


def work_predictor(work: str, overrides: list[str], recipe: str, steps: int):
    """A ``train_jobs.learnability`` run's final EMA weights as a predictor, its held-out split and the
    recipe's predicate set."""
    import torch

    from relate.api import RelationPredictor
    from relate.data.corpus import read_corpus
    from relate.model.model import create_relation_model
    from train_jobs.learnability import LearnabilityConfig, build_recipe
    from train_jobs.relation_data import build_space

    cfg = LearnabilityConfig(recipe=recipe, overrides=overrides, work_dir=work)
    train_cfg = build_recipe(cfg, work, steps)
    space = build_space(train_cfg.data, train_cfg.model.text_dim)
    model = create_relation_model(train_cfg.model)
    model.load_state_dict(torch.load(Path(work) / "ema_weights.pt", weights_only=True))
    return RelationPredictor(model.eval(), space["bank"]), read_corpus(work, "test"), train_cfg.data.predicates


def model_errors(work: str, overrides: list[str], recipe: str, steps: int, families=FAMILIES) -> None:
    """The errors of a ``train_jobs.learnability`` run's final EMA weights on its held-out split."""
    _errors(*work_predictor(work, overrides, recipe, steps), families)


def naming(predictor, table, batch: int = 16) -> dict:
    """How often the model's grounding embedding of a box is nearest the text embedding of its own
    category, among the categories of ``table`` (encoded by the predictor's text encoder): overall, per
    category, and the commonest (true, named) confusions."""
    import numpy as np
    import torch

    from relate.api import _as_array, input_scale, prepare_image
    from relate.text.bank import build_bank

    model, pre = predictor.model, predictor.model.preprocessing
    boxes_col = table.column("boxes").to_pylist()
    names = sorted({b["category"] for bx in boxes_col for b in bx})
    cat_bank = torch.as_tensor(build_bank(names, encoder_name=predictor.text_encoder).matrix)
    bank = torch.as_tensor(predictor._bank_for(None)[1])
    hits, total, confused = Counter(), Counter(), Counter()
    uris = table.column("uri").to_pylist()
    with torch.no_grad():
        for start in range(0, len(uris), batch):
            arrays = [_as_array(u) for u in uris[start:start + batch]]
            regions = boxes_col[start:start + batch]
            n = max(len(r) for r in regions)
            imgs = torch.stack([prepare_image(a, pre.img_size, pre.interpolation, pre.keep_aspect) for a in arrays])
            boxes, valid = torch.zeros(len(arrays), n, 4), torch.zeros(len(arrays), n, dtype=torch.bool)
            for k, (a, r) in enumerate(zip(arrays, regions)):
                sx, sy = input_scale(a.shape[0], a.shape[1], pre.img_size, pre.keep_aspect)
                boxes[k, : len(r)] = torch.tensor([[b["x1"] * sx, b["y1"] * sy, b["x2"] * sx, b["y2"] * sy] for b in r])
                valid[k, : len(r)] = True
            named = (model(imgs, boxes, valid, bank.to(imgs.dtype)).grounding @ cat_bank.T.float()).argmax(-1)
            for k, r in enumerate(regions):
                for i, b in enumerate(r):
                    got = names[int(named[k, i])]
                    total[b["category"]] += 1
                    hits[b["category"]] += got == b["category"]
                    if got != b["category"]:
                        confused[(b["category"], got)] += 1
    return {"named": round(sum(hits.values()) / max(sum(total.values()), 1), 3),
            "per_category": {c: round(hits[c] / total[c], 3) for c in names if total[c]},
            "confused": confused.most_common(8), "boxes": int(sum(total.values())),
            "categories": len(names), "chance": round(float(np.max(list(total.values()))) / sum(total.values()), 3)}


def checkpoint_errors(checkpoint: str, world: str, images: int, families=FAMILIES) -> None:
    """The errors of a checkpoint folder (a training run's, e.g. ``train_jobs.learning_curve``'s) on
    the first ``images`` of a synthetic world folder's test split (the world states its full truth)."""
    from relate.api import load_model
    from relate.data.corpus import read_corpus

    table = read_corpus(world, "test")
    _errors(load_model(checkpoint), table.slice(0, images), "synthetic_lexicon", families)


def depth_margins(checkpoint: str, world: str, images: int) -> dict:
    """A checkpoint's depth errors at |truth| on the first ``images`` of a world folder's test split,
    against the world's visibility rule: for each pair, its shared drawn pixels over the rule's
    threshold max(MIN_OCCLUSION_PX, MIN_OCCLUSION_SHARE x the smaller shape). The masks are the
    world's own, captured as ``make_scene`` draws them."""
    from unittest import mock

    import numpy as np

    import relate.data.synthetic as synthetic
    from relate.api import load_model
    from relate.data.corpus import read_corpus
    from relate.data.synthetic_truth import MIN_OCCLUSION_PX, MIN_OCCLUSION_SHARE
    from relate.data.world_truth import load_world, scene_index
    from relate.model.score import relation_logit
    from train_jobs.learnability import _truth
    from train_jobs.relation_eval import concept_key

    cfg, table = load_world(world), read_corpus(world, "test").slice(0, images)
    predictor = load_model(checkpoint)
    scores = predictor.score_images(table.column("uri").to_pylist(), table.column("boxes").to_pylist())
    forms = np.array([concept_key(s, "synthetic_lexicon") for s in predictor.vocabulary_strings()])
    draw, masks, cells = synthetic.shape_mask, [], []

    def keep(o, w, h):
        masks.append(draw(o, w, h))
        return masks[-1]

    with mock.patch.object(synthetic, "shape_mask", keep):
        for sc, (truth, _), iid in zip(scores, _truth(table), table.column("image_id").to_pylist()):
            masks.clear()
            scene = synthetic.make_scene(scene_index(iid, cfg.seed), cfg)
            logit = relation_logit(sc.l_pred, sc.l_pair, predictor.model.cfg.pair_weight)
            for k, (s, o) in enumerate(sc.pairs.tolist()):
                held = {c for a, b, c in truth if (a, b) == (s, o)}
                shared = np.count_nonzero(masks[s] & masks[o])
                need = max(MIN_OCCLUSION_PX, MIN_OCCLUSION_SHARE * min(masks[s].sum(), masks[o].sum()))
                part = scene.boxes[s]["is_body_part"] or scene.boxes[o]["is_body_part"]
                for c in ("in_front_of", "behind"):
                    cells.append((float(logit[k, forms == c].max()), c in held, bool(held & {"in_front_of", "behind"}),
                                  bool(part), float(shared / need)))
    ranked = sorted(cells, key=lambda x: -x[0])
    n = sum(x[1] for x in ranked)
    false, missed = [x for x in ranked[:n] if not x[1]], [x for x in ranked[n:] if x[1]]
    whole = [x[4] for x in false if not x[2] and not x[3]]
    return {"true_cells": n, "false_above": len(false), "missed_below": len(missed),
            "false_reversed_direction": sum(x[2] for x in false), "false_body_part": sum(x[3] and not x[2] for x in false),
            "false_whole_no_shared_pixel": sum(r == 0 for r in whole),
            "false_whole_under_threshold": sum(0 < r < 1 for r in whole),
            "false_whole_within_20pct_under": sum(0.8 <= r < 1 for r in whole),
            "false_whole_past_threshold_covered": sum(r >= 1 for r in whole),
            "missed_within_25pct_over": sum(1 <= x[4] < 1.25 for x in missed)}


def _errors(predictor, table, predicates: str, families) -> None:
    """Per family: the false cells among its 2 x |truth| best and the true ones ranked below |truth|,
    and, of the errors at |truth| (false cells above, true cells below), how many the picture's
    stretch to the square explains (near or spatial decided otherwise on the stretched boxes)."""
    import numpy as np

    from relate.api import input_scale
    from relate.data.lexicon import CONCEPTS
    from relate.data.synthetic_truth import PairRules
    from relate.model.score import relation_logit
    from train_jobs.learnability import _truth
    from train_jobs.relation_eval import concept_key

    side = predictor.model.preprocessing.img_size
    scores = predictor.score_images(table.column("uri").to_pylist(), table.column("boxes").to_pylist())
    concepts = list(CONCEPTS)
    col = {c: j for j, c in enumerate(concepts)}
    form_col = np.array([col.get(concept_key(s, predicates), -1) for s in predictor.vocabulary_strings()])
    cells = []
    for sc, (truth, _), boxes, w, h in zip(scores, _truth(table), table.column("boxes").to_pylist(),
                                           table.column("width").to_pylist(), table.column("height").to_pylist()):
        logit = relation_logit(sc.l_pred, sc.l_pair, predictor.model.cfg.pair_weight)
        sx, sy = input_scale(h, w, side)
        stretched = PairRules(np.array([[b["x1"] * sx, b["y1"] * sy, b["x2"] * sx, b["y2"] * sy] for b in boxes]),
                              [np.zeros((1, 1), bool)] * len(boxes))
        for k, (s, o) in enumerate(sc.pairs.tolist()):
            held = frozenset(c for a, b, c in truth if (a, b) == (s, o))
            for c in concepts:
                if CONCEPTS[c].family in families and (form_col == col[c]).any():
                    seen = {"proximity": lambda: stretched.near(s, o),
                            "spatial": lambda: stretched.spatial(s, o) == c}.get(CONCEPTS[c].family)
                    cells.append((CONCEPTS[c].family, c, float(logit[k, form_col == col[c]].max()), c in held,
                                  (boxes[s]["category"], boxes[o]["category"]),
                                  bool(boxes[s]["is_body_part"] or boxes[o]["is_body_part"]), held,
                                  None if seen is None else bool(seen())))
    for fam in families:
        ranked = sorted((x for x in cells if x[0] == fam), key=lambda x: -x[2])
        n = sum(x[3] for x in ranked)
        false = [x for x in ranked[: 2 * n] if not x[3]]
        print(f"\n{fam}: {n} true cells; false among the best {2 * n}: {len(false)}"
              f"\n  by concept: {Counter(x[1] for x in false).most_common()}"
              f"\n  with a body part: {sum(x[5] for x in false)}"
              f"\n  by category pair: {Counter(x[4] for x in false).most_common(8)}"
              f"\n  what holds on the pair: {Counter(tuple(sorted(x[6])) for x in false).most_common(6)}"
              f"\n  true cells ranked below {n}: {Counter(x[4] for x in ranked[n:] if x[3]).most_common(6)}")
        top_false, missed = [x for x in ranked[:n] if not x[3]], [x for x in ranked[n:] if x[3]]
        print(f"  at {n}: {len(top_false)} false cells above, {len(missed)} true below", end="")
        if ranked and ranked[0][7] is not None:  # near / spatial: what the stretched boxes decide
            print(f"; true only on the stretched boxes: {sum(bool(x[7]) for x in top_false)} of the false,"
                  f" false on them: {sum(not x[7] for x in missed)} of the missed (whole objects:"
                  f" {sum(not x[5] for x in top_false)} false, {sum(not x[5] for x in missed)} missed)")
        else:
            print()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--boxes", type=int, default=0, help="scenes for the boxes-only AP (0: skip)")
    ap.add_argument("--work", help="a train_jobs.learnability work_dir holding ema_weights.pt")
    ap.add_argument("--checkpoint", help="a checkpoint folder (e.g. a learning_curve run's), scored on --world")
    ap.add_argument("--world", help="with --checkpoint: the synthetic world folder whose test split is scored")
    ap.add_argument("--images", type=int, default=300, help="with --checkpoint: test images scored")
    ap.add_argument("--overrides", nargs="*", default=[], help="the overrides that run was trained with")
    ap.add_argument("--recipe", default="train_jobs/configs/cpu_long.yaml", help="the recipe that run was trained with")
    ap.add_argument("--steps", type=int, default=400, help="that run's steps (its schedule)")
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), help="families whose errors are listed")
    ap.add_argument("--pixels", type=int, default=0, help="scenes for the colour rule's depth direction (0: skip)")
    ap.add_argument("--stretch", type=int, default=0, help="scenes for what stretching to the square changes (0: skip)")
    ap.add_argument("--naming", action="store_true", help="with --work or --checkpoint: how often the model names "
                    "each box's category through its grounding head")
    ap.add_argument("--depth-margins", action="store_true", help="with --checkpoint: its depth errors against the "
                    "world's visibility threshold")
    args = ap.parse_args(argv)
    if not (args.boxes or args.work or args.pixels or args.stretch or args.checkpoint):
        ap.error("give --boxes N, --pixels N, --stretch N, --work DIR, --checkpoint DIR --world DIR, or several")
    if bool(args.checkpoint) != bool(args.world):
        ap.error("--checkpoint and --world go together")
    if args.boxes:
        print(box_ceiling(args.boxes))
    if args.pixels:
        print(pixel_direction(args.pixels))
    if args.stretch:
        print(stretch_flips(args.stretch))
    if args.work and args.naming:
        predictor, table, _ = work_predictor(args.work, args.overrides, args.recipe, args.steps)
        print(naming(predictor, table))
    elif args.work:
        model_errors(args.work, args.overrides, args.recipe, args.steps, tuple(args.families))
    if args.checkpoint and args.naming:
        from relate.api import load_model
        from relate.data.corpus import read_corpus

        print(naming(load_model(args.checkpoint), read_corpus(args.world, "test").slice(0, args.images)))
    elif args.checkpoint and args.depth_margins:
        print(depth_margins(args.checkpoint, args.world, args.images))
    elif args.checkpoint:
        checkpoint_errors(args.checkpoint, args.world, args.images, tuple(args.families))


if __name__ == "__main__":
    main()
