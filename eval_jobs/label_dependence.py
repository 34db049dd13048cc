"""Label dependence (seed 001, § 7.1, Table 9) of any systems' predictions in the objects layout.

    python -m eval_jobs.label_dependence --set 'systems=[{name: ours, predictions: runs/x/scene_graphs.parquet}]' \\
        --set train_corpus=runs/demo/synthetic/corpus/train.parquet
    python -m eval_jobs.label_dependence --set out_dir=runs/analyses/label_dependence   # the synthetic case

With no ``systems`` the job builds a synthetic case whose answers are known, writes each system's
predictions in the objects layout under ``out_dir/predictions/`` and measures them: ``label_lookup``
(the training-majority predicate of each label pair: a pure lookup), ``world_truth`` (the stated
relations of each scene), and ``model`` (the relation model's top-1 on each stated pair; see
eval_jobs.analysis_inputs for which model). In the synthetic case predicates are concept names, so
synonyms count as one predicate. The intervention block feeds the label-using system (the lookup)
true labels, labels shuffled across the boxes of each image, and one constant label, and reports
the self-lookup of its output against the true labels; the model reads no labels, so its row is
its unchanged output.

Writes ``label_dependence.parquet`` (one row per system), ``intervention.parquet``,
``label_dependence.md``, ``label_dependence.png`` and the resolved ``config.yaml``.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field

from eval_jobs.analysis_inputs import (ModelSourceConfig, ScenesConfig, load_analysis_model, markdown_table,
                                       scene_batches, write_table)
from relate.config import StrictConfig, dump_config, parse_job_args
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.metrics.label_dependence import (LabelTriplets, label_dependence, label_triplets, majority_table)
from relate.probe.attribution import edge_predictions
from relate.probe.model_inputs import bank_classes
from relate.schema import SCENE_GRAPHS_SCHEMA
from relate.storage import Location, LocationValue

__all__ = ["SystemPredictionsConfig", "LabelDependenceConfig", "LabelDependenceResult", "main", "training_majority"]

INTERVENTIONS = ("true", "shuffled", "constant")


class SystemPredictionsConfig(StrictConfig):
    name: str = Field(..., min_length=1, description="the system's name in the table")
    predictions: LocationValue = Field(..., description="Parquet in the objects layout (relate.schema.SCENE_GRAPHS_SCHEMA)")


class LabelDependenceConfig(StrictConfig):
    systems: list[SystemPredictionsConfig] = Field(default_factory=list, description="systems to measure; empty: the synthetic case")
    train_corpus: LocationValue | None = Field(None, description="training corpus Parquet (CORPUS_SCHEMA) whose majority "
                                               "predicate per label pair the freq. agreement column compares with")
    top_k: int | None = Field(50, ge=1, description="highest-scoring triplets kept per image (Table 9: top-50); null: all")
    vocabulary_size: int | None = Field(None, ge=1, description="predicates in the benchmark, for the 'distinct / V' column")
    seed: int = Field(0, description="seed of the image halves of self-lookup and of the label shuffle")
    model: ModelSourceConfig = Field(default_factory=ModelSourceConfig, description="synthetic case: the model measured")
    scenes: ScenesConfig = Field(default_factory=lambda: ScenesConfig(images=64), description="synthetic case: test scenes")
    train_images: int = Field(300, ge=1, description="synthetic case: training scenes the majority table is fitted on")
    out_dir: Location = Field("runs/analyses/label_dependence", description="folder for the tables, figure and config")


@dataclass
class LabelDependenceResult:
    rows: list[dict]
    intervention: list[dict]
    markdown: str
    out_dir: str
    seconds: float


def training_majority(corpus: pa.Table) -> dict[tuple[str, str], str]:
    """Majority predicate per (subject category, object category) over a corpus's relations."""
    s, o, p = [], [], []
    for boxes, rels in zip(corpus.column("boxes").to_pylist(), corpus.column("relations").to_pylist()):
        for r in rels:
            cs, co = boxes[r["subject"]]["category"], boxes[r["object"]]["category"]
            if cs is not None and co is not None:
                s.append(cs); o.append(co); p.append(r["predicate"])
    if not p:
        raise ValueError("training corpus has no relation between two labelled boxes: no majority table")
    return majority_table(s, o, p)


def _objects(scene, labels) -> list[dict]:
    return [dict(x1=b["x1"], y1=b["y1"], x2=b["x2"], y2=b["y2"], label=lab, score=1.0)
            for b, lab in zip(scene.boxes, labels)]


def _graphs(scenes, predicted: list[list[tuple[int, int, str]]]) -> pa.Table:
    rows = []
    for scene, trips in zip(scenes, predicted):
        rows.append(dict(image_id=scene.image_id, objects=_objects(scene, [b["category"] for b in scene.boxes]), pairs=[],
                         pair_scores=[], triplets=[dict(subject=s, object=o, predicate=p, score=1.0, spatial_score=None,
                                                        semantic_score=None) for s, o, p in trips]))
    return pa.Table.from_pylist(rows, schema=SCENE_GRAPHS_SCHEMA)


def _lookup(table, cs, co, fallback: str) -> str:
    return table.get((cs, co), fallback)


def _synthetic_case(cfg: LabelDependenceConfig, out: Path):
    """Writes the three systems' predictions; returns (system configs, majority, intervention rows)."""
    world = SyntheticConfig(seed=cfg.scenes.world_seed)
    train = [make_scene(i, world) for i in range(cfg.train_images)]
    majority = majority_table(*zip(*[(sc.boxes[r["subject"]]["category"], sc.boxes[r["object"]]["category"], r["concept"])
                                     for sc in train for r in sc.relations]))
    fallback = Counter(majority.values()).most_common(1)[0][0]
    test = [make_scene(cfg.scenes.first_index + i, world) for i in range(cfg.scenes.images)]
    cats = [[b["category"] for b in sc.boxes] for sc in test]
    pairs = [[(r["subject"], r["object"]) for r in sc.relations] for sc in test]
    systems = {
        "label_lookup": [[(s, o, _lookup(majority, c[s], c[o], fallback)) for s, o in ps] for c, ps in zip(cats, pairs)],
        "world_truth": [[(r["subject"], r["object"], r["concept"]) for r in sc.relations] for sc in test],
    }
    model, bank, strings = load_analysis_model(cfg.model)
    classes, _ = bank_classes(strings)
    pred, _true = edge_predictions(model, scene_batches(cfg.scenes, model, bank, strings))
    it = iter(pred)
    systems[f"model: {cfg.model.name()}"] = [[(s, o, classes[next(it)]) for s, o in ps] for ps in pairs]
    (out / "predictions").mkdir(exist_ok=True)
    configs = []
    for name, trips in systems.items():
        path = out / "predictions" / f"{name.split(':')[0]}.parquet"
        pq.write_table(_graphs(test, trips), path)
        configs.append(SystemPredictionsConfig(name=name, predictions=str(path)))
    # intervention: the lookup fed altered labels, its output judged against the true label pairs
    rng = np.random.default_rng(cfg.seed)
    rows = []
    for mode in INTERVENTIONS:
        fed = [list(c) if mode == "true" else list(rng.permutation(c)) if mode == "shuffled" else ["object"] * len(c)
               for c in cats]
        out_trips = [[(s, o, _lookup(majority, f[s], f[o], fallback)) for s, o in ps] for f, ps in zip(fed, pairs)]
        for name, trips in (("label_lookup", out_trips), (f"model: {cfg.model.name()}", systems[f"model: {cfg.model.name()}"])):
            r = label_dependence(label_triplets(_graphs(test, trips), cfg.top_k), seed=cfg.seed)
            rows.append(dict(system=name, labels=mode, self_lookup=r.self_lookup, cond_entropy=r.cond_entropy,
                             distinct_predicates=r.distinct_predicates))
    return configs, majority, rows, len(classes)


def _figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    names = [r["system"] for r in rows]
    a.barh(names, [100 * r["self_lookup"] for r in rows]); a.set_xlabel("self-lookup (%)"); a.invert_yaxis()
    b.barh(names, [r["cond_entropy"] for r in rows]); b.set_xlabel("H(p | c_s, c_o) (nats)"); b.invert_yaxis()
    b.set_yticks([])
    fig.tight_layout(); fig.savefig(path, dpi=110); plt.close(fig)


def main(cfg: LabelDependenceConfig) -> LabelDependenceResult:
    t0 = time.perf_counter()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "config.yaml")
    intervention: list[dict] = []
    vocab = cfg.vocabulary_size
    if cfg.systems:
        systems = cfg.systems
        majority = training_majority(pq.read_table(cfg.train_corpus)) if cfg.train_corpus else None
    else:
        systems, majority, intervention, n_classes = _synthetic_case(cfg, out)
        vocab = vocab or n_classes
    rows = []
    for sys_cfg in systems:
        t: LabelTriplets = label_triplets(pq.read_table(sys_cfg.predictions), cfg.top_k, name=sys_cfg.predictions)
        r = label_dependence(t, train_majority=majority, vocabulary_size=vocab, seed=cfg.seed)
        rows.append({"system": sys_cfg.name, **r.row()})
    write_table(rows, out, "label_dependence")
    if intervention:
        write_table(intervention, out, "intervention")
    md = f"# Label dependence\n\n{markdown_table(rows)}\n"
    if intervention:
        md += f"\nLabels handed to the system: true, shuffled across boxes, one constant:\n\n{markdown_table(intervention)}\n"
    (out / "label_dependence.md").write_text(md)
    _figure(rows, out / "label_dependence.png")
    return LabelDependenceResult(rows, intervention, md, str(out), time.perf_counter() - t0)


if __name__ == "__main__":
    print(main(parse_job_args(LabelDependenceConfig, description=__doc__)).markdown)
