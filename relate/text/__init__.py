"""The predicate text space (seed 001, 3.3 and B.2): encoders, banks, resources, report, vocabulary."""

from relate.text.bank import BankError, TextBank, build_bank, load_bank, score_against_bank
from relate.text.encoders import DEFAULT_ENCODER, ENCODERS, load_text_encoder
from relate.text.report import geometry_report, render_markdown
from relate.text.resources import (is_directional, load_inverse_pairs, load_synonym_groups, p_directional,
                                   synonym_pairs)
from relate.text.vocabulary import build_vocabulary, load_vocabulary_file

__all__ = ["BankError", "TextBank", "build_bank", "load_bank", "score_against_bank", "DEFAULT_ENCODER",
           "ENCODERS", "load_text_encoder", "geometry_report", "render_markdown", "is_directional",
           "load_inverse_pairs", "load_synonym_groups", "p_directional", "synonym_pairs",
           "build_vocabulary", "load_vocabulary_file"]
