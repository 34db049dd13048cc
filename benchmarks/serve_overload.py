"""Overload and worst-case memory of the Ray Serve app (CPU, small random-weight model).

Clients reach the app as it ships: through nginx started from serve_apps/nginx/relate.conf with
only its listen and upstream ports (and its prefix) changed, as tests/ray/test_serve_nginx_front.py
runs it. Without an nginx binary the benchmark stops and says so (``apt-get install nginx-light``).
Each client sends from its own loopback address (127.0.0.2, 127.0.0.3, ...), as separate users
would, so the front's per-address cap is not what refuses them.

Figures:
* ``throughput_64_over_16``: useful answers per second (HTTP 200 from ``POST /v1/relations``) with
  64 concurrent clients over the same with 16, same app, through the front. Each client is a
  closed loop that honours ``Retry-After`` (a 503 makes it wait that long, as a client is told
  to); the excess must be answered 503 + Retry-After. Goal >= 0.9.
  ``throughput_64_over_16_no_backoff`` is the same ratio with clients that resend at once (the
  hostile case), ``share_503_at_64`` the share of answers that were 503 at 64 clients,
  ``all_503_with_retry_after`` whether every one carried the header, and ``other_errors`` counts
  any answer that is neither 200 nor 503. ``cpu_s_per_answer_*`` and ``cpu_share_64_*`` say where
  the CPU went (this process, the load generator, shares the cores; ``nginx`` is the front's
  processes). The same figures with the suffix ``_direct`` come from the same clients sent
  straight to Serve's proxy, past the front: the app's own admission alone.
* ``peak_rss_mb_16_worst`` (through the front): the highest sum of resident memory over the ingress and the
  RelationModel replica (sampled every 20 ms) while 16 clients send the largest requests the app
  accepts: a square image of ``max_image_pixels`` (5000 x 5000 under local.yaml), the largest
  square image with two full-image masks that fits ``max_mask_pixels`` and the in-flight pixel
  budget (image + masks, 3 x side^2 <= ``max_inflight_pixels``), and a render of the largest image
  with ``max_regions`` boxes and ``max_render_triplets`` edges, each label ``max_string_chars``
  long. Each kind runs on its own (``--quick`` 3 s, full 10 s); a client that gets a 503 waits its
  Retry-After. A kind must have a request admitted: answered, or run to the app's model_timeout_s
  (its JSON 504, counted as ``timed_out_504_*``: the work and its memory happened). Goal <= 2,048 MB. The per-kind peaks (kinds run in turn, so memory a process
  keeps after one kind counts in the next), the idle baseline, the same peak as a PSS sum
  (``peak_pss_mb_16_worst``: shared pages counted once) and the proxy's own peak are reported
  beside it.

The app is the shipped one (``serve_apps.app.build_app``) with serve_apps/configs/local.yaml's
security limits and proxy timeout, read from the file, in the relation-only shape (``detector:
null, judge: null``) with the cpu_small architecture. Throughput rounds run 16 then 64 clients, with
Retry-After honoured and then without (``--quick``: three rounds of 2 s each, full: three of 10 s);
the 16- and 64-client phases alternate, so a change in the machine's load during the run falls on both.

``python -m benchmarks.serve_overload [--quick] [--out FILE]``
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.serve_overhead import SMALL_MODEL, VOCAB, _free_port, _png, _scene

LOCAL_YAML = Path(__file__).resolve().parents[1] / "serve_apps" / "configs" / "local.yaml"
NGINX_CONF = Path(__file__).resolve().parents[1] / "serve_apps" / "nginx" / "relate.conf"


def _local_limits() -> tuple[dict, float]:
    """local.yaml's security section (with SecuritySettings' defaults for what it leaves out) and
    its proxy request timeout: the benchmark serves what a user of that file serves."""
    import yaml

    from serve_apps.config import SecuritySettings

    cfg = yaml.safe_load(LOCAL_YAML.read_text())
    relate = next(a for a in cfg["applications"] if a["import_path"] == "serve_apps.app:app_builder")
    return SecuritySettings.model_validate(relate["args"]["security"]).model_dump(), cfg["http_options"]["request_timeout_s"]


SECURITY, PROXY_TIMEOUT_S = _local_limits()
SIDE = int(SECURITY["max_image_pixels"] ** 0.5)  # the largest accepted square image
# the largest square image two masks may come with: masks x pixels within max_mask_pixels, and
# image + mask pixels within one ingress replica's in-flight budget
MASK_SIDE = int(min(SECURITY["max_image_pixels"], SECURITY["max_mask_pixels"] / 2,
                    SECURITY["max_inflight_pixels"] / 3) ** 0.5)


def _config(ckpt: Path, port: int) -> dict:
    fast = {"graceful_shutdown_timeout_s": 0}
    return {"http": {"port": port}, "security": SECURITY,
            "relation": {"checkpoint": str(ckpt), "max_batch_size": 8, "torch_threads": 1,
                         "deployment": {"num_cpus": 0.4, "max_ongoing_requests": 16, "max_queued_requests": 16,
                                        **fast}},
            "detector": None, "judge": None,
            "ingress": {"num_cpus": 0.1, "max_ongoing_requests": 64, "max_queued_requests": 64, **fast}}


def _bodies() -> dict[str, bytes]:
    """JSON bodies, encoded once: the light request of the throughput rounds and the three worst."""
    image, boxes = _scene()
    light = {"image": base64.b64encode(_png(image)).decode(), "boxes": boxes, "topk": 20}
    flat = base64.b64encode(_png(np.full((SIDE, SIDE, 3), 128, np.uint8))).decode()  # ~100 KB of PNG
    two = [{"x1": 10, "y1": 10, "x2": SIDE / 2, "y2": SIDE / 2}, {"x1": SIDE / 4, "y1": SIDE / 4, "x2": SIDE - 10,
                                                                  "y2": SIDE - 10}]
    flat_m = base64.b64encode(_png(np.full((MASK_SIDE, MASK_SIDE, 3), 128, np.uint8))).decode()
    full = {"size": [MASK_SIDE, MASK_SIDE], "counts": [0, MASK_SIDE * MASK_SIDE]}
    rng = np.random.default_rng(0)
    many = []
    for i in range(SECURITY["max_regions"]):
        x, y = rng.uniform(0, SIDE - 400, 2)  # max_regions labelled boxes
        many.append({"x1": float(x), "y1": float(y), "x2": float(x + 300), "y2": float(y + 300),
                     "label": (f"object {i:03d} " + "w" * 200)[:SECURITY["max_string_chars"]]})
    edges = [{"subject": int(a), "object": int(b),
              "predicate": (f"predicate {i} " + "p" * 200)[:SECURITY["max_string_chars"]]}
             for i, (a, b) in enumerate(rng.integers(0, len(many), (2 * SECURITY["max_render_triplets"], 2)))
             if a != b][:SECURITY["max_render_triplets"]]
    out = {"light": light,
           "image": {"image": flat, "boxes": two, "topk": 20},
           "mask": {"image": flat_m, "masks": [full, full], "topk": 20},
           "render": {"image": flat, "boxes": many, "triplets": edges}}
    return {k: json.dumps(v).encode() for k, v in out.items()}


ROUTES = {"light": "/v1/relations", "image": "/v1/relations", "mask": "/v1/relations", "render": "/v1/render"}


async def _clients(url: str, route: str, body: bytes, n: int, seconds: float, backoff: bool) -> dict:
    """``n`` closed-loop clients for ``seconds``: status counts, and whether each 503 had Retry-After."""
    import httpx

    counts: dict[int, int] = {}
    retry_after = {"with": 0, "without": 0}
    headers = {"Content-Type": "application/json"}
    one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    # one connection per client, each from its own loopback address (separate users)
    conns = [httpx.AsyncClient(base_url=url, timeout=PROXY_TIMEOUT_S + 10,
                               transport=httpx.AsyncHTTPTransport(local_address=f"127.0.0.{2 + i}", limits=one))
             for i in range(n)]
    try:
        stop = time.perf_counter() + seconds

        async def client(c):
            while time.perf_counter() < stop:
                r = await c.post(route, content=body, headers=headers)
                counts[r.status_code] = counts.get(r.status_code, 0) + 1
                if r.status_code == 503:
                    wait = r.headers.get("retry-after")
                    retry_after["with" if wait else "without"] += 1
                    if backoff and wait:
                        await asyncio.sleep(min(float(wait), max(0.0, stop - time.perf_counter())))
        t0 = time.perf_counter()
        await asyncio.gather(*[client(c) for c in conns])
        return {"counts": counts, "retry_after": retry_after, "seconds": time.perf_counter() - t0}
    finally:
        for c in conns:
            await c.aclose()


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far (/proc/<pid>/stat)."""
    total = 0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except FileNotFoundError:
            pass
    return total / os.sysconf("SC_CLK_TCK")


def _throughput(url: str, body: bytes, rounds: int, seconds: float, pids: dict[str, list[int]],
                suffix: str = "") -> dict[str, float]:
    ok = {(n, b): 0.0 for n in (16, 64) for b in (True, False)}
    took = dict.fromkeys(ok, 0.0)
    groups = {"client": [os.getpid()], **pids}
    cpu = {k: dict.fromkeys(groups, 0.0) for k in ok}
    answers_64, refused_64, other, with_ra, without_ra = 0, 0, 0, 0, 0
    asyncio.run(_clients(url, ROUTES["light"], body, 16, 1.0, True))  # warm-up
    for _ in range(rounds):
        for n, b in ((16, True), (64, True), (16, False), (64, False)):
            before = {g: _cpu_s(ps) for g, ps in groups.items()}
            res = asyncio.run(_clients(url, ROUTES["light"], body, n, seconds, b))
            for g, ps in groups.items():
                cpu[(n, b)][g] += _cpu_s(ps) - before[g]
            ok[(n, b)] += res["counts"].get(200, 0)
            took[(n, b)] += res["seconds"]
            other += sum(v for k, v in res["counts"].items() if k not in (200, 503))
            with_ra += res["retry_after"]["with"]
            without_ra += res["retry_after"]["without"]
            if n == 64 and b:
                answers_64 += sum(res["counts"].values())
                refused_64 += res["counts"].get(503, 0)
    rate = {k: ok[k] / took[k] for k in ok}
    out = {"throughput_64_over_16": round(rate[(64, True)] / rate[(16, True)], 4),
            "throughput_64_over_16_no_backoff": round(rate[(64, False)] / rate[(16, False)], 4),
            "answers_per_s_16": round(rate[(16, True)], 2), "answers_per_s_64": round(rate[(64, True)], 2),
            "answers_per_s_64_no_backoff": round(rate[(64, False)], 2),
            "share_503_at_64": round(refused_64 / max(1, answers_64), 4),
            "all_503_with_retry_after": without_ra == 0 and with_ra > 0, "other_errors": other,
            # where the CPU went (seconds per useful answer, and each process group's share at 64)
            "cpu_s_per_answer_16": round(sum(cpu[(16, True)].values()) / max(1, ok[(16, True)]), 4),
            "cpu_s_per_answer_64": round(sum(cpu[(64, True)].values()) / max(1, ok[(64, True)]), 4),
            **{f"cpu_share_64_{g}": round(v / max(1e-9, sum(cpu[(64, True)].values())), 3)
               for g, v in cpu[(64, True)].items()}}
    return {f"{k}{suffix}": v for k, v in out.items()}


class _RssSampler:
    """Sums of VmRSS and of PSS over ``pids`` every 20 ms in a thread; ``peak`` and ``peak_pss``
    are the highest sums seen. RSS counts pages shared between the processes (torch's libraries,
    object-store arrays both sides map) once per process; PSS splits them, so its sum is the
    memory the group really holds."""

    def __init__(self, pids: list[int]) -> None:
        self.pids, self.peak, self.peak_pss, self._stop = pids, 0.0, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self, key: str = "VmRSS", source: str = "status") -> float:
        total = 0
        for pid in self.pids:
            try:
                for line in open(f"/proc/{pid}/{source}"):
                    if line.startswith(key + ":"):
                        total += int(line.split()[1])
            except FileNotFoundError:
                pass
        return total / 1024

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.sample())
            self.peak_pss = max(self.peak_pss, self.sample("Pss", "smaps_rollup"))
            time.sleep(0.02)

    def __enter__(self) -> "_RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _pids(app: str) -> dict[str, list[int]]:
    from ray._private.state import actors

    out: dict[str, list[int]] = {"ingress": [], "relation": [], "proxy": []}
    for a in actors().values():
        if a["State"] != "ALIVE":
            continue
        name = a["Name"] or ""
        if name.startswith(f"SERVE_REPLICA::{app}#Ingress#"):
            out["ingress"].append(int(a["Pid"]))
        elif name.startswith(f"SERVE_REPLICA::{app}#RelationModel#"):
            out["relation"].append(int(a["Pid"]))
        elif name.startswith("SERVE_PROXY_ACTOR"):
            out["proxy"].append(int(a["Pid"]))
    return out


def _worst(url: str, bodies: dict[str, bytes], seconds: float) -> dict[str, float]:
    pids = _pids("overload")
    replicas = pids["ingress"] + pids["relation"]
    assert pids["ingress"] and pids["relation"], pids
    idle = _RssSampler(replicas)
    out: dict[str, float] = {"idle_rss_mb": round(idle.sample(), 1),
                             "idle_pss_mb": round(idle.sample("Pss", "smaps_rollup"), 1)}
    peak, peak_pss, proxy_peak = 0.0, 0.0, 0.0
    for kind in ("image", "mask", "render"):
        with _RssSampler(replicas) as s, _RssSampler(pids["proxy"]) as p:
            res = asyncio.run(_clients(url, ROUTES[kind], bodies[kind], 16, seconds, True))
        # admitted means answered, or run to the app's model_timeout_s (its JSON 504) on a loaded machine
        if res["counts"].get(200, 0) + res["counts"].get(504, 0) == 0:
            raise RuntimeError(f"{kind}: no request of the largest accepted kind was admitted: {res['counts']}")
        out[f"peak_rss_mb_{kind}"] = round(s.peak, 1)
        out[f"answered_{kind}"] = res["counts"].get(200, 0)
        out[f"timed_out_504_{kind}"] = res["counts"].get(504, 0)
        out[f"refused_503_{kind}"] = res["counts"].get(503, 0)
        peak, peak_pss, proxy_peak = max(peak, s.peak), max(peak_pss, s.peak_pss), max(proxy_peak, p.peak)
    out["peak_rss_mb_16_worst"] = round(peak, 1)
    out["peak_pss_mb_16_worst"] = round(peak_pss, 1)
    out["proxy_peak_rss_mb"] = round(proxy_peak, 1)
    return out


def _nginx_front(root: Path, upstream: int) -> tuple[subprocess.Popen, str]:
    """nginx from the shipped serve_apps/nginx/relate.conf, its listen and upstream ports (and its
    prefix) the only change, in front of Serve's proxy on ``upstream``; its master's handle and URL."""
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if nginx is None:
        raise RuntimeError("no nginx binary: this benchmark measures the shipped front (serve_apps/nginx/relate.conf); "
                           "install it (apt-get install nginx-light)")
    port = _free_port()
    text = NGINX_CONF.read_text()
    text, n1 = re.subn(r"listen 127\.0\.0\.1:8080", f"listen 127.0.0.1:{port}", text)
    text, n2 = re.subn(r"server 127\.0\.0\.1:8000;", f"server 127.0.0.1:{upstream};", text)
    if not n1 == n2 == 1:
        raise RuntimeError(f"{NGINX_CONF}: its listen/upstream lines moved; update this benchmark")
    (root / "logs").mkdir(parents=True)
    (root / "tmp").mkdir()
    conf = root / "relate.conf"
    conf.write_text(text)
    proc = subprocess.Popen([nginx, "-p", str(root), "-c", str(conf), "-g", "daemon off;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    import httpx

    for _ in range(100):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                return proc, f"http://127.0.0.1:{port}"
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.1)
    proc.terminate()
    raise RuntimeError("nginx in front of Serve did not answer /healthz in 10 s")


def _children(pid: int) -> list[int]:
    return [pid] + [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def measure(quick: bool) -> dict[str, float]:
    import ray
    from ray import serve

    from serve_apps.app import build_app
    from serve_apps.tiny import save_tiny_checkpoint

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()

    def phase(name: str) -> None:
        print(f"[serve_overload] {name} done at {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

    front = None
    with tempfile.TemporaryDirectory() as d:
        ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            ckpt = save_tiny_checkpoint(Path(d) / "small", VOCAB, model=SMALL_MODEL)
            port = _free_port()
            serve.start(http_options={"host": "127.0.0.1", "port": port, "request_timeout_s": PROXY_TIMEOUT_S})
            serve.run(build_app(_config(ckpt, port)), name="overload", route_prefix="/")
            phase("ray, serve and the app start")
            front, url = _nginx_front(Path(d) / "nginx", port)
            direct, bodies = f"http://127.0.0.1:{port}", _bodies()
            pids = {**_pids("overload"), "nginx": _children(front.pid)}
            rounds, seconds = (3, 2.0) if quick else (3, 10.0)
            figures = _throughput(url, bodies["light"], rounds, seconds, pids)
            phase(f"throughput through the nginx front ({figures['throughput_64_over_16']})")
            figures.update(_throughput(direct, bodies["light"], rounds, seconds, pids, suffix="_direct"))
            phase(f"throughput straight to Serve ({figures['throughput_64_over_16_direct']})")
            figures.update(_worst(url, bodies, seconds))
            phase("worst-case memory")
        finally:
            if front is not None:
                front.terminate()  # our nginx master, by its handle; it stops its workers
                front.wait(timeout=30)
            ray.shutdown()  # takes Serve with it
    return figures


if __name__ == "__main__":
    from benchmarks._common import run_benchmark

    run_benchmark("serve_overload", measure)
