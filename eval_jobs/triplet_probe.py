"""Triplet relatedness probe (seed 000) over a model zoo: one Ray task per model.

    python -m eval_jobs.triplet_probe --config eval_jobs/configs/triplet_probe_synthetic.yaml

Each task reserves ``task.resources`` (by default one GPU when the cluster has GPUs), extracts
features through ``actors.feature_extractor.FeatureExtractorActor`` with a Parquet cache keyed by
model and input content, and returns per-triplet correctness. The driver scores accuracy overall
and per axis, both gaps, bootstrap intervals, paired tests and an optional layer sweep, then
writes results.json, table.md and (given ImageNet accuracies) the Fig. 4-style scatter.png.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from pydantic import Field, model_validator

from relate.config import StrictConfig, dump_config, parse_job_args
from relate.storage import Location, LocationValue
from relate.jobinfo import Progress, gather, run_name
from relate.placement import ResourcesConfig, ray_remote_args
from relate.data.poporo import TripletSet, read_triplet_manifest
from relate.data.synthetic_triplets import SyntheticTripletsConfig, write_synthetic_triplets
from relate.probe import (
    ModelRow, bootstrap_intervals, cosine_correct, format_markdown_table, format_paired_tests,
    format_text_table, paired_test, plot_scatter, score_triplets,
)
from relate.probe.cache import FINAL, FeatureCache, cached_features, model_fingerprint

__all__ = ["TripletProbeConfig", "ProbeModelConfig", "ProbeTaskConfig", "TripletProbeResult", "main", "probe_model"]


class ProbeModelConfig(StrictConfig):
    """One model (zoo entry + weights) to probe."""

    name: str = Field(description="zoo registry name (relate.zoo.zoo_names())")
    label: str | None = Field(default=None, description="row name in tables; defaults to name (set it to probe one entry twice)")
    pretrained: bool = Field(default=True, description="pretrained weights (False: random weights, for tests and demos)")
    checkpoint: str | None = Field(default=None, description="local weights file (required offline for pretrained models)")
    seed: int = Field(default=0, description="torch seed for random-weight builds")
    imagenet_top1: float | None = Field(default=None, ge=0, le=100, description="ImageNet top-1 in percent, for the Fig. 4 scatter")
    layers: list[int] = Field(default_factory=list, description="block indices for a layer sweep (negative counts from the end); empty: none")

    @property
    def display(self) -> str:
        return self.label or self.name


class ProbeTaskConfig(StrictConfig):
    """What each per-model Ray task reserves, and its batch size."""

    resources: ResourcesConfig = Field(default_factory=ResourcesConfig,
                                       description="per model task: CPUs (fractional is fine on small machines), GPUs "
                                                   "and custom resources such as {evaluator: 1}")
    gpu_when_available: bool = Field(default=True, description="when resources.num_gpus is 0 and the cluster has GPUs, "
                                                               "each task takes one GPU (one per probed model)")
    batch_size: int = Field(default=32, ge=1, description="images per forward pass")

    def remote_args(self, cluster_gpus: float) -> dict[str, Any]:
        """``.options()`` keyword arguments for a cluster with ``cluster_gpus`` GPUs now."""
        res = self.resources
        if res.num_gpus == 0 and self.gpu_when_available and cluster_gpus > 0:
            res = res.model_copy(update={"num_gpus": 1.0})
        return ray_remote_args(res)


class BootstrapConfig(StrictConfig):
    """Percentile bootstrap over triplets, stratified by annotation cell."""

    n_boot: int = Field(default=2000, ge=10, description="bootstrap resamples")
    level: float = Field(default=0.95, gt=0, lt=1, description="interval coverage")
    seed: int = Field(default=0, description="resampling seed (intervals are identical under the same seed)")
    stratified: bool = Field(default=True, description="resample within each CR/TR x CD/SD cell (cell sizes are fixed by design)")


class PairedConfig(StrictConfig):
    """Paired comparisons between every two models on the same triplets."""

    enabled: bool = Field(default=True, description="run McNemar and permutation tests for all model pairs")
    n_permutations: int = Field(default=10000, ge=100, description="sign-flip permutations per pair")
    seed: int = Field(default=0, description="permutation seed")


class TripletProbeConfig(StrictConfig):
    """The triplet probe job."""

    manifest: str | None = Field(default=None, description="triplet manifest (.csv/.parquet); exclusive with synthetic")
    synthetic: SyntheticTripletsConfig | None = Field(default=None, description="generate a synthetic triplet set into output_dir/synthetic instead of reading a manifest")
    benchmark_name: str = Field(default="triplets", description="benchmark name for table titles (e.g. POPORO, PoporoIN)")
    models: list[ProbeModelConfig] = Field(min_length=1, description="models to probe, in table order")
    output_dir: Location = Field(default="runs/triplet_probe", description="folder for results.json, table.md, scatter.png")
    cache_dir: LocationValue | None = Field(default=None, description="feature cache folder; default output_dir/feature_cache")
    task: ProbeTaskConfig = Field(default_factory=ProbeTaskConfig, description="per-model task resources and batch size")
    bootstrap: BootstrapConfig = Field(default_factory=BootstrapConfig, description="bootstrap intervals")
    paired: PairedConfig = Field(default_factory=PairedConfig, description="paired tests between models")
    ray_address: str | None = Field(default=None, description="Ray address; None starts or joins a local instance")

    @model_validator(mode="after")
    def _check(self) -> "TripletProbeConfig":
        if (self.manifest is None) == (self.synthetic is None):
            raise ValueError("set exactly one of manifest and synthetic")
        names = [m.display for m in self.models]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"model rows must be unique; repeated: {dup} (give each a label)")
        return self


@dataclass
class TripletProbeResult:
    """Scores per model (fractions), intervals, paired tests, and the files written."""

    benchmark: str
    n_triplets: int
    models: dict[str, dict[str, Any]]
    paired: list[dict[str, Any]]
    table: str
    paths: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0


def probe_model(spec: ProbeModelConfig, triplets: TripletSet, cache_dir: str, batch_size: int,
                device: str = "cpu") -> dict[str, Any]:
    """Extract (or reuse) features for one model and return its per-triplet correctness."""
    from actors.feature_extractor import FeatureExtractorActor
    from relate.zoo import ExtractorConfig, content_hash, load_image

    t0 = time.perf_counter()
    cfg = ExtractorConfig(name=spec.name, pretrained=spec.pretrained, checkpoint=spec.checkpoint,
                          device=device, batch_size=batch_size, seed=spec.seed)
    actor = FeatureExtractorActor(cfg)
    ex = actor.extractor
    roles = triplets.role_inputs(ex.input_kind)
    uniq = list(dict.fromkeys(itertools.chain(*roles.values())))
    keys = [content_hash(Path(u).read_bytes() if ex.input_kind == "image" else u) for u in uniq]
    layer_names = [FINAL] + [f"block{i}" for i in _resolved_layers(spec, ex)]
    column = "path" if ex.input_kind == "image" else "label"

    def compute(idx: list[int]) -> dict[str, np.ndarray]:
        items = [uniq[i] for i in idx]
        out = {FINAL: np.concatenate([actor({column: np.array(items[j:j + batch_size], dtype=object)})["feature"]
                                      for j in range(0, len(items), batch_size)])}
        if spec.layers:
            out |= ex.encode_layers([load_image(p) for p in items], spec.layers)
        return out

    fp = model_fingerprint(spec.name, pretrained=spec.pretrained, checkpoint=spec.checkpoint, seed=spec.seed)
    feats, n_new = cached_features(FeatureCache(cache_dir, fp), keys, layer_names, compute)
    row_of = {u: i for i, u in enumerate(uniq)}
    idx = {r: np.array([row_of[u] for u in v]) for r, v in roles.items()}
    correct = {layer: cosine_correct(f[idx["query"]], f[idx["target"]], f[idx["distractor"]]).tolist()
               for layer, f in feats.items()}
    return {"entry": ex.entry.summary(), "params": ex.num_params(), "dim": int(feats[FINAL].shape[1]),
            "preprocess": ex.preprocess.to_dict() if ex.preprocess else None, "correct": correct,
            "n_inputs": len(uniq), "n_extracted": n_new, "seconds": time.perf_counter() - t0,
            "device": device}


def _resolved_layers(spec: ProbeModelConfig, ex: Any) -> list[int]:
    if not spec.layers:
        return []
    # The extractor names its taps by absolute index; ask it once on a blank image.
    from PIL import Image

    probe = ex.encode_layers([Image.new("RGB", (8, 8))], spec.layers)
    return [int(k.removeprefix("block")) for k in probe]


def _run_tasks(cfg: TripletProbeConfig, triplets: TripletSet, cache_dir: str) -> list[dict[str, Any]]:
    import ray

    if not ray.is_initialized():
        ray.init(address=cfg.ray_address, ignore_reinit_error=True, log_to_driver=False)
    name = run_name("probe", cfg.output_dir)
    remote = ray.remote(_task_entry)
    opts = dict(cfg.task.remote_args(ray.cluster_resources().get("GPU", 0)), max_retries=1)
    ref = ray.put(triplets)
    futures = [remote.options(name=f"{name}:{m.display}", **opts).remote(m, ref, cache_dir, cfg.task.batch_size)
               for m in cfg.models]
    return gather(ray, futures, Progress(name, "models", len(futures)))


def _task_entry(spec: ProbeModelConfig, triplets: TripletSet, cache_dir: str, batch_size: int) -> dict[str, Any]:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"  # Ray exposes only the reserved GPU
    return probe_model(spec, triplets, cache_dir, batch_size, device)


def _score(cfg: TripletProbeConfig, triplets: TripletSet, outs: Sequence[dict[str, Any]]):
    rows, models = [], {}
    rel, dis = triplets.relation_type, triplets.distractor_type
    b = cfg.bootstrap
    for spec, out in zip(cfg.models, outs):
        correct = np.asarray(out["correct"][FINAL], dtype=bool)
        scores = score_triplets(correct, rel, dis)
        ivs = bootstrap_intervals(correct, rel, dis, n_boot=b.n_boot, level=b.level, seed=b.seed,
                                  stratified=b.stratified)
        sweep = {layer: score_triplets(np.asarray(c, bool), rel, dis).to_dict()
                 for layer, c in out["correct"].items() if layer != FINAL}
        params_m = out["params"] / 1e6 if out["params"] else None
        rows.append(ModelRow(spec.display, out["entry"]["paradigm"], params_m, spec.imagenet_top1, scores, ivs))
        models[spec.display] = {
            "scores": scores.to_dict(), "ci": {k: v.to_list() for k, v in ivs.items()},
            "layer_sweep": sweep, "params_m": params_m, "imagenet_top1": spec.imagenet_top1,
            "feature_dim": out["dim"], "entry": out["entry"], "preprocess": out["preprocess"],
            "n_inputs": out["n_inputs"], "n_extracted": out["n_extracted"],
            "seconds": round(out["seconds"], 3), "device": out["device"], "correct": out["correct"][FINAL],
        }
    tests = []
    if cfg.paired.enabled:
        for (a, oa), (bb, ob) in itertools.combinations(zip(models, outs), 2):
            tests.append(paired_test(a, oa["correct"][FINAL], bb, ob["correct"][FINAL],
                                     n_perm=cfg.paired.n_permutations, seed=cfg.paired.seed))
    return rows, models, tests


def _sweep_markdown(models: dict[str, dict[str, Any]]) -> str:
    lines = []
    for name, m in models.items():
        if not m["layer_sweep"]:
            continue
        lines += [f"### Layer sweep: {name}", "", "| layer | overall | CR | TR | CD | SD | Δ CR-TR | Δ CD-SD |",
                  "|---|---|---|---|---|---|---|---|"]
        for layer, s in [("final", m["scores"]), *m["layer_sweep"].items()]:
            vals = [s["overall"], s["CR"], s["TR"], s["CD"], s["SD"]]
            lines.append(f"| {layer} | " + " | ".join(f"{100 * v:.2f}" for v in vals)
                         + f" | {100 * s['gap_cr_tr']:+.2f} | {100 * s['gap_cd_sd']:+.2f} |")
        lines.append("")
    return "\n".join(lines)


def main(cfg: TripletProbeConfig) -> TripletProbeResult:
    """Run the probe for every model in ``cfg`` and write the report folder."""
    t0 = time.perf_counter()
    out_dir = Path(cfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out_dir / "config.yaml")
    manifest = cfg.manifest or write_synthetic_triplets(out_dir / "synthetic", cfg.synthetic)
    triplets = read_triplet_manifest(manifest)
    cache_dir = cfg.cache_dir or str(out_dir / "feature_cache")
    outs = _run_tasks(cfg, triplets, cache_dir)
    rows, models, tests = _score(cfg, triplets, outs)
    title = f"{cfg.benchmark_name}: triplet relatedness accuracy ({len(triplets)} triplets)"
    table = format_markdown_table(rows, title)
    md = table + "\n" + _sweep_markdown(models) + ("\n" + format_paired_tests(tests) if tests else "")
    paths = {"config": str(out_dir / "config.yaml"), "manifest": str(manifest),
             "table": str(out_dir / "table.md"), "results": str(out_dir / "results.json")}
    (out_dir / "table.md").write_text(md)
    png = plot_scatter(rows, out_dir / "scatter.png", title=f"{cfg.benchmark_name}: ImageNet vs probe accuracy")
    if png is not None:
        paths["scatter"] = str(png)
    result = TripletProbeResult(cfg.benchmark_name, len(triplets), models, [t.to_dict() for t in tests],
                                table, paths, round(time.perf_counter() - t0, 2))
    (out_dir / "results.json").write_text(json.dumps(result.__dict__, indent=1, default=float))
    print(f"\n{title}\n" + format_text_table(rows) + f"\n(results in {out_dir})")
    return result


if __name__ == "__main__":
    # run through the importable module, not __main__, so Ray workers unpickle tasks and configs by reference
    import eval_jobs.triplet_probe as _job

    _job.main(parse_job_args(_job.TripletProbeConfig, description=__doc__.splitlines()[0]))
