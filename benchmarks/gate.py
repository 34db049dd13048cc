"""Gate throughput on one core: Algorithm 1 + repair + balancing + dedup over a large batch.

Candidates are the synthetic world's true relations (each in its pass) plus a copy of each
with its roles reversed, replicated over many image ids to reach the target size. Baseline: one
vectorised IoU over the same subject/object boxes (the cheapest geometric operation the gate
must at least do), measured in the same run.
"""

from __future__ import annotations

import os


from benchmarks._common import best_of, run_benchmark


def _batch(n_target: int):
    from relate.data.lexicon import CONCEPTS
    from relate.data.synthetic import SyntheticConfig, make_scene
    from relate.gate import BoxTable, Candidates

    scenes = [make_scene(i, SyntheticConfig(seed=0)) for i in range(200)]
    layout = ("spatial", "depth", "contact", "proximity", "containment")
    per = sum(2 * len(s.relations) for s in scenes)
    reps = max(1, -(-n_target // per))
    ids, boxes, img, sub, obj, pred, passes = [], [], [], [], [], [], []
    for k in range(reps):
        for s in scenes:
            i = len(ids)
            ids.append(f"{s.image_id}-{k}")
            boxes.append(s.boxes)
            for r in s.relations:
                p = "spatial" if CONCEPTS[r["concept"]].family in layout else "semantic"
                for a, b in ((r["subject"], r["object"]), (r["object"], r["subject"])):
                    img.append(i); sub.append(a); obj.append(b); pred.append(r["predicate"]); passes.append(p)
    return BoxTable.from_images(ids, boxes), Candidates.from_lists(img, sub, obj, pred, passes)


def measure(quick: bool) -> dict[str, float]:
    from relate import geometry as G
    from relate.gate import GateConfig, gate_relations

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    bt, c = _batch(100_000 if quick else 400_000)
    reps = 3 if quick else 7
    cfg = GateConfig()
    gate_relations(bt, c, cfg)  # warm caches
    t_gate = best_of(lambda: gate_relations(bt, c, cfg), reps)
    si = bt.offsets[c.image] + c.subject
    oi = bt.offsets[c.image] + c.object
    t_iou = best_of(lambda: G.iou(bt.boxes[si], bt.boxes[oi]), reps)
    return {"gate_relations_per_s": round(len(c) / t_gate), "relations": len(c),
            "gate_over_iou_time_ratio": round(t_gate / t_iou, 2), "gate_s": round(t_gate, 4)}


if __name__ == "__main__":
    run_benchmark("gate", measure)
