"""The OvR-SGG leaderboard protocol (seed 001, § 6.7 and App. D.7; Tables 8 and 24) for any systems.

    python -m eval_jobs.ovr_sgg --config eval_jobs/configs/ovr_sgg_synthetic.yaml
    python -m eval_jobs.ovr_sgg --config eval_jobs/configs/ovr_sgg_vg150.yaml   # VG150, OvSGTR's split

A predicate split (relate.data.predicate_split: OvSGTR's 35 base / 15 novel for VG150, five of
seventeen concepts for the synthetic world) decides which GT relations are novel. Every system is
scored, graph-constrained, under two matchers: ``sgb`` (the leaderboard's, duplicate-crediting) and
``one_to_one`` (Table 24's third row). Per system and matcher: Base+Novel and Novel R@K, mR@K over
the benchmark's predicates and over the novel ones, and the predicates the system ever puts in an
image's top K (the "40/50 (8/15 novel)" column).

A system is a checkpoint (inference runs as one Ray task per checkpoint, on the GT boxes or the
benchmark's ``detections``, scoring every string of the vocabulary) or a predictions file already
written (PREDICTIONS_SCHEMA). Whether a system has seen the novel predicates is read from its
checkpoint's text bank (any form of a novel synonym group there makes it non-compliant; the training
run's leak check covers its relations, train_jobs.relation_data) or taken from ``novel_seen`` for a
predictions file; a row whose answer is unknown says so.

A compliant checkpoint that scores with converse scoring (relate.converse) must not average a novel
predicate with its trained converse on the reversed pair ("a behind b" with "b in front of a"): that
would score the novel predicate half by base supervision. The predictor keeps groups its bank was
trained on apart from the others; each checkpoint's converse table is checked against the split as
the checkpoint is loaded, before any image is read, and a table that ties a novel string to a
trained one is refused (LeakError naming each pair). A row records whether converse scoring was on
and which novel strings were scored without their trained converse.

Writes ``ovr_sgg.parquet`` (one row per system and matcher), ``table.md`` (the Table 8 layout plus
the compliant-vs-non-compliant gap), ``ovr_sgg.png``, ``results.json`` and the resolved config.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, model_validator

from relate.config import StrictConfig, dump_config, parse_job_args
from relate.data.predicate_split import LeakError, PredicateSplit, converse_leaks, leaked_forms, load_predicate_split
from relate.jobinfo import Progress, gather, run_name
from relate.metrics.ovr import OVR_MATCHERS, fold_ground_truth, fold_predictions, ovr_scores
from relate.placement import ResourcesConfig, ray_remote_args
from relate.storage import Location, LocationValue

if TYPE_CHECKING:
    from relate.api import RelationPredictor

__all__ = ["OvRBenchmarkConfig", "OvRSystemConfig", "OvRSGGConfig", "main", "table8"]


class OvRBenchmarkConfig(StrictConfig):
    reader: str = Field("corpus", description="'corpus' (a folder holding corpus/<split>/*.parquet, e.g. a synthetic "
                        "world) or a registered benchmark reader (vg150, indoorvg, psg; relate.data.readers)")
    path: Location = Field(description="the corpus root or the benchmark's native folder")
    split: str = Field("test", description="split scored")
    fold: str = Field("none", description="'lexicon': fold surface strings into the synthetic world's concepts "
                      "(one name per synonym group, as VG150 has one string per predicate); 'none'")
    detections: LocationValue | None = Field(None, description="IMAGE_SCHEMA Parquet of a detector's boxes (SGDet, "
                                             "as the leaderboard scores); none: the GT boxes")
    iou_threshold: float = Field(0.5, gt=0, le=1, description="IoU for a detection to link to a GT box")
    reader_options: dict[str, str | int | float | bool] = Field(default_factory=dict,
                                                                description="extra keyword arguments of the reader")


class OvRSystemConfig(StrictConfig):
    name: str = Field(min_length=1, description="row name in the table")
    checkpoint: LocationValue | None = Field(None, description="relation checkpoint run on the benchmark: its folder, a "
                                             "pointer file naming it (a LATEST file), or a training run's folder "
                                             "(its latest checkpoint)")
    predictions: LocationValue | None = Field(None, description="PREDICTIONS_SCHEMA Parquet already written")
    novel_seen: bool | None = Field(None, description="for a predictions file: whether the system was trained on the "
                                    "novel predicates (a checkpoint's bank answers this itself)")
    converse: bool | None = Field(None, description="for a checkpoint: converse scoring (relate.converse) on or off; "
                                  "none: the checkpoint's model.converse_scoring")

    def resolve_checkpoint(self) -> str:
        """The checkpoint folder itself (a pointer file read, a run folder's latest checkpoint taken)."""
        from eval_jobs.ovsgg_config import InferenceSpec
        from train_jobs.run_files import SNAPSHOT, latest_checkpoint_dir

        path = InferenceSpec(system=self.name, checkpoint=self.checkpoint).resolve_checkpoint()
        if Path(path).is_dir() and not (Path(path) / "meta.json").is_file() and (Path(path) / SNAPSHOT).is_file():
            latest = latest_checkpoint_dir(path)
            if latest is None:
                raise ValueError(f"system {self.name!r}: training run {path} holds no checkpoint yet")
            return latest
        return path

    @model_validator(mode="after")
    def _one_source(self) -> "OvRSystemConfig":
        if (self.checkpoint is None) == (self.predictions is None):
            raise ValueError(f"system {self.name!r}: give exactly one of checkpoint and predictions")
        if self.converse is not None and self.checkpoint is None:
            raise ValueError(f"system {self.name!r}: converse applies to a checkpoint, not to a predictions file")
        return self


class OvRSGGConfig(StrictConfig):
    split: str = Field("synthetic_ovr", description="predicate split: a packaged name (vg150_ovr, synthetic_ovr) or a "
                       "YAML file (relate.data.predicate_split)")
    benchmark: OvRBenchmarkConfig = Field(description="what is scored")
    systems: list[OvRSystemConfig] = Field(min_length=1, description="systems, in table order")
    ks: list[int] = Field([20, 50, 100], min_length=1, description="K of R@K")
    matchers: list[str] = Field(list(OVR_MATCHERS), min_length=1, description="sgb (the leaderboard's) and/or "
                                "one_to_one (Table 24's correction)")
    count_k: int = Field(50, ge=1, description="top K per image whose distinct predicates the class count reads")
    per_pair: int = Field(3, ge=1, description="answers per pair inference keeps (graph-constrained recall reads one)")
    inference: ResourcesConfig = Field(default_factory=lambda: ResourcesConfig(num_cpus=1.0),
                                       description="what each inference task reserves")
    use_ray: bool = Field(True, description="run inference as Ray tasks (false: in this process)")
    out_dir: Location = Field("runs/analyses/ovr_sgg", description="folder for the table, figure, Parquet and config")

    @model_validator(mode="after")
    def _known(self) -> "OvRSGGConfig":
        bad = [m for m in self.matchers if m not in OVR_MATCHERS]
        if bad:
            raise ValueError(f"matchers {bad} unknown; valid: {list(OVR_MATCHERS)}")
        if self.benchmark.fold not in ("none", "lexicon"):
            raise ValueError(f"benchmark.fold {self.benchmark.fold!r}: valid 'none', 'lexicon'")
        names = [s.name for s in self.systems]
        if len(set(names)) != len(names):
            raise ValueError(f"system names repeat: {names}")
        return self


# --------------------------------------------------------------------------- stages (Ray-free)

def _corpus(b: OvRBenchmarkConfig) -> tuple[pa.Table, list[str]]:
    """(corpus table, the benchmark's predicate strings)."""
    if b.reader == "corpus":
        from relate.data.corpus import read_corpus

        t = read_corpus(b.path, b.split)
        return t, sorted({r["predicate"] for rels in t.column("relations").to_pylist() for r in rels})
    from relate.data.readers import read_benchmark

    data = read_benchmark(b.reader, b.path, split=b.split, **b.reader_options)
    return data.corpus, list(data.predicates)


def _fold(b: OvRBenchmarkConfig) -> dict[str, str]:
    if b.fold == "none":
        return {}
    from relate.data.lexicon import CONCEPTS

    return {f: c.forms[0] for c in CONCEPTS.values() for f in c.forms}


def _vocabulary(b: OvRBenchmarkConfig, predicates: list[str]) -> list[str]:
    """What a checkpoint scores: every surface form of the world (fold 'lexicon') or the benchmark's strings."""
    if b.fold == "lexicon":
        from relate.data.lexicon import all_surface_forms

        return all_surface_forms()
    return list(predicates)


def _regions(b: OvRBenchmarkConfig, corpus: pa.Table) -> pa.Table:
    if b.detections is None:
        return corpus
    from relate.schema import CORPUS_SCHEMA, to_table

    det = pq.read_table(b.detections)
    det = det.append_column("relations", pa.array([[] for _ in range(det.num_rows)],
                                                  type=CORPUS_SCHEMA.field("relations").type))
    ids = set(corpus.column("image_id").to_pylist())
    keep = pa.array([i in ids for i in det.column("image_id").to_pylist()])
    return to_table(det.filter(keep), CORPUS_SCHEMA, table=f"detections {b.detections}")


def _converse_check(split: PredicateSplit, checkpoint: str, vocabulary: list[str],
                    predictor: RelationPredictor) -> list[str]:
    """The novel strings a compliant checkpoint scores without their trained converse (none when
    converse scoring is off or the checkpoint saw the novel predicates); refuses a converse table that
    averages a novel string with a trained one, naming each pair."""
    from relate.converse import converse_map

    table, bank = predictor.converse_table(vocabulary), predictor.bank.strings
    if table is None or leaked_forms(split, bank):
        return []
    strings = [str(v).strip() for v in vocabulary]
    leaks = converse_leaks(split, strings, table, bank)
    if leaks:
        pairs = "; ".join(f"{s!r} with {', '.join(map(repr, base))}" for s, base in list(leaks.items())[:8])
        more = f" and {len(leaks) - 8} more" if len(leaks) > 8 else ""
        raise LeakError(f"checkpoint {checkpoint}: its bank holds no novel predicate of split {split.name!r}, yet its "
                        f"converse table would average {len(leaks)} novel string(s) with a trained converse on the "
                        f"reversed pair, scoring them half by base supervision: {pairs}{more}. Score it with "
                        "converse: false (systems[].converse)")
    return sorted(converse_leaks(split, strings, converse_map(strings), bank))


def _infer(checkpoint: str, regions: pa.Table, vocabulary: list[str], per_pair: int, out: str, split: PredicateSplit,
           converse: bool | None = None) -> tuple[str, list[str], bool, list[str]]:
    """Run one checkpoint; (predictions path, its training bank's strings, whether it scored with converse
    scoring, the novel strings scored without their trained converse). The converse check runs before any
    image is read."""
    from relate.api import load_model

    predictor = load_model(checkpoint, converse=converse)
    withheld = _converse_check(split, checkpoint, vocabulary, predictor)
    table = predictor.predict_table(regions, vocabulary, per_pair=per_pair)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out)
    return out, list(predictor.bank.strings), predictor.converse, withheld


def _score(cfg: OvRSGGConfig, split: PredicateSplit, corpus: pa.Table, predicates: list[str], predictions: str) -> list[dict]:
    from relate.metrics import load_detections, load_ground_truth, load_predictions

    b = cfg.benchmark
    fold = _fold(b)
    gt = load_ground_truth(corpus)
    det = None if b.detections is None else load_detections(pq.read_table(b.detections), gt, name=b.detections)
    nb = None if det is None else dict(zip(gt.image_ids.tolist(), det.n_boxes.tolist()))
    preds = load_predictions(predictions, gt, n_boxes=nb)
    label_set = list(dict.fromkeys(fold.get(p, p) for p in (_vocabulary(b, predicates) if fold else predicates)))
    novel = list(dict.fromkeys(fold.get(p, p) for p in split.novel))
    if fold:
        gt = fold_ground_truth(gt, fold)
        preds = fold_predictions(preds, fold, gt)
    return [ovr_scores(gt, preds, novel, label_set=label_set, ks=cfg.ks, matcher=m, detections=det,
                       iou_threshold=b.iou_threshold, count_k=cfg.count_k) for m in cfg.matchers]


# --------------------------------------------------------------------------- report

def _pct(x: float) -> str:
    return "nan" if x != x else f"{100 * x:.1f}"


def table8(rows: list[dict], ks: list[int], k: int = 50) -> str:
    """Table 8's layout: per system and matcher, Base+Novel and Novel R@K, mR@k both ways, the
    class count, and whether the system has seen the novel predicates."""
    head = (["system", "novel seen", "matcher"] + [f"B+N R@{x}" for x in ks] + [f"Novel R@{x}" for x in ks] +
            [f"B+N mR@{k}", f"Novel mR@{k}", "predicates predicted"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        seen = {True: "yes", False: "no (compliant)", None: "not stated"}[r["novel_seen"]]
        cells = [r["system"], seen, r["matcher"]] + [_pct(r[f"R@{x}"]) for x in ks] + \
                [_pct(r[f"novel_R@{x}"]) for x in ks] + [_pct(r[f"mR@{k}"]), _pct(r[f"novel_mR@{k}"]),
                                                         f"{r['predicted']}/{r['n_predicates']} "
                                                         f"({r['predicted_novel']}/{r['n_novel']} novel)"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _gaps(rows: list[dict], k: int) -> list[dict]:
    """Non-compliant minus compliant, per matcher (each pair of a seen and an unseen system)."""
    out = []
    for m in dict.fromkeys(r["matcher"] for r in rows):
        seen = [r for r in rows if r["matcher"] == m and r["novel_seen"] is True]
        clean = [r for r in rows if r["matcher"] == m and r["novel_seen"] is False]
        for a in seen:
            for c in clean:
                out.append({"matcher": m, "non_compliant": a["system"], "compliant": c["system"],
                            f"d_R@{k}": a[f"R@{k}"] - c[f"R@{k}"], f"d_novel_R@{k}": a[f"novel_R@{k}"] - c[f"novel_R@{k}"],
                            f"d_mR@{k}": a[f"mR@{k}"] - c[f"mR@{k}"],
                            f"d_novel_mR@{k}": a[f"novel_mR@{k}"] - c[f"novel_mR@{k}"]})
    return out


def _figure(rows: list[dict], k: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    labels = [f"{r['system']}\n{r['matcher']}" for r in rows]
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [100 * r[f"R@{k}"] for r in rows], 0.4, label=f"Base+Novel R@{k}")
    ax.bar(x + 0.2, [100 * r[f"novel_R@{k}"] for r in rows], 0.4, label=f"Novel R@{k}")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("recall (%)")
    ax.legend(fontsize=8)
    ax.set_title("OvR-SGG: compliant and non-compliant systems", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------- job

def _require_inputs(cfg: OvRSGGConfig) -> None:
    """Every input exists before any inference: the benchmark's corpus, each checkpoint and predictions file."""
    from relate.data.corpus import require_corpus
    from relate.job_inputs import MAKE_CHECKPOINT, MAKE_WORLD, require_checkpoint, require_path

    b = cfg.benchmark
    if b.reader == "corpus":
        require_corpus(b.path, "benchmark corpus", MAKE_WORLD, [b.split])
    else:
        require_path(b.path, f"{b.reader} benchmark folder", f"python -m eval_jobs.prepare {b.reader} --describe")
    for s in cfg.systems:
        if s.checkpoint is not None:
            require_checkpoint(s.checkpoint, f"checkpoint of system {s.name!r}", MAKE_CHECKPOINT)
        if s.predictions is not None:
            require_path(s.predictions, f"predictions of system {s.name!r}", "python -m eval_jobs.convert --help")


def main(cfg: OvRSGGConfig) -> dict:
    """Score every system under every matcher; returns the results also written to ``out_dir``."""
    t0 = time.perf_counter()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "config.yaml")
    split = load_predicate_split(cfg.split)  # a bad split file fails before any work
    _require_inputs(cfg)
    corpus, predicates = _corpus(cfg.benchmark)
    vocab = _vocabulary(cfg.benchmark, predicates)
    name = run_name("ovr_sgg", cfg.out_dir)
    ckpts = [s for s in cfg.systems if s.checkpoint is not None]
    done: dict[str, tuple] = {s.name: (s.predictions, None, None, None) for s in cfg.systems
                              if s.predictions is not None}
    if ckpts:
        regions = _regions(cfg.benchmark, corpus)
        args = [(s.resolve_checkpoint(), regions, vocab, cfg.per_pair, str(out / "predictions" / f"{s.name}.parquet"),
                 split, s.converse) for s in ckpts]
        progress = Progress(name, "inference systems", len(ckpts))
        if cfg.use_ray:
            import ray

            if not ray.is_initialized():
                ray.init()
            task = ray.remote(**ray_remote_args(cfg.inference))(_infer)
            res = gather(ray, [task.options(name=f"{name}:infer:{s.name}").remote(*a) for s, a in zip(ckpts, args)],
                         progress)
        else:
            res = []
            for a in args:
                res.append(_infer(*a))
                progress.update()
        done.update({s.name: r for s, r in zip(ckpts, res)})
    rows = []
    for s in cfg.systems:
        path, bank, converse, withheld = done[s.name]
        leaks = None if bank is None else leaked_forms(split, bank)
        seen = s.novel_seen if leaks is None else bool(leaks)
        for r in _score(cfg, split, corpus, predicates, path):
            rows.append({"system": s.name, "novel_seen": seen,
                         "novel_forms_in_bank": None if leaks is None else sorted(leaks),
                         "converse_scoring": converse, "converse_withheld": withheld, **r})
    k = 50 if 50 in cfg.ks else cfg.ks[0]
    gaps = _gaps(rows, k)
    pq.write_table(pa.Table.from_pylist(rows), out / "ovr_sgg.parquet")
    md = [f"OvR-SGG, split {split.name} ({len(split.base)} base / {len(split.novel)} novel; source: {split.source}); "
          f"{cfg.benchmark.split} split of {cfg.benchmark.path}, "
          f"{'detector boxes' if cfg.benchmark.detections else 'GT boxes'}, graph-constrained, recall in %", "",
          table8(rows, cfg.ks, k)]
    if gaps:
        md += ["", "Non-compliant minus compliant (points):", "",
               "| matcher | non-compliant | compliant | " + " | ".join(
                   c[2:] for c in gaps[0] if c.startswith("d_")) + " |",
               "|" + "---|" * (3 + sum(c.startswith("d_") for c in gaps[0]))]
        md += ["| " + " | ".join([g["matcher"], g["non_compliant"], g["compliant"]] +
                                 [f"{100 * v:+.1f}" for c, v in g.items() if c.startswith("d_")]) + " |" for g in gaps]
    for r in {r["system"]: r for r in rows if r["converse_withheld"]}.values():
        md += ["", f"{r['system']} scores with converse scoring; {len(r['converse_withheld'])} novel string(s) without "
                   f"their trained converse: {', '.join(r['converse_withheld'])}"]
    text = "\n".join(md) + "\n"
    (out / "table.md").write_text(text)
    _figure(rows, k, out / "ovr_sgg.png")
    result = {"split": {"name": split.name, "source": split.source, "base": list(split.base), "novel": list(split.novel)},
              "rows": rows, "gaps": gaps, "seconds": time.perf_counter() - t0}
    (out / "results.json").write_text(json.dumps(result, indent=1))
    print(text, flush=True)
    return result


if __name__ == "__main__":
    import eval_jobs.ovr_sgg as _job

    _job.main(parse_job_args(_job.OvRSGGConfig, description="OvR-SGG: Tables 8 and 24 for any systems"))
