"""Configuration of the relation train job: architecture, objective, data, optimiser and run settings.

The driver (``train_jobs.train_relation``) and each Ray Train worker (``train_jobs.relation_worker``,
which receives the config as a dict) validate a ``TrainRelationConfig``; it lives here so that
neither module has to import the other for it.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from relate.config import StrictConfig
from relate.losses import LossConfig
from relate.model.config import RelationModelConfig
from relate.placement import ResourcesConfig
from relate.storage import Location
from train_jobs.relation_data import DataConfig

__all__ = ["OptimConfig", "RunSettings", "TrainRelationConfig"]


class OptimConfig(StrictConfig):
    lr_head: float = Field(4e-4, gt=0, description="head learning rate (Table 14: 4e-4)")
    lr_backbone: float = Field(5e-5, ge=0, description="backbone learning rate (Table 14: 5e-5, 8x below)")
    weight_decay: float = Field(0.05, ge=0, description="AdamW weight decay")
    warmup_steps: int = Field(50, ge=0, description="linear warm-up steps before the cosine decay")
    epochs: int = Field(12, ge=1, description="passes over the training split (Table 14: 12)")
    max_steps: int | None = Field(None, gt=0, description="stop after this many optimiser steps (overrides epochs)")
    batch_size: int = Field(32, gt=0, description="images per worker per step (Table 14: 32 per GPU)")
    grad_clip: float = Field(1.0, gt=0, description="gradient norm clip")
    ema: float = Field(0.9998, ge=0, lt=1, description="EMA decay (Table 14: 0.9998); warmed up as (1+t)/(10+t)")
    amp: bool = Field(True, description="bfloat16 autocast on GPU (ignored on CPU)")


class RunSettings(StrictConfig):
    name: str = Field("relation", description="run name: a new run's folder under storage_path is "
                      "<name>-<UTC time>-<6 hex> (see unique_name); with resume, the folder of the run to continue")
    unique_name: bool = Field(True, description="give a new run its own folder, <name>-<UTC time>-<6 hex>; false "
                              "uses name as is, and an existing folder of that name is an error unless resume")
    resume: bool = Field(False, description="continue the run in <storage_path>/<name> from its latest checkpoint "
                         "(what --resume RUN sets); refused when it has no checkpoint or already reached its last step")
    storage_path: Location = Field("runs/ray_train", description="RunConfig storage for checkpoints, progress.log and "
                              "results: a local (on a cluster: shared) folder, resolved to an absolute path, or a "
                              "pyarrow.fs URI passed to Ray as is (s3://bucket/runs, gs://bucket/runs; an "
                              "S3-compatible endpoint as s3://bucket/runs?endpoint_override=host:9000&scheme=http). "
                              "Credentials come "
                              "from each node's default chain (AWS_* variables, instance role) or inline as "
                              "s3://KEY:SECRET@bucket/...; printed and returned locations drop inline credentials "
                              "(relate.storage)")
    num_workers: int = Field(2, ge=1, description="DDP workers")
    worker: ResourcesConfig = Field(default_factory=lambda: ResourcesConfig(num_cpus=0.75),
                                    description="what each DDP worker reserves: num_gpus > 0 means one GPU each and nccl "
                                                "(gloo otherwise), custom resources such as {trainer: 1} pin workers to "
                                                "the training node group; on CPU leave some CPUs for Ray Data")
    torch_threads: int | None = Field(None, ge=1, description="intra-op threads each worker's torch computes with; "
                                      "default: Ray's, the floor of worker.num_cpus (at least 1). On a small CPU machine one "
                                      "worker with every core trains faster than several with one each (docs/jobs/training.md, "
                                      "\"One worker on two cores\")")
    checkpoint_every: int = Field(50, gt=0, description="steps between checkpoints")
    keep_checkpoints: int = Field(2, ge=1, description="checkpoints kept in storage")
    max_failures: int = Field(2, ge=0, description="worker-group restarts allowed (FailureConfig)")
    seed: int = Field(0, description="seed for weights, rungs and augmentation")
    val_every: int = Field(0, ge=0, description="validate every N steps on rank 0 (0: only at the end)")
    val_images: int = Field(100, gt=0, description="validation images scored in the loop")
    evaluate_test: bool = Field(True, description="after training, score the test split and the frequency baseline")
    calibrate: bool = Field(True, description="after training, fit Platt (a, b) of Eq. 6 on the val split and install "
                            "it in the final checkpoint (train_jobs.calibrate; a checkpoint at a URI is fitted on a "
                            "temporary copy and its calibration.json written back)")
    log_every: int = Field(10, gt=0, description="rank-0 console log interval in steps, and the interval of "
                           "ray.train.report besides validations and checkpoints (a report is a barrier across "
                           "workers; TensorBoard gets every step)")
    log_reports: bool = Field(False, description="keep Ray Train's own 'Reporting training result ...' line, "
                              "logged by every worker at every report (off: the job log carries our step lines)")
    kill_worker_at_step: int | None = Field(None, gt=0, description="fault drill: the last rank SIGKILLs itself once at this step")

    @model_validator(mode="after")
    def _check(self) -> "RunSettings":
        if self.worker.num_gpus not in (0, 1):
            raise ValueError(f"run.worker.num_gpus={self.worker.num_gpus}: a DDP worker takes no GPU or exactly one")
        return self


class TrainRelationConfig(StrictConfig):
    model: RelationModelConfig = Field(default_factory=RelationModelConfig, description="architecture")
    loss: LossConfig = Field(default_factory=LossConfig, description="objective weights (Table 14)")
    data: DataConfig = Field(default_factory=DataConfig, description="corpus, vocabulary and input pipeline")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="optimiser and schedule")
    run: RunSettings = Field(default_factory=RunSettings, description="Ray Train run settings")
