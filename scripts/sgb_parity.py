"""Check the ``sgb`` protocol against Scene-Graph-Benchmark.pytorch's own evaluation code.

    python scripts/sgb_parity.py --sgb-repo PATH/TO/Scene-Graph-Benchmark.pytorch [--images 500]

Runs SGB's ``sgg_eval.py`` (SGRecall, SGNoGraphConstraintRecall, SGMeanRecall, SGNGMeanRecall),
loaded from a local checkout of that repository (nothing of it is copied here), on the evaluator
benchmark's SGB-style dense sgdet outputs (benchmarks._dense_outputs), and relate.metrics on the
same outputs in the scene-graphs layout; prints both R@K, ngR@K, mR@K and ngmR@K, both rates, and
exits 1 if any figure differs. Only SGB's evaluation modules are imported: the packages they
import for other purposes (maskrcnn_benchmark.layers, .data, .utils.comm) are empty stand-ins.
Needs torch (SGB's boxes are tensors) and pycocotools (imported by sgg_eval.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import types
from pathlib import Path

import numpy as np


def _load_sgb(repo: Path):
    """SGB's evaluation module from ``repo``, with stand-ins for the packages it does not need."""
    root = repo / "maskrcnn_benchmark"
    for name in ("maskrcnn_benchmark", "maskrcnn_benchmark.structures", "maskrcnn_benchmark.utils",
                 "maskrcnn_benchmark.data.datasets", "maskrcnn_benchmark.data.datasets.evaluation",
                 "maskrcnn_benchmark.data.datasets.evaluation.vg"):
        mod = types.ModuleType(name)
        mod.__path__ = [str(root.parent / name.replace(".", "/"))]
        sys.modules[name] = mod
    stand_ins = {"maskrcnn_benchmark.layers": {"nms": None},
                 "maskrcnn_benchmark.data": {"get_dataset_statistics": None},
                 "maskrcnn_benchmark.utils.comm": {"is_main_process": lambda: True}}
    for name, attrs in stand_ins.items():
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        mod.__path__ = []
        sys.modules[name] = mod
    for rel in ("structures/bounding_box.py", "structures/boxlist_ops.py", "utils/miscellaneous.py",
                "data/datasets/evaluation/vg/sgg_eval.py"):
        name = "maskrcnn_benchmark." + rel[:-3].replace("/", ".")
        spec = importlib.util.spec_from_file_location(name, root / rel)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules["maskrcnn_benchmark.data.datasets.evaluation.vg.sgg_eval"]


def _sgb_inputs(d, n_pairs: int, n_obj: int) -> list[dict]:
    """SGB's per-image containers; pairs sorted as its relation post-processor leaves them
    (predicate max x subject x object score, descending), scores with the background column."""
    out = []
    for i in range(d.n):
        sc, os_ = d.scores[i * n_pairs:(i + 1) * n_pairs], d.det_score[i * n_obj:(i + 1) * n_obj]
        order = np.argsort(-((sc.max(1) * os_[d.pairs[:, 0]]) * os_[d.pairs[:, 1]]), kind="stable")
        box = slice(i * n_obj, (i + 1) * n_obj)
        out.append({"gt_rels": np.stack([d.gt_s[i], d.gt_o[i], d.gt_pred[i] + 1], 1).astype(np.int64),
                    "gt_boxes": d.gt_xyxy[box].astype(np.float32), "gt_classes": d.gt_cat[box],
                    "pred_rel_inds": d.pairs[order].astype(np.int64),
                    "rel_scores": np.concatenate([np.zeros((n_pairs, 1), np.float32), sc], 1)[order],
                    "pred_boxes": d.det_xyxy[box].astype(np.float32), "pred_classes": d.det_cat[box],
                    "obj_scores": os_})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sgb-repo", required=True, help="a local checkout of Scene-Graph-Benchmark.pytorch")
    ap.add_argument("--images", type=int, default=500, help="images of the dense benchmark outputs")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks._dense_outputs import N_OBJ, N_PAIRS, VOCAB, make_dense
    from relate.metrics import evaluate_scene_graphs, load_ground_truth, load_scene_graphs

    sgg = _load_sgb(Path(args.sgb_repo))
    d = make_dense(args.images)
    names = ["__background__"] + list(d.vocab)
    res: dict = {}
    ev = [sgg.SGRecall(res), sgg.SGNoGraphConstraintRecall(res), sgg.SGMeanRecall(res, VOCAB + 1, names, False),
          sgg.SGNGMeanRecall(res, VOCAB + 1, names, False)]
    for e in ev:
        e.register_container("sgdet")
    g = {"mode": "sgdet", "iou_thres": 0.5, "num_rel_category": VOCAB + 1, "multiple_preds": False}
    inputs = _sgb_inputs(d, N_PAIRS, N_OBJ)
    t0 = time.perf_counter()
    for lc in inputs:
        lc = ev[0].calculate_recall(g, dict(lc), "sgdet")
        ev[1].calculate_recall(g, lc, "sgdet")
        ev[2].collect_mean_recall_items(g, lc, "sgdet")
        ev[3].collect_mean_recall_items(g, lc, "sgdet")
    ev[2].calculate_mean_recall("sgdet")
    ev[3].calculate_mean_recall("sgdet")
    sgb_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    gt = load_ground_truth(d.corpus())
    sg = load_scene_graphs(d.scene_graphs(), gt)
    ours = {gc: evaluate_scene_graphs(gt, sg, ks=(20, 50, 100), protocol="sgb", predicates=list(d.vocab),
                                      graph_constrained=gc).metrics for gc in (True, False)}
    our_s = time.perf_counter() - t0
    bad = 0
    for k in (20, 50, 100):
        pairs = {"R": (np.mean(res["sgdet_recall"][k]), ours[True][f"R@{k}"]),
                 "ngR": (np.mean(res["sgdet_recall_nogc"][k]), ours[False][f"R@{k}"]),
                 "mR": (res["sgdet_mean_recall"][k], ours[True][f"mR@{k}"]),
                 "ngmR": (res["sgdet_ng_mean_recall"][k], ours[False][f"mR@{k}"])}
        for name, (a, b) in pairs.items():
            same = abs(a - b) < 1e-9
            bad += not same
            print(f"{name}@{k}: SGB {a:.6f}  relate {b:.6f}  {'same' if same else 'DIFFERENT'}")
    print(f"SGB's own code {args.images / sgb_s:.1f} images/s; relate.metrics (in memory) {args.images / our_s:.1f} images/s")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
