"""The relation checkpoint folder: one format for training, evaluation and serving.

A folder holds the resolved model config (``config.yaml``), the weights
(``model.safetensors``), the text bank the model was trained against (``text_bank.npz``), the
Platt calibration of Eq. 6 (``calibration.json``, NaN -> null until fitted) and ``meta.json``
(format, text encoder, bank checksum, sha256 of the weights and bank files). Loading is strict:
a file whose sha256 differs from the recorded one, missing or unexpected weight keys and a bank
that does not match the recorded encoder or checksum are errors, never warnings.
``calibration.json`` has no digest because calibration is refitted in place after training;
checkpoints saved before digests were recorded load unverified.

A checkpoint is read from a local folder or a URI (``s3://``, ``gs://``, ``file://``: anything
``pyarrow.fs.FileSystem.from_uri`` resolves), copied into a temporary folder removed after
loading. Loading never reaches a model hub: the architecture is built with the backbone's
pretrained loading switched off, since every weight is in ``model.safetensors``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
import yaml
from safetensors.torch import load_file, save_file

from relate.model.config import RelationModelConfig
from relate.model.model import RelationModel, create_relation_model
from relate.model.score import Calibration
from relate.storage import is_uri, join, redact, resolve

__all__ = ["CheckpointError", "LoadedCheckpoint", "save_checkpoint", "load_checkpoint", "write_calibration",
           "local_copy", "find_latest_checkpoint", "CHECKPOINT_FORMAT"]

CHECKPOINT_FORMAT = "relate.relation_checkpoint.v1"
_FILES = ("config.yaml", "model.safetensors", "text_bank.npz", "calibration.json", "meta.json")
_DIGESTED = ("model.safetensors", "text_bank.npz")  # not calibration.json: it is refitted in place


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
            "bank_size": len(bank), "sha256": {name: _sha256(folder / name) for name in _DIGESTED}}
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))
    return folder


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_meta(folder: Path, where: str) -> dict:
    missing = [f for f in _FILES if not (folder / f).is_file()]
    if missing:
        raise CheckpointError(f"{where}: not a relation checkpoint, missing {missing}")
    meta = json.loads((folder / "meta.json").read_text())
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{where}: format {meta.get('format')!r}, expected {CHECKPOINT_FORMAT!r}")
    return meta


def _verify_digests(folder: Path, where: str, meta: dict) -> None:
    """Refuse a weights or bank file that changed after saving (no record: an older checkpoint, unverified)."""
    recorded = meta.get("sha256") or {}
    for name in _DIGESTED:
        if recorded.get(name) is not None and (got := _sha256(folder / name)) != recorded[name]:
            raise CheckpointError(f"{where}: {name} has sha256 {got} but meta.json records {recorded[name]}; "
                                  "the file is corrupt or was changed after saving")


@contextmanager
def local_copy(source: str | Path, filesystem=None) -> Iterator[Path]:
    """The checkpoint as a local folder: ``source`` itself, or a temporary copy of its files at a URI
    (or at a path on ``filesystem``, e.g. a Ray Train checkpoint's), removed on exit. Nothing is verified
    here; ``load_checkpoint`` verifies what it reads."""
    if filesystem is None and not is_uri(source):
        yield Path(source)
        return
    from pyarrow import fs as pafs

    where = redact(str(source))
    try:
        fs, root = resolve(source, filesystem)
        infos = fs.get_file_info([f"{root.rstrip('/')}/{name}" for name in _FILES])
    except (ValueError, OSError) as exc:  # pyarrow: ArrowInvalid (a ValueError) for an unknown scheme
        raise CheckpointError(f"{where}: cannot open the checkpoint URI: {exc}") from None
    missing = [name for name, info in zip(_FILES, infos) if info.type != pafs.FileType.File]
    if missing:
        raise CheckpointError(f"{where}: not a relation checkpoint, missing {missing}")
    with tempfile.TemporaryDirectory(prefix="relate-checkpoint-") as tmp:
        for name, info in zip(_FILES, infos):
            try:
                with fs.open_input_stream(info.path) as src, open(Path(tmp) / name, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            except OSError as exc:
                raise CheckpointError(f"{where}: cannot read {name}: {exc}") from None
        yield Path(tmp)


def load_checkpoint(source: str | Path, map_location: str = "cpu", filesystem=None) -> LoadedCheckpoint:
    """Load a checkpoint folder or URI (or a path on ``filesystem``): verify the file digests, rebuild
    the model from its config, load weights strictly, verify the bank."""
    with local_copy(source, filesystem) as folder:
        return _load_folder(folder, redact(str(source)), map_location)


def _load_folder(folder: Path, where: str, map_location: str) -> LoadedCheckpoint:
    from relate.text.bank import BankError, load_bank

    meta = _read_meta(folder, where)
    _verify_digests(folder, where, meta)
    cfg = RelationModelConfig.model_validate(yaml.safe_load((folder / "config.yaml").read_text()))
    try:
        bank = load_bank(folder / "text_bank.npz", expect_encoder=meta["text_encoder"], expect_dim=cfg.text_dim)
    except BankError as exc:
        raise CheckpointError(f"{where}: text bank does not match the checkpoint: {exc}") from None
    if bank.checksum != meta["bank_checksum"]:
        raise CheckpointError(f"{where}: text bank checksum {bank.checksum[:12]} differs from the one the "
                              f"checkpoint was saved with ({meta['bank_checksum'][:12]}); the bank was replaced")
    # every weight is in model.safetensors: build the bare architecture, so that loading reaches neither
    # a model hub nor the training machine's backbone file; model.cfg still says what the run used
    bare = cfg.backbone.model_copy(update={"pretrained": False, "checkpoint_path": None})
    model = create_relation_model(cfg.model_copy(update={"backbone": bare}))
    model.cfg = cfg
    sd = load_file(str(folder / "model.safetensors"), device=map_location)
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(sd)), sorted(set(sd) - expected)
    if missing or unexpected:
        raise CheckpointError(f"{where}: weights do not fit the config: missing {missing[:8]}"
                              f"{' ...' if len(missing) > 8 else ''}, unexpected {unexpected[:8]}"
                              f"{' ...' if len(unexpected) > 8 else ''}")
    model.load_state_dict(sd, strict=True)
    model.eval()
    cal = Calibration.from_dict(json.loads((folder / "calibration.json").read_text()))
    return LoadedCheckpoint(model, bank, cal, cfg, meta["text_encoder"])


def find_latest_checkpoint(root: str | Path) -> Path | None:
    """The most recently written checkpoint folder anywhere under the local folder ``root`` (by the
    time its weights were written), or None when there is none. A folder counts when its
    ``meta.json`` names this format; symbolic links are not followed, so nothing is counted twice."""
    best: tuple[float, str] | None = None
    for dirpath, _dirs, files in os.walk(root):
        if "meta.json" not in files or "model.safetensors" not in files:
            continue
        folder = Path(dirpath)
        try:
            if json.loads((folder / "meta.json").read_text()).get("format") != CHECKPOINT_FORMAT:
                continue
            key = ((folder / "model.safetensors").stat().st_mtime, str(folder))
        except (OSError, ValueError):  # a checkpoint being written or removed right now
            continue
        best = key if best is None or key > best else best
    return None if best is None else Path(best[1])


def write_calibration(target: str | Path, calibration: Calibration, filesystem=None,
                      expect_meta: dict | None = None) -> str:
    """Install a Platt map into a checkpoint (a local folder, a URI or a path on ``filesystem``): only
    ``calibration.json`` changes, replaced atomically (a concurrent reader sees the old map or the new
    one: a rename locally, a single-object write on an object store); returns its location.

    ``meta.json`` is left as it is (``calibration.json`` carries no digest). ``expect_meta``, the
    ``meta.json`` of the copy the map was fitted on, must still match the target's: a map is never
    installed beside weights or a bank other than the ones it was fitted against.
    """
    if calibration.fitted and calibration.a <= 0:
        raise CheckpointError(f"{redact(str(target))}: Platt slope a={calibration.a:.4g} is not positive; such a "
                              "map would reverse the checkpoint's ranking, so it is not installed")
    if filesystem is None and not is_uri(target):
        folder = Path(target)
        meta = _read_meta(folder, str(folder))
        _check_same(meta, expect_meta, str(folder))
        tmp = folder / ".calibration.json.tmp"
        tmp.write_text(json.dumps(calibration.to_dict()))
        tmp.replace(folder / "calibration.json")
        return str(folder / "calibration.json")
    where = redact(str(target))
    try:
        fs, root = resolve(target, filesystem)
        root = root.rstrip("/")
        with fs.open_input_stream(f"{root}/meta.json") as f:
            meta = json.loads(f.read())
    except (ValueError, OSError) as exc:
        raise CheckpointError(f"{where}: not a readable relation checkpoint (meta.json): {exc}") from None
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{where}: format {meta.get('format')!r}, expected {CHECKPOINT_FORMAT!r}")
    _check_same(meta, expect_meta, where)
    with fs.open_output_stream(f"{root}/calibration.json") as f:
        f.write(json.dumps(calibration.to_dict()).encode())
    return join(where, "calibration.json") if filesystem is None else f"{root}/calibration.json"


def _check_same(meta: dict, expect: dict | None, where: str) -> None:
    if expect is not None and (meta.get("sha256"), meta.get("bank_checksum")) != (expect.get("sha256"),
                                                                                 expect.get("bank_checksum")):
        raise CheckpointError(f"{where}: the weights or the text bank changed while the calibration was fitted "
                              f"(meta.json records {meta.get('sha256')}, the fit saw {expect.get('sha256')}); "
                              "not installed")
