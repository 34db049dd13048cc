"""A small synthetic corpus written in this process, without Ray, for tests and benchmarks.

``pipelines.synthetic`` is the scalable path (Ray Data, deterministic shards); this writes scenes
``0 .. num_scenes - 1`` of a world as PNGs plus one Parquet shard per split, rows from
``Scene.to_record`` so both paths produce the same records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

__all__ = ["write_corpus"]


def write_corpus(out: str | Path, world, split: Callable[[int], str] = lambda i: "train") -> Path:
    """Write ``world``'s scenes under ``out`` (``images/``, ``corpus/<split>/part-0.parquet``);
    ``split(index)`` names each scene's split. Returns ``out``."""
    import pyarrow.parquet as pq
    from PIL import Image

    from relate.data.synthetic import make_scene
    from relate.schema import CORPUS_SCHEMA, to_table

    out = Path(out)
    rows: dict[str, list[dict]] = {}
    for i in range(world.num_scenes):
        sc = make_scene(i, world)
        uri = out / "images" / f"{sc.image_id}.png"
        uri.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(sc.image).save(uri)
        s = split(i)
        rows.setdefault(s, []).append(sc.to_record(str(uri), s))
    for s, items in rows.items():
        (out / "corpus" / s).mkdir(parents=True, exist_ok=True)
        pq.write_table(to_table(items, CORPUS_SCHEMA), out / "corpus" / s / "part-0.parquet")
    return out
