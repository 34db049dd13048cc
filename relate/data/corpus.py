"""Reading the project's corpus layout: ``<root>/corpus/<split>/*.parquet`` (CORPUS_SCHEMA)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from relate.job_inputs import MAKE_CORPUS, MissingInputError, is_remote
from relate.schema import CORPUS_SCHEMA, SchemaError, to_table, validate_corpus

__all__ = ["read_corpus", "corpus_dir", "require_corpus", "SPLITS"]

SPLITS = ("train", "val", "test")


def corpus_dir(root: str | Path) -> Path:
    """Accept either the run folder (holding ``corpus/``) or the corpus folder itself."""
    root = Path(root)
    return root / "corpus" if (root / "corpus").is_dir() else root


def require_corpus(root: str | Path, what: str, make: str = MAKE_CORPUS, splits: Sequence[str] | None = None) -> None:
    """A job's corpus input must hold Parquet shards of at least one of ``splits`` (any split when
    None), else :class:`relate.job_inputs.MissingInputError` names it and ``make`` (``{path}``: root)."""
    if is_remote(root):
        return
    base = corpus_dir(root)
    if not any(next((base / s).glob("*.parquet"), None) for s in (splits or SPLITS)):
        where = f"{root} (splits {list(splits)})" if splits else str(root)
        raise MissingInputError(what, where, make.replace("{path}", str(root)))


def read_corpus(root: str | Path, split: str | None = None, *, validate: bool = True) -> pa.Table:
    """All shards of one split (or of every split), sorted by ``image_id`` for reproducibility."""
    base = corpus_dir(root)
    splits = SPLITS if split is None else (split,)
    if split is not None and split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {list(SPLITS)}")
    files = sorted(f for s in splits for f in (base / s).glob("*.parquet"))
    if not files:
        raise MissingInputError(f"corpus (Parquet shards of split {split or 'any'})", base,
                                MAKE_CORPUS.replace("{path}", str(root)))
    tables = []
    for f in files:
        try:
            tables.append(to_table(pq.read_table(f), CORPUS_SCHEMA, table=str(f)))
        except SchemaError as exc:
            raise SchemaError(f"{f}: {exc}") from None
    table = pa.concat_tables(tables)
    table = table.sort_by("image_id")
    if validate:
        validate_corpus(table, name=str(base))
    return table
