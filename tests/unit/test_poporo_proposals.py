"""PoporoIN proposals (seed 000, Sec. 3.3, stage 1) against a real OpenAI-compatible HTTP server.

The server is the outside engine (two LLMs by model name, on 127.0.0.1): it answers each
(model, cell) call in its own format, some malformed, and fails others (HTTP 500, timeouts, a
garbage body, an answer with no usable pair) on a fixed schedule per phase. Our client, parser and
writer run unchanged. Checked: every call ends as proposals or a failure record, parse counts, the
union's proposing models, and that a rerun asks exactly the failed calls (counted at the server).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.poporo_in import PairListsConfig
from pipelines.poporo_proposals import PoporoProposalsConfig, run_proposals
from relate.audit.review_store import load_proposals
from relate.data.poporo import read_pair_list
from relate.data.poporo_proposals import CELLS, cell_prompt, load_class_list, parse_pairs, union_pairs

CLASSES = """n01 corkscrew, bottle screw
n02 wine bottle
n03 drum, membranophone
n04 drumstick
n05 tennis ball
n06 orange
n07 goldfish, Carassius auratus
n08 lemon
n09 banana
n10 crane
n11 crane
n12 hammer
n13 nail
"""
N_PAIRS = 20

# (model, cell) -> phase -> list of responses by attempt (the last repeats): ("ok", text) is a 200
# with that answer; ("http", code), ("timeout",) and ("garbage",) fail the request
SCRIPT = {
    ("alpha", "CR"): {1: [("ok", '```json\n[["lemon", "orange"], ["Orange", "lemon"], ["lemon", "kazoo"], '
                                 '["banana", "lemon"]]\n```')]},
    ("beta", "CR"): {1: [("ok", '{"pairs": [{"a": "orange", "b": "lemon", "why": "citrus"}, '
                                '{"a": "banana", "b": "orange"}]}')]},
    ("alpha", "TR"): {1: [("ok", "Here are some pairs:\n1. corkscrew - wine bottle\n"
                                 "2. **drum** - drumstick (played together)\n3. hammer - nails")]},
    ("beta", "TR"): {1: [("timeout",)], 2: [("ok", "- hammer, nail\n- drumstick, drum")]},
    ("alpha", "CD"): {1: [("http", 500)], 2: [("ok", "goldfish – orange\ntennis ball – lemon")]},
    ("beta", "CD"): {1: [("ok", "I'm sorry, colour is not something I can judge from names alone.")],
                     2: [("ok", '```json\n[["banana", "lemon"], ["goldfish", "orange"], ["tenn')]},
    ("alpha", "SD"): {1: [("garbage",), ("ok", "tennis ball | orange\norange | tennis ball\ncrane - drum")]},
    ("beta", "SD"): {1: [("ok", "tennis ball -> orange\nlemon -> lemon")]},
}


class _LLMServer:
    """OpenAI-compatible chat completions on 127.0.0.1 following SCRIPT; logs every request."""

    def __init__(self, prompts: dict[str, str], timeout_sleep_s: float) -> None:
        self.prompts, self.sleep, self.phase = prompts, timeout_sleep_s, 1
        self.log: list[tuple[int, str, str, str]] = []  # (phase, model, cell, outcome)
        self.lock = threading.Lock()
        state = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a) -> None:
                pass

            def _send(self, code: int, body: bytes) -> None:
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.path != "/v1/chat/completions":
                    return self._send(404, b'{"error": "no such route"}')
                content = body["messages"][-1]["content"]
                assert isinstance(content, str), "proposal calls are text-only"
                model, cell = body["model"], state.prompts[content]
                with state.lock:
                    attempt = sum(1 for p, m, c, _ in state.log if (p, m, c) == (state.phase, model, cell))
                    plan = SCRIPT[(model, cell)]
                    steps = plan.get(state.phase) or plan[max(plan)]
                    step = steps[min(attempt, len(steps) - 1)]
                    state.log.append((state.phase, model, cell, step[0]))
                if step[0] == "timeout":
                    time.sleep(state.sleep)
                    return self._send(504, b'{"error": "late"}')
                if step[0] == "http":
                    return self._send(step[1], b'{"error": "internal"}')
                if step[0] == "garbage":
                    return self._send(200, b"<html>proxy error</html>")
                msg = {"choices": [{"message": {"role": "assistant", "content": step[1]}}],
                       "usage": {"prompt_tokens": 100, "completion_tokens": 20}}
                return self._send(200, json.dumps(msg).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def asked(self, phase: int) -> list[tuple[str, str]]:
        return sorted((m, c) for p, m, c, _ in self.log if p == phase)


@pytest.fixture
def classes_file(tmp_path: Path) -> Path:
    p = tmp_path / "LOC_synset_mapping.txt"
    p.write_text(CLASSES)
    return p


@pytest.fixture
def server(classes_file: Path):
    classes = load_class_list(classes_file)
    srv = _LLMServer({cell_prompt(c, classes, N_PAIRS): c for c in CELLS}, timeout_sleep_s=0.8)
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def _config(classes_file: Path, url: str, out: Path) -> PoporoProposalsConfig:
    ep = {"base_url": url, "timeout_s": 0.3, "max_retries": 1, "backoff_s": 0.01, "max_concurrency": 4}
    return PoporoProposalsConfig.model_validate({
        "classes": str(classes_file), "n_pairs": N_PAIRS, "out_dir": str(out),
        "endpoints": [{"openai": dict(ep, model="alpha")}, {"openai": dict(ep, model="beta")}]})


def _pairs(table, cell: str) -> dict[frozenset, list[str]]:
    return {frozenset((r["class_a"], r["class_b"])): r["models"] for r in table.to_pylist() if r["cell"] == cell}


def test_every_call_ends_as_proposals_or_a_failure_and_a_rerun_asks_only_the_failed(classes_file, server, tmp_path):
    out = tmp_path / "proposals"
    cfg = _config(classes_file, server.url, out)
    t0 = time.monotonic()
    first = run_proposals(cfg)

    calls = {(r["model"], r["cell"]): r for r in pq.read_table(out / "calls.parquet").to_pylist()}
    assert len(calls) == 8 and first.calls == 8 and first.asked == 8
    failures = {(r["model"], r["cell"]): r for r in pq.read_table(out / "failures.parquet").to_pylist()}
    assert {k: f["kind"] for k, f in failures.items()} == {
        ("alpha", "CD"): "http_500", ("beta", "TR"): "timeout", ("beta", "CD"): "unparseable"}
    assert failures[("alpha", "CD")]["attempts"] == 2 and failures[("beta", "TR")]["attempts"] == 2
    assert "colour is not something" in failures[("beta", "CD")]["message"]
    for key, row in calls.items():  # an answer with pairs, or the failure, never an empty result
        assert (row["answer"] is None) == (key in failures) == (row["kind"] is not None)
        if row["answer"] is not None:
            assert json.loads(row["counts_json"])["pairs"] > 0
    assert calls[("alpha", "SD")]["attempts"] == 2  # a garbage body is retried within the run
    assert first.failed == {"http_500": 1, "timeout": 1, "unparseable": 1} and not first.complete
    assert first.pair_lists is None and not (out / "pairs").exists()

    counts = {k: json.loads(r["counts_json"]) for k, r in calls.items() if r["answer"]}
    assert counts[("alpha", "CR")] == {"pairs": 2, "unknown": 1, "ambiguous": 0, "duplicates": 1,
                                      "self_pairs": 0, "unread_lines": 0}
    assert counts[("alpha", "TR")]["unknown"] == 1 and counts[("alpha", "TR")]["unread_lines"] == 1
    assert counts[("alpha", "SD")]["duplicates"] == 1 and counts[("alpha", "SD")]["ambiguous"] == 1
    assert counts[("beta", "SD")]["self_pairs"] == 1
    props = pq.read_table(out / "proposals.parquet")
    cr = _pairs(props, "CR")
    assert cr == {frozenset(("n08", "n06")): ["alpha", "beta"], frozenset(("n09", "n08")): ["alpha"],
                  frozenset(("n09", "n06")): ["beta"]}
    assert _pairs(props, "SD") == {frozenset(("n05", "n06")): ["alpha", "beta"]}
    assert not _pairs(props, "CD")  # both CD calls failed: nothing invented for them
    assert server.asked(1).count(("beta", "TR")) == 2 and len(server.asked(1)) == 11

    server.phase = 2
    second = run_proposals(cfg)
    assert server.asked(2) == sorted(failures), "the rerun must ask exactly the failed calls"
    assert second.asked == 3 and second.complete and not (out / "failures.parquet").exists()
    calls2 = {(r["model"], r["cell"]): r for r in pq.read_table(out / "calls.parquet").to_pylist()}
    assert all(r["answer"] for r in calls2.values())
    assert calls2[("alpha", "CD")]["attempts"] == 3  # attempts over both runs
    assert {k: calls2[k]["answer"] for k in calls if k not in failures} == \
        {k: calls[k]["answer"] for k in calls if k not in failures}  # earlier answers kept
    props2 = pq.read_table(out / "proposals.parquet")
    assert _pairs(props2, "TR")[frozenset(("n03", "n04"))] == ["alpha", "beta"]
    assert _pairs(props2, "CD") == {frozenset(("n07", "n06")): ["alpha", "beta"], frozenset(("n05", "n08")): ["alpha"],
                                    frozenset(("n09", "n08")): ["beta"]}
    assert json.loads(calls2[("beta", "CD")]["counts_json"])["pairs"] == 2  # a truncated JSON answer's whole pairs

    # the pair lists are what pipelines.poporo_in reads, unchanged
    lists = PairListsConfig(**second.pair_lists)
    for cell in CELLS:
        got = {frozenset(p) for p in read_pair_list(getattr(lists, cell))}
        assert got == set(_pairs(props2, cell)), cell
    reviewed = load_proposals(out / "proposals.parquet")  # the review stage reads the union unchanged
    assert len(reviewed) == props2.num_rows and reviewed[0]["models"] == props2.column("models")[0].as_py()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["pairs"] == {c: len(_pairs(props2, c)) for c in CELLS}

    server.phase = 3
    third = run_proposals(cfg)
    assert server.asked(3) == [] and third.asked == 0 and third.complete
    assert pq.read_table(out / "proposals.parquet").equals(props2)
    assert time.monotonic() - t0 < 30


def test_a_changed_prompt_is_a_new_call(classes_file, server, tmp_path):
    out = tmp_path / "p"
    cfg = _config(classes_file, server.url, out).model_copy(update={"cells": ["CR"]})
    assert run_proposals(cfg).asked == 2 and run_proposals(cfg).asked == 0
    server.prompts[cell_prompt("CR", load_class_list(classes_file), 5)] = "CR"
    again = run_proposals(cfg.model_copy(update={"n_pairs": 5}))
    assert again.asked == 2 and again.calls == 2 and again.complete


def test_answer_forms(classes_file):
    classes = load_class_list(classes_file)
    assert classes.labels["n10"] == "crane (n10)" and classes.labels["n07"] == "goldfish"
    forms = {
        "json": '[["corkscrew", "wine bottle"], ["hammer", "nail"]]',
        "json_objects": '```\n[{"first": "corkscrew", "second": "wine bottle"}, {"x": "hammer", "y": "nail"}]\n```',
        "lines": "Sure, here they are:\n1) Corkscrew - Wine bottle\n2) the hammer - nail: used together\n",
        "commas": "corkscrew, wine bottle\nhammer, nail",
        "tabs_and_dashes": "- corkscrew\twine bottle\n* hammer — nail",
    }
    for name, text in forms.items():
        got = parse_pairs(text, classes)
        assert got.pairs == [("n01", "n02"), ("n12", "n13")], (name, got)
    bad = parse_pairs("corkscrew - spoon\ncrane - nail\ncrane (n11) - nail\nnail - nail", classes)
    assert bad.pairs == [("n11", "n13")] and bad.unknown == ["spoon"] and bad.ambiguous == ["crane"]
    assert bad.self_pairs == 1
    assert parse_pairs("", classes).pairs == [] and parse_pairs("No.", classes).form == "none"
    u = union_pairs([("TR", "b", [("n02", "n01")]), ("TR", "a", [("n01", "n02")]), ("CR", "a", [("n06", "n08")])])
    assert u == [{"pair_id": "CR:n06,n08", "cell": "CR", "class_a": "n06", "class_b": "n08", "models": ["a"]},
                 {"pair_id": "TR:n02,n01", "cell": "TR", "class_a": "n02", "class_b": "n01", "models": ["a", "b"]}]


def test_config_refuses_shared_labels(classes_file):
    with pytest.raises(ValueError, match="distinct name"):
        PoporoProposalsConfig.model_validate({"classes": str(classes_file),
                                              "endpoints": [{"openai": {"model": "m"}}, {"openai": {"model": "m"}}]})
