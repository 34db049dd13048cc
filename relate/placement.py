"""Resource requests by name: one config block per stage, turned into Ray keyword arguments.

Every pipeline stage, trainer and evaluator reads its resources from config (``num_cpus``,
``num_gpus`` fractions, custom resources such as ``annotator`` or ``trainer`` and an optional
accelerator type), so the same code fills a 2-core laptop or a 64-GPU cluster: only the YAML
changes. The custom resource names match what the node types in ``cluster/*.yaml`` and
``cluster/kuberay/*.yaml`` advertise, which is how annotators land on the cheap spot GPUs and
trainers on the A100 group.

No ray import here (relate/ stays Ray-free): the helpers return plain dicts that callers splat
into ``map_batches(**...)``, ``@ray.remote(**...)``, Serve ``ray_actor_options`` or
``ray.train.ScalingConfig(**...)``.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field, field_validator, model_validator

from relate.config import StrictConfig

__all__ = [
    "ResourcesConfig",
    "ACCELERATOR_TYPES",
    "RESERVED_RESOURCES",
    "ray_remote_args",
    "serve_actor_options",
    "scaling_config_kwargs",
    "slots_per_node",
]

# The accelerator names Ray detects on a node (ray.util.accelerators); a request for one of them
# becomes the node resource "accelerator_type:<name>".
ACCELERATOR_TYPES = (
    "V100", "T4", "A10G", "L4", "L40S", "A100", "A100-40G", "A100-80G", "H100", "H200", "B200",
    "RTX-PRO-6000", "AMD-Instinct-MI300A", "TPU-V4", "TPU-V5P", "TPU-V5LITEPOD", "TPU-V6E",
)

# Resource names Ray manages itself; they have their own fields and may not appear in `resources`.
RESERVED_RESOURCES = ("CPU", "GPU", "TPU", "memory", "object_store_memory")


def _check_quantity(name: str, value: float) -> None:
    # Ray's own rule: a quantity above 1 must be a whole number (fractions only below one unit).
    if value < 0 or not math.isfinite(value):
        raise ValueError(f"{name}={value!r}: must be a finite number >= 0")
    if value > 1 and not float(value).is_integer():
        raise ValueError(f"{name}={value!r}: quantities above 1 must be whole numbers (Ray rule)")


class ResourcesConfig(StrictConfig):
    """What one task, actor, Serve replica or training worker reserves on a node."""

    num_cpus: float = Field(1.0, ge=0, description="Logical CPUs reserved; fractions (e.g. 0.5) let several actors share a small node.")
    num_gpus: float = Field(0.0, ge=0, description="GPUs reserved; a fraction (0.25) packs several annotator replicas on one GPU, 1 is one training worker per GPU.")
    resources: dict[str, float] = Field(default_factory=dict, description="Custom node resources requested, e.g. {'annotator': 0.25}; names match the node types in cluster/.")
    accelerator_type: str | None = Field(None, description="Pin to nodes with this accelerator (Ray name, e.g. 'A100', 'L4'); None runs anywhere.")

    @field_validator("num_cpus", "num_gpus")
    @classmethod
    def _whole_above_one(cls, v: float, info) -> float:
        _check_quantity(info.field_name, v)
        return v

    @field_validator("resources")
    @classmethod
    def _custom_names(cls, v: dict[str, float]) -> dict[str, float]:
        for name, qty in v.items():
            if name in RESERVED_RESOURCES:
                raise ValueError(f"resources[{name!r}]: {name} has its own field; use num_cpus/num_gpus instead")
            if not name or name.startswith("accelerator_type:"):
                raise ValueError(f"resources[{name!r}]: set accelerator_type instead of naming the resource")
            if qty <= 0:
                raise ValueError(f"resources[{name!r}]={qty!r}: must be > 0 (drop the key to request none)")
            _check_quantity(f"resources[{name!r}]", qty)
        return v

    @field_validator("accelerator_type")
    @classmethod
    def _known_accelerator(cls, v: str | None) -> str | None:
        if v is not None and v not in ACCELERATOR_TYPES:
            raise ValueError(f"accelerator_type {v!r} is not a Ray accelerator name; valid: {list(ACCELERATOR_TYPES)}")
        return v

    @model_validator(mode="after")
    def _accelerator_needs_gpu(self) -> "ResourcesConfig":
        if self.accelerator_type is not None and self.num_gpus == 0 and not self.accelerator_type.startswith("TPU"):
            raise ValueError(f"accelerator_type={self.accelerator_type!r} with num_gpus=0 pins a CPU task to GPU nodes; set num_gpus")
        return self


def ray_remote_args(res: ResourcesConfig) -> dict[str, Any]:
    """Keyword arguments for ``@ray.remote``, ``.options()`` and ``Dataset.map_batches``.

    Zero GPUs and empty custom resources are left out, so a CPU-only request stays schedulable
    on a cluster that has no GPU at all.
    """
    out: dict[str, Any] = {"num_cpus": res.num_cpus}
    if res.num_gpus:
        out["num_gpus"] = res.num_gpus
    if res.resources:
        out["resources"] = dict(res.resources)
    if res.accelerator_type:
        out["accelerator_type"] = res.accelerator_type
    return out


def serve_actor_options(res: ResourcesConfig) -> dict[str, Any]:
    """``ray_actor_options`` for a Serve deployment (same keys Ray accepts for an actor)."""
    return ray_remote_args(res)


def scaling_config_kwargs(res: ResourcesConfig, num_workers: int) -> dict[str, Any]:
    """Keyword arguments for ``ray.train.ScalingConfig``: ``num_workers`` copies of ``res``.

    ``use_gpu`` follows ``num_gpus`` (Ray rejects a GPU in resources_per_worker otherwise).
    """
    if num_workers < 1:
        raise ValueError(f"num_workers={num_workers}: a training run needs at least one worker")
    per_worker: dict[str, float] = {"CPU": res.num_cpus}
    if res.num_gpus:
        per_worker["GPU"] = res.num_gpus
    per_worker.update(res.resources)
    out: dict[str, Any] = {
        "num_workers": num_workers,
        "use_gpu": res.num_gpus > 0,
        "resources_per_worker": per_worker,
    }
    if res.accelerator_type:
        out["accelerator_type"] = res.accelerator_type
    return out


def slots_per_node(res: ResourcesConfig, node_resources: dict[str, float]) -> int:
    """How many copies of ``res`` fit on a node advertising ``node_resources``.

    Used by the README's capacity arithmetic and by tests that check a cluster node type can
    host the replicas its jobs ask for (0 means the request can never be placed there).
    """
    wanted = {"CPU": res.num_cpus, "GPU": res.num_gpus, **res.resources}
    if res.accelerator_type:
        wanted[f"accelerator_type:{res.accelerator_type}"] = 0.001  # what Ray itself requests
    fits = []
    for name, qty in wanted.items():
        if qty == 0:
            continue
        have = float(node_resources.get(name, 0.0))
        fits.append(int(math.floor(have / qty + 1e-9)))
    return min(fits) if fits else 0
