"""Representation probes (seed 001, § 7.3, App. F): linear CKA by depth between two models,
cross-image 1-NN retrieval of the object class and of the predicate from the interaction-region
(contact) feature of each, with chance levels, and each model's patch-similarity class and relation
selectivity (relate.probe.representation.PatchSelectivity).

    python -m eval_jobs.representation --set out_dir=runs/analyses/representation
    python -m eval_jobs.representation --set a.random_like=CKPT --set b.checkpoint=CKPT   # initial vs trained

Writes into ``out_dir``: ``cka.parquet`` (one row per depth), ``retrieval.parquet`` (one row per
model and target), ``selectivity.parquet`` (one row per model), ``representation.md``,
``representation.png`` (CKA against depth) and the resolved ``config.yaml``. Both models see the
same scenes and are read on the same forced ground-truth pairs, so their rows align. Small enough
to run in-process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from eval_jobs.analysis_inputs import (ModelSourceConfig, ScenesConfig, load_analysis_model, markdown_table,
                                       scene_batches, write_table)
from relate.config import StrictConfig, dump_config, parse_job_args
from relate.probe.representation import cka_by_depth, model_features, model_patch_selectivity, nn1_retrieval
from relate.storage import Location

__all__ = ["RepresentationConfig", "RepresentationResult", "main"]


class RepresentationConfig(StrictConfig):
    a: ModelSourceConfig = Field(default_factory=lambda: ModelSourceConfig(seed=0), description="first model (e.g. initial)")
    b: ModelSourceConfig = Field(default_factory=lambda: ModelSourceConfig(seed=1), description="second model (e.g. trained)")
    scenes: ScenesConfig = Field(default_factory=ScenesConfig, description="synthetic scenes both models read")
    max_rows: int = Field(4096, ge=16, description="backbone tokens kept per depth (a fixed random subset)")
    out_dir: Location = Field("runs/analyses/representation", description="folder for the tables, figure and config")


@dataclass
class RepresentationResult:
    cka: list[dict]
    retrieval: list[dict]
    selectivity: list[dict]
    markdown: str
    out_dir: str
    seconds: float


def _figure(cka: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ax.plot(range(len(cka)), [r["linear_cka"] for r in cka], marker="o")
    ax.set_xticks(range(len(cka)), [r["depth"] for r in cka], rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1.02); ax.set_ylabel("linear CKA"); ax.set_title(title, fontsize=9)
    fig.tight_layout(); fig.savefig(path, dpi=110); plt.close(fig)


def main(cfg: RepresentationConfig) -> RepresentationResult:
    t0 = time.perf_counter()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "config.yaml")
    feats, names, selectivity = [], [], []
    scenes = cfg.scenes
    for src in (cfg.a, cfg.b):
        model, bank, strings = load_analysis_model(src)
        if scenes.side is None:  # both models read the same pixels: the first model's input side
            scenes = scenes.model_copy(update={"side": model.cfg.backbone.img_size})
        # the same scenes and forced pairs for both; each model scores against its own bank
        batches = scene_batches(scenes, model, bank, strings)
        feats.append(model_features(model, batches, cfg.max_rows))
        names.append(src.name())
        ps = model_patch_selectivity(model, batches)
        selectivity.append(dict(model=src.name(), class_selectivity=ps.class_selectivity,
                                relation_selectivity=ps.relation_selectivity, partner_win_rate=ps.partner_win_rate,
                                partner_win_chance=0.5, queries=ps.relation_queries, win_queries=ps.win_queries))
    cka = [{"depth": k, "linear_cka": v, "rows": int(feats[0].depths[k].shape[0])}
           for k, v in cka_by_depth(*feats).items()]
    retrieval = []
    for name, f in zip(names, feats):
        for target, labels in (("object class", f.pair_object_class), ("predicate", f.pair_predicate)):
            r = nn1_retrieval(f.contact, labels, f.pair_image)
            retrieval.append(dict(model=name, target=target, nn1_accuracy=r.accuracy, chance_majority=r.chance_majority,
                                  chance_random=r.chance_random, n=r.n, classes=r.classes))
    write_table([{"a": names[0], "b": names[1], **r} for r in cka], out, "cka")
    write_table(retrieval, out, "retrieval")
    write_table(selectivity, out, "selectivity")
    md = (f"# Representation probes: {names[0]} vs {names[1]}\n\n{cfg.scenes.images} synthetic scenes.\n\n"
          f"Linear CKA by depth:\n\n{markdown_table(cka)}\n\nCross-image 1-NN retrieval from the contact-region "
          f"feature (chance: majority share, and sum of squared class shares):\n\n{markdown_table(retrieval)}\n"
          f"\nPatch similarity from subject boxes on the backbone's dense map (per-image mean token removed):\n\n"
          f"{markdown_table(selectivity)}\n")
    (out / "representation.md").write_text(md)
    _figure(cka, out / "representation.png", f"{names[0]} vs {names[1]}")
    return RepresentationResult(cka, retrieval, selectivity, md, str(out), time.perf_counter() - t0)


if __name__ == "__main__":
    print(main(parse_job_args(RepresentationConfig, description=__doc__)).markdown)
