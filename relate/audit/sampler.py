"""Deterministic stratified sampling of corpus relations for a human audit.

Every relation in the corpus falls in one stratum: (pass, gate outcome, predicate family,
frequency bucket). The buckets follow the benchmark convention (rare < 50, common 50-500,
frequent > 500 occurrences of the predicate string in the audited corpus). Each stratum
contributes up to ``per_stratum`` relations, chosen by a keyed hash of the item id, so the
choice does not depend on row order, shard layout or the other strata, and one seed always gives
the same batch. The batch stores the corpus composition so the report can re-weight the
per-stratum precisions back to the corpus (a stratified estimator, not the sample mean).

``python -m relate.audit --set corpus=DIR --set out=batch.json [--set per_stratum=10]``
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field, field_validator, model_validator

from relate.config import StrictConfig
from relate.data.lexicon import SURFACE_TO_CONCEPT, CONCEPTS
from relate.schema import SchemaError

__all__ = [
    "AuditSampleConfig", "AuditBatch", "STRATUM_KEYS", "BUCKETS", "OTHER_FAMILY",
    "family_of", "bucket_of", "relation_table", "stratum_counts", "sample_audit_batch",
    "write_audit_batch", "load_audit_batch", "verify_batch", "verify_corpus", "main",
]

STRATUM_KEYS = ("pass", "gate", "family", "bucket")
BUCKETS = ("rare", "common", "frequent")
OTHER_FAMILY = "other"
_META_KEY = b"relate.audit"
_ITEM_SCHEMA = pa.schema([
    ("item_id", pa.string()), ("position", pa.int32()), ("image_id", pa.string()),
    ("rel_index", pa.int32()), ("subject", pa.int32()), ("object", pa.int32()),
    ("predicate", pa.string()), ("pass", pa.string()), ("gate", pa.string()),
    ("family", pa.string()), ("bucket", pa.string()), ("stratum", pa.string()),
])


class AuditSampleConfig(StrictConfig):
    """How a batch is drawn; stored inside the batch so the report stratifies the same way."""

    corpus: str | None = Field(None, description="Corpus folder (run folder or its corpus/); used by the CLI.")
    out: str | None = Field(None, description="Batch file to write (.json or .parquet); used by the CLI.")
    seed: int = Field(0, description="Seed of the keyed hash that picks items; same seed, same batch.")
    per_stratum: int = Field(10, ge=1, description="Relations drawn per stratum (all of them when it has fewer).")
    split: str | None = Field(None, description="Corpus split to audit (train/val/test); None audits all splits.")
    strata: tuple[str, ...] = Field(STRATUM_KEYS, description=(
        f"Dimensions that define a stratum, a subset of {STRATUM_KEYS}."))
    family_map: dict[str, str] = Field(default_factory=dict, description=(
        "Predicate string -> family for corpora outside the synthetic world (matched lower-cased and stripped); "
        "checked before the lexicon."))
    use_lexicon: bool = Field(True, description=(
        "Look strings missing from family_map up in relate.data.lexicon; unknown ones go to 'other'."))
    rare_below: int = Field(50, ge=1, description="A predicate seen fewer times than this is 'rare'.")
    frequent_above: int = Field(500, ge=1, description="A predicate seen more times than this is 'frequent'.")

    @field_validator("strata")
    @classmethod
    def _known_strata(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [k for k in v if k not in STRATUM_KEYS]
        if bad or not v or len(set(v)) != len(v):
            raise ValueError(f"strata {list(v)}: need distinct names from {list(STRATUM_KEYS)}")
        return v

    @model_validator(mode="after")
    def _buckets_ordered(self) -> "AuditSampleConfig":
        if self.rare_below > self.frequent_above:
            raise ValueError(f"rare_below ({self.rare_below}) must not exceed frequent_above ({self.frequent_above})")
        return self


@dataclass(frozen=True)
class AuditBatch:
    """Sampled items plus what the report needs to re-weight them to the corpus."""

    items: pa.Table
    config: AuditSampleConfig
    corpus_strata: dict[str, int]
    fingerprint: str

    @property
    def meta(self) -> dict[str, Any]:
        return {"config": self.config.model_dump(mode="json"), "corpus_strata": self.corpus_strata,
                "fingerprint": self.fingerprint, "num_items": self.items.num_rows}


def _norm(predicate: str) -> str:
    return " ".join(predicate.strip().lower().split())


def family_of(predicate: str, family_map: dict[str, str] | None = None, use_lexicon: bool = True) -> str:
    """User map first, then the synthetic lexicon, else 'other' (never an error: real corpora
    carry free-form annotator strings)."""
    key = _norm(predicate)
    fmap = {_norm(k): v for k, v in (family_map or {}).items()}
    if key in fmap:
        return fmap[key]
    if use_lexicon and key in SURFACE_TO_CONCEPT:
        return CONCEPTS[SURFACE_TO_CONCEPT[key]].family
    return OTHER_FAMILY


def bucket_of(count: int, rare_below: int = 50, frequent_above: int = 500) -> str:
    """rare < 50 <= common <= 500 < frequent (counts of one predicate string in the corpus)."""
    if count < rare_below:
        return "rare"
    return "frequent" if count > frequent_above else "common"


def _stratum_name(row: dict[str, str], keys: Sequence[str]) -> str:
    return "|".join(f"{k}={row[k]}" for k in keys)


def relation_table(corpus: pa.Table, cfg: AuditSampleConfig) -> pa.Table:
    """One row per corpus relation with its item id and stratum (vectorised over the list column)."""
    for col in ("image_id", "relations"):
        if col not in corpus.column_names:
            raise SchemaError(f"audit sampler: corpus table lacks column {col!r}; has {corpus.column_names}")
    if cfg.split is not None:
        if "split" not in corpus.column_names:
            raise SchemaError(f"audit sampler: split={cfg.split!r} asked but the corpus has no 'split' column")
        corpus = corpus.filter(pc.equal(corpus.column("split"), cfg.split))
    rels = corpus.column("relations").combine_chunks()
    parent = pc.list_parent_indices(rels).to_numpy()
    offsets = rels.offsets.to_numpy()
    rel_index = np.arange(parent.size) - (offsets[parent] - offsets[0]) if parent.size else parent
    flat = rels.flatten()
    image_ids = np.asarray(corpus.column("image_id").to_pylist(), dtype=object)[parent]
    preds = flat.field("predicate").to_pylist()
    norm = [_norm(p) for p in preds]
    counts: dict[str, int] = {}
    for p in norm:
        counts[p] = counts.get(p, 0) + 1
    fam = {p: family_of(p, cfg.family_map, cfg.use_lexicon) for p in counts}
    buck = {p: bucket_of(c, cfg.rare_below, cfg.frequent_above) for p, c in counts.items()}
    cols: dict[str, list] = {
        "item_id": [f"{i}:{k}" for i, k in zip(image_ids, rel_index.tolist())],
        "image_id": image_ids.tolist(), "rel_index": rel_index.tolist(),
        "subject": flat.field("subject").to_pylist(), "object": flat.field("object").to_pylist(),
        "predicate": preds, "pass": flat.field("pass").to_pylist(), "gate": flat.field("gate").to_pylist(),
        "family": [fam[p] for p in norm], "bucket": [buck[p] for p in norm],
    }
    rows = zip(*(cols[k] for k in STRATUM_KEYS))
    cols["stratum"] = [_stratum_name(dict(zip(STRATUM_KEYS, r)), cfg.strata) for r in rows]
    cols["position"] = [-1] * len(preds)
    return pa.table({f.name: pa.array(cols[f.name], f.type) for f in _ITEM_SCHEMA}, schema=_ITEM_SCHEMA)


def stratum_counts(relations: pa.Table) -> dict[str, int]:
    """Relations per stratum in a :func:`relation_table` (the corpus composition)."""
    vc = pc.value_counts(relations.column("stratum").combine_chunks()).to_pylist()
    return {d["values"]: int(d["counts"]) for d in sorted(vc, key=lambda d: d["values"])}


def _key(seed: int, salt: str, item_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{salt}:{seed}:{item_id}".encode(), digest_size=8).digest(), "big")


def _fingerprint(relations: pa.Table) -> str:
    """Hash of every relation's id, predicate, pass and gate, independent of row order."""
    rows = sorted(zip(*(relations.column(c).to_pylist() for c in ("item_id", "predicate", "pass", "gate"))))
    h = hashlib.sha256()
    for row in rows:
        h.update("\x1f".join(row).encode() + b"\x1e")
    return h.hexdigest()[:16]


def sample_audit_batch(corpus: pa.Table, cfg: AuditSampleConfig) -> AuditBatch:
    """Up to ``per_stratum`` items per stratum by smallest keyed hash, shown in a hash order that
    interleaves strata (so an auditor never sees one stratum as a block and drifts)."""
    rel = relation_table(corpus, cfg)
    if rel.num_rows == 0:
        raise ValueError("audit sampler: the corpus (after the split filter) has no relations to audit")
    ids = rel.column("item_id").to_pylist()
    strata = rel.column("stratum").to_pylist()
    by_stratum: dict[str, list[tuple[int, int]]] = {}
    for row, (iid, s) in enumerate(zip(ids, strata)):
        by_stratum.setdefault(s, []).append((_key(cfg.seed, "pick", iid), row))
    chosen = [row for s in sorted(by_stratum) for _, row in sorted(by_stratum[s])[: cfg.per_stratum]]
    chosen.sort(key=lambda r: _key(cfg.seed, "order", ids[r]))
    items = rel.take(pa.array(chosen, pa.int64()))
    items = items.set_column(items.schema.get_field_index("position"), "position",
                             pa.array(np.arange(len(chosen), dtype=np.int32)))
    return AuditBatch(items, cfg, stratum_counts(rel), _fingerprint(rel))


def write_audit_batch(batch: AuditBatch, path: str | Path) -> Path:
    """``.parquet`` (metadata in the schema) or ``.json`` (``{"meta":..., "items": [...]}``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".parquet":
        table = batch.items.replace_schema_metadata({_META_KEY: json.dumps(batch.meta).encode()})
        pq.write_table(table, tmp)
    elif path.suffix == ".json":
        tmp.write_text(json.dumps({"meta": batch.meta, "items": batch.items.to_pylist()}, indent=1))
    else:
        raise ValueError(f"audit batch {path}: suffix must be .parquet or .json, got {path.suffix!r}")
    tmp.replace(path)
    return path


def load_audit_batch(path: str | Path) -> AuditBatch:
    """Read a batch written by :func:`write_audit_batch`, checking its layout."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"audit batch not found: {path}")
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        raw = (table.schema.metadata or {}).get(_META_KEY)
        if raw is None:
            raise SchemaError(f"{path}: not an audit batch (no {_META_KEY.decode()} metadata)")
        meta = json.loads(raw)
        table = table.replace_schema_metadata(None)
    elif path.suffix == ".json":
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or "meta" not in doc or "items" not in doc:
            raise SchemaError(f"{path}: not an audit batch (need keys 'meta' and 'items')")
        meta = doc["meta"]
        table = pa.Table.from_pylist(doc["items"], schema=_ITEM_SCHEMA) if doc["items"] else _ITEM_SCHEMA.empty_table()
    else:
        raise ValueError(f"audit batch {path}: suffix must be .parquet or .json, got {path.suffix!r}")
    missing = [n for n in _ITEM_SCHEMA.names if n not in table.column_names]
    if missing:
        raise SchemaError(f"{path}: audit batch lacks column(s) {missing}")
    table = table.select(_ITEM_SCHEMA.names).cast(_ITEM_SCHEMA)
    ids = table.column("item_id").to_pylist()
    if len(set(ids)) != len(ids):
        raise SchemaError(f"{path}: duplicate item_id in the audit batch")
    cfg = AuditSampleConfig.model_validate(meta["config"])
    return AuditBatch(table, cfg, {k: int(v) for k, v in meta["corpus_strata"].items()}, str(meta["fingerprint"]))


def verify_corpus(corpus: pa.Table, cfg: AuditSampleConfig, fingerprint: str) -> dict[str, int]:
    """Check that ``corpus`` is the one a batch with this config and fingerprint was drawn from
    (same item ids, predicates, passes, gates); returns its stratum composition. A changed corpus
    would silently make stored items point at other relations, so it is an error."""
    rel = relation_table(corpus, cfg)
    found = _fingerprint(rel)
    if found != fingerprint:
        raise ValueError(f"the corpus does not match the audit batch (fingerprint {found}, the batch was drawn "
                         f"from {fingerprint}); point --corpus at the corpus the batch was sampled from")
    return stratum_counts(rel)


def verify_batch(batch: AuditBatch, corpus: pa.Table) -> dict[str, int]:
    """:func:`verify_corpus` for a loaded batch."""
    return verify_corpus(corpus, batch.config, batch.fingerprint)


def main(cfg: AuditSampleConfig) -> AuditBatch:
    """Sample a batch from ``cfg.corpus`` and write it to ``cfg.out``."""
    from relate.data.corpus import read_corpus

    if cfg.corpus is None or cfg.out is None:
        raise ValueError("audit sampler: set both corpus=DIR and out=FILE")
    batch = sample_audit_batch(read_corpus(cfg.corpus, cfg.split), cfg)
    write_audit_batch(batch, cfg.out)
    print(f"wrote {batch.items.num_rows} items from {len(batch.corpus_strata)} strata "
          f"({sum(batch.corpus_strata.values())} corpus relations) to {cfg.out}")
    return batch
