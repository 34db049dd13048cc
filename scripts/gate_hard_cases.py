"""Score the gate on hard cases: relations on both sides of every Algorithm 1 threshold.

Runs the annotation stages without Ray (``pipelines.annotate.annotate_local``: markers, scripted
passes, parsing, gate, top-up) on synthetic scenes with ``vlm.scripted.hard_cases.enabled``, and
prints recall and precision per rule with fired/n per side and |margin| bin (the table the
pipeline prints when the same option is set). Usage:

    python scripts/gate_hard_cases.py [--scenes 300] [--seed 11] [--out FILE.json]

The full pipeline prints the same table:
``python -m pipelines.annotate --config pipelines/configs/annotate_synthetic.yaml
--set vlm.scripted.hard_cases.enabled=true ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> dict:
    import pyarrow as pa
    from PIL import Image

    from pipelines.annotate import AnnotateConfig, annotate_local
    from pipelines.annotate_stages import merge_counters
    from relate.annotation_stats import annotation_statistics
    from relate.data.gate_hard_cases import format_hard_case_table
    from relate.data.synthetic import SyntheticConfig, make_scene
    from relate.schema import CORPUS_SCHEMA, REJECTIONS_SCHEMA, to_table

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenes", type=int, default=300)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--duplicate-person-rate", type=float, default=0.5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    world, rows = SyntheticConfig(seed=args.seed), []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.scenes):
            s = make_scene(i, world)
            uri = Path(tmp) / f"{s.image_id}.png"
            Image.fromarray(s.image).save(uri)
            row = s.to_record(str(uri), "train")
            row["reference"] = row.pop("relations")
            rows.append(dict(row, shard=f"train/part-{i // 64:05d}"))
        cfg = AnnotateConfig(duplicate_person_rate=args.duplicate_person_rate, cpu_batch_size=50,
                             vlm={"scripted": {"hard_cases": {"enabled": True}}})
        out = annotate_local(pa.Table.from_pylist(rows), cfg)
    counters: dict = {}
    for r in out:
        counters = merge_counters(counters, json.loads(r["counters_json"]))
    kept = to_table([{k: r[k] for k in CORPUS_SCHEMA.names} for r in out], CORPUS_SCHEMA)
    rej = to_table([{"image_id": r["image_id"], "rejected": r["rejected"]} for r in out], REJECTIONS_SCHEMA)
    scores = annotation_statistics(kept, rej, counters)["gate_hard_cases"]
    print(f"{args.scenes} synthetic scenes (seed {args.seed})")
    print(format_hard_case_table(scores))
    if args.out:
        Path(args.out).write_text(json.dumps(scores, indent=2))
    return scores


if __name__ == "__main__":
    main()
