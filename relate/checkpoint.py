"""The relation checkpoint folder: one format for training, evaluation and serving.

A folder holds the resolved model config (``config.yaml``), the weights
(``model.safetensors``), the text bank the model was trained against (``text_bank.npz``), the
Platt calibration of Eq. 6 (``calibration.json``, NaN -> null until fitted) and ``meta.json``
(format, text encoder, bank checksum). Loading is strict: missing or unexpected weight keys
and a bank that does not match the recorded encoder or checksum are errors, never warnings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file, save_file

from relate.model.config import RelationModelConfig
from relate.model.model import RelationModel, create_relation_model
from relate.model.score import Calibration

__all__ = ["CheckpointError", "LoadedCheckpoint", "save_checkpoint", "load_checkpoint", "CHECKPOINT_FORMAT"]

CHECKPOINT_FORMAT = "relate.relation_checkpoint.v1"
_FILES = ("config.yaml", "model.safetensors", "text_bank.npz", "calibration.json", "meta.json")


class CheckpointError(ValueError):
    """A checkpoint folder is incomplete, inconsistent or does not fit the model it describes."""


@dataclass
class LoadedCheckpoint:
    model: RelationModel
    bank: object  # relate.text.TextBank
    calibration: Calibration
    config: RelationModelConfig
    text_encoder: str


def save_checkpoint(folder: str | Path, model: RelationModel, bank, calibration: Calibration = Calibration(),
                    state_dict: dict[str, torch.Tensor] | None = None) -> Path:
    """Write the five files; ``state_dict`` (e.g. EMA weights) replaces the model's own."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if bank.dim != model.cfg.text_dim:
        raise CheckpointError(f"bank dimension {bank.dim} does not match model text_dim {model.cfg.text_dim}")
    (folder / "config.yaml").write_text(yaml.safe_dump(model.cfg.model_dump(mode="json"), sort_keys=False))
    sd = state_dict if state_dict is not None else model.state_dict()
    save_file({k: v.detach().cpu().contiguous() for k, v in sd.items()}, str(folder / "model.safetensors"))
    bank.save(folder / "text_bank.npz")
    (folder / "calibration.json").write_text(json.dumps(calibration.to_dict()))
    meta = {"format": CHECKPOINT_FORMAT, "text_encoder": bank.encoder, "bank_checksum": bank.checksum,
            "bank_size": len(bank)}
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))
    return folder


def _read_meta(folder: Path) -> dict:
    missing = [f for f in _FILES if not (folder / f).is_file()]
    if missing:
        raise CheckpointError(f"{folder}: not a relation checkpoint, missing {missing}")
    meta = json.loads((folder / "meta.json").read_text())
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{folder}: format {meta.get('format')!r}, expected {CHECKPOINT_FORMAT!r}")
    return meta


def load_checkpoint(folder: str | Path, map_location: str = "cpu") -> LoadedCheckpoint:
    """Rebuild the model from its config, load weights strictly, verify the bank."""
    from relate.text.bank import BankError, load_bank

    folder = Path(folder)
    meta = _read_meta(folder)
    cfg = RelationModelConfig.model_validate(yaml.safe_load((folder / "config.yaml").read_text()))
    try:
        bank = load_bank(folder / "text_bank.npz", expect_encoder=meta["text_encoder"], expect_dim=cfg.text_dim)
    except BankError as exc:
        raise CheckpointError(f"{folder}: text bank does not match the checkpoint: {exc}") from None
    if bank.checksum != meta["bank_checksum"]:
        raise CheckpointError(f"{folder}: text bank checksum {bank.checksum[:12]} differs from the one the "
                              f"checkpoint was saved with ({meta['bank_checksum'][:12]}); the bank was replaced")
    model = create_relation_model(cfg)
    sd = load_file(str(folder / "model.safetensors"), device=map_location)
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(sd)), sorted(set(sd) - expected)
    if missing or unexpected:
        raise CheckpointError(f"{folder}: weights do not fit the config: missing {missing[:8]}"
                              f"{' ...' if len(missing) > 8 else ''}, unexpected {unexpected[:8]}"
                              f"{' ...' if len(unexpected) > 8 else ''}")
    model.load_state_dict(sd, strict=True)
    model.eval()
    cal = Calibration.from_dict(json.loads((folder / "calibration.json").read_text()))
    return LoadedCheckpoint(model, bank, cal, cfg, meta["text_encoder"])
