"""Configuration of the OV-SGG-Bench job (eval_jobs.ovsgg): benchmarks and their axes, systems,
the optional inference stage, the A3 synonym matcher, the protocol and the bootstrap."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from eval_jobs.intervals import BootstrapSpec
from relate.config import StrictConfig
from relate.storage import Location, LocationValue
from relate.data.readers import BenchmarkData
from relate.placement import ResourcesConfig

__all__ = ["BenchmarkSpec", "SystemSpec", "InferenceSpec", "SynonymSpec", "OVSGGConfig"]


class BenchmarkSpec(StrictConfig):
    name: str = Field(description="key systems use for this benchmark's predictions file")
    axis: Literal["A1", "A2", "A3", "A4", "A6"] = Field(description="the axis this benchmark scores")
    reader: str = Field(description="registered reader (vg150, indoorvg, psg, haystack, hico_det, "
                                    "spatialsense) or 'parquet' for a CORPUS_SCHEMA file")
    path: Location = Field(description="native dataset folder/file, or the corpus Parquet for reader 'parquet'")
    split: str = Field(default="test", description="split to evaluate")
    detections: LocationValue | None = Field(default=None, description="A4: IMAGE_SCHEMA Parquet of the shared detector's boxes")
    iou_threshold: float = Field(default=0.5, gt=0, le=1, description="A4: IoU for a detection to match a GT box")
    require_category: bool | None = Field(
        default=None, description="whether a box links to a GT box only under the same label: unset scores labels "
        "whenever the system predicts them (a scene-graphs file whose objects carry labels: sgcls, sgdet) and "
        "links by IoU alone where it predicts none (a label-free system's file; plain predictions on the shared "
        "A4 detector's boxes, whose classes are the detector's); true or false forces label-scored or "
        "label-agnostic ('paper' only; 'sgb' always scores labels). Cells name it: recall.object_labels")
    min_support: int = Field(default=5, ge=1, description="A2: positives a predicate needs to enter mean fAP")
    vocabulary_size: int | None = Field(default=None, ge=1, description="V for the 1/V recall chance "
                                        "(default: the benchmark's own predicate list)")
    vocabulary: str | None = Field(
        default=None, description="A3 only: the strings the system answers from and V of MRR, median rank and "
        "chance: 'packaged' (the default for A3: relate.text.build_vocabulary, 19,291 strings), 'benchmark' (its "
        "own predicate list, as A1 supplies it) or a vocabulary file, one string per line")
    per_pair: int | None = Field(default=None, ge=1, description="answers per region pair the inference stage "
                                 "asks predict_fn for (default 3; 25 on A3, where median rank and MRR read "
                                 "how deep the GT string sits; deeper than this counts as unranked)")
    reader_options: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="extra keyword arguments of the reader, e.g. h5_name, box_scale, "
                                          "boxes_from, json_name (see relate.data.readers)")

    @model_validator(mode="after")
    def _a4_needs_detections(self) -> "BenchmarkSpec":
        if self.axis == "A4" and not self.detections:
            raise ValueError(f"benchmark {self.name!r}: axis A4 needs 'detections' (the shared detector's boxes)")
        if self.vocabulary is not None and self.axis != "A3":
            raise ValueError(f"benchmark {self.name!r}: 'vocabulary' is for axis A3 (the model answers from it); "
                             f"axis {self.axis} scores the benchmark's own predicates")
        return self

    def answer_vocabulary(self, bench: BenchmarkData) -> tuple[str, list[str]]:
        """(name, strings) the system answers from on this benchmark: A3's vocabulary, else the
        benchmark's predicate list."""
        choice = self.vocabulary or ("packaged" if self.axis == "A3" else "benchmark")
        if choice == "benchmark":
            return "benchmark", list(bench.predicates)
        if choice == "packaged":
            from relate.text.vocabulary import build_vocabulary

            return "packaged", build_vocabulary()
        from relate.text.vocabulary import load_vocabulary_file

        return choice, load_vocabulary_file(choice)

    def answers_per_pair(self) -> int:
        return self.per_pair or (25 if self.axis == "A3" else 3)


class SystemSpec(StrictConfig):
    name: str = Field(description="system name in the tables")
    predictions: dict[str, LocationValue] = Field(default_factory=dict, description="benchmark name -> predictions Parquet")
    a5: float | None = Field(default=None, ge=0, description="A5 from its own job: judged bits per image "
                             "divided by the annotation's bits (enters the composite when present)")
    a5_from: LocationValue | None = Field(default=None, description="a judge run (eval_jobs.judge output folder or its "
                                "result.json) to read this system's A5 from; exclusive with a5")
    train_corpus: LocationValue | None = Field(default=None, description="CORPUS_SCHEMA Parquet of this system's "
                                     "training data, for the shared triplet mass beside its A1 cells")

    @model_validator(mode="after")
    def _one_a5(self) -> "SystemSpec":
        if self.a5 is not None and self.a5_from is not None:
            raise ValueError(f"system {self.name!r}: set a5 or a5_from, not both")
        return self

    def resolve_a5(self) -> float | None:
        """A5 given inline, read from a judge run (null when the judge left it unscored), or None."""
        if self.a5_from is None:
            return self.a5
        from eval_jobs.judge import load_a5

        p = Path(self.a5_from)
        if not (p / "result.json" if p.is_dir() else p).is_file():
            raise FileNotFoundError(f"system {self.name!r}: a5_from={self.a5_from!r} has no judge result.json")
        return load_a5(p, self.name)


class InferenceSpec(StrictConfig):
    system: str = Field(description="the system whose missing prediction files inference writes")
    predict_fn: str = Field(default="eval_jobs.ovsgg:relate_api_predict",
                            description="'module:function' taking (regions table, vocabulary[, checkpoint=]) "
                                        "and returning a PREDICTIONS_SCHEMA table")
    out_dir: str = Field(default="predictions", description="folder (under out_dir) for the written files")
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig,
                                       description="what each inference task (one per benchmark) reserves, e.g. "
                                                   "{num_gpus: 1, resources: {evaluator: 1}} for one A100 of the "
                                                   "evaluation group")
    checkpoint: LocationValue | None = Field(default=None, description="checkpoint folder or URI passed to predict_fn as "
                                   "checkpoint=... (the default predict_fn loads it with relate.api), or a "
                                   "pointer file holding one, such as the LATEST file a training run writes")

    def resolve_checkpoint(self) -> str | None:
        """The checkpoint itself: a pointer file is read (its one line names the checkpoint)."""
        if self.checkpoint is None or not Path(self.checkpoint).is_file():
            return self.checkpoint
        try:
            target = Path(self.checkpoint).read_text(encoding="utf-8", errors="strict").strip()
        except UnicodeDecodeError:
            target = "\0"
        if not target:
            raise ValueError(f"inference.checkpoint {self.checkpoint!r} is an empty pointer file")
        if "\n" in target or len(target) > 4096 or not target.isprintable():
            raise ValueError(f"inference.checkpoint {self.checkpoint!r} is a file but not a pointer file (one line "
                             "naming a checkpoint folder or URI, as a training run's LATEST): give the checkpoint "
                             "folder itself")
        return target


class SynonymSpec(StrictConfig):
    encoder: str = Field(default="minilm", description="text encoder (relate.text.encoders) defining the space")
    groups: str = Field(default="lexicon", description="'lexicon' (synthetic world) or a JSON {group: [strings]} "
                                                       "file to calibrate the threshold on")
    threshold: float | None = Field(default=None, description="fixed cosine threshold; only valid for 'encoder'")


class OVSGGConfig(StrictConfig):
    out_dir: Location = Field(default="runs/ovsgg", description="where results.json, table.md and radar.png go")
    benchmarks: list[BenchmarkSpec] = Field(default_factory=list, description="benchmarks and their axes")
    systems: list[SystemSpec] = Field(default_factory=list, description="our model and any baselines")
    ks: list[int] = Field(default=[20, 50, 100], description="recall cut-offs")
    headline_k: int = Field(default=50, description="K of the headline cells (F1@K, wR@K, mR@K)")
    graph_constrained: bool = Field(default=True, description="graph-constrained recall (the protocol default)")
    matcher: Literal["one_to_one", "legacy"] = Field(default="one_to_one", description="triplet matcher of the "
                                                     "'paper' protocol ('sgb' always credits many-to-many)")
    protocol: Literal["paper", "sgb"] = Field(
        default="paper", description="A1/A4 recall rules: 'paper' (dedup GT, every GT image counts, mR over "
        "predicates with GT) or 'sgb' (Scene-Graph-Benchmark.pytorch's evaluation: +1-pixel float32 IoU with "
        "labels, GT rows as given, images without GT or without predictions skipped, mR over the benchmark's "
        "whole predicate list, triplet scores times object scores; the vg150 / indoorvg readers then load the "
        "ground truth as its loader does: integer corners, clipping to the last pixel, self relations kept)")
    num_cpus_per_task: float = Field(default=0.5, gt=0, description="CPUs per scoring task")
    inference: InferenceSpec | None = Field(default=None, description="optional model inference step")
    synonyms: SynonymSpec = Field(default_factory=SynonymSpec, description="A3 synonym matcher")
    bootstrap: BootstrapSpec = Field(default_factory=BootstrapSpec, description="intervals over images for every "
                                     "cell, axis, the OVS and each leave-one-axis-out value, paired across systems")
    prior_watch: list[str] = Field(default_factory=list, description="H.3: predicates that need contact (e.g. "
                                   "'wearing'); their disjoint-box rate is compared with the system's training data")
    use_ray: bool = Field(default=True, description="run stages as Ray tasks (False: in-process, for debugging)")

    @model_validator(mode="after")
    def _consistent(self) -> "OVSGGConfig":
        names = [b.name for b in self.benchmarks]
        if len(set(names)) != len(names):
            raise ValueError(f"benchmark names must be unique, got {names}")
        if self.protocol == "sgb" and "matcher" in self.model_fields_set and self.matcher != "legacy":
            raise ValueError(f"protocol 'sgb' credits many-to-many (matcher 'legacy'); got matcher {self.matcher!r}")
        agnostic = [b.name for b in self.benchmarks if b.require_category is False]
        if self.protocol == "sgb" and agnostic:
            raise ValueError(f"protocol 'sgb' links boxes by label; benchmark(s) {agnostic} ask for label-agnostic "
                             "scoring (require_category: false), a 'paper' option")
        if self.headline_k not in self.ks:
            raise ValueError(f"headline_k={self.headline_k} must be one of ks={self.ks}")
        for s in self.systems:
            unknown = sorted(set(s.predictions) - set(names))
            if unknown:
                raise ValueError(f"system {s.name!r}: predictions for unknown benchmark(s) {unknown}; have {names}")
        if self.inference and self.inference.system not in [s.name for s in self.systems]:
            raise ValueError(f"inference.system {self.inference.system!r} is not a configured system")
        return self
