"""A small synthetic triplet set with known structure, for the probe's demo and tests.

Each image is one textured shape on a background. The texture family (stripes, dots, checks,
rings) is the "semantic" category; colour and outline shape are the perceptual confounds the
probe's distractor axis is about:
  CR target   same family, different colour and shape           (taxonomic)
  TR target   the family's partner (stripes<->dots, checks<->rings), sharing the query's small
              grey context prop (sun, ground line, frame, flag), other colour and shape (thematic)
  CD distractor   unrelated family, same colour as the query, other shape
  SD distractor   unrelated family, same shape as the query, other colour
So a colour histogram should fail CD trials and do well on SD ones, while a shape-driven
representation shows the reverse: the gaps of seed 000 Sec. 3.5 have a known expected sign.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import Field

from relate.config import StrictConfig
from relate.data.poporo import write_triplet_manifest

__all__ = ["SyntheticTripletsConfig", "write_synthetic_triplets", "FAMILIES", "SHAPES", "COLOURS"]

FAMILIES = ("striped", "dotted", "checked", "ringed")
PARTNER = {"striped": "dotted", "dotted": "striped", "checked": "ringed", "ringed": "checked"}
SHAPES = ("circle", "square", "triangle", "diamond")
COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 70, 220),
           "yellow": (230, 210, 40), "magenta": (200, 50, 200), "cyan": (40, 200, 210)}
PROPS = ("sun", "ground", "frame", "flag")  # grey, small: context without colour information
BACKGROUND = (228, 228, 228)


class SyntheticTripletsConfig(StrictConfig):
    """Size and seed of a generated triplet set."""

    n_triplets: int = Field(default=48, ge=4, description="triplets; a multiple of 4 (one quarter per CR/TR x CD/SD cell)")
    image_size: int = Field(default=64, ge=16, le=512, description="square image side in pixels")
    seed: int = Field(default=0, description="seed; the same seed writes byte-identical images")
    manifest_name: str = Field(default="manifest.csv", description="manifest file name (.csv or .parquet)")


def _texture(family: str, size: int, ink: np.ndarray, base: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    period = max(4, size // 8)
    phase = rng.integers(0, period)
    if family == "striped":
        on = ((xx + yy + phase) // (period / 2)) % 2 == 0
    elif family == "dotted":
        on = ((xx + phase) % period - period / 2) ** 2 + ((yy + phase) % period - period / 2) ** 2 < (period / 4) ** 2
    elif family == "checked":
        on = (((xx + phase) // period) + ((yy + phase) // period)) % 2 == 0
    else:  # ringed
        cy, cx = size / 2, size / 2
        on = (np.sqrt((xx - cx) ** 2 + (yy - cy) ** 2) // (period / 2)) % 2 == 0
    return np.where(on[..., None], ink, base)


def _shape_mask(shape: str, size: int, rng: np.random.Generator) -> np.ndarray:
    from PIL import Image, ImageDraw

    r = size * rng.uniform(0.28, 0.38)
    cx, cy = size / 2 + rng.uniform(-0.08, 0.08) * size, size / 2 + rng.uniform(-0.08, 0.08) * size
    im = Image.new("L", (size, size), 0)
    d = ImageDraw.Draw(im)
    if shape == "circle":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=255)
    elif shape == "square":
        d.rectangle([cx - r * 0.85, cy - r * 0.85, cx + r * 0.85, cy + r * 0.85], fill=255)
    elif shape == "triangle":
        d.polygon([(cx, cy - r), (cx - r, cy + r * 0.8), (cx + r, cy + r * 0.8)], fill=255)
    else:
        d.polygon([(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)], fill=255)
    return np.asarray(im) > 127


def _draw_prop(img: np.ndarray, prop: str) -> None:
    s = img.shape[0]
    k = max(2, s // 16)
    grey = 70
    if prop == "sun":
        yy, xx = np.mgrid[0:s, 0:s]
        img[(yy - 2 * k) ** 2 + (xx - 2 * k) ** 2 <= (1.5 * k) ** 2] = grey
    elif prop == "ground":
        img[s - 2 * k:s - k, :] = grey
    elif prop == "frame":
        img[:k // 2 + 1, :] = img[-(k // 2 + 1):, :] = grey
        img[:, :k // 2 + 1] = img[:, -(k // 2 + 1):] = grey
    else:  # flag in the top-right corner
        img[k:4 * k, s - 2 * k:s - 2 * k + max(1, k // 2)] = grey
        img[k:2 * k, s - 2 * k - 2 * k:s - 2 * k] = grey


def _render(family: str, shape: str, colour: str, prop: str, size: int,
            rng: np.random.Generator) -> np.ndarray:
    base = np.array(COLOURS[colour], dtype=np.float32)
    ink = base * 0.45  # darker shade of the same hue keeps the colour histogram dominated by it
    obj = _texture(family, size, ink, base, rng)
    bg = np.array(BACKGROUND, dtype=np.float32) + rng.normal(0, 4, size=(size, size, 3))
    img = np.where(_shape_mask(shape, size, rng)[..., None], obj, bg)
    _draw_prop(img, prop)
    return np.clip(img, 0, 255).astype(np.uint8)


def _other(rng: np.random.Generator, options, *exclude):
    pool = [o for o in options if o not in exclude]
    return pool[int(rng.integers(0, len(pool)))]


def _plan_triplet(rel: str, dis: str, rng: np.random.Generator) -> list[tuple[str, str, str, int]]:
    """(family, shape, colour, prop) for query, target and distractor."""
    colours = list(COLOURS)
    fam, shape, colour = _other(rng, FAMILIES), _other(rng, SHAPES), _other(rng, colours)
    prop = _other(rng, PROPS)
    other_prop = _other(rng, PROPS, prop)
    t_fam = fam if rel == "CR" else PARTNER[fam]
    target = (t_fam, _other(rng, SHAPES, shape), _other(rng, colours, colour),
              prop if rel == "TR" else other_prop)
    d_fam = _other(rng, FAMILIES, fam, PARTNER[fam])
    if dis == "CD":
        distractor = (d_fam, _other(rng, SHAPES, shape, target[1]), colour, other_prop)
    else:
        distractor = (d_fam, shape, _other(rng, colours, colour, target[2]), other_prop)
    return [(fam, shape, colour, prop), target, distractor]


def write_synthetic_triplets(out_dir: str | Path, cfg: SyntheticTripletsConfig | None = None) -> Path:
    """Render the set into ``out_dir/images`` and write the manifest; returns its path."""
    from PIL import Image

    cfg = cfg or SyntheticTripletsConfig()
    if cfg.n_triplets % 4:
        raise ValueError(f"n_triplets must be a multiple of 4, got {cfg.n_triplets}")
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(cfg.seed)
    cells = [(r, d) for r in ("CR", "TR") for d in ("CD", "SD")]
    rows = []
    for i in range(cfg.n_triplets):
        rel, dis = cells[i % 4]
        row = {"triplet_id": f"syn-{i:05d}", "relation_type": rel, "distractor_type": dis}
        for role, (fam, shape, colour, prop) in zip(("query", "target", "distractor"), _plan_triplet(rel, dis, rng)):
            name = f"images/{i:05d}_{role}.png"
            Image.fromarray(_render(fam, shape, colour, prop, cfg.image_size, rng)).save(out / name)
            row[role] = name
            row[f"{role}_label"] = f"{colour} {fam} {shape}"
        rows.append(row)
    return write_triplet_manifest(rows, out / cfg.manifest_name)
