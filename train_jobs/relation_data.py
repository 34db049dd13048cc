"""Inputs of the relation train job: its data config, predicate space and Ray Data stage.

The predicate space (synonym groups, inverses, P(directional), P(q|p), isotonic synonym
weights, category bank and per-category-pair annotation rates) is built once on the driver
and shipped to the workers. Scoring a split is ``train_jobs.relation_eval``.
"""

from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import torch
from pydantic import Field, field_validator

from relate.config import StrictConfig
from relate.data.predicate_split import check_no_leak, held_out, load_predicate_split, remove_held_out
from relate.storage import Location, LocationValue, under_root
from relate.losses import PredicateSpace, fit_synonym_weighting

__all__ = ["DataConfig", "HoldOutConfig", "build_space", "family_ids", "training_table", "DecodeStage", "DECODED_KEYS", "epoch_order", "concept_key",
           "concept_family", "dropped_by_caps"]


class HoldOutConfig(StrictConfig):
    split: str = Field(description="predicate split whose novel predicates training never sees: a packaged name "
                       "(vg150_ovr: OvSGTR's 35 base / 15 novel; synthetic_ovr) or a YAML file "
                       "(relate.data.predicate_split)")
    synonyms: bool = Field(True, description="remove every surface form of each novel predicate's synonym group "
                           "too (the protocol: seed 001, App. D.7); false removes the exact strings only, and the "
                           "leak check then refuses any vocabulary that still holds a synonym of one")


class DataConfig(StrictConfig):
    corpus_root: Location = Field("runs/synthetic", description="folder holding corpus/<split>/*.parquet")
    predicates: Literal["synthetic_lexicon", "text_resources"] = Field(
        "synthetic_lexicon", description="where synonym groups, inverses and directional flags come from")
    text_encoder: str = Field("minilm", description="frozen text encoder of the bank (relate.text registry): 'minilm', "
                              "'hf:...', 'open_clip:...', or 'student:<folder>' for a student distilled by "
                              "train_jobs.distill_text (the paper trains against its 512-d student; model.text_dim "
                              "must equal the student's dim). A relative student folder is resolved to an absolute "
                              "path, so the name the checkpoint records loads from any working directory")
    heldout_form: int | None = Field(2, ge=0, description="surface form index per group kept out of the training "
                                     "bank (scored only at test time, as an unseen vocabulary); None keeps all")
    cooccurrence: str = Field("estimate", description="P(q|p) of Eq. 3: 'estimate' fits it on the training split's "
                              "multiply-annotated pairs (train_jobs.cooccurrence), cached by a checksum of the training "
                              "relations, and zero on a synthetic world that states its full truth (no relation goes "
                              "unstated there); 'off'; or the path of an .npz written by train_jobs.cooccurrence")
    truth_root: LocationValue | None = Field(
        None, description="synthetic world folder (pipelines.synthetic output, with synthetic_config.yaml) whose "
        "rules give every image's full truth: validation and the test report then add per-family AP and top-10 "
        "precision against it (relate.metrics.truth). None: the corpus root when it is such a folder, else no truth "
        "figures. Set it for a corpus annotated from the world's images (pipelines.annotate)")
    hold_out: HoldOutConfig | None = Field(
        None, description="OvR-SGG compliant training: the split's novel predicates and their synonym groups are "
        "removed from the training relations and the text space, and the run refuses to start if any form of "
        "one is left (a leak check over the bank, the space and the relations)")
    cache_dir: str = Field("~/.cache/relate", description="where estimated P(q|p) files and the decode cache "
                           "(data.decode_cache) are kept")
    source_scopes: dict[str, list[str] | Literal["observed"]] = Field(
        default_factory=dict, description="App. B.1: per corpus `source`, what it annotates: predicate families "
        "(synthetic lexicon), synonym-group keys or strings, or 'observed' (the groups that source annotates in "
        "the training split); a source not listed annotates everything")
    rungs: list[float] = Field([0.5, 0.667, 0.833, 1.0, 1.167, 1.333, 1.5], min_length=1,
                               description="multi-scale factors of the base side (Table 14: 7 rungs in [0.5, 1.5])")
    photometric: float = Field(0.3, ge=0, lt=1, description="brightness/contrast/saturation jitter (Table 14: 0.3)")
    max_boxes: int = Field(16, ge=2, description="boxes per image kept (extra boxes and their relations dropped)")
    max_relations: int = Field(64, ge=1, description="relations per image kept (implied ones after the stated ones)")
    implied_relations: bool = Field(False, description="also state what each annotated relation implies: the same "
                                    "fact from the other end (inverse or symmetric group) and the sourced entailments "
                                    "of relate/predicate_knowledge.yaml ('on' -> 'touching'), so the objective counts "
                                    "them as positives rather than unlabelled cells (relate.entailment)")
    unlabelled_families: list[str] = Field(default_factory=list, description="predicate families the annotation's "
                                           "passes do not decide (relate/predicate_knowledge.yaml names): on a pair no "
                                           "pass was asked every relation of, a predicate of these families that was "
                                           "not stated is unlabelled, not a negative (in the InfoNCE, the per-cell "
                                           "sigmoid and the background term); on an asked pair it stays a negative. A "
                                           "corpus that states its full truth has none")
    decode_concurrency: int = Field(1, ge=1, description="Ray Data decode tasks in flight")
    block_rows: int = Field(64, ge=1, description="training rows a Ray Data block holds (one decode task's output), so "
                            "the stream's first batch waits for one block to decode, not for the whole table")
    decode_cpus: float = Field(0.25, gt=0, description="CPUs per decode task (fractional on small machines)")
    decode_cache: bool = Field(False, description="decode each training row once, before the first step, into "
                               "memory-mapped arrays under cache_dir/decoded/ that every epoch and every later run "
                               "over the same rows and settings reads instead (train_jobs.decode_cache; bit for bit "
                               "what decoding gives). With photometric jitter the pictures are still decoded at each "
                               "visit, each drawing its own jitter. The folder must be readable where the decode "
                               "tasks run: a shared filesystem on a multi-node cluster. For small pictures (the CPU "
                               "recipes' 96-112 px: about 28 KB a row)")

    @field_validator("unlabelled_families")
    @classmethod
    def _known_families(cls, v: list[str]) -> list[str]:
        from relate.predicate_knowledge import load_predicate_knowledge

        known = load_predicate_knowledge().families
        bad = sorted(set(v) - set(known))
        if bad:
            raise ValueError(f"{bad} are not families of relate/predicate_knowledge.yaml ({sorted(known)})")
        return v

    @field_validator("text_encoder")
    @classmethod
    def _encoder_name(cls, name: str) -> str:
        return _absolute_student(name.strip())


def _absolute_student(name: str) -> str:
    """'student:runs/x' -> 'student:/abs/runs/x'; other encoder names unchanged. The folder itself is
    checked when the bank is built (relate.text.student names what is missing)."""
    from relate.text.encoders import split_encoder_name

    scheme, arg = split_encoder_name(name)
    if scheme != "student" or not arg or "://" in arg:
        return name
    return f"student:{Path(under_root(arg, 'data.text_encoder student folder')).resolve()}"


def concept_key(predicate: str, mode: str) -> str:
    """The synonym-group id of a string (its own string when it has no group)."""
    if mode == "synthetic_lexicon":
        from relate.data.lexicon import SURFACE_TO_CONCEPT

        return SURFACE_TO_CONCEPT.get(predicate.strip().lower(), predicate)
    from relate.text.resources import group_of

    return group_of(predicate) or predicate


def concept_family(predicate: str, mode: str) -> str:
    """The predicate family of a synthetic-lexicon string ('other' when unknown); 'all' otherwise."""
    if mode == "synthetic_lexicon":
        from relate.data.lexicon import CONCEPTS

        key = concept_key(predicate, mode)
        return CONCEPTS[key].family if key in CONCEPTS else "other"
    return "all"


def _predicate_tables(cfg: DataConfig, train: pa.Table | None) -> tuple[list[str], list[str], list[bool], np.ndarray, np.ndarray]:
    """(strings, group keys, held out?, inverse matrix, P(directional)) over every known string."""
    if cfg.predicates == "synthetic_lexicon":
        from relate.data.lexicon import CONCEPTS

        strings, keys, held, pdir = [], [], [], []
        for c in CONCEPTS.values():
            for i, f in enumerate(c.forms):
                strings.append(f)
                keys.append(c.name)
                held.append(cfg.heldout_form is not None and i == cfg.heldout_form)
                pdir.append(1.0 if c.directional else 0.0)
        inv_key = {c.name: c.inverse for c in CONCEPTS.values()}
    else:
        from relate.text.resources import inverse_of, p_directional

        strings = sorted({r["predicate"] for rels in train.column("relations").to_pylist() for r in rels})
        if cfg.implied_relations:  # the strings the implied relations are stated with join the text space
            strings = sorted(set(strings) | _implied_forms(strings))
        keys = [concept_key(s, cfg.predicates) for s in strings]
        held = [False] * len(strings)
        pdir = p_directional(strings, unknown=0.5).tolist()
        inv_key = {concept_key(s, cfg.predicates): concept_key(inverse_of(s) or "", cfg.predicates) for s in strings}
    k = np.array(keys, dtype=object)
    inverse = np.array([[inv_key.get(a) == b for b in keys] for a in keys], dtype=bool) & (k[:, None] != k[None, :])
    return strings, keys, held, inverse, np.asarray(pdir, dtype=np.float32)


def _implied_forms(strings: list[str]) -> set[str]:
    """The strings relate.entailment states the implications of ``strings`` with, when every known
    form is available: the string-level inverse where there is one, else the group's first form."""
    from relate.entailment import implied_relations
    from relate.predicate_knowledge import load_predicate_knowledge
    from relate.text.resources import group_of

    k = load_predicate_knowledge()
    out: set[str] = set()
    for s in strings:
        out.update(f for _, _, f in implied_relations([(0, 1, s)], group_of,
                                                      lambda g, pref: pref or k.groups[g].forms[0], k))
    return out


def _pair_rate(train: pa.Table, categories: list[str]) -> np.ndarray:
    """Share of ordered box pairs of each category pair that carry an annotation (§ 3.3)."""
    idx = {c: i for i, c in enumerate(categories)}
    tot = np.zeros((len(categories),) * 2)
    ann = np.zeros_like(tot)
    for boxes, rels in zip(train.column("boxes").to_pylist(), train.column("relations").to_pylist()):
        cat = np.array([idx.get(b["category"], -1) for b in boxes])
        ok = cat >= 0
        c = cat[ok]
        np.add.at(tot, (c[:, None].repeat(len(c), 1), c[None, :].repeat(len(c), 0)), 1)
        np.add.at(tot, (c, c), -1)
        for s, o in {(r["subject"], r["object"]) for r in rels}:
            if cat[s] >= 0 and cat[o] >= 0:
                ann[cat[s], cat[o]] += 1
    return (ann / np.maximum(tot, 1)).astype(np.float32)


def training_table(cfg: DataConfig, quiet: bool = False) -> pa.Table:
    """The training split as training reads it: with ``data.hold_out``, without any relation whose
    predicate is held out (said once, with the base predicates that share a novel group)."""
    from relate.data.corpus import read_corpus

    train = read_corpus(cfg.corpus_root, "train")
    if cfg.hold_out is None:
        return train
    held = _held_out(cfg)
    train, removed, emptied = remove_held_out(train, held)
    if not quiet:
        split = held.split
        print(f"hold-out {split.name} ({len(split.novel)} novel predicates, source: {split.source}): {removed} training "
              f"relations removed, {emptied} images left with none; {len(held.forms)} surface forms out of the text "
              f"space" + (f"; base predicates sharing a novel synonym group, removed with it: {list(held.base_removed)}"
                          if held.base_removed else ""), flush=True)
    return train


def _held_out(cfg: DataConfig):
    return held_out(load_predicate_split(cfg.hold_out.split), synonyms=cfg.hold_out.synonyms)


def build_space(cfg: DataConfig, text_dim: int) -> dict:
    """Driver-side: the training bank, the PredicateSpace and what the decode stage needs."""
    from relate.text.bank import TextBank, build_bank

    train = training_table(cfg)
    strings, keys, held, inverse, pdir = _predicate_tables(cfg, train)
    if cfg.hold_out is not None:
        strings, keys, held, inverse, pdir = _without_held_out(cfg, train, strings, keys, held, inverse, pdir)
    full = build_bank(strings, encoder_name=cfg.text_encoder)
    if full.dim != text_dim:
        raise ValueError(f"text encoder {cfg.text_encoder!r} gives {full.dim}-d vectors but model.text_dim={text_dim}")
    cols = [i for i, h in enumerate(held) if not h]
    bank = TextBank(strings=tuple(strings[i] for i in cols), matrix=full.matrix[cols], encoder=full.encoder)
    cos = full.matrix @ full.matrix.T
    k = np.array(keys, dtype=object)
    same = k[:, None] == k[None, :]
    off = ~np.eye(len(strings), dtype=bool)
    iso = fit_synonym_weighting(cos[off], same[off])  # positive weights: P(synonym | cosine), § 3.3
    syn = iso.predict(cos.ravel()).reshape(cos.shape).astype(np.float32)
    np.fill_diagonal(syn, 1.0)
    p_cond = _p_cond(cfg, train, strings, full.matrix)
    p_unstated = _p_unstated(cfg, train, strings)
    sources, scope = _scope_table(cfg, train, strings, keys)
    categories = sorted({b["category"] for bx in train.column("boxes").to_pylist() for b in bx if b["category"]})
    cat_bank = build_bank(categories, encoder_name=cfg.text_encoder).matrix
    _, group = np.unique(k, return_inverse=True)
    t = torch.from_numpy
    family = family_ids(cfg, keys)
    from relate.gate import condition_columns

    conditions = condition_columns(strings)
    space = PredicateSpace(t(group.astype(np.int64)), t(inverse), t(pdir), t(p_cond), t(syn),
                           torch.tensor(cols, dtype=torch.long), t(cat_bank), t(_pair_rate(train, categories)),
                           t(scope), t(family), t(conditions), t(p_unstated), _unlabelled(cfg, keys))
    return {"space": space, "bank": bank, "forms": strings, "categories": categories, "n_train": train.num_rows,
            "isotonic_synonym": iso, "sources": sources}


def _unlabelled(cfg: DataConfig, keys: list[str]) -> torch.Tensor | None:
    """(Va,) bool: the strings of ``data.unlabelled_families`` (None when it is empty or the corpus states
    its full truth, where an unstated cell is a true negative)."""
    from relate.predicate_knowledge import load_predicate_knowledge

    if not cfg.unlabelled_families or states_full_truth(cfg.corpus_root):
        return None
    groups = load_predicate_knowledge().groups  # the names were checked with the config
    return torch.tensor([k in groups and groups[k].family in cfg.unlabelled_families for k in keys], dtype=torch.bool)


def family_ids(cfg: DataConfig, keys: list[str]) -> np.ndarray:
    """Per synonym-group key, an id of its family (relate/predicate_knowledge.yaml; a string in no group
    is in family 'unknown'): the scope of loss.negatives_scope='family'. A corpus that states every
    relation that holds leaves nothing unlabelled, so there all strings share one id."""
    from relate.predicate_knowledge import load_predicate_knowledge

    groups = load_predicate_knowledge().groups
    names = np.array([groups[k].family if k in groups else "unknown" for k in keys], dtype=object)
    _, ids = np.unique(names, return_inverse=True)
    if states_full_truth(cfg.corpus_root):
        return np.zeros(len(keys), np.int64)
    return ids.astype(np.int64)


def _without_held_out(cfg: DataConfig, train: pa.Table, strings, keys, held, inverse, pdir):
    """The predicate tables without the held-out forms, after the leak check of what remains."""
    out = _held_out(cfg)
    keep = [i for i, s in enumerate(strings) if not out.removes(s)]
    strings, keys, held = [strings[i] for i in keep], [keys[i] for i in keep], [held[i] for i in keep]
    inverse, pdir = inverse[np.ix_(keep, keep)], pdir[keep]
    check_no_leak(out.split, {"text space": strings,
                              "training bank": [s for s, h in zip(strings, held) if not h],
                              "training relations": [r["predicate"] for rs in train.column("relations").to_pylist()
                                                     for r in rs]})
    return strings, keys, held, inverse, pdir


def relations_checksum(train: pa.Table) -> str:
    """sha256 of the training split's image ids and relations (what P(q|p) is estimated from)."""
    t = train.select(["image_id", "relations"]).combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


def states_full_truth(corpus_root: str) -> bool:
    """Whether ``corpus_root`` is a synthetic world folder that states its full truth (``coverage: full``).

    Eq. 3 discounts a negative q of an annotated p by log(1 - P(q|p)), the chance that q also holds
    and went unstated. Estimated on a complete corpus, where every pair carries all it holds, the
    estimator's label frequency is the co-occurrence rate itself (about 0.1 on the synthetic world's
    truth), P(q|p) is inflated by 1/c to its cap, and the discount spares exactly the negatives that
    teach which pairs a concept holds on (near against left of, brighter against below).
    """
    from relate.data.world_truth import WORLD_CONFIG, load_world

    if "://" in str(corpus_root) or not (Path(corpus_root) / WORLD_CONFIG).is_file():
        return False
    return load_world(corpus_root).coverage == "full"


def _p_cond(cfg: DataConfig, train: pa.Table, strings: list[str], emb: np.ndarray) -> np.ndarray:
    """(V, V) P(q|p) over ``strings`` for Eq. 3: estimated (and cached), read from a file, or zero."""
    from train_jobs.cooccurrence import (CooccurrenceConfig, count_on_asked_pairs, estimate_cooccurrence,
                                         has_asked_pairs, load_cooccurrence, multi_annotated_sets, save_cooccurrence)

    p_cond = np.zeros((len(strings), len(strings)), dtype=np.float32)
    if cfg.cooccurrence == "off":
        return p_cond
    if cfg.cooccurrence == "estimate" and states_full_truth(cfg.corpus_root):
        print("P(q|p): the corpus states every relation that holds (a synthetic world with coverage: full), so no "
              "negative is an unlabelled positive: the Eq. 3 discount is zero", flush=True)
        return p_cond
    if cfg.cooccurrence == "estimate" and has_asked_pairs(train):
        p_cond, _, pairs = count_on_asked_pairs(train, strings, lambda x: concept_key(x, cfg.predicates))
        print(f"P(q|p): counted on the {pairs} ordered pairs the pairs pass asked every relation of "
              f"(train_jobs.cooccurrence.count_on_asked_pairs)", flush=True)
        return p_cond
    if cfg.cooccurrence == "estimate":
        est = CooccurrenceConfig.model_construct()  # its defaults (neighbours, cap); its paths are not used here
        digest = hashlib.sha256(f"{relations_checksum(train)}|{cfg.text_encoder}|{est.neighbours}|{est.cap}|"
                                f"{chr(10).join(strings)}".encode()).hexdigest()[:20]
        path = Path(cfg.cache_dir).expanduser() / f"cooccurrence-{digest}.npz"
        if path.is_file() and Path(f"{path}.strings.json").is_file():
            print(f"P(q|p): cached estimate {path}", flush=True)
        else:
            sets = multi_annotated_sets(train)
            matrix, c = estimate_cooccurrence(sets, strings, emb, est.neighbours, est.cap)
            tmp = path.with_name(f".{path.stem}.{os.getpid()}.npz")  # atomic: a reader never sees half a file
            save_cooccurrence(tmp, matrix, strings)
            os.replace(f"{tmp}.strings.json", f"{path}.strings.json")
            os.replace(tmp, path)
            print(f"P(q|p): {len(sets)} multiply-annotated pairs in the training split, {matrix.nnz} cells, "
                  f"label frequency c={c:.3f} -> {path}" if sets else
                  "P(q|p): the training split has no pair with two predicates; the Eq. 3 discount is zero", flush=True)
    else:
        path = Path(cfg.cooccurrence).expanduser()
    c_strings, mat = load_cooccurrence(path)
    pos = {s: i for i, s in enumerate(strings)}
    coo = mat.tocoo()
    for r, c, v in zip(coo.row, coo.col, coo.data):
        if c_strings[r] in pos and c_strings[c] in pos:
            p_cond[pos[c_strings[r]], pos[c_strings[c]]] = v
    return p_cond


def _p_unstated(cfg: DataConfig, train: pa.Table, strings: list[str]) -> np.ndarray:
    """(V,) P(q holds | nothing stated of the pair), counted on the pairs the pairs pass asked about
    (``train_jobs.cooccurrence.count_on_asked_pairs``); zero without them or a P(q|p) estimate."""
    from train_jobs.cooccurrence import count_on_asked_pairs, has_asked_pairs

    if cfg.cooccurrence != "estimate" or states_full_truth(cfg.corpus_root) or not has_asked_pairs(train):
        return np.zeros(len(strings), np.float32)
    return count_on_asked_pairs(train, strings, lambda x: concept_key(x, cfg.predicates))[1]


def _scope_table(cfg: DataConfig, train: pa.Table, strings: list[str], keys: list[str]
                 ) -> tuple[list[str], np.ndarray]:
    """Source names (index 0: any unlisted source) and the (S, V) bool table of what each annotates."""
    names = ["*"] + sorted(cfg.source_scopes)
    key_arr = np.array(keys, dtype=object)
    scope = np.ones((len(names), len(strings)), dtype=bool)
    families = np.array([concept_family(x, cfg.predicates) for x in strings], dtype=object)
    for i, name in enumerate(names[1:], 1):
        spec = cfg.source_scopes[name]
        if spec == "observed":
            seen = {concept_key(r["predicate"], cfg.predicates)
                    for src, rels in zip(train.column("source").to_pylist(), train.column("relations").to_pylist())
                    if src == name for r in rels}
            if not seen:
                raise ValueError(f"data.source_scopes.{name}: 'observed', but no training relation has source {name!r}")
            scope[i] = np.isin(key_arr, list(seen))
            continue
        row = np.zeros(len(strings), dtype=bool)
        for entry in spec:
            hit = (families == entry) | (key_arr == entry) | (np.array(strings, dtype=object) == entry)
            if not hit.any():
                raise ValueError(f"data.source_scopes.{name}: {entry!r} is no predicate family, synonym group or "
                                 f"predicate string of this vocabulary")
            row |= np.isin(key_arr, list(set(key_arr[hit])))
        scope[i] = row
    return names, scope


def dropped_by_caps(table: pa.Table, cfg: DataConfig) -> tuple[int, int, int]:
    """(relations DecodeStage drops under data.max_boxes / data.max_relations, training relations, images
    affected): a box beyond max_boxes takes its relations with it, and each image keeps at most
    max_relations. Said before training, so a dense corpus (the world's full truth) is not cut silently."""
    dropped = total = images = 0
    n, m = cfg.max_boxes, cfg.max_relations
    for rels in table.column("relations").to_pylist():
        ok = [r for r in rels if r["subject"] < n and r["object"] < n and r["subject"] != r["object"]]
        lost = len(rels) - min(len(ok), m) - sum(1 for r in rels if r["subject"] == r["object"])
        total += len(rels)
        dropped += lost
        images += lost > 0
    return dropped, total, images


def epoch_order(rows: int, epochs: int, seed: int) -> np.ndarray:
    """The training stream's row indices: ``epochs`` passes over ``rows`` rows, each pass its own
    permutation drawn from ``(seed, epoch)`` (so a run's order is reproducible and no two epochs
    share their batches)."""
    if rows < 1 or epochs < 1:
        raise ValueError(f"a training stream needs at least one row and one epoch, got {rows} rows, {epochs} epochs")
    return np.concatenate([np.random.default_rng([seed, e]).permutation(rows) for e in range(epochs)])


@contextmanager
def _one_thread():
    """torch computes on one intra-op thread inside the block, as a data-loading worker does: a decode
    task's tensors are a few kilobytes, and several threads each waiting on cores the trainer holds made
    ``prepare_image``'s small ops cost milliseconds each (a 64-row block: 1.27 s on two threads against
    0.16 s on one, beside a training run on a 2-core machine)."""
    threads = torch.get_num_threads()
    if threads != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if threads != 1:
            torch.set_num_threads(threads)


class DecodeStage:
    """Ray Data stage: read, resize and photometrically jitter images; pad boxes and relations; the
    gate's geometric conditions of every ordered box pair (``relate.gate.pair_conditions``) and which
    pairs a pass was asked every relation of (``asked_pairs``, both ways: ``complete``).

    Works on a pyarrow batch with columns uri, boxes, relations (and source), or, given ``rows`` (the
    row table, shared by every call), on a batch whose ``row`` column indexes it; returns fixed-shape
    arrays, ``source`` as the row of the predicate space's scope table. Given ``cache`` as well (the
    ``train_jobs.decode_cache.DecodedRows`` built from the same row table and settings), a row's arrays
    are read from it instead of decoded, bit for bit what decoding gives; the image is decoded (and
    jittered) here only where ``data.photometric`` draws a new jitter each visit.
    Only photometric changes are applied: a flip would silently falsify left/right labels.
    """

    def __init__(self, size: int, data: DataConfig, forms: list[str], categories: list[str], seed: int = 0,
                 sources: list[str] | None = None, keep_aspect: bool = False, rows: pa.Table | None = None,
                 cache=None) -> None:
        self.size, self.cfg, self.keep_aspect, self.rows = size, data, keep_aspect, rows
        if cache is not None and (rows is None or cache.rows != rows.num_rows):
            raise ValueError("a decode cache is indexed by the row table's positions: pass the rows it was built from")
        self.cache = cache
        self.form_index = {f: i for i, f in enumerate(forms)}
        self.cat_index = {c: i for i, c in enumerate(categories)}
        self.source_index = {s: i for i, s in enumerate(sources or ["*"])}  # an unlisted source: row 0
        self.rng = np.random.default_rng(seed)
        self.group_of, self.first_form = {}, {}
        if data.implied_relations:
            for f in forms:
                g = concept_key(f, data.predicates)
                self.group_of[f] = g
                self.first_form.setdefault(g, f)

    def _form_of(self, group: str, preferred: str | None) -> str | None:
        return preferred if preferred in self.form_index else self.first_form.get(group)

    def _implied(self, kept: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
        from relate.entailment import implied_relations

        return implied_relations(kept, self.group_of.get, self._form_of)

    def _jitter(self, img: torch.Tensor) -> torch.Tensor:
        s = self.cfg.photometric
        if s <= 0:
            return img
        b, c, sat = 1 + self.rng.uniform(-s, s, size=3)
        img = img * b
        mean = img.mean()
        img = (img - mean) * c + mean
        grey = img.mean(0, keepdim=True)
        return ((img - grey) * sat + grey).clamp(0, 1)

    def _image(self, uri: str) -> np.ndarray:
        """One picture as the model's (S, S, 3) uint8 input, jittered where data.photometric says."""
        from relate.api import prepare_image

        img = self._jitter(prepare_image(uri, self.size, keep_aspect=self.keep_aspect))
        return (img.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)

    def __call__(self, batch: pa.Table) -> dict[str, np.ndarray]:
        with _one_thread():
            if self.cache is not None:
                return self._from_cache(batch.column("row"))
            if self.rows is not None:
                batch = self.rows.take(batch.column("row"))
            return self.decode(batch.to_pylist())

    def decode(self, rows: list[dict], images: bool = True) -> dict[str, np.ndarray]:
        """Corpus rows (dicts with uri, width, height, boxes, relations, source) -> the batch arrays
        (without ``image`` when not ``images``)."""
        from relate.api import input_scale
        from relate.gate import CONDITIONS, pair_conditions

        n, m, S = self.cfg.max_boxes, self.cfg.max_relations, self.size
        out = {"image": np.zeros((len(rows), S, S, 3), np.uint8), "boxes": np.zeros((len(rows), n, 4), np.float32),
               "conditions": np.zeros((len(rows), n * n, len(CONDITIONS)), bool),
               "complete": np.zeros((len(rows), n * n), bool),
               "box_valid": np.zeros((len(rows), n), bool), "categories": np.full((len(rows), n), -1, np.int64),
               "rels": np.full((len(rows), m, 3), -1, np.int64),
               "source": np.array([self.source_index.get(r.get("source"), 0) for r in rows], np.int64)}
        if not images:
            del out["image"]
        for k, r in enumerate(rows):
            if images:
                out["image"][k] = self._image(r["uri"])
            sx, sy = input_scale(r["height"], r["width"], S, self.keep_aspect)
            boxes = r["boxes"][:n]
            m_k = len(boxes)
            for a in r.get("asked_pairs") or ():  # asked every relation of: its unstated cells are negatives
                if a["subject"] < n and a["object"] < n:
                    out["complete"][k, a["subject"] * n + a["object"]] = out["complete"][k, a["object"] * n + a["subject"]] = True
            if m_k:  # float64 products rounded once to float32, as the scalar arithmetic was
                xy = np.array([[b["x1"], b["y1"], b["x2"], b["y2"]] for b in boxes], np.float64)
                out["boxes"][k, :m_k] = xy * np.array([sx, sy, sx, sy])
                out["box_valid"][k, :m_k] = True
                out["categories"][k, :m_k] = [self.cat_index.get(b["category"], -1) for b in boxes]
                # what the gate's geometry allows each ordered pair (relate.gate)
                cond = np.zeros((n, n, len(CONDITIONS)), bool)
                cond[:m_k, :m_k] = pair_conditions(out["boxes"][k, :m_k])
                out["conditions"][k] = cond.reshape(n * n, -1)
            kept = [(x["subject"], x["object"], x["predicate"]) for x in r["relations"]
                    if x["subject"] < n and x["object"] < n and x["subject"] != x["object"]
                    and x["predicate"] in self.form_index]
            if self.cfg.implied_relations:
                kept += self._implied(kept)
            kept = [(s, o, self.form_index[p]) for s, o, p in kept[:m]]
            if kept:
                out["rels"][k, : len(kept)] = np.array(kept)
        return out

    def _from_cache(self, row: pa.Array) -> dict[str, np.ndarray]:
        out = self.cache.take(np.asarray(row.to_numpy(), np.int64))
        if "image" not in out:  # a new jitter each visit: decoded here, in the stream's order
            uris = self.rows.column("uri").take(row).to_pylist()
            out["image"] = np.stack([self._image(u) for u in uris]) if uris else \
                np.zeros((0, self.size, self.size, 3), np.uint8)
        return {k: out[k] for k in DECODED_KEYS}


# the arrays a decoded batch holds, in this order
DECODED_KEYS = ("image", "boxes", "conditions", "complete", "box_valid", "categories", "rels", "source")
