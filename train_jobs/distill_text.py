"""Ray Train job: distil an antonym-repelling text student from a frozen teacher (seed 001, B.2.1).

    python -m train_jobs.distill_text --config train_jobs/configs/distill_text.yaml [--set k=v]

The driver holds out a fraction of the inverse synonym-group pairs (every form of those groups,
modified and derived forms included, stays out of every loss; ``relate.text.heldout``), embeds
the remaining training strings with the frozen teacher once (token outputs, de-hubbed
sentence targets, PCA anchors), and hands the
arrays to ``TorchTrainer`` workers (gloo on CPU). Rank 0 saves the student folder as the
checkpoint; the driver copies it to ``out_dir/student`` and writes the Table 16 report of
teacher and student on the trained and the held-out groups.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from relate.config import StrictConfig, dump_config, parse_job_args
from relate.storage import Location, LocationValue
from relate.placement import ResourcesConfig, scaling_config_kwargs
from relate.text.distill import DistillWeights, distill_losses
from relate.text.distill_data import evaluate_text_spaces, prepare_distill_data
from relate.text.student import create_text_student, save_student

__all__ = ["DistillTextConfig", "DistillResult", "DistillRunner", "fit_local", "main"]


class DataConfig(StrictConfig):
    train_vocab_size: int = Field(4000, ge=100, description="training strings: every grouped base form plus a fixed random sample of modified forms up to this size")
    heldout_fraction: float = Field(0.25, ge=0.0, lt=1.0, description="share of inverse synonym-group pairs held out: every form of those groups (surface, modified, derived) is kept out of every loss and reported separately")
    heldout_groups: list[str] | None = Field(None, description="synonym groups to hold out by name (each takes its inverse group with it); None draws heldout_fraction of the pairs with split_seed")
    split_seed: int = Field(0, description="seed of the held-out group split and the modified-form sample")
    dehub_components: int = Field(3, ge=0, description="leading principal directions removed from the teacher targets (B.2.1 uses 3)")


class ModelConfig(StrictConfig):
    teacher: str = Field("minilm", description="registry name of the frozen teacher (must expose token outputs: minilm or hf:...)")
    dim: int = Field(512, ge=8, description="student output dimension (512 in the paper)")
    width: int = Field(192, ge=8, description="width of the adapter transformer over teacher tokens")
    layers: int = Field(0, ge=0, description="adapter transformer layers over teacher tokens (0: MLP adapter over the pooled tokens only)")
    heads: int = Field(4, ge=1, description="adapter attention heads")
    hidden: int = Field(1024, ge=8, description="hidden width of the residual MLP that maps pooled tokens to the student space")
    attention_pool: bool = Field(False, description="also pool the teacher tokens with learned attention weights (a token-level input at MLP cost)")


class LossConfig(StrictConfig):
    relational: float = Field(1.0, ge=0, description="weight of the pairwise-cosine distillation term")
    anchor: float = Field(0.1, ge=0, description="weight of the absolute anchor to the PCA-projected de-hubbed teacher (small)")
    neighbourhood: float = Field(1.0, ge=0, description="weight of the row-wise KL between teacher and student batch softmaxes")
    antonym: float = Field(2.0, ge=0, description="weight of the antonym-repulsion hinge on trained inverse pairs")
    synonym: float = Field(1.0, ge=0, description="weight of the synonym-cohesion hinge")
    modified: float = Field(0.5, ge=0, description="weight of the softer hinge between modified forms and their base")
    kl_temperature: float = Field(0.1, gt=0, description="softmax temperature of the neighbourhood term")
    antonym_margin: float = Field(0.0, ge=-1, le=1, description="inverse-pair cosines above this are penalised")
    synonym_margin: float = Field(0.75, ge=-1, le=1, description="synonym cosines below this are penalised")
    modified_margin: float = Field(0.5, ge=-1, le=1, description="modified-to-base cosines below this are penalised")
    modified_ceiling: float = Field(0.95, ge=-1, le=1, description="modified-to-base cosines above this are penalised (no merging)")
    spread: float = Field(0.0, ge=0, description="weight of the squared log ratio of the batch's participation ratio (student over de-hubbed teacher): keeps the effective dimension")
    distrust_inverse_groups: bool = Field(False, description="leave teacher cosines between strings of two declared-inverse groups out of the relational and neighbourhood terms")


class TrainConfig(StrictConfig):
    epochs: int = Field(30, ge=1, description="passes over the training strings")
    batch_size: int = Field(96, ge=4, description="random training strings per worker step")
    pairs_per_kind: int = Field(32, ge=1, description="inverse, synonym and modified pairs added to each worker step")
    lr: float = Field(2e-3, gt=0, description="AdamW learning rate (cosine decay to 5%)")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay")
    seed: int = Field(0, description="model init and pair-sampling seed (rank is added for sampling)")
    torch_threads: int = Field(1, ge=1, description="intra-op threads per worker (2 CPU workers share 2 cores)")


class ScalingConfig(StrictConfig):
    num_workers: int = Field(2, ge=1, description="Ray Train workers")
    worker: ResourcesConfig = Field(default_factory=lambda: ResourcesConfig(num_cpus=0.5),
                                    description="what each worker reserves: CPUs (fractional on a 2-CPU node so Ray "
                                                "Data tasks still get a slot) and optional custom resources; no GPU "
                                                "(the student is small and trains on CPU with gloo)")
    backend: Literal["gloo"] = Field("gloo", description="torch.distributed backend (CPU)")

    @model_validator(mode="after")
    def _cpu_only(self) -> "ScalingConfig":
        if self.worker.num_gpus or self.worker.accelerator_type:
            raise ValueError("scaling.worker: the text student trains on CPU (gloo); request no GPU or accelerator")
        return self


class DistillTextConfig(StrictConfig):
    data: DataConfig = Field(default_factory=DataConfig, description="training strings and held-out split")
    model: ModelConfig = Field(default_factory=ModelConfig, description="teacher and student shape")
    loss: LossConfig = Field(default_factory=LossConfig, description="the six objectives of B.2.1 and our spread term")
    train: TrainConfig = Field(default_factory=TrainConfig, description="optimisation")
    scaling: ScalingConfig = Field(default_factory=ScalingConfig, description="Ray Train scaling")
    out_dir: Location = Field("runs/distill_text", description="folder for the student, report and resolved config")
    storage_path: LocationValue | None = Field(None, description="Ray Train storage (default: out_dir/ray)")

    @model_validator(mode="after")
    def _margins(self) -> "DistillTextConfig":
        if self.loss.modified_margin >= self.loss.modified_ceiling:
            raise ValueError("loss.modified_margin must be below loss.modified_ceiling")
        return self


@dataclass
class DistillResult:
    student_dir: str
    report_path: str
    markdown: str
    reports: dict = field(default_factory=dict)
    acceptance: dict = field(default_factory=dict)
    history: list = field(default_factory=list)


class DistillRunner:
    """Owns the student, optimiser and one step; rank-agnostic, so it also runs without Ray."""

    def __init__(self, cfg: DistillTextConfig, data: dict, rank: int = 0, total_steps: int = 1):
        torch.manual_seed(cfg.train.seed)  # same init on every rank before DDP broadcasts
        self.cfg, self.data = cfg, data
        m = cfg.model
        self.model = create_text_student(int(data["tokens"].shape[2]), m.dim, m.width, m.layers, m.heads, m.hidden,
                                         m.attention_pool)
        self.weights = DistillWeights(**cfg.loss.model_dump(exclude={"distrust_inverse_groups"}))
        # Arrays arrive read-only from the object store; copies keep torch from warning.
        self.group_id = torch.from_numpy(np.array(data["group_id"]))
        self.inverse_group = torch.from_numpy(np.array(data["inverse_group"]))
        self.rng = np.random.default_rng(cfg.train.seed + 1000 * rank)
        self.tokens = torch.from_numpy(np.array(data["tokens"]))
        self.mask = torch.from_numpy(np.array(data["mask"]))
        self.teacher = torch.from_numpy(np.array(data["teacher"]))
        self.anchor = torch.from_numpy(np.array(data["anchor"]))
        self.total_steps, self.step = max(1, total_steps), 0

    def build_optimizer(self, model: torch.nn.Module) -> None:
        self.opt = torch.optim.AdamW(model.parameters(), lr=self.cfg.train.lr,
                                     weight_decay=self.cfg.train.weight_decay)
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: 0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * min(s, self.total_steps) / self.total_steps)))

    def _sample(self, key: str) -> np.ndarray:
        pairs = self.data[key]
        if len(pairs) == 0:
            return np.zeros((0, 2), dtype=np.int64)
        return pairs[self.rng.integers(0, len(pairs), self.cfg.train.pairs_per_kind)]

    def train_step(self, model: torch.nn.Module, idx: torch.Tensor) -> dict[str, float]:
        inv, syn, mod = (self._sample(k) for k in ("inverse_train", "synonym", "modified"))
        rows = np.concatenate([idx.numpy().astype(np.int64), inv.ravel(), syn.ravel(), mod.ravel()])
        uniq, local = np.unique(rows, return_inverse=True)
        n = len(idx)
        cut = [n, n + inv.size, n + inv.size + syn.size]
        remap = [torch.from_numpy(a.reshape(-1, 2)) for a in np.split(local, cut)[1:]]
        sel = torch.from_numpy(uniq)
        mask = self.mask[sel]
        length = int(mask.sum(1).max())
        emb = model(self.tokens[sel, :length].float(), mask[:, :length])
        distrust = None
        if self.cfg.loss.distrust_inverse_groups:
            g = self.group_id[sel]
            inv = torch.where(g >= 0, self.inverse_group[g.clamp_min(0)], torch.full_like(g, -1))
            distrust = (inv[:, None] == g[None, :]) & (g[None, :] >= 0)
        losses = distill_losses(emb, self.teacher[sel], self.anchor[sel], *remap, self.weights, distrust)
        self.opt.zero_grad(set_to_none=True)
        losses["total"].backward()
        self.opt.step()
        self.sched.step()
        self.step += 1
        return {k: float(v.detach()) for k, v in losses.items()}

    @torch.no_grad()
    def validate(self, model: torch.nn.Module) -> dict[str, float]:
        """Cheap in-training check on the base forms: mean synonym and inverse cosines."""
        model.eval()
        n = int(self.data["n_base"])
        length = int(self.mask[:n].sum(1).max())
        emb = model(self.tokens[:n, :length].float(), self.mask[:n, :length])
        model.train()
        out = {}
        for key in ("synonym_base", "inverse_train_base"):  # held-out groups have no rows here
            p = torch.from_numpy(self.data[key])
            out[f"val_{key}_cos"] = float((emb[p[:, 0]] * emb[p[:, 1]]).sum(-1).mean()) if len(p) else float("nan")
        return out

    def save_checkpoint(self, model: torch.nn.Module, folder: str | Path) -> Path:
        inner = model.module if hasattr(model, "module") else model
        return save_student(folder, inner, self.cfg.model.teacher, extra={"step": self.step})

    def load_checkpoint(self, model: torch.nn.Module, folder: str | Path) -> None:
        inner = model.module if hasattr(model, "module") else model
        state = torch.load(Path(folder) / "student.pt", map_location="cpu", weights_only=True)
        inner.load_state_dict(state, strict=True)
        self.step = int(json.loads((Path(folder) / "student.json").read_text()).get("step", 0))


def fit_local(cfg: DistillTextConfig, data: dict) -> DistillRunner:
    """The same steps as one Ray Train worker, in this process (tests and quick sweeps)."""
    torch.set_num_threads(cfg.train.torch_threads)
    rows = np.asarray(data["train_rows"])
    per_epoch = len(rows) // cfg.train.batch_size
    runner = DistillRunner(cfg, data, total_steps=per_epoch * cfg.train.epochs)
    runner.build_optimizer(runner.model)
    order_rng = np.random.default_rng(cfg.train.seed)
    for _ in range(cfg.train.epochs):
        order = torch.from_numpy(order_rng.permutation(rows))
        for i in range(per_epoch):
            runner.train_step(runner.model, order[i * cfg.train.batch_size:(i + 1) * cfg.train.batch_size])
    runner.model.eval()
    return runner


def train_loop_per_worker(config: dict) -> None:
    import ray.train
    import ray.train.torch

    cfg = DistillTextConfig.model_validate(config["cfg"])
    torch.set_num_threads(cfg.train.torch_threads)
    ctx = ray.train.get_context()
    data = config["data"]
    shard = ray.train.get_dataset_shard("train")
    per_epoch = -(-int(config["n_train"]) // (cfg.scaling.num_workers * cfg.train.batch_size))
    runner = DistillRunner(cfg, data, rank=ctx.get_world_rank(), total_steps=per_epoch * cfg.train.epochs)
    model = ray.train.torch.prepare_model(runner.model)
    runner.build_optimizer(model)
    start = 0
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            runner.load_checkpoint(model, d)
            start = json.loads((Path(d) / "student.json").read_text()).get("epoch", -1) + 1
    for epoch in range(start, cfg.train.epochs):
        batches = shard.iter_torch_batches(batch_size=cfg.train.batch_size, drop_last=True,
                                           local_shuffle_buffer_size=4 * cfg.train.batch_size,
                                           local_shuffle_seed=cfg.train.seed + epoch)
        logs = [runner.train_step(model, batch["idx"]) for batch in batches]
        metrics = {k: float(np.mean([l[k] for l in logs])) for k in logs[0]} if logs else {}
        metrics.update(runner.validate(model), epoch=epoch, step=runner.step)
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if ctx.get_world_rank() == 0:
                runner.save_checkpoint(model, tmp)
                meta = json.loads((Path(tmp) / "student.json").read_text())
                (Path(tmp) / "student.json").write_text(json.dumps({**meta, "epoch": epoch}, indent=2))
                checkpoint = ray.train.Checkpoint.from_directory(tmp)
            ray.train.report(metrics, checkpoint=checkpoint)


def build_trainer(cfg: DistillTextConfig, data: dict):
    """An unstarted TorchTrainer over the string indices."""
    import ray.data
    from ray.train import CheckpointConfig, RunConfig
    from ray.train import ScalingConfig as RayScaling
    from ray.train.torch import TorchConfig, TorchTrainer

    n = len(data["train_rows"])
    ds = ray.data.from_items([{"idx": int(i)} for i in data["train_rows"]])
    storage = cfg.storage_path or str((Path(cfg.out_dir) / "ray").resolve())
    return TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"cfg": cfg.model_dump(mode="json"), "data": data, "n_train": n},
        scaling_config=RayScaling(**scaling_config_kwargs(cfg.scaling.worker, cfg.scaling.num_workers)),
        torch_config=TorchConfig(backend=cfg.scaling.backend),
        datasets={"train": ds},
        run_config=RunConfig(name="distill_text", storage_path=storage,
                             checkpoint_config=CheckpointConfig(num_to_keep=1)),
    )


def main(cfg: DistillTextConfig) -> DistillResult:
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "config.yaml")
    d = cfg.data
    data, info = prepare_distill_data(cfg.model.teacher, cfg.model.dim, d.train_vocab_size, d.heldout_fraction,
                                      d.split_seed, d.dehub_components, d.heldout_groups)
    result = build_trainer(cfg, data).fit()
    if result.checkpoint is None:
        raise RuntimeError(f"distill_text: training produced no checkpoint ({result.error})")
    student_dir = out / "student"
    with result.checkpoint.as_directory() as d:
        shutil.rmtree(student_dir, ignore_errors=True)
        shutil.copytree(d, student_dir)
    (out / "split.json").write_text(json.dumps(
        {"inverse_train": info["inverse_train"], "inverse_heldout": info["inverse_heldout"],
         "trained_groups": info["trained_groups"], "heldout_groups": info["heldout_groups"]}, indent=1))
    history = [dict(m) for m in (result.metrics_dataframe.to_dict("records")
                                 if result.metrics_dataframe is not None else [])]
    reports, markdown, acceptance = evaluate_text_spaces(
        cfg.model.teacher, f"student:{student_dir.resolve()}", info["split"])
    report_path = out / "report.md"
    report_path.write_text(markdown + "\n")
    (out / "metrics.json").write_text(json.dumps({"reports": reports, "acceptance": acceptance}, indent=2))
    return DistillResult(student_dir=str(student_dir), report_path=str(report_path), markdown=markdown,
                         reports=reports, acceptance=acceptance, history=history)


if __name__ == "__main__":
    # Run through the importable module, not __main__: Ray pickles __main__'s functions by value, and
    # the config class rebuilt that way on a worker fails to build its pydantic serializer.
    import train_jobs.distill_text as _job

    res = _job.main(parse_job_args(_job.DistillTextConfig, description=__doc__))
    print(res.markdown)
    print(json.dumps(res.acceptance, indent=2))
