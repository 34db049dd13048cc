"""Generated predicate vocabulary and user vocabulary files."""

from __future__ import annotations

import pytest

from relate.data.lexicon import all_surface_forms
from relate.predicate_knowledge import load_synonym_groups
from relate.text.vocabulary import (VocabularyError, build_vocabulary, derived_inverse_pairs,
                                    load_vocabulary_file, modified_base_pairs)


def test_generated_vocabulary_is_large_unique_and_complete():
    vocab = build_vocabulary()
    assert len(vocab) >= 19_103 and len(vocab) == len(set(vocab))
    assert set(all_surface_forms()) <= set(vocab)
    assert {f for g in load_synonym_groups().values() for f in g.forms} <= set(vocab)
    for s in ("far above", "partly behind", "just left of", "standing just behind"):
        assert s in vocab
    assert build_vocabulary() == vocab  # deterministic
    assert build_vocabulary(limit=50) == vocab[:50]
    with pytest.raises(VocabularyError):
        build_vocabulary(limit=0)


def test_modified_and_derived_pairs():
    strings = ["above", "below", "far above", "far below", "partly behind", "near"]
    assert ("far above", "above") in modified_base_pairs(strings)
    assert all(base != mod for mod, base in modified_base_pairs(strings))
    derived = derived_inverse_pairs(strings, [("above", "below")])
    assert derived == [("far above", "far below")]
    assert derived_inverse_pairs(strings, [("left of", "right of")]) == []


def test_load_vocabulary_file_strips_and_dedups(tmp_path):
    p = tmp_path / "v.txt"
    p.write_text("  above \n\nbelow\nabove\n far   from \n")
    assert load_vocabulary_file(p) == ["above", "below", "far from"]


def test_empty_or_missing_vocabulary_file_names_the_path(tmp_path):
    p = tmp_path / "empty.txt"
    p.write_text("\n   \n")
    with pytest.raises(VocabularyError, match="empty.txt"):
        load_vocabulary_file(p)
    with pytest.raises(VocabularyError, match="not found"):
        load_vocabulary_file(tmp_path / "missing.txt")
