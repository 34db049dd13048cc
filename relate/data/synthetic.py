"""The synthetic world: seeded procedural scenes whose relations are known exactly.

It is the embedded default and the test bed of the whole loop. Each scene is a small RGB image
with 3-10 objects drawn as simple shapes, their boxes, and the true relations among them, each
stated with one of its concept's surface forms (``relate.data.lexicon``). The scenes are built so
that every family of predicate is present and each is decidable by exactly what it should be:

* spatial (left/right, above/below) from the boxes alone;
* depth (in front of / behind) only from pixels: the drawing order of overlapping objects is
  random and independent of size and position, so boxes alone are at chance; a pair is labelled
  only where the drawn shapes (not just the boxes) overlap enough for a viewer to see who hides
  whom, each object casts a shadow on what lies behind it, and one object per scene is usually
  placed half over another to make such pairs common;
* appearance (brighter/darker/same colour) only from pixels: colours are independent of
  category and geometry;
* contact, proximity and containment satisfy the geometric gate's rules;
* action and part relations involve people and their body parts (head, hand), which are
  objects flagged ``is_body_part`` so the gate's body-part rules have something to act on.

A scene depends only on ``(seed, index)``, so a corpus can be built in any order or sharding.

Beside what it states, a scene keeps its full truth (``Scene.true_relations``, from
``relate.data.synthetic_truth``). Two opt-in settings make the corpus positive-unlabeled and mixed
in annotation scope as real ones are (``relate.data.synthetic_annotation``): ``sources`` and
``multi_label``. Left at their defaults, the world is exactly what it was before they existed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from relate import geometry as G
from relate.config import StrictConfig
from relate.data.lexicon import CONCEPTS
from relate.data.synthetic_annotation import (FULL_TRUTH_STREAM, MULTI_LABEL_STREAM, AnnotationSourceConfig,
                                              check_sources, draw_source, state_relations, state_truth)
from relate.data.synthetic_object import SceneObject
from relate.data.synthetic_render import PALETTE, render, shape_mask
from relate.data.synthetic_truth import BRIGHTNESS_GAP, PairRules, true_relations

__all__ = ["SyntheticConfig", "AnnotationSourceConfig", "Scene", "make_scene", "split_of", "PALETTE", "CATEGORIES"]

FREE_CATEGORIES = ("ball", "cup", "book", "lamp", "plant", "bag", "chair", "dog")
SMALL_CATEGORIES = ("cup", "book", "ball", "lamp", "plant")
CATEGORIES = ("person", "head", "hand", "hat", "table", "box") + FREE_CATEGORIES
_LUMINANCE: dict[str, float] = {c: 0.299 * r + 0.587 * g + 0.114 * b for c, (r, g, b) in PALETTE.items()}
# the twin's colours (make_scene): complements, luminance 255 - L, so brightness gaps keep their size
_MIRROR: dict[str, str] = {c: f"inverse_{c}" for c in PALETTE}
_TRUTH_LUMINANCE: dict[str, float] = {**_LUMINANCE, **{_MIRROR[c]: 255.0 - v for c, v in _LUMINANCE.items()}}
_RESTYLED = ("spatial", "proximity", "depth", "appearance")  # families the world derives, not builds


class SyntheticConfig(StrictConfig):
    """How the synthetic world draws scenes."""

    seed: int = Field(0, description="World seed; a scene depends only on (seed, index).")
    num_scenes: int = Field(2000, ge=1, description="Number of scenes in the corpus.")
    min_size: int = Field(128, ge=48, description="Smallest image side in pixels.")
    max_size: int = Field(224, ge=48, description="Largest image side in pixels.")
    min_objects: int = Field(3, ge=2, description="Fewest objects per scene (body parts included).")
    max_objects: int = Field(10, ge=2, description="Most objects per scene (body parts included).")
    image_format: Literal["png", "jpeg"] = Field("png", description="Encoding of the written images.")
    split_fractions: tuple[float, float, float] = Field(
        (0.8, 0.1, 0.1), description="Train/val/test shares, assigned by a hash of the image id.")
    sources: list[AnnotationSourceConfig] | None = Field(
        None, description="Annotation sources (name, share, families), one drawn per scene from (seed, index); a "
        "scoped source states only its families and its name is the row's `source`. None: one source "
        "'synthetic' stating everything (App. B.1).")
    multi_label: float = Field(
        0.0, ge=0, le=1, description="Probability that each further true concept of a stated pair is also stated "
        "(positive-unlabeled pairs, § 3.3); 0: one stated concept per ordered pair.")
    coverage: Literal["stated", "full"] = Field(
        "stated", description="What a scene's row states: 'stated', the world's few chosen relations (a "
        "positive-unlabeled corpus, as annotation gives); 'full', every relation that holds (the full truth, from "
        "both ends, each with a surface form drawn from its own stream): the reference a model trained on "
        "annotation is measured against. Images and boxes are the same either way.")

    @model_validator(mode="after")
    def _check(self) -> "SyntheticConfig":
        if self.min_size > self.max_size:
            raise ValueError(f"min_size ({self.min_size}) must not exceed max_size ({self.max_size})")
        if self.min_objects > self.max_objects:
            raise ValueError(f"min_objects ({self.min_objects}) must not exceed max_objects ({self.max_objects})")
        if abs(sum(self.split_fractions) - 1.0) > 1e-6 or min(self.split_fractions) < 0:
            raise ValueError(f"split_fractions must be non-negative and sum to 1, got {self.split_fractions}")
        if self.sources is not None:
            check_sources(self.sources)
        if self.coverage == "full" and (self.sources is not None or self.multi_label > 0):
            raise ValueError("coverage 'full' states every true relation: sources and multi_label must stay unset")
        return self


@dataclass
class Scene:
    """One generated scene: the image, its boxes, the relations its source states and the full truth.

    ``relations`` (subject, object, predicate, concept) are what the corpus row carries;
    ``true_relations`` (subject, object, concept) are every relation that holds, stated from both
    ends, of which the stated ones are a subset.
    """

    image_id: str
    image: np.ndarray
    boxes: list[dict]
    relations: list[dict]
    colours: list[str] = field(default_factory=list)
    depth: list[float] = field(default_factory=list)
    source: str = "synthetic"
    true_relations: list[dict] = field(default_factory=list)

    @property
    def width(self) -> int:
        return int(self.image.shape[1])

    @property
    def height(self) -> int:
        return int(self.image.shape[0])

    def true_concepts(self) -> dict[tuple[int, int], set[str]]:
        """Ordered pair -> every concept true of it."""
        out: dict[tuple[int, int], set[str]] = {}
        for r in self.true_relations:
            out.setdefault((r["subject"], r["object"]), set()).add(r["concept"])
        return out

    def to_record(self, uri: str, split: str | None) -> dict:
        """The scene as one corpus row (CORPUS_SCHEMA): its stated relations, kept, pass ``human``."""
        return dict(image_id=self.image_id, uri=uri, width=self.width, height=self.height, source=self.source,
                    split=split, boxes=self.boxes,
                    relations=[dict(subject=r["subject"], object=r["object"], predicate=r["predicate"],
                                    **{"pass": "human"}, gate="kept", score=None) for r in self.relations])


def split_of(image_id: str, fractions: tuple[float, float, float]) -> str:
    """Deterministic split from a hash of the id (stable under any sharding or ordering)."""
    u = int(hashlib.blake2b(image_id.encode(), digest_size=8).hexdigest(), 16) / 2.0**64
    if u < fractions[0]:
        return "train"
    return "val" if u < fractions[0] + fractions[1] else "test"


class _Builder:
    """Places objects and records relations for one scene."""

    def __init__(self, rng: np.random.Generator, w: int, h: int, budget: int) -> None:
        self.rng, self.w, self.h, self.budget = rng, w, h, budget
        self.objs: list[SceneObject] = []
        self.rels: list[tuple[int, int, str]] = []
        self.free_colours = list(PALETTE)
        rng.shuffle(self.free_colours)
        self.whole: list[int] = []
        self.rules: PairRules | None = None

    # -- helpers -------------------------------------------------------------------------
    def room(self, n: int = 1) -> bool:
        return len(self.objs) + n <= self.budget

    def colour(self) -> str:
        return self.free_colours.pop() if self.free_colours else str(self.rng.choice(list(PALETTE)))

    def add(self, box, category: str, z: float | None = None, **kw) -> int:
        b = np.array(box, dtype=np.float64)
        b[[0, 2]] = np.clip(b[[0, 2]], 0, self.w)
        b[[1, 3]] = np.clip(b[[1, 3]], 0, self.h)
        colour = kw.pop("colour", None) or self.colour()
        z = float(self.rng.uniform(0, 10)) if z is None else z
        self.objs.append(SceneObject(b, category, colour, z, striped=bool(self.rng.random() < 0.3), **kw))
        return len(self.objs) - 1

    def place(self, bw: float, bh: float, y_lo: float = 0.0, y_hi: float = 1.0) -> list[float]:
        bw, bh = min(bw, self.w - 1), min(bh, self.h - 1)
        x1 = self.rng.uniform(0, self.w - bw)
        y1 = self.rng.uniform(max(0, y_lo * self.h), max(max(0, y_lo * self.h), min(self.h - bh, y_hi * self.h - bh)))
        return [x1, y1, x1 + bw, y1 + bh]

    def rel(self, s: int, o: int, concept: str, invertible: bool = True) -> None:
        """Record a relation; a directional concept with an inverse is stated from either end."""
        inv = CONCEPTS[concept].inverse
        if invertible and inv is not None and self.rng.random() < 0.5:
            s, o, concept = o, s, inv
        self.rels.append((s, o, concept))

    # -- scene parts ---------------------------------------------------------------------
    def person(self) -> None:
        pw, ph = self.rng.uniform(0.14, 0.22) * self.w, self.rng.uniform(0.4, 0.6) * self.h
        for _ in range(10):
            box = self.place(pw, ph, y_lo=0.15)
            if all(not o.is_person or G.iou(np.array(box), o.box) < 0.3 for o in self.objs):
                break
        else:
            return
        z = float(self.rng.uniform(0, 10))
        p = self.add(box, "person", z, is_person=True)
        x1, y1, x2, y2 = box
        head = self.add([x1 + 0.22 * pw, y1, x2 - 0.22 * pw, y1 + 0.24 * ph], "head", z + 0.01,
                        is_body_part=True, colour="skin", parent=p)
        hand = self.add([x2 - 0.12 * pw, y1 + 0.45 * ph, x2 + 0.2 * pw, y1 + 0.45 * ph + 0.32 * pw], "hand",
                        z + 0.02, is_body_part=True, colour="skin", parent=p)
        self.rels += [(head, p, "part_of"), (hand, p, "part_of")]
        hb = self.objs[head].box
        if self.room() and self.rng.random() < 0.5 and y1 - 0.1 * ph >= 0:
            hat = self.add([hb[0] - 0.08 * pw, y1 - 0.1 * ph, hb[2] + 0.08 * pw, y1 + 0.06 * ph], "hat", z + 0.03, parent=p)
            self.rels.append((p, hat, "wearing"))
        if self.room() and self.rng.random() < 0.5:
            hd = self.objs[hand].box
            cs = 0.45 * pw
            cup = self.add([x2 - 0.05 * pw, hd[1] - 0.1 * cs, x2 - 0.05 * pw + cs, hd[1] + 0.9 * cs], "cup", z + 0.04, parent=p)
            self.rels.append((p, cup, "holding"))

    def table(self) -> None:
        tw, th = self.rng.uniform(0.35, 0.55) * self.w, self.rng.uniform(0.1, 0.18) * self.h
        box = self.place(tw, th, y_lo=0.5)
        z = float(self.rng.uniform(0, 10))
        t = self.add(box, "table", z)
        for _ in range(int(self.rng.integers(1, 3))):
            if not self.room():
                return
            s = self.rng.uniform(0.08, 0.14) * min(self.w, self.h)
            x1 = self.rng.uniform(box[0], max(box[0], box[2] - s))
            item = self.add([x1, box[1] - s + 1.0, x1 + s, box[1] + 1.0], str(self.rng.choice(SMALL_CATEGORIES)), z + 0.05,
                            base=t)
            self.rels.append((item, t, "on"))

    def container(self) -> None:
        s = self.rng.uniform(0.2, 0.3) * min(self.w, self.h)
        box = self.place(s, s)
        z = float(self.rng.uniform(0, 10))
        c = self.add(box, "box", z)
        if self.room():
            bs = self.rng.uniform(0.4, 0.6) * s
            x1 = self.rng.uniform(box[0] + 0.05 * s, box[2] - 0.05 * s - bs)
            y1 = self.rng.uniform(box[1] + 0.05 * s, box[3] - 0.05 * s - bs)
            ball = self.add([x1, y1, x1 + bs, y1 + bs], "ball", z + 0.05, base=c)
            self.rel(ball, c, "inside")

    def free(self) -> int:
        s = self.rng.uniform(0.12, 0.26) * min(self.w, self.h)
        aspect = self.rng.uniform(0.7, 1.4)
        return self.add(self.place(s * aspect, s), str(self.rng.choice(FREE_CATEGORIES)))

    def occluder(self) -> None:
        """A free object placed half over an existing one (a depth pair, order decided by z)."""
        anchors = [i for i, o in enumerate(self.objs) if not o.is_body_part and o.parent is None
                   and o.category in FREE_CATEGORIES]
        if not anchors or not self.room():
            return
        a = self.objs[int(self.rng.choice(anchors))].box
        s = self.rng.uniform(0.14, 0.24) * min(self.w, self.h)
        aw, ah = a[2] - a[0], a[3] - a[1]
        # centre the newcomer a third to two thirds of the way out from the anchor's centre
        cx = (a[0] + a[2]) / 2 + self.rng.choice([-1, 1]) * self.rng.uniform(0.2, 0.45) * (aw + s)
        cy = (a[1] + a[3]) / 2 + self.rng.uniform(-0.3, 0.3) * (ah + s)
        cx, cy = float(np.clip(cx, s / 2, self.w - s / 2)), float(np.clip(cy, s / 2, self.h - s / 2))
        self.add([cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2], str(self.rng.choice(FREE_CATEGORIES)))

    def touching(self) -> None:
        anchors = [i for i, o in enumerate(self.objs) if not o.is_body_part and o.parent is None]
        if not anchors or not self.room():
            return
        a = self.objs[int(self.rng.choice(anchors))].box
        s = self.rng.uniform(0.1, 0.18) * min(self.w, self.h)
        if a[2] + s > self.w:
            return
        y1 = self.rng.uniform(max(0, a[1] - 0.5 * s), min(self.h - s, a[3] - 0.3 * s)) if a[3] - 0.3 * s > max(0, a[1] - 0.5 * s) else a[1]
        b = self.add([a[2], y1, a[2] + s, y1 + s], "bag")
        i = anchors[[self.objs[k].box.tolist() for k in anchors].index(a.tolist())]
        self.rels.append((b, i, "touching") if self.rng.random() < 0.5 else (i, b, "touching"))

    # -- relations that follow from the finished layout ----------------------------------
    def _related(self) -> set[frozenset[int]]:
        return {frozenset((s, o)) for s, o, _ in self.rels}

    def derived(self, shapes: list[np.ndarray]) -> None:
        """Depth, spatial, proximity and appearance relations among whole (non-part) objects."""
        whole = self.whole = [i for i, o in enumerate(self.objs) if not o.is_body_part]
        if len(whole) < 2:
            return
        rules = self.rules = PairRules(np.stack([self.objs[i].box for i in whole]), [shapes[i] for i in whole])
        related = self._related()
        # Depth: objects whose drawn shapes overlap visibly, in either stacking order; the order is
        # random (pixel-only). Overlapping boxes whose shapes barely touch would be unreadable labels.
        for a in range(len(whole)):
            for b in range(a + 1, len(whole)):
                i, j = whole[a], whole[b]
                if frozenset((i, j)) in related:
                    continue
                if rules.occlusion_visible(a, b):
                    front, back = (i, j) if self.objs[i].z > self.objs[j].z else (j, i)
                    self.rel(front, back, "in_front_of")
                    related.add(frozenset((i, j)))
        # Spatial: each object against its nearest unrelated neighbour, separated on one axis.
        ctr = rules.ctr
        dist = np.linalg.norm(ctr[:, None] - ctr[None], axis=-1) + np.eye(len(whole)) * 1e9
        for a in range(len(whole)):
            for b in np.argsort(dist[a]):
                i, j = whole[a], whole[int(b)]
                if i == j or frozenset((i, j)) in related:
                    continue
                concept = rules.spatial(a, int(b))
                if concept is None:
                    continue
                self.rel(i, j, concept)
                related.add(frozenset((i, j)))
                break
        # Proximity: one close, unrelated pair per scene at most.
        cands = [(a, b) for a in range(len(whole)) for b in range(a + 1, len(whole))
                 if rules.near(a, b) and frozenset((whole[a], whole[b])) not in related]
        if cands and self.rng.random() < 0.6:
            a, b = cands[int(self.rng.integers(len(cands)))]
            self.rels.append((whole[a], whole[b], "near"))
        self._appearance(whole)

    def _appearance(self, whole: list[int]) -> None:
        lum = _LUMINANCE
        pool = [i for i in whole if self.objs[i].colour in PALETTE]
        if len(pool) >= 2 and self.rng.random() < 0.4:
            a, b = self.rng.choice(pool, size=2, replace=False)
            self.objs[int(b)].colour = self.objs[int(a)].colour
            self.rels.append((int(a), int(b), "same_colour_as"))
        pairs = [(i, j) for i in pool for j in pool if i < j and abs(lum[self.objs[i].colour] - lum[self.objs[j].colour]) > BRIGHTNESS_GAP]
        for k in self.rng.permutation(len(pairs))[:2]:
            i, j = pairs[int(k)]
            hi, lo = (i, j) if lum[self.objs[i].colour] > lum[self.objs[j].colour] else (j, i)
            self.rel(hi, lo, "brighter_than")


def _restyle(objs: list[SceneObject]) -> None:
    """The twin's styling: each group's drawing depth mirrored (a group's parts keep their offsets
    to its root) and every palette colour swapped for its complement (luminance 255 - L)."""
    z0 = [o.z for o in objs]
    for o in objs:
        root = o.parent if o.parent is not None else o.base
        o.z = 10.0 - z0[root] + (o.z - z0[root]) if root is not None else 10.0 - o.z
    for o in objs:
        o.colour = _MIRROR.get(o.colour, o.colour)


def make_scene(index: int, cfg: SyntheticConfig, twin: bool = False) -> Scene:
    """Build scene ``index`` of the world ``cfg`` (deterministic in ``(cfg.seed, index)``).

    ``twin``: the same layout, boxes and shapes with the drawing order of its groups reversed and
    each colour swapped for its complement, so its depth and brightness truth are flipped
    while nothing a box-only model sees changes (the pixel control of the learnability check,
    ``train_jobs.learnability``). A twin states its full truth (``coverage: full``) and its id ends
    in ``-twin``.
    """
    if twin and cfg.coverage != "full":
        raise ValueError("a twin scene states its full truth: use a world with coverage 'full'")
    rng = np.random.default_rng([cfg.seed, index])
    w = int(rng.integers(cfg.min_size, cfg.max_size + 1))
    h = int(rng.integers(cfg.min_size, cfg.max_size + 1))
    budget = int(rng.integers(cfg.min_objects, cfg.max_objects + 1))
    b = _Builder(rng, w, h, budget)
    for _ in range(int(rng.choice([0, 1, 1, 2]))):
        if b.room(3):
            b.person()
    if b.room(2) and rng.random() < 0.5:
        b.table()
    if b.room(2) and rng.random() < 0.35:
        b.container()
    while len(b.objs) < budget - 1 or len(b.objs) < cfg.min_objects:
        b.free()
    if b.room() and rng.random() < 0.7:
        b.occluder()
    if b.room() and rng.random() < 0.5:
        b.touching()
    for k, o in enumerate(b.objs):  # strict drawing order: equal depths would make occlusion ambiguous
        o.z += k * 1e-6
    shapes = [shape_mask(o, w, h) for o in b.objs]  # drawn once: depth labels and shadows share them
    b.derived(shapes)
    if twin:
        _restyle(b.objs)
        # what the layout built stays true; what depth and colour decide is derived again below
        b.rels = [r for r in b.rels if CONCEPTS[r[2]].family not in _RESTYLED]

    canvas = render(b.objs, shapes, rng, w, h)
    image_id = f"synth-{cfg.seed}-{index:07d}" + ("-twin" if twin else "")
    boxes = [dict(x1=float(o.box[0]), y1=float(o.box[1]), x2=float(o.box[2]), y2=float(o.box[3]),
                  category=o.category, is_person=o.is_person, is_body_part=o.is_body_part) for o in b.objs]
    relations, seen = [], set()
    for s, o, concept in b.rels:
        if s == o or (s, o) in seen:
            continue
        seen.add((s, o))
        forms = CONCEPTS[concept].forms
        relations.append(dict(subject=s, object=o, predicate=forms[int(rng.integers(len(forms)))], concept=concept))
    truth = true_relations(b.rules, b.whole, np.stack([o.box for o in b.objs]), [o.z for o in b.objs],
                           [o.colour for o in b.objs], _TRUTH_LUMINANCE, ((s, o, c) for s, o, c in b.rels if s != o))
    source = draw_source(cfg.sources, cfg.seed, index) if cfg.sources is not None else None
    if source is not None or cfg.multi_label > 0:
        relations = state_relations(relations, truth, cfg.multi_label, source,
                                    np.random.default_rng([cfg.seed, index, MULTI_LABEL_STREAM]))
    if cfg.coverage == "full":
        relations = state_truth(truth, np.random.default_rng([cfg.seed, index, FULL_TRUTH_STREAM]))
    return Scene(image_id, np.asarray(canvas), boxes, relations,
                 colours=[o.colour for o in b.objs], depth=[o.z for o in b.objs],
                 source="synthetic" if source is None else source.name,
                 true_relations=[dict(subject=s, object=o, concept=c) for s, o, c in truth])
