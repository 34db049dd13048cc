"""Export the relation model to ONNX or OpenVINO IR and run it with onnxruntime or OpenVINO
(``relate export``, ``runtime="onnxruntime" | "openvino"``).

The exported graph is the whole forward of ``RelationModel`` (backbone, pair sampler, pair
transformer, two-branch head) with the vocabulary as an input: ``bank`` is the (V, text_dim)
unit-norm text matrix and the predicate gate alpha_p = g(e_p) runs inside the graph, so swapping
or growing a vocabulary needs no re-export. Batch size, box count N and vocabulary size V are
dynamic; the image side is the checkpoint's ``img_size``.

    inputs   images (B, 3, S, S) float32 in [0, 1], boxes (B, N, 4) float32 pixels of the S x S
             image, box_valid (B, N) bool, bank (V, text_dim) float32
    outputs  pairs (B, P, 2) int64, pair_valid (B, P) bool, l_pred (B, P, V), l_pair (B, P),
             z_spa (B, P, text_dim), z_sem (B, P, text_dim)

The file records the sha256 of the checkpoint's ``model.safetensors`` (metadata
``weights_sha256``), and ``relate.api.load_model(..., runtime="onnxruntime")`` refuses a graph
exported from other weights. Masks as regions are a torch-runtime feature.

OpenVINO IR (``relate export --format openvino``, ``<checkpoint>/relation.xml`` + ``.bin``) is the
same ONNX graph read by OpenVINO's ONNX front end and saved with fp32 weights (no fp16
compression), the weights' sha256 in its ``rt_info`` (``relate/weights_sha256``). The OpenVINO
runtime compiles it for the CPU with inference precision f32 set explicitly (OpenVINO's CPU
default is bf16 wherever the CPU has bf16 instructions, as this one does) and keeps every
``Divide`` a division: OpenVINO otherwise rewrites ``x / c`` as ``x * (1/c)``, one ulp off, and
the box encoder's top Fourier band (``sin(2^15 pi x)``) turns that ulp into score differences of
2e-4; kept, the scores match torch to about 3e-7.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

__all__ = ["export_onnx", "export_model", "onnx_session", "run_onnx", "default_onnx_path", "check_onnx_matches", "ONNX_NAME",
           "INPUTS", "OUTPUTS", "ExportError", "export_openvino", "openvino_session", "default_ir_path",
           "check_ir_matches", "IR_NAME"]

ONNX_NAME = "relation.onnx"
IR_NAME = "relation.xml"  # OpenVINO IR; the weights go next to it as relation.bin
INPUTS = ("images", "boxes", "box_valid", "bank")
OUTPUTS = ("pairs", "pair_valid", "l_pred", "l_pair", "z_spa", "z_sem")


class ExportError(ValueError):
    """The graph cannot be exported, found or trusted for this checkpoint."""


class _Forward(nn.Module):
    """RelationModel's forward with tensor outputs only (what a graph can return)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images, boxes, box_valid, bank):
        r = self.model(images, boxes, box_valid, bank)
        return r.sampled.pairs, r.sampled.valid, r.scores.logits, r.l_pair, r.scores.z_spa, r.scores.z_sem


def default_onnx_path(checkpoint: str | Path) -> Path:
    return Path(checkpoint) / ONNX_NAME


def default_ir_path(checkpoint: str | Path) -> Path:
    return Path(checkpoint) / IR_NAME


def _weights_sha256(checkpoint: str | Path) -> str:
    from relate.checkpoint import _sha256

    return _sha256(Path(checkpoint) / "model.safetensors")


def _example_inputs(model, batch: int = 2, n_boxes: int = 3, n_strings: int = 4):
    """Example inputs for tracing; sizes other than 0 and 1, which torch.export would specialise."""
    side = model.preprocessing.img_size
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(batch, n_boxes, 2, generator=g) * side * 0.6
    boxes = torch.cat([xy, xy + side * 0.3], dim=-1)
    bank = torch.nn.functional.normalize(torch.randn(n_strings, model.cfg.text_dim, generator=g), dim=-1)
    return (torch.rand(batch, 3, side, side, generator=g), boxes, torch.ones(batch, n_boxes, dtype=torch.bool),
            bank)


def export_onnx(checkpoint: str | Path, out: str | Path | None = None, opset: int = 18, verbose: bool = False) -> Path:
    """Write the checkpoint's forward as ONNX (default ``<checkpoint>/relation.onnx``); returns the path."""
    import importlib.util

    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if missing:
        raise ExportError(f"ONNX export needs the {missing} package(s); install the project's 'onnx' extra: "
                          "pip install -e '.[onnx]'")
    from relate.checkpoint import load_checkpoint

    if not Path(checkpoint).is_dir():
        raise ExportError(f"{checkpoint}: export needs a local checkpoint folder")
    ck = load_checkpoint(checkpoint, map_location="cpu")
    out = Path(out) if out is not None else default_onnx_path(checkpoint)
    return export_model(ck.model, out, _weights_sha256(checkpoint), opset=opset, verbose=verbose)


def export_model(model: nn.Module, out: str | Path, weights_sha256: str = "", opset: int = 18,
                 verbose: bool = False) -> Path:
    """Write ``model``'s forward (a ``RelationModel``) as ONNX to ``out``; ``weights_sha256`` is recorded
    as the metadata a checkpoint's graph is checked by."""
    out = Path(out)
    wrapper = _Forward(model.eval()).eval()
    args = _example_inputs(model)
    b, n, v = torch.export.Dim("B", min=1, max=64), torch.export.Dim("N", min=2, max=512), \
        torch.export.Dim("V", min=1, max=200_000)
    with torch.no_grad():
        program = torch.onnx.export(
            wrapper, args, dynamo=True, opset_version=opset, verbose=verbose, input_names=list(INPUTS),
            output_names=list(OUTPUTS), external_data=False,
            dynamic_shapes={"images": {0: b}, "boxes": {0: b, 1: n}, "box_valid": {0: b, 1: n}, "bank": {0: v}})
    program.model.metadata_props.update({
        "relate.weights_sha256": weights_sha256,
        "relate.img_size": str(model.preprocessing.img_size),
        "relate.keep_aspect": str(model.preprocessing.keep_aspect).lower(),
        "relate.text_dim": str(model.cfg.text_dim),
        "relate.inputs": json.dumps(INPUTS), "relate.outputs": json.dumps(OUTPUTS)})
    out.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(out))
    return out


def _openvino():
    try:
        import openvino
    except ImportError as exc:
        raise ExportError(f"OpenVINO export and runtime 'openvino' need the openvino package ({exc}): install the "
                          "project's 'openvino' extra: pip install -e '.[openvino]'") from None
    return openvino


def export_openvino(checkpoint: str | Path, out: str | Path | None = None) -> Path:
    """Write the checkpoint's forward as OpenVINO IR (default ``<checkpoint>/relation.xml`` and ``.bin``),
    read from the checkpoint's ONNX graph (``relation.onnx`` when it is there and from these weights,
    otherwise exported to a temporary folder first); returns the path of the ``.xml``."""
    import tempfile

    ov = _openvino()
    if not Path(checkpoint).is_dir():
        raise ExportError(f"{checkpoint}: export needs a local checkpoint folder")
    out = Path(out) if out is not None else default_ir_path(checkpoint)
    if out.suffix != ".xml":
        raise ExportError(f"{out}: an OpenVINO IR file name ends in .xml (the weights go next to it as .bin)")
    sha = _weights_sha256(checkpoint)
    with tempfile.TemporaryDirectory(prefix="relate-ir-") as tmp:
        onnx_path = default_onnx_path(checkpoint)
        try:
            check_onnx_matches(onnx_path, checkpoint)
        except ExportError:  # missing or stale: a fresh graph, not left in the checkpoint
            onnx_path = export_onnx(checkpoint, Path(tmp) / ONNX_NAME)
        # Core.read_model is OpenVINO's ONNX front end, what ov.convert_model runs, without its telemetry
        model = ov.Core().read_model(str(onnx_path))
        for key, value in (("weights_sha256", sha), ("inputs", json.dumps(INPUTS)), ("outputs", json.dumps(OUTPUTS))):
            model.set_rt_info(value, ["relate", key])
        out.parent.mkdir(parents=True, exist_ok=True)
        ov.save_model(model, str(out), compress_to_fp16=False)  # fp32 weights: the default halves them
    return out


def check_ir_matches(path: str | Path, checkpoint: str | Path) -> None:
    """Refuse an IR converted from weights other than the checkpoint's."""
    ov = _openvino()
    path = Path(path)
    if not path.is_file():
        raise ExportError(f"{path}: no exported graph; run: relate export --checkpoint {checkpoint} --format openvino")
    model = ov.Core().read_model(str(path))
    key = ["relate", "weights_sha256"]
    got = model.get_rt_info(key).astype(str) if model.has_rt_info(key) else None
    want = _weights_sha256(checkpoint)
    if got != want:
        raise ExportError(f"{path} was exported from weights with sha256 {str(got)[:12]}, but {checkpoint} has "
                          f"{want[:12]}; re-run relate export --format openvino")


class OpenVINOSession:
    """A compiled OpenVINO model behind onnxruntime's ``run(output_names, feed)``, so ``run_onnx`` drives
    either; one infer request, one forward at a time."""

    def __init__(self, compiled) -> None:
        import threading

        self.compiled = compiled
        self._request = compiled.create_infer_request()
        self._lock = threading.Lock()

    def run(self, names, feed) -> list[np.ndarray]:
        with self._lock:
            self._request.infer(feed)
            return [self._request.get_tensor(n).data.copy() for n in names]


def openvino_session(path: str | Path, threads: int | None = None, config: dict | None = None) -> OpenVINOSession:
    """The graph at ``path`` (IR ``.xml``, or the ``.onnx`` itself) compiled for the CPU in exact fp32:
    inference precision f32, every Divide kept a division; latency hint, ``threads`` inference threads
    (default torch's), threads not pinned to cores (on cores other processes share, as Serve replicas
    do, a pinned thread waits for its busy core; README, relation_cpu). ``config`` adds or overrides
    CPU plugin properties, except the precision."""
    ov = _openvino()
    if not Path(path).is_file():
        raise ExportError(f"{path}: no exported graph; run: relate export --checkpoint DIR --format openvino")
    model = ov.Core().read_model(str(path))
    for op in model.get_ops():
        if op.get_type_name() == "Divide":  # OpenVINO's ConvertDivide skips nodes that carry this mark
            op.get_rt_info()["nonconvertable_divide_0"] = True
    props = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": int(threads or torch.get_num_threads()),
             "ENABLE_CPU_PINNING": False, **(config or {}), "INFERENCE_PRECISION_HINT": "f32"}
    compiled = ov.Core().compile_model(model, "CPU", props)
    got = compiled.get_property("INFERENCE_PRECISION_HINT")
    if got != ov.Type.f32:
        raise ExportError(f"OpenVINO compiled {path} with inference precision {got}, not f32")
    return OpenVINOSession(compiled)


def onnx_session(path: str | Path, threads: int | None = None):
    """An onnxruntime CPU session on the exported graph, all graph optimisations on."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ExportError(f"runtime 'onnxruntime' needs the onnxruntime package ({exc}): "
                          "pip install -e '.[onnx]'") from None
    if not Path(path).is_file():
        raise ExportError(f"{path}: no exported graph; run: relate export --checkpoint DIR --format onnx")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads or torch.get_num_threads()
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def check_onnx_matches(path: str | Path, checkpoint: str | Path) -> None:
    """Refuse a graph exported from weights other than the checkpoint's."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise ExportError(f"{path}: no exported graph; run: relate export --checkpoint {checkpoint} --format onnx")
    meta = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    want, got = _weights_sha256(checkpoint), meta.get("relate.weights_sha256")
    if got != want:
        raise ExportError(f"{path} was exported from weights with sha256 {str(got)[:12]}, but {checkpoint} has "
                          f"{want[:12]}; re-run relate export")


def run_onnx(session, images, boxes, box_valid, bank: np.ndarray) -> tuple[np.ndarray, ...]:
    """One forward through the session -> (pairs, pair_valid, l_pred, l_pair, z_spa, z_sem) as numpy."""
    feed = {"images": np.ascontiguousarray(np.asarray(images, dtype=np.float32)),
            "boxes": np.ascontiguousarray(np.asarray(boxes, dtype=np.float32)),
            "box_valid": np.asarray(box_valid, dtype=bool), "bank": np.ascontiguousarray(bank, dtype=np.float32)}
    return tuple(session.run(list(OUTPUTS), feed))
