"""Synthetic world build rate through the Ray Data pipeline on a local 2-CPU Ray instance.

Figures: ``scenes_per_s`` (scenes built, encoded and written per second by the pipeline, Parquet
included), ``serial_scenes_per_s`` (one process, no Ray, same work) and ``pipeline_over_serial``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._common import run_benchmark


def _measure(quick: bool) -> dict[str, float]:
    import ray

    from pipelines.synthetic import SceneStage, SyntheticJobConfig, main

    n = 600 if quick else 2000
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    with tempfile.TemporaryDirectory() as tmp:
        main(SyntheticJobConfig(num_scenes=50, out_dir=f"{tmp}/warm"))  # start workers, import code
        res = main(SyntheticJobConfig(num_scenes=n, out_dir=f"{tmp}/run", blocks=8))
        stage = SceneStage(SyntheticJobConfig(), str(Path(tmp) / "serial"))
        (Path(tmp) / "serial").mkdir()
        m = n // 4
        t0 = time.perf_counter()
        stage({"id": np.arange(m)})
        serial = m / (time.perf_counter() - t0)
    ray.shutdown()
    return {"scenes_per_s": round(res.scenes_per_s, 1), "serial_scenes_per_s": round(serial, 1),
            "pipeline_over_serial": round(res.scenes_per_s / serial, 3), "scenes": n}


if __name__ == "__main__":
    run_benchmark("synthetic_build", _measure)
