"""One object placed in a synthetic scene: what the world builder decides and the renderer paints.

``relate.data.synthetic`` creates these and ``relate.data.synthetic_render`` draws them; both
import the type from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SceneObject"]


@dataclass
class SceneObject:
    """A placed object: pixel box, category, palette colour and depth ``z`` (drawn in rising z)."""

    box: np.ndarray
    category: str
    colour: str
    z: float
    is_person: bool = False
    is_body_part: bool = False
    striped: bool = False
    parent: int | None = None
    base: int | None = None  # the object this one's depth was set from (its group's root), when not a parent
