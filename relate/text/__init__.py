"""The predicate text space (seed 001, 3.3 and B.2): encoders, banks, resources, report, vocabulary.

Names are imported on first use (PEP 562), so that ``relate.text.resources`` (the restatements the
gate reads) loads without torch or an encoder. Synonym groups and inverse pairs themselves are
read from ``relate.predicate_knowledge``.
"""

from __future__ import annotations

import importlib

_HOME = {
    "BankError": "bank", "TextBank": "bank", "build_bank": "bank", "load_bank": "bank", "score_against_bank": "bank",
    "DEFAULT_ENCODER": "encoders", "ENCODERS": "encoders", "load_text_encoder": "encoders",
    "geometry_report": "report", "render_markdown": "report",
    "is_directional": "resources", "p_directional": "resources", "synonym_pairs": "resources",
    "build_vocabulary": "vocabulary", "load_vocabulary_file": "vocabulary",
}
__all__ = list(_HOME)


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(f"relate.text.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'relate.text' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
