"""Driver of test_autoscaling_fake_nodes.py, run as its own process (the pytest process may
already hold the session's local Ray instance): connects to the fake autoscaling cluster, puts the
annotation-shaped demand and then the Train-shaped demand on it, samples the node list every half
second, and prints one JSON object on its last stdout line.

Not a test module. Usage: python _autoscale_driver.py SPEC.json (keys: address, groups, engine,
engines, train_worker, num_workers, hold_s, phase_timeout_s, idle_timeout_s).
"""

from __future__ import annotations

import json
import sys
import threading
import time


def _group_of(resources: dict, groups: dict[str, dict]) -> str:
    """The node group a live node belongs to: the head, or the group whose resource names it carries."""
    if "node:__internal_head__" in resources:
        return "head"
    names = {k for k in resources if not k.startswith("node:") and k not in ("memory", "object_store_memory")}
    for name, res in groups.items():
        if names == set(res):
            return name
    return "unknown:" + ",".join(sorted(names))


def main(spec: dict) -> dict:
    import ray
    from ray.train import ScalingConfig
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    groups = spec["groups"]
    t0 = time.monotonic()
    deadline = t0 + 120
    while True:  # the head's GCS may still be starting
        try:
            ray.init(address=spec["address"], log_to_driver=False, configure_logging=False)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)

    samples: list[tuple[float, dict[str, int]]] = []
    node_group: dict[str, str] = {}
    addresses: set[str] = set()
    stop = threading.Event()

    def counts() -> dict[str, int]:
        out: dict[str, int] = {}
        for n in ray.nodes():
            if n["Alive"]:
                g = _group_of(n["Resources"], groups)
                node_group[n["NodeID"]] = g
                addresses.add(n["NodeManagerAddress"])
                out[g] = out.get(g, 0) + 1
        return out

    def sample() -> None:
        while not stop.is_set():
            c = counts()
            if not samples or samples[-1][1] != c:
                samples.append((round(time.monotonic() - t0, 1), c))
            stop.wait(0.5)

    def wait_until_only_head(timeout: float) -> float:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if set(counts()) == {"head"}:
                return round(time.monotonic() - t0, 1)
            time.sleep(0.5)
        raise TimeoutError(f"workers still alive {timeout:.0f} s after the work finished: {counts()}")

    threading.Thread(target=sample, daemon=True).start()
    events: dict[str, object] = {"start": counts()}

    # 1. annotation-shaped demand: engines asking for `annotator` (and their GPU share)
    @ray.remote
    def engine(hold: float) -> str:
        time.sleep(hold)
        return ray.get_runtime_context().get_node_id()

    events["annotate_submitted"] = round(time.monotonic() - t0, 1)
    refs = [engine.options(**spec["engine"]).remote(spec["hold_s"]) for _ in range(spec["engines"])]
    events["annotate_ran_on"] = ray.get(refs, timeout=spec["phase_timeout_s"])
    events["annotate_done"] = round(time.monotonic() - t0, 1)
    events["annotate_ran_on_groups"] = sorted({node_group.get(n, "?") for n in events["annotate_ran_on"]})
    events["annotate_scaled_down"] = wait_until_only_head(spec["idle_timeout_s"])

    # 2. Train-shaped demand: the placement group Ray Train reserves for `num_workers` workers
    sc = ScalingConfig(**spec["train_worker"], num_workers=spec["num_workers"])
    pgf = sc.as_placement_group_factory()
    events["train_bundles"] = pgf.bundles
    events["train_submitted"] = round(time.monotonic() - t0, 1)
    pg = pgf()
    events["train_ready_at_once"] = pg.wait(timeout_seconds=0.5)
    ray.get(pg.ready(), timeout=spec["phase_timeout_s"])
    events["train_ready"] = round(time.monotonic() - t0, 1)
    workers = [i for i, b in enumerate(pg.bundle_specs) if b.get("trainer")]
    per_worker = sc._resources_per_worker_not_none
    opts = {"num_cpus": per_worker.get("CPU", 0), "num_gpus": per_worker.get("GPU", 0),
            "resources": {k: v for k, v in per_worker.items() if k not in ("CPU", "GPU")}}
    ran = ray.get([engine.options(**opts, scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)).remote(0.0)
                   for i in workers], timeout=spec["phase_timeout_s"])
    events["train_workers"] = len(workers)
    events["train_ran_on_groups"] = sorted({node_group.get(n, "?") for n in ran})
    ray.util.remove_placement_group(pg)
    events["train_released"] = round(time.monotonic() - t0, 1)
    events["train_scaled_down"] = wait_until_only_head(spec["idle_timeout_s"])

    stop.set()
    final = counts()
    if samples[-1][1] != final:
        samples.append((round(time.monotonic() - t0, 1), final))
    events["node_addresses"] = sorted(addresses)
    return {"events": events, "samples": samples}


if __name__ == "__main__":
    result = main(json.loads(open(sys.argv[1]).read()))
    print(json.dumps(result))
