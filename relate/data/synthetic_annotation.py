"""How a synthetic scene's truth gets stated: sources of different scope, and multi-label pairs.

Two properties of real training mixtures (seed 001, § 3.3 and App. B.1), both opt-in:

* **Annotation sources of different scope.** Each scene is annotated by one source, drawn from
  ``(seed, index)`` by the sources' shares. A scoped source states only relations whose concept
  family it covers (HICO-DET annotates verbs and never spatial relations), so its unstated pairs
  and predicates are no evidence against what it never looks at. The source's name is the
  corpus row's ``source``.
* **Positive-unlabeled pairs.** A stated pair often has several true concepts
  (``relate.data.synthetic_truth``); with ``multi_label = p`` each further true concept of a
  stated pair is also stated with probability ``p``, so some pairs carry several annotations and
  the rest of their truth stays unstated.

Both use random streams of their own, so turning them on never changes a scene's image, boxes or
the surface forms of the relations the plain world states.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from pydantic import Field, field_validator

from relate.config import StrictConfig
from relate.data.lexicon import CONCEPTS, FAMILIES
from relate.data.synthetic_truth import close_relations

__all__ = ["AnnotationSourceConfig", "check_sources", "draw_source", "source_scopes", "state_relations",
           "state_truth", "SOURCE_STREAM", "MULTI_LABEL_STREAM", "FULL_TRUTH_STREAM"]

# Third word of the per-scene seed sequence [seed, index, stream]; the world itself uses [seed, index].
SOURCE_STREAM = 1
MULTI_LABEL_STREAM = 2
FULL_TRUTH_STREAM = 3


class AnnotationSourceConfig(StrictConfig):
    """One annotation source of the synthetic world."""

    name: str = Field(..., min_length=1, pattern=r"^[A-Za-z0-9_.-]+$",
                      description="The corpus `source` string of the scenes this source annotates.")
    share: float = Field(..., gt=0, le=1, description="Share of scenes annotated by this source (shares sum to 1).")
    families: list[str] | None = Field(
        None, description=f"Predicate families this source states (of {list(FAMILIES)}); None: all of them.")

    @field_validator("families")
    @classmethod
    def _known_families(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        bad = [f for f in v if f not in FAMILIES]
        if bad or not v or len(set(v)) != len(v):
            raise ValueError(f"families must be distinct names from {list(FAMILIES)} (or null for all), got {v}")
        return v

    def states(self, concept: str) -> bool:
        """Whether this source would annotate ``concept``."""
        return self.families is None or CONCEPTS[concept].family in self.families


def check_sources(sources: Sequence[AnnotationSourceConfig]) -> None:
    """Raise if the sources are empty, share a name, or their shares do not sum to 1."""
    names = [s.name for s in sources]
    if not sources or len(set(names)) != len(names):
        raise ValueError(f"sources must be a non-empty list with distinct names, got {names}")
    total = sum(s.share for s in sources)
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"source shares must sum to 1, got {total} ({[(s.name, s.share) for s in sources]})")


def draw_source(sources: Sequence[AnnotationSourceConfig], seed: int, index: int) -> AnnotationSourceConfig:
    """The source of scene ``index``: a draw from its own stream, so it depends only on (seed, index)."""
    u = np.random.default_rng([seed, index, SOURCE_STREAM]).random()
    edge = 0.0
    for s in sources:
        edge += s.share
        if u < edge:
            return s
    return sources[-1]  # shares summing to 1 - 1e-7 leave a sliver


def source_scopes(sources: Sequence[AnnotationSourceConfig] | None) -> dict[str, list[str]]:
    """Source name -> families it annotates, for the scoped sources only (an unscoped source
    annotates everything): the shape the relation trainer's per-source negative masks take."""
    return {s.name: list(s.families) for s in sources or () if s.families is not None}


def state_relations(primary: list[dict], truth: Sequence[tuple[int, int, str]], multi_label: float,
                    source: AnnotationSourceConfig | None, rng: np.random.Generator) -> list[dict]:
    """What the annotator writes down: the world's stated relations (``primary``, one per ordered
    pair), each followed by further true concepts of the same ordered pair, each kept with
    probability ``multi_label``; then only what ``source`` covers.

    A further concept is skipped when the same fact is already stated from either end, so a pair
    never repeats a relation its reverse pair states.
    """
    by_pair: dict[tuple[int, int], list[str]] = {}
    for s, o, c in truth:
        by_pair.setdefault((s, o), []).append(c)
    order = {c: k for k, c in enumerate(CONCEPTS)}
    stated = close_relations((r["subject"], r["object"], r["concept"]) for r in primary)
    out = []
    for r in primary:
        out.append(r)
        if multi_label <= 0:
            continue
        s, o = r["subject"], r["object"]
        for c in sorted(by_pair.get((s, o), ()), key=order.__getitem__):
            if (s, o, c) in stated or rng.random() >= multi_label:
                continue
            stated |= close_relations([(s, o, c)])
            forms = CONCEPTS[c].forms
            out.append(dict(subject=s, object=o, predicate=forms[int(rng.integers(len(forms)))], concept=c))
    return out if source is None else [r for r in out if source.states(r["concept"])]


def state_truth(truth: Sequence[tuple[int, int, str]], rng: np.random.Generator) -> list[dict]:
    """Every true relation of a scene as stated rows (``coverage: full``), in the truth's order, each
    with one of its concept's surface forms drawn from ``rng``."""
    out = []
    for s, o, c in truth:
        forms = CONCEPTS[c].forms
        out.append(dict(subject=int(s), object=int(o), predicate=forms[int(rng.integers(len(forms)))], concept=c))
    return out
