"""The main job on the embedded default: everything runs on a local Ray instance, no GPU, no hub.

Today: build the synthetic world with Ray Data and print its corpus statistics. Each stage
prints what it did and where it wrote it, under runs/demo/.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "runs" / "demo"


def main() -> int:
    import ray

    ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False

    from pipelines.synthetic import SyntheticJobConfig, main as build_synthetic

    print("== 1/1 synthetic world (Ray Data) ==")
    build_synthetic(SyntheticJobConfig(num_scenes=2000, out_dir=str(RUN / "synthetic")))
    ray.shutdown()
    print(f"\ndone: outputs under {RUN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
