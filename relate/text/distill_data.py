"""Teacher-side preparation and evaluation for the text-student distillation (seed 001, B.2).

``prepare_distill_data`` embeds the training strings once with the frozen teacher (token
outputs for the student, de-hubbed sentence targets, PCA anchors) and turns the resources
into index pairs; ``evaluate_text_spaces`` writes Table 16 for teacher and student on the
trained and the held-out synonym groups (held out whole, see ``relate.text.heldout``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from relate.predicate_knowledge import load_synonym_groups
from relate.text.bank import build_bank
from relate.text.distill import dehub, pad_token_outputs, pca_anchor_targets
from relate.text.heldout import GroupSplit, assert_no_heldout_leak, split_inverse_groups
from relate.text.backends import HFTextEncoder, length_sorted_batches, mean_pool
from relate.text.encoders import load_text_encoder
from relate.text.report import geometry_report, render_markdown
from relate.text.resources import synonym_pairs
from relate.text.vocabulary import build_vocabulary, derived_inverse_pairs, modified_base_pairs

__all__ = ["base_strings", "group_cross_pairs", "prepare_distill_data", "evaluate_text_spaces", "ACCEPTANCE"]

# Issue 4 acceptance on both trained and held-out inverse pairs.
ACCEPTANCE = {"auc_min": 0.97, "inv_cos_max": 0.3, "syn_cos_min": 0.6, "eff_dim_rel_tol": 0.25}


def base_strings() -> list[str]:
    """Every grouped surface form, in file order (the Table 16 evaluation set)."""
    return [f for g in load_synonym_groups().values() for f in g.forms]


def _index_pairs(pairs: Sequence[tuple[str, str]], row: dict[str, int]) -> np.ndarray:
    kept = [(row[a], row[b]) for a, b in pairs if a in row and b in row]
    return np.asarray(kept, dtype=np.int64).reshape(-1, 2)


def _teacher_outputs(teacher: HFTextEncoder, strings: list[str], batch_size: int = 256):
    import torch

    chunks, order, pooled = [], [], []
    for idx in length_sorted_batches(len(strings), [len(s) for s in strings], batch_size):
        hidden, mask = teacher.token_outputs([strings[i] for i in idx])
        chunks.append((hidden, mask))
        pooled.append(torch.nn.functional.normalize(mean_pool(hidden, mask), dim=-1).numpy())
        order.append(idx)
    tokens, masks = pad_token_outputs(chunks)
    perm = np.concatenate(order)
    inv = np.empty_like(perm)
    inv[perm] = np.arange(len(perm))
    return tokens[inv], masks[inv], np.concatenate(pooled)[inv]


def group_cross_pairs(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Every (a, b) with a and b drawn from ``pairs`` whose groups are declared inverses.

    "over" / "positioned below" is as much a converse pair as "over" / "under"; repelling the
    whole cross product moves the two groups apart, not only the listed string pairs, which is
    what lets held-out members of those groups follow (they join their group by cohesion).
    """
    from relate.text.resources import group_of

    groups = load_synonym_groups()
    by_group: dict[str, list[str]] = {}
    for s in sorted({x for p in pairs for x in p}):
        by_group.setdefault(group_of(s), []).append(s)
    out = []
    for g, members in by_group.items():
        inv = groups[g].inverse
        if inv is not None and g < inv:
            out += [(a, b) for a in members for b in by_group.get(inv, [])]
    return out


def _group_arrays(strings: Sequence[str]) -> dict[str, np.ndarray]:
    """Group id per string (modified forms take their base's group; -1 when none) and the
    inverse group id per group (-1 when none), for masking teacher terms across inverse groups."""
    from relate.text.resources import base_form, group_of

    groups = load_synonym_groups()
    gid = {name: i for i, name in enumerate(groups)}
    per_string = np.full(len(strings), -1, dtype=np.int64)
    for i, s in enumerate(strings):
        base = base_form(s)
        if base is not None:
            per_string[i] = gid[group_of(base)]
    inverse = np.asarray([gid[g.inverse] if g.inverse else -1 for g in groups.values()], dtype=np.int64)
    return {"group_id": per_string, "inverse_group": inverse}


def prepare_distill_data(teacher_name: str, dim: int, train_vocab_size: int, heldout_fraction: float,
                         split_seed: int, dehub_components: int = 3,
                         heldout_groups: Sequence[str] | None = None) -> tuple[dict, dict]:
    """Arrays for the workers (``data``) and the split for the report (``info``).

    Held-out inverse pairs are held out as pairs of synonym groups (``relate.text.heldout``):
    no form of those groups, modified or not, is a training string, so none reaches a loss term,
    the de-hubbing or the PCA anchor; ``assert_no_heldout_leak`` checks it before returning.
    """
    teacher = load_text_encoder(teacher_name)
    if not isinstance(teacher, HFTextEncoder):
        raise ValueError(f"distillation teacher {teacher_name!r} must expose token outputs (minilm or hf:...)")
    split = split_inverse_groups(heldout_fraction, split_seed, heldout_groups)
    base = [s for s in base_strings() if not split.is_heldout(s)]
    rest = [s for s in build_vocabulary() if s not in set(base_strings()) and not split.is_heldout(s)]
    n_extra = max(0, min(len(rest), train_vocab_size - len(base)))
    pick = np.sort(np.random.default_rng(split_seed).choice(len(rest), n_extra, replace=False))
    strings = base + [rest[i] for i in pick]
    row = {s: i for i, s in enumerate(strings)}

    inv_train, inv_held = split.inverse_pairs("trained"), split.inverse_pairs("heldout")
    inv_train_all = group_cross_pairs(inv_train) + derived_inverse_pairs(strings, inv_train)
    tokens, mask, pooled = _teacher_outputs(teacher, strings)
    targets = dehub(pooled, dehub_components)
    syn = _index_pairs(synonym_pairs(strings), row)
    data = {
        "tokens": tokens, "mask": mask, "teacher": targets, "anchor": pca_anchor_targets(targets, dim),
        "n_base": len(base), "train_rows": np.arange(len(strings)),
        "synonym": syn, "synonym_base": syn,
        "inverse_train": _index_pairs(inv_train_all, row), "inverse_train_base": _index_pairs(inv_train, row),
        "modified": _index_pairs(modified_base_pairs(strings), row),
    }
    data.update(_group_arrays(strings))
    assert_no_heldout_leak(data, strings, split)
    info = {"strings": strings, "split": split, "inverse_train": [list(p) for p in inv_train],
            "inverse_heldout": [list(p) for p in inv_held], **split.to_json()}
    return data, info


def _passes(rep: dict, teacher_rep: dict) -> dict[str, bool]:
    """Each ACCEPTANCE bar for one student row against the teacher row of the same split."""
    a = ACCEPTANCE
    return {"auc": rep["auc_syn_inv"] >= a["auc_min"], "inv_cos": rep["inv_cos"] < a["inv_cos_max"],
            "syn_cos": rep["syn_cos"] > a["syn_cos_min"],
            "eff_dim": abs(rep["eff_dim"] - teacher_rep["eff_dim"]) <= a["eff_dim_rel_tol"] * teacher_rep["eff_dim"]}


def evaluate_text_spaces(teacher_name: str, student_name: str, split: GroupSplit) -> tuple[dict, str, dict]:
    """Table 16 rows (teacher, student) x (trained, held-out groups) over the base forms.

    Each row reads the synonym pairs and the inverse pairs of its own side of the group split,
    so the held-out rows measure groups that reached no loss term; effective dimension and
    hubness are properties of the whole bank and repeat across a model's rows.
    """
    strings = base_strings()
    splits = {"trained": "trained", "held-out": "heldout"}
    reports, rows = {}, []
    for label, name in (("teacher", teacher_name), ("student", student_name)):
        bank = build_bank(strings, name)
        for split_name, side in splits.items():
            pairs = split.inverse_pairs(side)
            if not pairs:
                continue
            rep = geometry_report(bank, split.synonym_groups(side), pairs)
            reports[f"{label}/{split_name}"] = rep
            rows.append((f"{label} ({name.split(':')[0]}), {split_name} groups", rep))
    acceptance = {s: _passes(reports[f"student/{s}"], reports[f"teacher/{s}"])
                  for s in splits if f"student/{s}" in reports}
    return reports, render_markdown(rows), acceptance
