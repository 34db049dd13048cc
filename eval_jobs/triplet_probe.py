"""Triplet relatedness probe (seed 000) over a model zoo: one Ray task per model.

    python -m eval_jobs.triplet_probe --config eval_jobs/configs/triplet_probe_synthetic.yaml

Each task reserves ``task.resources`` (by default one GPU when the cluster has GPUs), extracts
features through ``actors.feature_extractor.FeatureExtractorActor`` with a Parquet cache keyed by
model and input content, and returns per-triplet correctness. The driver scores accuracy overall
and per axis, both gaps, bootstrap intervals, paired tests and an optional layer sweep, then
writes results.json, table.md and (given ImageNet accuracies) the Fig. 4-style scatter.png.

``readout`` adds the ablations the paper leaves open (all off by default, leaving the output as
before): other similarity metrics on every layer, a learned linear probe cross-validated over
triplets, and a zero-shot text baseline on the triplets' class names (docs/jobs/probe.md).
"""

from __future__ import annotations

import inspect
import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field, model_validator

from relate.config import StrictConfig, dump_config, parse_job_args
from relate.storage import Location, LocationValue
from relate.jobinfo import Progress, gather, run_name
from relate.job_inputs import require_path
from relate.placement import ResourcesConfig, ray_remote_args
from relate.data.poporo import TripletSet, read_triplet_manifest
from relate.data.synthetic_triplets import SyntheticTripletsConfig, write_synthetic_triplets
from relate.probe import (
    ModelRow, bootstrap_intervals, cosine_correct, format_markdown_table, format_paired_tests,
    format_text_table, paired_test, plot_scatter, score_triplets,
)
from relate.probe.cache import FINAL, FeatureCache, cached_features, model_fingerprint
from relate.probe.readouts import Similarity

__all__ = ["TripletProbeConfig", "ProbeModelConfig", "ProbeTaskConfig", "ReadoutConfig", "LinearProbeConfig",
           "TextBaselineConfig", "TripletProbeResult", "main", "probe_model"]


class ProbeModelConfig(StrictConfig):
    """One model (zoo entry + weights) to probe."""

    name: str = Field(description="zoo registry name (relate.zoo.zoo_names())")
    label: str | None = Field(default=None, description="row name in tables; defaults to name (set it to probe one entry twice)")
    pretrained: bool = Field(default=True, description="pretrained weights (False: random weights, for tests and demos)")
    checkpoint: str | None = Field(default=None, description="local weights file (required offline for pretrained models)")
    seed: int = Field(default=0, description="torch seed for random-weight builds")
    imagenet_top1: float | None = Field(default=None, ge=0, le=100, description="ImageNet top-1 in percent, for the Fig. 4 scatter")
    layers: list[int] = Field(default_factory=list, description="block indices for a layer sweep (negative counts from the end); empty: none")
    timesteps: list[int] = Field(default_factory=list, description="diffusion entries: a timestep sweep (seed 000 reports "
                                 "46.0-50.5% on POPORO across it), one feature per t at the entry's block, read as "
                                 "layers named 't{t}'; empty: none (the final feature is the entry's own t, 90)")
    layer_pool: Literal["avg", "head"] = Field(
        default="avg", description="how a swept block is pooled: 'avg' = spatial mean of its feature map (a ViT's "
                                   "patch tokens); 'head' = as the final readout pools (forward_head pre-logits: a "
                                   "ViT's class token after the final norm, a ResNet's global average; timm models)")

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


class LinearProbeConfig(StrictConfig):
    """A learned linear readout, cross-validated over triplets (relate.probe.linear_probe)."""

    enabled: bool = Field(default=False, description="fit and score the linear probe on every layer")
    n_splits: int = Field(default=5, ge=2, description="GroupKFold folds")
    C: float = Field(default=1.0, gt=0, description="inverse L2 strength of the logistic regression")
    features: Literal["product", "absdiff"] = Field(
        default="product", description="pair-difference features: q*t - q*d on unit features (a learned weighting "
                                       "of the cosine readout) or |q-d| - |q-t|")
    group_by: Literal["triplet", "query"] = Field(
        default="triplet", description="what never straddles train and test: each triplet, or every triplet "
                                       "sharing a query input")


class TextBaselineConfig(StrictConfig):
    """Zero-shot baseline from class names alone (relate.probe.text_baseline); needs manifest labels."""

    encoder: str = Field(default="minilm", description="relate.text encoder name (minilm is the offline default)")


class ReadoutConfig(StrictConfig):
    """Readout ablations; the defaults give today's single cosine readout and nothing more."""

    metrics: list[Similarity] = Field(default_factory=lambda: ["cosine"], min_length=1,
                                      description="similarities scored on every layer: cosine, euclidean, spearman")
    linear_probe: LinearProbeConfig = Field(default_factory=LinearProbeConfig, description="learned linear probe")
    text_baseline: TextBaselineConfig | None = Field(default=None, description="zero-shot class-name baseline; None: off")

    @model_validator(mode="after")
    def _check(self) -> "ReadoutConfig":
        if len(set(self.metrics)) != len(self.metrics):
            raise ValueError(f"readout.metrics repeats a metric: {self.metrics}")
        return self

    @property
    def is_default(self) -> bool:
        return self.metrics == ["cosine"] and not self.linear_probe.enabled and self.text_baseline is None


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
    readout: ReadoutConfig = Field(default_factory=ReadoutConfig, description="readout ablations (default: cosine only)")
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
    text_baseline: dict[str, Any] | None = None  # set when readout.text_baseline is


def probe_model(spec: ProbeModelConfig, triplets: TripletSet, cache_dir: str, batch_size: int,
                device: str = "cpu", readout: ReadoutConfig | None = None) -> dict[str, Any]:
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
    suffix = "" if spec.layer_pool == "avg" else f"_{spec.layer_pool}"  # its own cache column per pooling
    layer_names = [FINAL] + [f"block{i}{suffix}" for i in _resolved_layers(spec, ex)]
    if spec.timesteps:
        if not hasattr(ex, "encode_timesteps"):
            raise ValueError(f"{spec.display}: timesteps is a diffusion option; the {ex.entry.library} extractor of "
                             f"{spec.name!r} has no noise step")
        layer_names += [f"t{t}" for t in dict.fromkeys(spec.timesteps)]
    column = "path" if ex.input_kind == "image" else "label"

    def compute(idx: list[int]) -> dict[str, np.ndarray]:
        items = [uniq[i] for i in idx]
        out = {FINAL: np.concatenate([actor({column: np.array(items[j:j + batch_size], dtype=object)})["feature"]
                                      for j in range(0, len(items), batch_size)])}
        if spec.layers:
            kw = {} if spec.layer_pool == "avg" else {"pool": spec.layer_pool}
            layers = ex.encode_layers([load_image(p) for p in items], spec.layers, **kw)
            out |= {k + suffix: v for k, v in layers.items()}
        if spec.timesteps:
            out |= ex.encode_timesteps([load_image(p) for p in items], list(dict.fromkeys(spec.timesteps)))
        return out

    fp = model_fingerprint(spec.name, pretrained=spec.pretrained, checkpoint=spec.checkpoint, seed=spec.seed)
    feats, n_new = cached_features(FeatureCache(cache_dir, fp), keys, layer_names, compute)
    row_of = {u: i for i, u in enumerate(uniq)}
    idx = {r: np.array([row_of[u] for u in v]) for r, v in roles.items()}
    correct = {layer: cosine_correct(f[idx["query"]], f[idx["target"]], f[idx["distractor"]]).tolist()
               for layer, f in feats.items()}
    extra = _readout_ablations(readout, feats, idx) if readout is not None and not readout.is_default else {}
    return {**extra, "entry": ex.entry.summary(), "params": ex.num_params(), "dim": int(feats[FINAL].shape[1]),
            "preprocess": ex.preprocess.to_dict() if ex.preprocess else None, "correct": correct,
            "n_inputs": len(uniq), "n_extracted": n_new, "seconds": time.perf_counter() - t0,
            "device": device}


def _readout_ablations(readout: ReadoutConfig, feats: dict[str, np.ndarray],
                       idx: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per-triplet correctness under each similarity, and the linear probe's held-out correctness, per layer."""
    from relate.probe.linear_probe import cross_validated_probe
    from relate.probe.readouts import readout_correct

    roles = {layer: [f[idx[r]] for r in ("query", "target", "distractor")] for layer, f in feats.items()}
    out: dict[str, Any] = {"readouts": {m: {layer: readout_correct(*qtd, m).tolist() for layer, qtd in roles.items()}
                                        for m in readout.metrics}}
    lp = readout.linear_probe
    if lp.enabled:
        groups = idx["query"] if lp.group_by == "query" else None
        out["linear_probe"] = {layer: cross_validated_probe(*qtd, n_splits=lp.n_splits, C=lp.C, features=lp.features,
                                                            groups=groups).to_dict()
                               for layer, qtd in roles.items()}
    return out


def _resolved_layers(spec: ProbeModelConfig, ex: Any) -> list[int]:
    if not spec.layers:
        return []
    # The extractor names its taps by absolute index; ask it once on a blank image.
    from PIL import Image

    if spec.layer_pool != "avg" and "pool" not in inspect.signature(ex.encode_layers).parameters:
        raise ValueError(f"{spec.display}: layer_pool={spec.layer_pool!r} is not supported by the "
                         f"{ex.entry.library} extractor; use layer_pool='avg'")
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
    futures = [remote.options(name=f"{name}:{m.display}", **opts).remote(m, ref, cache_dir, cfg.task.batch_size,
                                                                           cfg.readout)
               for m in cfg.models]
    return gather(ray, futures, Progress(name, "models", len(futures)))


def _task_entry(spec: ProbeModelConfig, triplets: TripletSet, cache_dir: str, batch_size: int,
                readout: ReadoutConfig | None = None) -> dict[str, Any]:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"  # Ray exposes only the reserved GPU
    return probe_model(spec, triplets, cache_dir, batch_size, device, readout)


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
        if "readouts" in out:  # readout ablations: scored apart from the zero-shot cosine row above
            models[spec.display]["readouts"] = {
                metric: {layer: score_triplets(np.asarray(c, bool), rel, dis).to_dict() for layer, c in by_layer.items()}
                for metric, by_layer in out["readouts"].items()}
        if "linear_probe" in out:
            models[spec.display]["linear_probe"] = {
                layer: {"scores": score_triplets(np.asarray(r["correct"], bool), rel, dis).to_dict(),
                        **{k: v for k, v in r.items() if k != "correct"}}
                for layer, r in out["linear_probe"].items()}
    tests = []
    if cfg.paired.enabled:
        for (a, oa), (bb, ob) in itertools.combinations(zip(models, outs), 2):
            tests.append(paired_test(a, oa["correct"][FINAL], bb, ob["correct"][FINAL],
                                     n_perm=cfg.paired.n_permutations, seed=cfg.paired.seed))
    return rows, models, tests


def _text_baseline(cfg: TripletProbeConfig, triplets: TripletSet) -> dict[str, Any] | None:
    """Scores of the zero-shot class-name baseline under each readout metric (no image seen)."""
    if cfg.readout.text_baseline is None:
        return None
    from relate.probe.text_baseline import text_triplet_correct
    from relate.text import load_text_encoder

    enc = load_text_encoder(cfg.readout.text_baseline.encoder)
    names = triplets.role_inputs("label")
    correct = {m: text_triplet_correct(enc, names["query"], names["target"], names["distractor"], m)
               for m in cfg.readout.metrics}
    return {"encoder": enc.name,
            "scores": {m: score_triplets(c, triplets.relation_type, triplets.distractor_type).to_dict()
                       for m, c in correct.items()},
            "correct": {m: c.tolist() for m, c in correct.items()}}


def _score_row(label: str, s: dict[str, float]) -> str:
    vals = [s["overall"], s["CR"], s["TR"], s["CD"], s["SD"]]
    return (f"| {label} | " + " | ".join(f"{100 * v:.2f}" for v in vals)
            + f" | {100 * s['gap_cr_tr']:+.2f} | {100 * s['gap_cd_sd']:+.2f} |")


def _ablation_markdown(models: dict[str, dict[str, Any]], text: dict[str, Any] | None) -> str:
    """Readout ablation tables: zero-shot readouts per layer and metric, then the learned probe,
    then the text baseline, each under its own heading."""
    head = "| overall | CR | TR | CD | SD | Δ CR-TR | Δ CD-SD |"
    lines = []
    for name, m in models.items():
        if "readouts" in m:
            lines += [f"### Zero-shot readouts: {name}", "", "| layer | metric " + head, "|---" * 9 + "|"]
            lines += [_score_row(f"{layer} | {metric}", s)
                      for layer in next(iter(m["readouts"].values())) for metric, by in m["readouts"].items()
                      for s in [by[layer]]]
            lines.append("")
        if "linear_probe" in m:
            first = next(iter(m["linear_probe"].values()))
            lines += [f"### Learned linear probe (held-out, {first['n_splits']}-fold GroupKFold, "
                      f"{first['features']} features, C={first['C']}): {name}", "", "| layer " + head, "|---" * 8 + "|"]
            lines += [_score_row(layer, r["scores"]) for layer, r in m["linear_probe"].items()]
            lines.append("")
    if text is not None:
        lines += [f"### Zero-shot text baseline (class names only, {text['encoder']})", "", "| metric " + head,
                  "|---" * 8 + "|"]
        lines += [_score_row(metric, s) for metric, s in text["scores"].items()]
        lines.append("")
    return "\n".join(lines)


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
    if cfg.manifest is not None:  # a missing input: one line naming what makes it
        require_path(cfg.manifest, "triplet manifest (manifest)", "POPORO's manifest.csv (docs/jobs/probe.md), or "
                     "python -m pipelines.poporo_in --config FILE for PoporoIN")
    t0 = time.perf_counter()
    out_dir = Path(cfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out_dir / "config.yaml")
    manifest = cfg.manifest or write_synthetic_triplets(out_dir / "synthetic", cfg.synthetic)
    triplets = read_triplet_manifest(manifest)
    cache_dir = cfg.cache_dir or str(out_dir / "feature_cache")
    outs = _run_tasks(cfg, triplets, cache_dir)
    rows, models, tests = _score(cfg, triplets, outs)
    text = _text_baseline(cfg, triplets)
    title = f"{cfg.benchmark_name}: triplet relatedness accuracy ({len(triplets)} triplets)"
    table = format_markdown_table(rows, title)
    md = table + "\n" + _sweep_markdown(models) + ("\n" + format_paired_tests(tests) if tests else "")
    if not cfg.readout.is_default:
        md += "\n## Readout ablations\n\n" + _ablation_markdown(models, text)
    paths = {"config": str(out_dir / "config.yaml"), "manifest": str(manifest),
             "table": str(out_dir / "table.md"), "results": str(out_dir / "results.json")}
    (out_dir / "table.md").write_text(md)
    png = plot_scatter(rows, out_dir / "scatter.png", title=f"{cfg.benchmark_name}: ImageNet vs probe accuracy")
    if png is not None:
        paths["scatter"] = str(png)
    result = TripletProbeResult(cfg.benchmark_name, len(triplets), models, [t.to_dict() for t in tests],
                                table, paths, round(time.perf_counter() - t0, 2), text)
    saved = {k: v for k, v in result.__dict__.items() if not (k == "text_baseline" and v is None)}
    (out_dir / "results.json").write_text(json.dumps(saved, indent=1, default=float))
    print(f"\n{title}\n" + format_text_table(rows) + f"\n(results in {out_dir})")
    return result


if __name__ == "__main__":
    # run through the importable module, not __main__, so Ray workers unpickle tasks and configs by reference
    import eval_jobs.triplet_probe as _job

    _job.main(parse_job_args(_job.TripletProbeConfig, description=__doc__.splitlines()[0]))
