"""Strict pydantic configs, YAML loading and dotted command-line overrides.

Every job takes one config object. Experiments are small YAML files over the defaults plus
``--set a.b=value`` overrides; the resolved config is written into the run folder.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Sequence, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from relate.job_inputs import UserInputError, one_line_errors

__all__ = ["StrictConfig", "load_config", "apply_overrides", "parse_job_args", "ConfigError", "dump_config", "read_yaml"]

C = TypeVar("C", bound=BaseModel)


class _Loader(yaml.SafeLoader):
    """YAML as configs read it: only true/false are booleans (YAML 1.2). YAML 1.1 also reads on/off
    and yes/no as booleans, which turned ``occlusion_cue: off`` into False and failed a string field."""


_Loader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in rs if tag != "tag:yaml.org,2002:bool"]
    for ch, rs in yaml.SafeLoader.yaml_implicit_resolvers.items()}
for _ch in "tTfF":
    _Loader.yaml_implicit_resolvers.setdefault(_ch, []).insert(
        0, ("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")))


def read_yaml(text: str) -> Any:
    """Parse config YAML (booleans are true/false only)."""
    return yaml.load(text, Loader=_Loader)


class ConfigError(UserInputError, ValueError):
    """A config file or override is invalid; the message names the field and the problem."""


class StrictConfig(BaseModel):
    """Base for every config: unknown keys are an error, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


def _list_item(items: list, key: str, dotted: str) -> Any:
    """``key`` addresses a list element by position (``0``) or by its ``name`` field (``vg150``)."""
    if key.isdigit():
        if int(key) >= len(items):
            raise ConfigError(f"override {dotted!r}: index {key} is past the list's {len(items)} entries")
        return int(key)
    names = [x.get("name") for x in items if isinstance(x, dict)]
    if key not in names:
        raise ConfigError(f"override {dotted!r}: no entry named {key!r}; entries: {names}")
    return names.index(key)


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in a nested tree; a list on the way is entered by position or by entry name
    (``benchmarks.vg150.path=...``)."""
    keys = dotted.split(".")
    node: Any = tree
    for k in keys[:-1]:
        if isinstance(node, list):
            node = node[_list_item(node, k, dotted)]
            continue
        nxt = node.get(k)
        if nxt is None:
            nxt = node[k] = {}
        if not isinstance(nxt, (dict, list)):
            raise ConfigError(f"override {dotted!r}: {k!r} is not a section")
        node = nxt
    if isinstance(node, list):
        node[_list_item(node, keys[-1], dotted)] = value
    elif isinstance(node, dict):
        node[keys[-1]] = value
    else:
        raise ConfigError(f"override {dotted!r}: {keys[-2]!r} is not a section")


def apply_overrides(tree: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``key.sub=value`` strings; values are parsed as YAML (so 3, 3.0e-4, true, [a, b] work;
    YAML reads "1e-4" as a string, which a float field's validation then converts)."""
    out = json.loads(json.dumps(tree))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.sub=value")
        key, raw = item.split("=", 1)
        _set_dotted(out, key.strip(), read_yaml(raw))
    return out


def load_config(cls: type[C], path: str | Path | None = None, overrides: Sequence[str] = ()) -> C:
    """Read ``path`` (YAML, may be None for the defaults), apply overrides, validate as ``cls``."""
    tree: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        loaded = read_yaml(p.read_text())
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{p}: top level must be a mapping, got {type(loaded).__name__}")
        tree = loaded or {}
    tree = apply_overrides(tree, overrides)
    try:
        return cls.model_validate(tree)
    except ValidationError as exc:
        where = f" in {path}" if path else ""
        lines = [f"invalid {cls.__name__}{where}:"]
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
            lines.append(f"  {loc}: {err['msg']}")
        raise ConfigError("\n".join(lines)) from None


def dump_config(cfg: BaseModel, path: str | Path) -> None:
    """Write the resolved config as YAML (what a run folder and a checkpoint carry)."""
    Path(path).write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))


def parse_job_args(cls: type[C], argv: Sequence[str] | None = None, description: str = "") -> C:
    """The shared ``__main__`` shim: ``--config FILE`` plus repeated ``--set key=value``. From here on a
    config error or a missing input ends the job with one line, no traceback (``relate.job_inputs``)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    one_line_errors(spec.name if spec is not None else Path(sys.argv[0]).name)
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--config", default=None, help="YAML file over the defaults")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="dotted override, e.g. --set train.lr=1e-4 (repeatable)")
    args = ap.parse_args(argv)
    return load_config(cls, args.config, args.overrides)
