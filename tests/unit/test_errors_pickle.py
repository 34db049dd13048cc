"""Every error the project defines with its own constructor arrives whole when pickled, as Ray carries
an exception from a worker to its driver: same class, message and fields. Pickle rebuilds an exception
by calling its class with ``args`` (the message alone), so a constructor with other arguments fails
there unless the class says how to rebuild it; ``MissingInputError`` raised in a Ray Train worker had
reached the controller as a TypeError about ``__init__``, and the run was retried as if it had crashed.

The classes are found by reading the source (every class with an ``__init__`` whose bases name an
error), so one added later without a case here fails ``test_every_custom_error_has_a_case``."""

from __future__ import annotations

import ast
import importlib
import pickle
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("relate", "train_jobs", "pipelines", "eval_jobs", "serve_apps", "actors")

# constructor arguments of each error class that defines its own __init__ (module, class) -> args
CASES = {
    ("relate.job_inputs", "MissingInputError"): ("corpus", "/no/such/corpus", "python -m pipelines.synthetic"),
    ("relate.inputs", "InputError"): ("image_too_large", "image: 9000x9000 exceeds the limit"),
    ("pipelines.annotate_images", "ImageProblem"): ("image_missing", "/no/such.png: no such file"),
    ("serve_apps.security", "ApiError"): (422, "bad_boxes", "boxes[0]: outside the image"),
}


def _error_like(base: ast.expr) -> bool:
    name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
    return name.endswith(("Error", "Exception", "Problem")) or name in ("HTTPException",)


def _custom_init_errors() -> set[tuple[str, str]]:
    """(module, class) of every class whose bases name an error and that defines ``__init__``."""
    found = set()
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if (isinstance(node, ast.ClassDef) and any(_error_like(b) for b in node.bases)
                        and any(isinstance(s, ast.FunctionDef) and s.name == "__init__" for s in node.body)):
                    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                    found.add((module, node.name))
    return found


def test_every_custom_error_has_a_case():
    found = _custom_init_errors()
    assert ("relate.job_inputs", "MissingInputError") in found  # the reader sees the known one
    assert found - set(CASES) == set(), "add the new error classes' constructor arguments to CASES"


@pytest.mark.parametrize("key", sorted(CASES), ids=lambda k: k[1])
def test_error_pickles_whole(key):
    module, name = key
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, BaseException)
    err = cls(*CASES[key])
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls
    assert str(back) == str(err)
    assert vars(back) == vars(err)  # the fields (code, rule, path, ...) as raised
