"""The decode cache (train_jobs.decode_cache): batches read from it are bit for bit the batches the
decode stage computes, and anything a decoded row depends on names another cache."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from relate.data.corpus import read_corpus
from relate.data.synthetic import SyntheticConfig
from relate.data.synthetic_corpus import write_corpus
from train_jobs.decode_cache import (META, DecodedRows, decode_cache_key, decode_in_process, ensure_decode_cache,
                                     write_decode_cache)
from train_jobs.relation_data import DECODED_KEYS, DataConfig, DecodeStage, epoch_order

FORMS = ["on", "left of", "right of", "near", "touching", "above", "below", "in front of", "behind", "brighter than",
         "holding", "inside"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("decode_world")
    write_corpus(root, SyntheticConfig(num_scenes=24, coverage="full", min_size=64, max_size=120))
    return root


def _kwargs(root: Path, **data) -> dict:
    table = read_corpus(root, "train").select(["image_id", "uri", "width", "height", "boxes", "relations", "source",
                                              "asked_pairs"])
    cats = sorted({b["category"] for bx in table.column("boxes").to_pylist() for b in bx if b["category"]})
    cfg = DataConfig(**{"corpus_root": str(root), "max_boxes": 6, "max_relations": 40, "photometric": 0.0, **data})
    return dict(size=48, data=cfg, forms=FORMS, categories=cats, seed=3, sources=["*"], keep_aspect=True, rows=table)


def _stream(kwargs: dict, cache: str | None, batches: int = 5) -> list[dict]:
    """What the training stream's stage hands the trainer for the first rows of a run's order."""
    stage = DecodeStage(**kwargs, cache=cache)
    order = epoch_order(kwargs["rows"].num_rows, 2, seed=1)
    return [stage(pa.table({"row": order[i * 8:(i + 1) * 8]})) for i in range(batches)]


@pytest.mark.parametrize("photometric", [0.0, 0.3])
def test_cached_batches_are_the_decoded_batches(corpus, tmp_path, photometric):
    kw = _kwargs(corpus, photometric=photometric, implied_relations=True)
    cache = ensure_decode_cache(kw, str(tmp_path), decode=decode_in_process, say=lambda s: None)
    assert ("image" in cache.arrays) == (photometric == 0)  # a jittered picture is drawn anew each visit, not kept
    assert all(not a.flags.writeable for a in cache.arrays.values())
    cache = pickle.loads(pickle.dumps(cache))  # as a Ray actor receives it: the folder, opened where it is read
    plain, read = _stream(kw, None), _stream(kw, cache)
    for a, b in zip(plain, read):
        assert tuple(a) == tuple(b) == DECODED_KEYS
        for k in DECODED_KEYS:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
    assert any((b["rels"][..., 0] >= 0).sum() > 0 for b in read) and read[0]["conditions"].any()
    if photometric:  # the jitter still differs between two visits of one row
        stage = DecodeStage(**kw, cache=cache)
        one = pa.table({"row": [0]})
        assert not np.array_equal(stage(one)["image"], stage(one)["image"])


def test_a_second_run_reads_the_cache_without_decoding(corpus, tmp_path):
    kw = _kwargs(corpus)
    said: list[str] = []
    first = ensure_decode_cache(kw, str(tmp_path), decode=decode_in_process, say=said.append)

    def refuse(_):
        raise AssertionError("decoded again")

    assert ensure_decode_cache(kw, str(tmp_path), decode=refuse, say=said.append).folder == first.folder
    assert "decoded once" in said[0] and "reading" in said[1]
    assert [p.name for p in Path(first.folder).parent.iterdir()] == [Path(first.folder).name]  # no temporary folder
    with pytest.raises(ValueError, match="rows it was built from"):  # a cache of another row table
        DecodeStage(**{**kw, "rows": kw["rows"].slice(1)}, cache=first)


def test_the_key_follows_everything_a_decoded_row_depends_on(corpus, tmp_path):
    base = _kwargs(corpus)
    key = decode_cache_key(base)
    assert decode_cache_key(_kwargs(corpus)) == key  # the same rows and settings: the same cache
    # neither the stream's seed nor how many tasks decode changes a cached array, nor, once the pictures
    # are not cached, the jitter's strength
    assert decode_cache_key({**base, "seed": 9}) == key
    assert decode_cache_key(_kwargs(corpus, decode_concurrency=3)) == key
    assert decode_cache_key(_kwargs(corpus, photometric=0.2)) == decode_cache_key(_kwargs(corpus, photometric=0.3))
    other = {
        "side": {**base, "size": 56},
        "aspect": {**base, "keep_aspect": False},
        "jitter on": _kwargs(corpus, photometric=0.2),
        "boxes cap": _kwargs(corpus, max_boxes=7),
        "relations cap": _kwargs(corpus, max_relations=41),
        "implied": _kwargs(corpus, implied_relations=True),
        "forms": {**base, "forms": FORMS[:-1]},
        "categories": {**base, "categories": base["categories"][::-1]},
        "sources": {**base, "sources": ["*", "a"]},
        "rows": {**base, "rows": base["rows"].slice(1)},
    }
    keys = {name: decode_cache_key(kw) for name, kw in other.items()}
    assert key not in keys.values() and len(set(keys.values())) == len(keys), keys
    # a relation changed in the corpus
    rels = base["rows"].column("relations").to_pylist()
    rels[0] = rels[0][1:]
    edited = base["rows"].set_column(base["rows"].schema.get_field_index("relations"), "relations",
                                     pa.array(rels, base["rows"].schema.field("relations").type))
    assert decode_cache_key({**base, "rows": edited}) != key
    # a picture rewritten at the same path
    uri = base["rows"].column("uri")[0].as_py()
    st = os.stat(uri)
    os.utime(uri, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    try:
        assert decode_cache_key(base) != key
    finally:
        os.utime(uri, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert decode_cache_key(base) == key


def test_an_incomplete_cache_is_never_read(tmp_path):
    rows = 5

    def short():  # decoding stops after three rows
        yield np.arange(3), {"boxes": np.zeros((3, 2), np.float32)}

    with pytest.raises(RuntimeError, match="2 of 5 rows"):
        write_decode_cache(tmp_path / "k", rows, short())
    assert not list(tmp_path.iterdir())
    with pytest.raises(FileNotFoundError, match="missing or incomplete"):
        DecodedRows(tmp_path / "k", rows).arrays
    write_decode_cache(tmp_path / "k", rows, iter([(np.arange(5), {"boxes": np.ones((5, 2), np.float32)})]))
    assert json.loads((tmp_path / "k" / META).read_text())["rows"] == rows
    with pytest.raises(ValueError, match="holds 5 rows, the row table has 6"):
        DecodedRows(tmp_path / "k", 6).arrays
    # a second writer of the same key keeps the first complete copy
    write_decode_cache(tmp_path / "k", rows, iter([(np.arange(5), {"boxes": np.zeros((5, 2), np.float32)})]))
    assert DecodedRows(tmp_path / "k", rows).arrays["boxes"].sum() == 10
    assert [p.name for p in tmp_path.iterdir()] == ["k"]


def test_decoding_runs_on_one_torch_thread_and_puts_the_count_back(corpus):
    kw = _kwargs(corpus, photometric=0.3)
    seen = []
    stage = DecodeStage(**kw)
    stage._image = lambda uri, _f=stage._image: (seen.append(torch.get_num_threads()), _f(uri))[1]
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        stage(pa.table({"row": [0, 1]}))
        assert seen == [1, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
