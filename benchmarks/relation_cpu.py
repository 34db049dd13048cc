"""The relation forward on CPU against the machine's own fp32 GEMM rate, per runtime.

The released architecture (DINOv3 ViT-S/16+ at 448, random weights), batch 1, 20 boxes, 128
scored pairs, a 50-string vocabulary: the inputs of ``benchmarks.relation_latency``. Figures, all
from one run:

* ``gemm_gflops``: fp32 matrix product rate of this machine now (torch ``mm``, 2048 x 2048, all
  threads), the ceiling the forward is compared with;
* ``forward_gflop``: the forward's floating-point operations (``torch.utils.flop_counter``,
  2 per multiply-add; matrix products, convolutions and attention), counted on the decomposed
  path (``forward_flops``); ``forward_gflop_fused_count`` is what the counter reports on the fused
  CPU kernels the forward runs, which it misses in part (pytorch/pytorch#195460);
* per runtime (``torch_eager``: the plain modules, vocabulary product prepacked; ``torch_onednn``:
  what ``relate.api`` runs on CPU, every linear on a prepacked oneDNN kernel and the DINOv3 MLP's
  SiLU and gating fused into them (``relate.model.onednn``); ``onnxruntime``: the graph ``relate
  export`` writes, all optimisations on; ``openvino``: the same graph compiled by OpenVINO as
  ``runtime="openvino"`` compiles its IR, exact fp32, latency hint, one inference thread per
  core): ``<rt>_ms`` (best of the repeats) and
  ``<rt>_fraction_of_peak`` = forward_gflop / time / gemm_gflops;
* ``onednn_packed_mib``: the memory ``torch_onednn``'s packed weight copies add (every packed
  linear's fp32 weight);
* ``best_over_eager``: eager time over the fastest runtime's time (> 1: faster than eager);
* ``torch_onednn_max_abs_diff``, ``onnx_max_abs_diff`` and ``openvino_max_abs_diff``: largest
  |score| difference (Eq. 6, every pair x predicate) between that runtime and torch eager on the
  benchmark input, with the same pairs kept (infinite when the kept pairs differ);
* ``load_average_1m``: the machine's load at the end, since a shared machine's load changes the rest.

The exported graph of these random weights is cached under ``$RELATE_BENCH_CACHE`` (default
``~/.cache/relate/bench``), keyed by torch version and config: the first run also exports (a few
minutes on 2 cores), later runs (and ``--quick``) reuse it. OpenVINO reads that ONNX file (what
``relate export --format openvino`` converts); without the ``openvino`` extra its arm is left out
and ``openvino`` says so.

    python -m benchmarks.relation_cpu [--quick] [--out FILE]
"""

from __future__ import annotations

import copy
import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from benchmarks._common import best_of, run_benchmark
from benchmarks.relation_latency import N_BOXES, N_PAIRS, _bank, _inputs

GEMM_N = 2048


def gemm_gflops(repeats: int) -> float:
    """Measured fp32 GEMM rate (GFLOP/s) of torch.mm on square matrices, best of ``repeats``."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(GEMM_N, GEMM_N, generator=g), torch.randn(GEMM_N, GEMM_N, generator=g)
    out = torch.empty(GEMM_N, GEMM_N)
    torch.mm(a, b, out=out)
    t = best_of(lambda: torch.mm(a, b, out=out), repeats)
    return 2 * GEMM_N ** 3 / t / 1e9


def forward_flops(run, decomposed: bool = True) -> int:
    """Floating-point operations of ``run()`` by ``torch.utils.flop_counter``.

    The counter knows a formula per aten op and sees only the ops dispatched to it. On CPU it sees
    nothing for two fused kernels: ``_scaled_dot_product_flash_attention_for_cpu`` has no formula
    in torch 2.14 (pytorch/pytorch#195460, fixed upstream by registering it), and inference's
    ``_transformer_encoder_layer_fwd`` runs its products inside one op. ``decomposed=True`` counts
    with SDPA on its math backend and the ``nn.MultiheadAttention`` fast path off, so every
    product is an ``mm`` / ``bmm`` / ``addmm`` the counter has a formula for; the products, and
    so the count, are those the fused kernels compute."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    if not decomposed:
        with FlopCounterMode(display=False) as fc:
            run()
        return int(fc.get_total_flops())
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as fc:
            run()
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)
    return int(fc.get_total_flops())


def _onnx_file(model, cfg) -> Path:
    from relate.export import export_model

    key = hashlib.sha256(f"{torch.__version__}|{cfg.model_dump_json()}|seed0|v1".encode()).hexdigest()[:16]
    cache = Path(os.environ.get("RELATE_BENCH_CACHE", Path.home() / ".cache" / "relate" / "bench"))
    path = cache / f"relation_cpu_{key}.onnx"
    if not path.is_file():
        tmp = path.with_suffix(".tmp.onnx")
        export_model(model, tmp, "benchmark-random-weights")
        tmp.replace(path)
    return path


def _score_diff(ref, ok: np.ndarray, got, w: float) -> float:
    """Largest |Eq. 6 score| difference between torch's output and a graph runtime's (pairs, valid, l_pred,
    l_pair, ...); infinite when the kept pairs differ."""
    from relate.model.score import relation_score

    v = got[1][0]
    if not np.array_equal(ref.pairs[0].numpy()[ok], got[0][0][v]):
        return float("inf")
    s_ref = relation_score(ref.scores.logits[0].numpy()[ok], ref.l_pair[0].numpy()[ok], w)
    return float(np.abs(s_ref - relation_score(got[2][0][v], got[3][0][v], w)).max())


def _as_graph_outputs(out) -> tuple:
    """A torch forward's output in a graph runtime's (pairs, valid, l_pred, l_pair) layout."""
    return (out.pairs.numpy(), out.sampled.valid.numpy(), out.scores.logits.numpy(), out.l_pair.numpy())


def measure(quick: bool) -> dict[str, float]:
    from relate.export import ExportError, onnx_session, openvino_session, run_onnx
    from relate.model import RelationModelConfig, create_relation_model
    from relate.model.onednn import packed_weights, prepack_cpu

    threads = max(1, os.cpu_count() or 1)
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = RelationModelConfig()
    cfg.sampler.learned_keep = N_PAIRS
    model = create_relation_model(cfg).eval()
    packed_model = copy.deepcopy(model)
    prepack_cpu(packed_model)
    packed_bytes = sum(w.numel() * w.element_size() for w in packed_weights(packed_model))
    images, boxes, valid = _inputs(cfg)
    bank = _bank(50, cfg.text_dim, 1)
    repeats = 6 if quick else 10  # 3 often missed the machine's fast phase: best-of-3 forwards read 0.80-0.91
    figures: dict[str, float] = {}
    with torch.inference_mode():
        scoring = model.head.scoring_matrix(bank)
        eager = lambda: model(images, boxes, valid, bank, scoring=scoring)  # noqa: E731
        ref = eager()
        assert int(ref.sampled.valid.sum()) == N_PAIRS, "benchmark must score exactly 128 pairs"
        flops = forward_flops(eager)
        fused_count = forward_flops(eager, decomposed=False)
        onednn = lambda: packed_model(images, boxes, valid, bank, scoring=scoring)  # noqa: E731
        onednn_out = onednn()
        path = _onnx_file(model, cfg)
        sess = onnx_session(path, threads=threads)
        bank_np = bank.numpy()
        ort = lambda: run_onnx(sess, images, boxes, valid, bank_np)  # noqa: E731
        got = {"onnxruntime": ort()}
        runs = {"torch_eager": eager, "torch_onednn": onednn, "onnxruntime": ort}
        try:
            ov_sess = openvino_session(path, threads=threads)
        except ExportError as exc:  # the openvino extra is not installed
            figures["openvino"] = str(exc)
        else:
            runs["openvino"] = lambda: run_onnx(ov_sess, images, boxes, valid, bank_np)
            got["openvino"] = runs["openvino"]()
        for fn in runs.values():  # warm-up
            fn()
        gemm = gemm_gflops(3 if quick else 10)
        best = {name: float("inf") for name in runs}
        for _ in range(repeats):  # interleaved, so load changes on a shared machine hit every arm alike
            for name, fn in runs.items():
                best[name] = min(best[name], best_of(fn, 1))
        gemm = max(gemm, gemm_gflops(3 if quick else 10))  # the ceiling measured around the forwards
    ok = ref.sampled.valid[0].numpy()
    figures["gemm_gflops"] = round(gemm, 1)
    figures["forward_gflop"] = round(flops / 1e9, 2)
    figures["forward_gflop_fused_count"] = round(fused_count / 1e9, 2)
    figures["onednn_packed_mib"] = round(packed_bytes / 2 ** 20, 1)
    for name, t in best.items():
        figures[f"{name}_ms"] = round(1000 * t, 1)
        figures[f"{name}_gflops"] = round(flops / t / 1e9, 1)
        figures[f"{name}_fraction_of_peak"] = round(flops / t / 1e9 / gemm, 3)
    fastest = min(best, key=best.get)
    figures["best_runtime"] = fastest
    figures["best_fraction_of_peak"] = figures[f"{fastest}_fraction_of_peak"]
    figures["best_over_eager"] = round(best["torch_eager"] / best[fastest], 3)
    figures["torch_onednn_max_abs_diff"] = _score_diff(ref, ok, _as_graph_outputs(onednn_out), cfg.pair_weight)
    figures["onnx_max_abs_diff"] = _score_diff(ref, ok, got["onnxruntime"], cfg.pair_weight)
    if "openvino" in got:
        figures["openvino_max_abs_diff"] = _score_diff(ref, ok, got["openvino"], cfg.pair_weight)
    figures.update({"n_boxes": N_BOXES, "n_pairs": N_PAIRS, "image_side": cfg.backbone.img_size, "threads": threads,
                    "load_average_1m": round(os.getloadavg()[0], 1)})  # how busy the machine was: read the rest with it
    import onnxruntime

    figures["onnxruntime_version"] = onnxruntime.__version__
    if "openvino" in got:
        import openvino

        figures["openvino_version"] = openvino.__version__
    return figures


def main(argv=None) -> dict:
    return run_benchmark("relation_cpu", measure, argv)


if __name__ == "__main__":
    main()
