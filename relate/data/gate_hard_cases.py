"""Hard cases for the geometric gate: relations on both sides of every threshold of Algorithm 1.

The scripted annotator's ordinary errors sit far from every threshold (containment only at zero
overlap), so they cannot show where the gate's boundary lies. With hard cases on, the annotator
also states, per image and rule, the relations whose box pairs lie *nearest* the rule's
threshold on each side: the pair just inside (the rule must fire) and the pair just outside (it
must not). What each one should get is decided here from the synthetic world's own box
coordinates in exact rational arithmetic (``fractions.Fraction``), written out from the
inequalities of Algorithm 1 (seed 001, App. C.2) and never from ``relate.geometry`` or
``relate.gate``, so the gate is scored against an independent reading of the paper.

Tags travel as ``hard/<rule>/<fire|pass>/<margin bin>`` through the parser to the gate's
counters; :func:`score_hard_cases` turns the counts into recall and precision per rule and per
distance to the threshold. The margin is signed towards firing, in the rule's own unit (IoU,
share of area, gap over the larger diagonal, centre offset over the mean box size).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Mapping, Sequence

from pydantic import Field

from relate.config import StrictConfig

__all__ = ["HardCaseConfig", "HARD_TAG", "HARD_RULES", "MARGIN_BINS", "expected_verdict", "hard_case_items",
           "score_hard_cases", "format_hard_case_table"]

HARD_TAG = "hard/"
MARGIN_BINS = ("=0", "<0.01", "<0.03", "<0.1", "<0.3", ">=0.3")
_EDGES = (0.01, 0.03, 0.1, 0.3)


class HardCaseConfig(StrictConfig):
    """Relations placed on both sides of each Algorithm 1 threshold (scripted annotator only)."""

    enabled: bool = Field(False, description="State hard-case relations (off: the annotator's output is unchanged).")
    per_side: int = Field(1, ge=1, le=8, description="Box pairs per image, rule and side, nearest the threshold first.")
    person_iou: float = Field(0.7, gt=0, le=1, description="Line 1 threshold the verdicts assume (must equal gate.person_iou).")
    containment_min: float = Field(0.5, gt=0, le=1, description="Line 8 threshold (must equal gate.containment_min).")
    proximity_gap: float = Field(0.5, gt=0, description="Line 10 threshold (must equal gate.proximity_gap).")
    body_part_inside: float = Field(0.6, gt=0, le=1, description="Line 17 threshold (must equal gate.body_part_inside).")


_Box = tuple[Fraction, Fraction, Fraction, Fraction]


def _box(b: Mapping) -> _Box:
    return tuple(Fraction(float(b[k])) for k in ("x1", "y1", "x2", "y2"))  # type: ignore[return-value]


def _inter(a: _Box, b: _Box) -> Fraction:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else Fraction(0)


def _area(a: _Box) -> Fraction:
    return (a[2] - a[0]) * (a[3] - a[1])


def _touch(a: _Box, b: _Box) -> bool:
    """Closed boxes share at least one point (an edge or a corner counts)."""
    return max(a[0], b[0]) <= min(a[2], b[2]) and max(a[1], b[1]) <= min(a[3], b[3])


def _gap2(a: _Box, b: _Box) -> Fraction:
    dx = max(Fraction(0), b[0] - a[2], a[0] - b[2])
    dy = max(Fraction(0), b[1] - a[3], a[1] - b[3])
    return dx * dx + dy * dy


def _diag2(a: _Box) -> Fraction:
    return (a[2] - a[0]) ** 2 + (a[3] - a[1]) ** 2


def _separation(a: _Box, b: _Box) -> float:
    """Gap over the larger diagonal when apart; minus the overlap depth over it when touching."""
    d = max(_diag2(a), _diag2(b)) ** 0.5
    if not _touch(a, b):
        return float(_gap2(a, b)) ** 0.5 / d
    depth = min(min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1]))
    return -float(depth) / d


def _person_duplicate(s: _Box, o: _Box, c: HardCaseConfig) -> tuple[bool, float]:
    i = _inter(s, o)
    iou = i / (_area(s) + _area(o) - i)
    t = Fraction(str(c.person_iou))
    return iou >= t, float(iou - t)  # line 1: IoU >= 0.7


def _disjoint(s: _Box, o: _Box, c: HardCaseConfig) -> tuple[bool, float]:
    return not _touch(s, o), _separation(s, o)  # lines 6 and 19: the boxes do not touch


def _containment(s: _Box, o: _Box, c: HardCaseConfig) -> tuple[bool, float]:
    t = Fraction(str(c.containment_min))
    share = _inter(s, o) / _area(s)
    return share < t, float(t - share)  # line 8: |s ∩ o| < 0.5 |s|


def _proximity(s: _Box, o: _Box, c: HardCaseConfig) -> tuple[bool, float]:
    t = Fraction(str(c.proximity_gap))
    far = not _touch(s, o) and _gap2(s, o) > t * t * max(_diag2(s), _diag2(o))  # line 10, squared
    return far, float(_gap2(s, o)) ** 0.5 / float(max(_diag2(s), _diag2(o))) ** 0.5 - float(t)


def _direction(axis: int) -> Callable[[_Box, _Box, HardCaseConfig], tuple[bool, float]]:
    def f(s: _Box, o: _Box, c: HardCaseConfig) -> tuple[bool, float]:
        d = (s[axis] + s[axis + 2]) / 2 - (o[axis] + o[axis + 2]) / 2  # subject centre past the object's
        size = (s[axis + 2] - s[axis] + o[axis + 2] - o[axis]) / 2
        return d > 0, float(d / size)  # line 11: "left of"/"above" with the subject's centre right/below
    return f


def _body_part_inside(s: _Box, o: _Box, c: HardCaseConfig) -> tuple[bool, float]:
    t = Fraction(str(c.body_part_inside))
    share = _inter(s, o) / _area(o)
    return share >= t, float(share - t)  # line 17: >= 60% of the part inside the subject


@dataclass(frozen=True)
class _Rule:
    name: str          # the gate rule that must fire, or "direction_repair" (a role swap)
    pass_name: str     # the pass the relation is stated in
    predicate: str     # a surface form outside the synthetic lexicon (no clash with true relations)
    pairs: str         # which boxes: "whole" | "persons" | "whole_part"
    verdict: Callable[[_Box, _Box, HardCaseConfig], tuple[bool, float]]
    threshold: str

    @property
    def expect(self) -> str:
        return "swapped" if self.name == "direction_repair" else f"rejected:{self.name}"


HARD_RULES: tuple[_Rule, ...] = (
    _Rule("person_duplicate", "semantic", "posing with", "persons", _person_duplicate, "IoU >= 0.7"),
    _Rule("contact_disjoint", "spatial", "pressed against", "whole", _disjoint, "boxes do not touch"),
    _Rule("containment_no_overlap", "spatial", "contained in", "whole", _containment, "|s∩o| < 0.5|s|"),
    _Rule("proximity_far", "spatial", "adjacent to", "whole", _proximity, "gap > 0.5 max diag"),
    _Rule("direction_repair", "spatial", "at the left of", "whole", _direction(0), "centre x contradicts"),
    _Rule("direction_repair", "spatial", "located above", "whole", _direction(1), "centre y contradicts"),
    _Rule("body_part_object", "semantic", "looking at", "whole_part", _body_part_inside, "|s∩o| >= 0.6|o|"),
    _Rule("semantic_disjoint", "semantic", "gripping", "whole", _disjoint, "boxes do not touch"),
)


def expected_verdict(rule: str, subject: Mapping, obj: Mapping, cfg: HardCaseConfig | None = None,
                     predicate: str | None = None) -> tuple[bool, float]:
    """(whether ``rule`` must fire on the relation, signed margin) from exact box geometry."""
    cfg = cfg or HardCaseConfig()
    for r in HARD_RULES:
        if r.name == rule and (predicate is None or r.predicate == predicate):
            return r.verdict(_box(subject), _box(obj), cfg)
    raise KeyError(f"no hard case for rule {rule!r}; known: {sorted({r.name for r in HARD_RULES})}")


def margin_bin(margin: float) -> str:
    m = abs(margin)
    if m == 0:
        return MARGIN_BINS[0]
    for edge, label in zip(_EDGES, MARGIN_BINS[1:]):
        if m < edge:
            return label
    return MARGIN_BINS[-1]


def _eligible(rule: _Rule, boxes: Sequence[Mapping], bx: list[_Box], s: int, o: int, cfg: HardCaseConfig) -> bool:
    part_s, part_o = bool(boxes[s].get("is_body_part")), bool(boxes[o].get("is_body_part"))
    persons = bool(boxes[s].get("is_person")) and bool(boxes[o].get("is_person"))
    if rule.pairs == "persons":
        return persons and not (part_s or part_o)
    if persons and _person_duplicate(bx[s], bx[o], cfg)[0]:
        return False  # line 1 would reject it first
    if min(_area(bx[s]), _area(bx[o])) <= 0 or part_s:
        return False
    return part_o if rule.pairs == "whole_part" else not part_o


def hard_case_items(boxes: Sequence[Mapping], pass_name: str, cfg: HardCaseConfig) -> list[dict]:
    """The hard-case relations of one image and pass (0-based ids, tagged): per rule and side the
    ``per_side`` pairs nearest the threshold, the two sides on different unordered pairs."""
    if not cfg.enabled:
        return []
    bx = [_box(b) for b in boxes]
    out = []
    for rule in HARD_RULES:
        if rule.pass_name != pass_name:
            continue
        sides: dict[bool, list[tuple[float, int, int]]] = {True: [], False: []}
        for s in range(len(bx)):
            for o in range(len(bx)):
                if s != o and _eligible(rule, boxes, bx, s, o, cfg):
                    fires, margin = rule.verdict(bx[s], bx[o], cfg)
                    sides[fires].append((abs(margin), s, o, margin))
        used: set[frozenset[int]] = set()  # a repaired (o, s) would repeat a kept (s, o): one side per pair
        for fires, found in sides.items():
            for _, s, o, margin in [x for x in sorted(found) if frozenset(x[1:3]) not in used][: cfg.per_side]:
                used.add(frozenset((s, o)))
                tag = f"{HARD_TAG}{rule.name}/{'fire' if fires else 'pass'}/{margin_bin(margin)}"
                out.append({"subject": s, "object": o, "predicate": rule.predicate, "injected": tag})
    return out


def score_hard_cases(tags: Mapping[str, Mapping[str, int]]) -> dict:
    """Per rule: recall (fire-side relations the rule rejected or repaired), precision (its
    firings that were due), and both per margin bin; other rules' firings are counted apart."""
    expect = {r.name: r.expect for r in HARD_RULES}
    threshold = {}
    for r in HARD_RULES:
        threshold.setdefault(r.name, []).append(r.threshold)
    out: dict = {}
    for tag, outcomes in sorted(tags.items()):
        if not tag.startswith(HARD_TAG):
            continue
        rule, side, bin_ = tag[len(HARD_TAG):].split("/")
        d = out.setdefault(rule, {"threshold": " | ".join(dict.fromkeys(threshold.get(rule, ["?"]))),
                                  "fire": 0, "hit": 0, "pass": 0, "false_fire": 0, "other_rule": 0, "by_margin": {}})
        b = d["by_margin"].setdefault(f"{side} {bin_}", {"n": 0, "fired": 0})
        n = sum(outcomes.values())
        fired = outcomes.get(expect.get(rule, ""), 0)
        d[side] += n
        d["hit" if side == "fire" else "false_fire"] += fired
        d["other_rule"] += sum(v for k, v in outcomes.items() if k.startswith("rejected:") and k != expect.get(rule))
        b["n"] += n
        b["fired"] += fired
    for d in out.values():
        d["recall"] = d["hit"] / d["fire"] if d["fire"] else None
        d["precision"] = d["hit"] / (d["hit"] + d["false_fire"]) if d["hit"] + d["false_fire"] else None
        d["by_margin"] = dict(sorted(d["by_margin"].items(), key=lambda kv: (kv[0].split()[0], MARGIN_BINS.index(kv[0].split()[1]))))
    return out


def format_hard_case_table(scores: Mapping[str, Mapping]) -> str:
    """Recall and precision per rule, then how often it fired per side and |margin| bin."""
    f = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    lines = ["gate hard cases (both sides of each Algorithm 1 threshold; margin signed towards firing)",
             f"{'rule':<24}{'threshold':<24}{'fire':>6}{'pass':>6}{'recall':>8}{'precision':>10}{'other':>7}"]
    for rule, d in scores.items():
        lines.append(f"{rule:<24}{d['threshold'][:23]:<24}{d['fire']:>6}{d['pass']:>6}{f(d['recall']):>8}"
                     f"{f(d['precision']):>10}{d['other_rule']:>7}")
        cells = [f"{k} {v['fired']}/{v['n']}" for k, v in d["by_margin"].items()]
        lines.append("    fired/n by side and |margin|: " + ", ".join(cells))
    return "\n".join(lines)
