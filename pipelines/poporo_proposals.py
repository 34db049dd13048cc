"""PoporoIN's first stage (seed 000, Sec. 3.3): class pairs per annotation cell proposed by LLMs.

    python -m pipelines.poporo_proposals --config pipelines/configs/poporo_proposals.yaml

Every cell prompt (:func:`relate.data.poporo_proposals.cell_prompt`) goes to every endpoint, all
calls in parallel, through the project's OpenAI-compatible client (:mod:`actors.vlm.http`: its
timeouts, retries with backoff and failure kinds, here with text-only messages). Each answer is
read against the class list (:func:`relate.data.poporo_proposals.parse_pairs`); the union per cell
keeps which models proposed each pair. Eight calls need no Ray: a thread pool per endpoint does.

Failures are data, as in annotation and the judge job: a call that still fails after its retries,
or whose answer holds no usable pair (kind ``unparseable``), is one row of ``failures.parquet``,
never an empty result. ``calls.parquet`` holds every call's answer or failure and is written last;
a rerun of the same command asks only the calls without a stored answer (the failed ones, and
any whose prompt changed) and keeps every earlier answer. Files under ``out_dir``:

- ``calls.parquet``: one row per (cell, model) call (CALLS_SCHEMA);
- ``failures.parquet``: one row per failed call (PROPOSAL_FAILURES_SCHEMA), absent when none;
- ``proposals.parquet``: the union of the answered calls (PROPOSALS_SCHEMA), the table the review
  stage loads (:func:`relate.audit.review_store.load_proposals`);
- ``pairs/<cell>.txt``: 'a,b' lines, the pair lists :mod:`pipelines.poporo_in` reads, written only
  when every call has an answer (the proposals before review);
- ``summary.json`` and the resolved ``config.yaml``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, model_validator

from actors.vlm.base import VLMOutcome, VLMRequest
from actors.vlm.configs import OpenAIConfig
from actors.vlm.http import HTTPBackendError, OpenAIBackend
from pipelines.annotate_shards import atomic_write
from pipelines.vlm_calls import CONFIG_ERROR
from relate.config import StrictConfig, dump_config, parse_job_args
from relate.data.poporo_proposals import CELLS, ClassList, cell_prompt, load_class_list, parse_pairs, union_pairs
from relate.jobinfo import Progress
from relate.storage import Location

__all__ = ["ProposalEndpointConfig", "PoporoProposalsConfig", "ProposalsResult", "CALLS_SCHEMA",
           "PROPOSAL_FAILURES_SCHEMA", "PROPOSALS_SCHEMA", "UNPARSEABLE", "run_proposals", "main"]

UNPARSEABLE = "unparseable"  # failure kind of an answer that held no pair of listed classes

CALLS_SCHEMA = pa.schema([
    pa.field("call_id", pa.string(), nullable=False),    # of (cell, model, prompt): a changed prompt is a new call
    pa.field("cell", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),      # the endpoint's name
    pa.field("base_url", pa.string(), nullable=False),
    pa.field("prompt_sha1", pa.string(), nullable=False),
    pa.field("answer", pa.string()),                     # the raw answer; null when the call failed
    pa.field("kind", pa.string()),                       # failure kind; null when answered
    pa.field("message", pa.string(), nullable=False),
    pa.field("attempts", pa.int32(), nullable=False),    # requests made for the call, over all runs
    pa.field("counts_json", pa.string(), nullable=False),  # what parsing kept and dropped (ParsedAnswer.counts)
])
PROPOSAL_FAILURES_SCHEMA = pa.schema([
    pa.field("call_id", pa.string(), nullable=False),
    pa.field("cell", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),
    pa.field("base_url", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("message", pa.string(), nullable=False),
    pa.field("attempts", pa.int32(), nullable=False),
])
PROPOSALS_SCHEMA = pa.schema([  # the proposals table the review stage loads (relate.audit.review_store)
    pa.field("pair_id", pa.string(), nullable=False),    # "<cell>:<class_a>,<class_b>"
    pa.field("cell", pa.string(), nullable=False),
    pa.field("class_a", pa.string(), nullable=False),    # folder names, as the pair lists of pipelines.poporo_in
    pa.field("class_b", pa.string(), nullable=False),
    pa.field("label_a", pa.string(), nullable=False),    # the names the LLMs saw
    pa.field("label_b", pa.string(), nullable=False),
    pa.field("models", pa.list_(pa.string()), nullable=False),
    pa.field("n_models", pa.int32(), nullable=False),
])


class ProposalEndpointConfig(StrictConfig):
    """One LLM behind an OpenAI-compatible server."""

    name: str | None = Field(None, description="Label recorded with each proposal; None: openai.model.")
    openai: OpenAIConfig = Field(default_factory=OpenAIConfig,
                                 description="Server, model, timeout, retries, backoff, concurrency and sampling.")

    @property
    def label(self) -> str:
        return self.name or self.openai.model


class PoporoProposalsConfig(StrictConfig):
    """Which classes, which cells, which LLMs, and where the proposals go."""

    classes: Location = Field(..., description="Class list: 'folder name, synonyms' lines (ImageNet's "
                                                "LOC_synset_mapping.txt) or one class per line.")
    endpoints: list[ProposalEndpointConfig] = Field(..., min_length=1, description="LLMs asked, all in parallel (seed 000: two).")
    cells: list[Literal["CR", "TR", "CD", "SD"]] = Field(list(CELLS), min_length=1, description="Cells to ask for, one prompt each.")
    n_pairs: int = Field(100, ge=1, description="Most pairs asked for per prompt.")
    out_dir: Location = Field("runs/poporo_proposals", description="Where calls, failures, proposals and pair lists go.")

    @model_validator(mode="after")
    def _unique(self) -> "PoporoProposalsConfig":
        labels = [e.label for e in self.endpoints]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise ValueError(f"endpoints share the labels {dup}; give each a distinct name")
        if len(set(self.cells)) != len(self.cells):
            raise ValueError(f"cells {self.cells} repeat a cell")
        return self


@dataclass
class ProposalsResult:
    """How the run left the proposals: calls in all, asked this run, failed by kind, pairs per cell."""

    out_dir: Path
    calls: int
    asked: int
    answered: int
    failed: dict[str, int]
    pairs: dict[str, int]
    pair_lists: dict[str, str] | None = None  # cell -> pair-list path, when complete
    counts: dict[str, int] = field(default_factory=dict)  # parse counts over all answered calls

    @property
    def complete(self) -> bool:
        return not self.failed


class _TextChatBackend(OpenAIBackend):
    """The project's HTTP client with a text-only user turn (no image)."""

    def _payload(self, req: VLMRequest) -> dict:
        s = self.cfg.sampling
        return {"model": self.cfg.model, "messages": [{"role": "user", "content": req.prompt}],
                "temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens}


def _call_id(cell: str, model: str, prompt: str) -> str:
    return hashlib.sha1(f"{cell}\n{model}\n{prompt}".encode()).hexdigest()[:16]


def _ask(backend: OpenAIBackend, req: VLMRequest) -> VLMOutcome:
    try:
        return backend.outcome(req)
    except HTTPBackendError as exc:  # 401/403/404: this endpoint is misconfigured; recorded, as annotation does
        return VLMOutcome(None, 1, CONFIG_ERROR, str(exc)[:500])


def _earlier(out: Path) -> dict[str, dict]:
    """call id -> the row an earlier run left in calls.parquet."""
    path = out / "calls.parquet"
    return {r["call_id"]: r for r in pq.read_table(path).to_pylist()} if path.exists() else {}


def _record(spec: dict, o: VLMOutcome, before: dict | None, classes: ClassList) -> dict:
    """A CALLS_SCHEMA row from this run's outcome; an answer without a usable pair is a failure."""
    attempts = o.attempts + int((before or {}).get("attempts") or 0)
    row = {k: spec[k] for k in ("call_id", "cell", "model", "base_url", "prompt_sha1")}
    if not o.ok:
        return dict(row, answer=None, kind=o.kind, message=o.message or "", attempts=attempts, counts_json="{}")
    parsed = parse_pairs(o.text or "", classes)
    if not parsed.pairs:
        return dict(row, answer=None, kind=UNPARSEABLE, attempts=attempts, counts_json=json.dumps(parsed.counts()),
                    message=f"no pair of listed classes ({parsed.form}); answer starts {(o.text or '')[:300]!r}")
    return dict(row, answer=o.text, kind=None, message="", attempts=attempts, counts_json=json.dumps(parsed.counts()))


def _line(r: dict) -> str:
    if r["kind"]:
        return f"{r['cell']}/{r['model']}: failed ({r['kind']}, {r['attempts']} attempts)"
    c = json.loads(r["counts_json"])
    return (f"{r['cell']}/{r['model']}: {c['pairs']} pairs ({c['unknown']} unknown, {c['ambiguous']} ambiguous, "
            f"{c['duplicates']} duplicate, {c['self_pairs']} self)")


def _ask_all(cfg: PoporoProposalsConfig, todo: list[dict], earlier: dict[str, dict], classes: ClassList) -> list[dict]:
    """This run's calls, in parallel (each endpoint up to its max_concurrency), a progress line each."""
    backends = {e.label: _TextChatBackend(e.openai) for e in cfg.endpoints if any(s["model"] == e.label for s in todo)}
    pools = {m: ThreadPoolExecutor(max_workers=b.cfg.max_concurrency, thread_name_prefix=f"llm-{m}")
             for m, b in backends.items()}
    rows: list[dict] = []
    progress = Progress("poporo-proposals", "calls", len(todo),  # one line per call: how it ended
                        emit=lambda line: print(f"{line}; {_line(rows[-1])}", flush=True))
    try:
        futures = {pools[s["model"]].submit(_ask, backends[s["model"]], VLMRequest(
            image_png=b"", prompt=s["prompt"], image_id=f"{s['cell']}/{s['model']}", pass_name=s["cell"])): s
            for s in todo}
        for fut in as_completed(futures):
            s = futures[fut]
            r = _record(s, fut.result(), earlier.get(s["call_id"]), classes)
            rows.append(r)
            progress.update()
    finally:
        for p in pools.values():
            p.shutdown(wait=True)
        for b in backends.values():
            b.close()
    return rows


def _write(out: Path, classes: ClassList, cells: list[str], rows: list[dict]) -> dict[str, str] | None:
    """failures, proposals and (when complete) pair lists, then calls.parquet last: what a rerun reads."""
    failed = [r for r in rows if r["kind"]]
    fail_path = out / "failures.parquet"
    if failed:
        ft = pa.Table.from_pylist([{k: r[k] for k in PROPOSAL_FAILURES_SCHEMA.names} for r in failed],
                                  schema=PROPOSAL_FAILURES_SCHEMA)
        atomic_write(fail_path, lambda p: pq.write_table(ft, p))
    union = union_pairs((r["cell"], r["model"], parse_pairs(r["answer"], classes).pairs) for r in rows if not r["kind"])
    props = pa.Table.from_pylist([dict(u, label_a=classes.labels[u["class_a"]], label_b=classes.labels[u["class_b"]],
                                       n_models=len(u["models"])) for u in union], schema=PROPOSALS_SCHEMA)
    atomic_write(out / "proposals.parquet", lambda p: pq.write_table(props, p))
    pair_dir, lists = out / "pairs", None
    shutil.rmtree(pair_dir, ignore_errors=True)  # lists exist only for a complete set of answers
    if not failed:
        lists = {}
        for cell in cells:
            lines = [f"# {cell} pairs proposed by LLMs (unreviewed); models per pair in proposals.parquet"]
            lines += [f"{u['class_a']},{u['class_b']}" for u in union if u["cell"] == cell]
            path = pair_dir / f"{cell}.txt"
            atomic_write(path, lambda p, text="\n".join(lines) + "\n": p.write_text(text))
            lists[cell] = str(path)
    calls = pa.Table.from_pylist(sorted(rows, key=lambda r: (cells.index(r["cell"]), r["model"])), schema=CALLS_SCHEMA)
    atomic_write(out / "calls.parquet", lambda p: pq.write_table(calls, p))
    if not failed:
        fail_path.unlink(missing_ok=True)  # after calls.parquet says every call is answered
    return lists


def run_proposals(cfg: PoporoProposalsConfig) -> ProposalsResult:
    """Ask every (cell, endpoint) call an earlier run left without an answer; write the run's files."""
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "config.yaml")
    classes = load_class_list(cfg.classes)
    specs = []
    for cell in cfg.cells:
        prompt = cell_prompt(cell, classes, cfg.n_pairs)
        for e in cfg.endpoints:
            specs.append({"call_id": _call_id(cell, e.label, prompt), "cell": cell, "model": e.label,
                          "base_url": e.openai.base_url, "prompt": prompt,
                          "prompt_sha1": hashlib.sha1(prompt.encode()).hexdigest()})
    earlier = _earlier(out)
    todo = [s for s in specs if not (earlier.get(s["call_id"]) or {}).get("answer")]
    print(f"[poporo-proposals] {len(specs)} calls ({len(cfg.cells)} cells x {len(cfg.endpoints)} models, "
          f"{len(classes.labels)} classes): {len(specs) - len(todo)} answered before, {len(todo)} to ask", flush=True)
    fresh = {r["call_id"]: r for r in (_ask_all(cfg, todo, earlier, classes) if todo else [])}
    rows = [fresh.get(s["call_id"]) or earlier[s["call_id"]] for s in specs]
    lists = _write(out, classes, list(cfg.cells), rows)
    counts: Counter = Counter()
    for r in rows:
        if not r["kind"]:
            counts.update(json.loads(r["counts_json"]))
    union = pq.read_table(out / "proposals.parquet", columns=["cell"]).column("cell").to_pylist()
    result = ProposalsResult(out, len(specs), len(todo), sum(not r["kind"] for r in rows),
                             dict(Counter(r["kind"] for r in rows if r["kind"])),
                             {c: union.count(c) for c in cfg.cells}, lists, dict(counts))
    summary = {"calls": result.calls, "asked": result.asked, "answered": result.answered, "failed": result.failed,
               "pairs": result.pairs, "parse": result.counts, "complete": result.complete, "pair_lists": lists}
    atomic_write(out / "summary.json", lambda p: p.write_text(json.dumps(summary, indent=2) + "\n"))
    return result


def main(cfg: PoporoProposalsConfig) -> ProposalsResult:
    result = run_proposals(cfg)
    pairs = ", ".join(f"{c} {n}" for c, n in result.pairs.items())
    if result.complete:
        print(f"[poporo-proposals] complete: {pairs} pairs; pair lists in {result.out_dir / 'pairs'}", flush=True)
    else:
        print(f"[poporo-proposals] INCOMPLETE: {sum(result.failed.values())} of {result.calls} calls failed "
              f"{result.failed}, listed in {result.out_dir / 'failures.parquet'}; pairs so far {pairs}. "
              f"Rerun the same command to ask exactly those calls again", flush=True)
    return result


if __name__ == "__main__":
    res = main(parse_job_args(PoporoProposalsConfig, description="Ask LLMs for PoporoIN class pairs per cell"))
    sys.exit(0 if res.complete else 3)
