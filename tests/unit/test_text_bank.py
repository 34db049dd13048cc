"""Bank file format, atomic save, mismatch errors, and scoring against swapped vocabularies."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from relate.geometry import N_PAIR_FEATURES, pair_features
from relate.text.bank import BankError, TextBank, build_bank, load_bank, score_against_bank

WORDS = ["above", "below", "left of", "right of", "in front of", "behind", "holding", "near"]


@pytest.fixture(scope="module")
def bank():
    return build_bank(WORDS, "minilm")


def test_build_bank_rows_are_unit_and_indexed(bank):
    assert bank.encoder == "minilm" and bank.dim == 384 and len(bank) == len(WORDS)
    assert bank.matrix.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(bank.matrix, axis=1), 1.0, atol=1e-5)
    assert bank.index("behind") == 5
    with pytest.raises(KeyError, match="not in this bank"):
        bank.index("florbing")


def test_build_bank_rejects_duplicates_and_empty_strings():
    with pytest.raises(BankError, match="appears twice"):
        build_bank(["above", " above"], "minilm")
    with pytest.raises(BankError, match="empty strings"):
        build_bank(["above", "  "], "minilm")


def test_save_load_roundtrip_is_atomic(bank, tmp_path):
    path = tmp_path / "sub" / "bank.npz"
    bank.save(path)
    bank.save(path)  # replacing an existing file goes through the same temp + os.replace
    assert sorted(p.name for p in path.parent.iterdir()) == ["bank.npz"]
    got = load_bank(path, expect_encoder="minilm", expect_dim=384)
    assert got.strings == bank.strings and got.checksum == bank.checksum
    np.testing.assert_array_equal(got.matrix, bank.matrix)


def test_load_refuses_mismatch_and_corruption(bank, tmp_path):
    path = bank.save(tmp_path / "bank.npz")
    with pytest.raises(BankError, match="built by encoder 'minilm' but 'hf:other' is expected"):
        load_bank(path, expect_encoder="hf:other")
    with pytest.raises(BankError, match="dimension 384 but 512"):
        load_bank(path, expect_dim=512)
    forged = TextBank(bank.strings, bank.matrix.copy(), bank.encoder)
    forged.matrix[0, 0] += 0.5
    meta_ok = bank.checksum
    np.savez(tmp_path / "forged.npz", strings=np.asarray(forged.strings), matrix=forged.matrix,
             meta=np.asarray('{"format": "relate.text_bank.v1", "encoder": "minilm", "dim": 384, '
                             f'"size": 8, "checksum": "{meta_ok}"}}'))
    with pytest.raises(BankError, match="checksum mismatch"):
        load_bank(tmp_path / "forged.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a bank")
    with pytest.raises(BankError, match="not a readable text bank"):
        load_bank(tmp_path / "junk.npz")
    with pytest.raises(BankError, match="not found"):
        load_bank(tmp_path / "missing.npz")


def test_same_pair_features_score_against_two_banks_without_retraining(bank):
    # A frozen stand-in for the relation head: geometry features -> text-space vectors.
    torch.manual_seed(0)
    head = torch.nn.Linear(N_PAIR_FEATURES, bank.dim)
    subj = torch.tensor([[0.0, 0.0, 10.0, 10.0], [20.0, 0.0, 30.0, 10.0], [0.0, 0.0, 4.0, 4.0]])
    obj = torch.tensor([[20.0, 0.0, 30.0, 10.0], [0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 3.0, 3.0]])
    with torch.no_grad():
        vec = head(pair_features(subj, obj))
    other = build_bank(["far above", "below", "touching", "inside", "left of"], "minilm")
    s1, s2 = score_against_bank(vec, bank), score_against_bank(vec, other)
    assert s1.shape == (3, len(bank)) and s2.shape == (3, len(other))
    # A string's score does not depend on which other strings share its bank.
    for word in ("below", "left of"):
        torch.testing.assert_close(s1[:, bank.index(word)], s2[:, other.index(word)], atol=1e-5, rtol=0)
    unit = torch.nn.functional.normalize(vec, dim=-1)
    torch.testing.assert_close(s2, unit @ torch.from_numpy(other.matrix).T)
    assert float(s1.abs().max()) <= 1.0 + 1e-5
    np.testing.assert_allclose(score_against_bank(vec.numpy(), other), s2.numpy(), atol=1e-6)


def test_scoring_checks_dimension(bank):
    with pytest.raises(BankError, match="dim 7"):
        score_against_bank(torch.zeros(2, 7), bank)
