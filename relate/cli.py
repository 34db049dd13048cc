"""The ``relate`` console script: ``relate predict`` (graphs for your own images, ``relate.predict``)
and ``relate export`` (the relation forward as ONNX or OpenVINO IR, ``relate.export``)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

__all__ = ["main"]


def _export(args: argparse.Namespace) -> int:
    from relate.checkpoint import CheckpointError
    from relate.export import ExportError, export_onnx, export_openvino

    exporters = {"onnx": (export_onnx, "onnxruntime"), "openvino": (export_openvino, "openvino")}
    if args.format not in exporters:
        print(f"relate export: error: format {args.format!r} is not supported ({', '.join(exporters)})",
              file=sys.stderr)
        return 2
    export, runtime = exporters[args.format]
    try:
        out = export(args.checkpoint, args.out)
    except (ExportError, CheckpointError) as exc:
        print(f"relate export: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}", file=sys.stderr)
    if args.check:
        from relate.parity import parity_check

        path = {"onnx_path": out} if args.format == "onnx" else {"ir_path": out}
        diff = parity_check(args.checkpoint, runtime=runtime, **path)
        print(f"max |score({runtime}) - score(torch)| = {diff:.3g} on a random image", file=sys.stderr)
        return 0 if diff <= 1e-4 else 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from relate import predict

    ap = argparse.ArgumentParser(prog="relate", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="relation graphs (JSON + PNG) for image files, folders or globs",
                       description=predict.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    predict.add_arguments(p)
    e = sub.add_parser("export", help="export a checkpoint's forward (vocabulary as an input) for another runtime")
    e.add_argument("--checkpoint", required=True, help="relation checkpoint folder")
    e.add_argument("--format", default="onnx", help="onnx (runtime onnxruntime) or openvino (OpenVINO IR, runtime "
                   "openvino)")
    e.add_argument("--out", default=None, help="output file (default: CHECKPOINT/relation.onnx, or "
                   "CHECKPOINT/relation.xml and .bin for openvino)")
    e.add_argument("--check", action="store_true", help="compare scores against torch after exporting (exit 1 beyond 1e-4)")
    args = ap.parse_args(argv)
    if args.command == "predict":
        return predict.run_cli(args)
    return _export(args)


if __name__ == "__main__":
    sys.exit(main())
