"""One Ray Train worker of the relation train job: steps, EMA, validation, checkpoints, step lines.

``train_loop_per_worker`` is what ``train_jobs.train_relation.build_trainer`` hands Ray Train; the
config arrives as a dict and is validated again here.
"""

from __future__ import annotations

import logging
import math
import pickle
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from relate.jobinfo import eta_seconds, format_seconds
from relate.losses import PredicateSpace, force_mask, relation_objective
from train_jobs.relation_config import TrainRelationConfig
from train_jobs.relation_eval import evaluate_split
from train_jobs.run_files import ProgressLog, TensorBoardLog, maybe_kill

__all__ = ["train_loop_per_worker", "quiet_reports", "TrainRunner", "load_train_state", "reports_at"]

# Rank 0's step lines go through a logger, not print: inside a Ray Train worker, print is patched
# to log *and* echo to the captured stdout, so every printed line reached the job log twice.
_log = logging.getLogger(__name__)


def reports_at(step: int, total: int, run) -> bool:
    """Whether step ``step``'s metrics go to Ray Train (``ray.train.report``).

    A report is a collective: every worker meets at Ray Train's synchronization actor before it
    returns. Reporting every step spent 47% of a worker's time waiting there (py-spy of ``cpu_long``,
    2 workers on 2 cores: 0.67 s of compute in a 1.99 s step), so metrics are reported at the console
    log interval, each validation, each checkpoint and the last step. TensorBoard still gets every
    step from rank 0. The decision depends on the step and the config only, so all ranks agree.
    """
    return (step >= total or step % run.checkpoint_every == 0 or step % run.log_every == 0
            or bool(run.val_every and step % run.val_every == 0))


class _EMA:
    """Exponential moving average of the floating-point state, warmed up as (1 + t) / (10 + t).

    One multi-tensor op per update instead of two per tensor (cpu_long's 230 state tensors: 460
    small ops a step from Python); elementwise the same ``mul_`` then ``add_``, so the same numbers."""

    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        self.decay = decay
        self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self._pairs: tuple | None = None  # (state dict it was built for, float EMA, float model, other EMA, other model)

    def _tensors(self, model: torch.nn.Module) -> tuple:
        if self._pairs is None or self._pairs[0] is not self.state:  # built again after load_checkpoint's state
            live = {k: v.detach() for k, v in model.state_dict().items()}
            fl = [k for k, v in live.items() if v.dtype.is_floating_point]
            other = [k for k in live if k not in set(fl)]
            self._pairs = (self.state, [self.state[k] for k in fl], [live[k] for k in fl],
                           [self.state[k] for k in other], [live[k] for k in other])
        return self._pairs

    @torch.no_grad()
    def update(self, model: torch.nn.Module, step: int) -> None:
        d = min(self.decay, (1 + step) / (10 + step))
        _, ema, live, ema_other, live_other = self._tensors(model)
        if ema:
            torch._foreach_mul_(ema, d)
            torch._foreach_add_(ema, live, alpha=1 - d)
        for e, v in zip(ema_other, live_other):
            e.copy_(v)


class TrainRunner:
    """Owns the step, validation and checkpoint I/O of one worker.

    Ray-free by itself: the Ray Train loop passes its device, its ``prepare_model`` and its rank;
    ``train_jobs.learnability`` drives the same steps in-process on a handful of images.
    """

    def __init__(self, cfg: TrainRelationConfig, space: dict, total_steps: int, device: torch.device | None = None,
                 prepare=None, rank: int = 0) -> None:
        from relate.model.model import create_relation_model

        self.cfg, self.total, self.rank = cfg, total_steps, rank
        torch.manual_seed(cfg.run.seed)
        self.device = device or torch.device("cpu")
        self.space: PredicateSpace = space["space"].to(self.device)
        self.bank = space["bank"]
        self.bank_t = self.bank.tensor(self.device)
        self.raw = create_relation_model(cfg.model).to(self.device)
        self.ema = _EMA(self.raw, cfg.optim.ema)
        self.model = prepare(self.raw) if prepare is not None else self.raw
        o = cfg.optim
        self.opt = torch.optim.AdamW([{"params": self.raw.backbone_parameters(), "lr": o.lr_backbone},
                                      {"params": self.raw.head_parameters(), "lr": o.lr_head}],
                                     weight_decay=o.weight_decay, fused=self.device.type in ("cpu", "cuda"))
        self.base_lrs = [o.lr_backbone, o.lr_head]
        self.step = 0
        self.resumed_from = 0
        self._offset, self._clock = 0.0, time.perf_counter()  # wall time before this attempt, and its start
        self.rng = np.random.default_rng(cfg.run.seed)

    @property
    def train_seconds(self) -> float:
        """Wall time of the run so far (steps, data waits, validation and checkpoints; earlier attempts
        included): the x axis of train_jobs.learning_curve's time curves."""
        return self._offset + time.perf_counter() - self._clock

    def lr_scale(self) -> float:
        w = self.cfg.optim.warmup_steps
        if self.step < w:
            return (self.step + 1) / w
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (self.step - w) / max(1, self.total - w))))

    def train_step(self, batch: dict) -> dict[str, float]:
        cfg = self.cfg
        t0 = time.perf_counter()
        images = batch["image"].to(self.device).permute(0, 3, 1, 2).float().div_(255)
        boxes, valid = batch["boxes"].to(self.device).float(), batch["box_valid"].to(self.device).bool()
        rels, cats = batch["rels"].to(self.device).long(), batch["categories"].to(self.device).long()
        rung = float(self.rng.choice(cfg.data.rungs))  # one resolution per step (Table 14 multi-scale)
        side = _rung_side(cfg.model.backbone.img_size, rung, self.raw.preprocessing.patch_size)
        if side != images.shape[-1]:
            boxes = boxes * (side / images.shape[-1])
            images = torch.nn.functional.interpolate(images, size=(side, side), mode="bilinear", antialias=True)
        amp = cfg.optim.amp and self.device.type == "cuda"
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=amp):
            out = self.model(images, boxes, valid, self.bank_t, force=force_mask(rels, valid.shape[1]))
            terms = relation_objective(out, rels, cats, valid, self.space, cfg.loss,
                                       sources=batch["source"].to(self.device) if "source" in batch else None,
                                       conditions=batch["conditions"].to(self.device) if "conditions" in batch else None,
                                       complete=batch["complete"].to(self.device) if "complete" in batch else None)
        for g, base in zip(self.opt.param_groups, self.base_lrs):
            g["lr"] = base * self.lr_scale()
        self.opt.zero_grad(set_to_none=True)
        terms["total"].backward()
        # multi-tensor norms and scaling: per tensor the same ops (the same numbers) without a Python loop
        gnorm = torch.nn.utils.clip_grad_norm_(self.raw.parameters(), cfg.optim.grad_clip, foreach=True)
        self.opt.step()
        self.step += 1
        self.ema.update(self.raw, self.step)
        out = {f"loss/{k}": float(v.detach()) for k, v in terms.items()}
        out.update({"grad_norm": float(gnorm), "step": self.step, "rung_side": side, "train_seconds": self.train_seconds,
                    "step_seconds": time.perf_counter() - t0, "resumed_from_step": self.resumed_from,
                    "gate_deformable": float(self.raw.deformable.gate.detach()) if self.raw.deformable is not None else 0.0})
        return out

    def ema_model(self):
        from relate.model.model import create_relation_model

        m = create_relation_model(self.cfg.model)
        m.load_state_dict(self.ema.state)
        return m.eval()

    def validate(self) -> dict[str, float]:
        from relate.api import RelationPredictor

        predictor = RelationPredictor(self.ema_model(), self.bank)
        return {f"val/{k}": v for k, v in evaluate_split(predictor, self.cfg.data, "val",
                                                          limit=self.cfg.run.val_images).items()
                if isinstance(v, float)}

    def save_checkpoint(self, folder: Path) -> None:
        from relate.checkpoint import save_checkpoint

        save_checkpoint(folder, self.raw, self.bank, state_dict=self.ema.state)
        torch.save({"model": self.raw.state_dict(), "ema": self.ema.state, "opt": self.opt.state_dict(),
                    "step": self.step, "rng": self.rng.bit_generator.state, "train_seconds": self.train_seconds},
                   folder / "train_state.pt")

    def load_checkpoint(self, folder: Path) -> None:
        st = load_train_state(folder / "train_state.pt", self.device)
        self.raw.load_state_dict(st["model"])
        self.ema.state = st["ema"]
        self.opt.load_state_dict(st["opt"])
        self.step = int(st["step"])
        self._offset, self._clock = float(st.get("train_seconds", 0.0)), time.perf_counter()
        self.resumed_from = self.step
        self.rng.bit_generator.state = st["rng"]


def load_train_state(path: Path, device: torch.device | str = "cpu") -> dict:
    """The resumable state ``save_checkpoint`` wrote, read with torch's weights-only unpickler.

    Run storage may be a shared bucket, and a full unpickle runs whatever code a crafted file
    names in every worker that resumes from it. The state holds only tensors, numbers, strings and
    containers (the numpy generator's state is a dict of ints), so nothing else is allowed in."""
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ValueError(f"{path}: refused to load: it holds objects other than tensors and plain containers, "
                         f"which a training state never does (the file may have been tampered with): "
                         f"{str(exc).splitlines()[0]}") from None


def _say(line: str) -> None:
    """One console line from rank 0: through Ray Train's worker logging when it is set up, else print."""
    if logging.getLogger().hasHandlers():
        _log.setLevel(logging.INFO)
        _log.info(line)
    else:
        print(line, flush=True)


class _DropReports(logging.Filter):
    """Drops Ray Train's per-report line ("Reporting training result N: ... from rank R")."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Reporting training result")


def quiet_reports(keep: bool = False) -> None:
    """In a worker: drop Ray Train's per-report log line unless ``keep`` (``run.log_reports``). The
    line comes from the logger of ray.train.v2's execution context module (named after its file)."""
    from ray.train.v2._internal.execution import context

    log = context.logger
    for f in [f for f in log.filters if isinstance(f, _DropReports)]:
        log.removeFilter(f)
    if not keep:
        log.addFilter(_DropReports())


def _family_line(step: int, total: int, metrics: dict) -> str:
    """One validation line: per-family AP against the world's truth where known, else stated recall."""
    ap = {k.rsplit("/", 1)[1][:-3]: v for k, v in metrics.items()
          if k.startswith("val/truth/family/") and k.endswith("_ap")}
    if ap:
        fams = " ".join(f"{f} {v:.2f}" for f, v in ap.items())
        return f"val {step}/{total}: AP vs truth {fams}; top-10 precision {metrics['val/truth/top10_precision']:.2f}"
    rec = {k.split("/")[-1][:-3]: v for k, v in metrics.items() if k.startswith("val/syn_nogc/family/")}
    return f"val {step}/{total}: recall@50 (stated, no graph constraint) " + " ".join(f"{f} {v:.2f}" for f, v in rec.items())


def _rung_side(base: int, rung: float, patch: int) -> int:
    return max(patch, int(round(base * rung / patch)) * patch)


def train_loop_per_worker(config: dict) -> None:
    import ray.train
    import ray.train.torch

    cfg = TrainRelationConfig.model_validate(config["cfg"])
    quiet_reports(cfg.run.log_reports)
    if cfg.run.torch_threads is not None:
        torch.set_num_threads(cfg.run.torch_threads)
    ctx = ray.train.get_context()
    runner = TrainRunner(cfg, config["space"], config["total_steps"], ray.train.torch.get_device(),
                         lambda m: ray.train.torch.prepare_model(m, parallel_strategy_kwargs={"find_unused_parameters": True}),
                         ctx.get_world_rank())
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            runner.load_checkpoint(Path(d))
    shard = ray.train.get_dataset_shard("train")
    progress = ProgressLog(config["run_dir"]) if runner.rank == 0 else None
    if progress is not None:
        progress.write(f"{ctx.get_world_size()} worker(s), each computing with {torch.get_num_threads()} torch thread(s)")
    board = TensorBoardLog(config["run_dir"], runner.step) if runner.rank == 0 else None
    if ckpt is not None and progress is not None:
        line = f"resumed from step {runner.step}/{runner.total} (checkpoint {Path(ckpt.path).name})"
        _say(line)
        progress.write(line)
    t_last = t_start = time.perf_counter()
    first = runner.step
    while runner.step < runner.total:
        for batch in shard.iter_torch_batches(batch_size=cfg.optim.batch_size, drop_last=True):
            metrics = runner.train_step(batch)
            maybe_kill(cfg.run.kill_worker_at_step, runner.step, runner.rank, ctx.get_world_size(),
                       config["run_dir"])
            last = runner.step >= runner.total
            if (cfg.run.val_every and runner.step % cfg.run.val_every == 0) or last:
                if runner.rank == 0:
                    metrics.update(runner.validate())
                    if progress is not None:
                        progress.write(_family_line(runner.step, runner.total, metrics))
            if board is not None:
                metrics["lr/head"] = runner.opt.param_groups[1]["lr"]
                board.scalars(metrics, runner.step)
            if runner.rank == 0 and runner.step % cfg.run.log_every == 0:
                now = time.perf_counter()
                eta = eta_seconds(runner.step - first, runner.total - first, now - t_start)
                line = (f"step {runner.step}/{runner.total} loss {metrics['loss/total']:.4f} side {metrics['rung_side']} "
                        f"compute {metrics['step_seconds']:.2f}s wall {now - t_last:.2f}s eta {format_seconds(eta)}")
                _say(line)
                if progress is not None:
                    progress.write(line)
            t_last = time.perf_counter()
            if runner.step % cfg.run.checkpoint_every == 0 or last:
                if board is not None:
                    board.close() if last else board.sync()
                with tempfile.TemporaryDirectory() as tmp:
                    if runner.rank == 0:
                        runner.save_checkpoint(Path(tmp))
                    ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp)
                                     if runner.rank == 0 else None)
            elif reports_at(runner.step, runner.total, cfg.run):
                ray.train.report(metrics)
            if last:
                return
