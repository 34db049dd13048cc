"""Can the boxes alone decide containment in the synthetic world? Count the pairs that look like it.

    python scripts/containment_lookalikes.py --scenes 600

For every ordered pair of objects in the first ``--scenes`` scenes of a world (its full truth),
the pairs whose smaller box lies at least ``--cover`` inside the larger one are counted by whether
``inside`` holds on them, by whether the inner object is a body part, and by category pair. If
containment were decided by the boxes, as spatial relations are, nearly every such pair of whole
objects would hold ``inside``. The printout says how far from that the world is. It is the ceiling
of a model that reads containment from geometry alone: precision at full recall is
inside / (inside + whole-object lookalikes).
"""

from __future__ import annotations

import argparse
from collections import Counter


def lookalikes(scenes: int, cover: float, seed: int = 0) -> tuple[Counter, Counter]:
    from relate.data.synthetic import SyntheticConfig, make_scene

    world = SyntheticConfig(seed=seed, coverage="full")
    totals, by_pair = Counter(), Counter()
    for i in range(scenes):
        sc = make_scene(i, world)
        truth = sc.true_concepts()
        boxes = [(b["x1"], b["y1"], b["x2"], b["y2"]) for b in sc.boxes]
        for a, A in enumerate(boxes):
            for b, C in enumerate(boxes):
                area_a, area_c = (A[2] - A[0]) * (A[3] - A[1]), (C[2] - C[0]) * (C[3] - C[1])
                if a == b or area_a >= area_c:
                    continue
                inter = max(0.0, min(A[2], C[2]) - max(A[0], C[0])) * max(0.0, min(A[3], C[3]) - max(A[1], C[1]))
                if inter < cover * area_a:
                    continue
                inside = "inside" in truth.get((a, b), set())
                body = bool(sc.boxes[a]["is_body_part"])
                totals[("inside" if inside else "no inside", "body part" if body else "whole object")] += 1
                if not body:
                    by_pair[(sc.boxes[a]["category"], sc.boxes[b]["category"], inside)] += 1
    return totals, by_pair


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", type=int, default=600)
    ap.add_argument("--cover", type=float, default=0.9, help="share of the smaller box inside the larger")
    ap.add_argument("--seed", type=int, default=0, help="world seed")
    args = ap.parse_args()
    totals, by_pair = lookalikes(args.scenes, args.cover, args.seed)
    for k, v in sorted(totals.items()):
        print(f"{v:6d}  {k[0]:10s} {k[1]}")
    pos, fake = totals[("inside", "whole object")], totals[("no inside", "whole object")]
    print(f"boxes-only precision at full recall: {pos}/{pos + fake} = {pos / max(1, pos + fake):.3f}")
    print("whole-object pairs by category (inner, outer, inside holds):")
    for (a, b, ins), v in by_pair.most_common(12):
        print(f"{v:6d}  {a} in {b}: {'inside' if ins else 'no inside'}")


if __name__ == "__main__":
    main()
