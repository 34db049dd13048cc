"""A5 reaches the OV-SGG composite inline (``a5:``) or from a judge run (``a5_from:``)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from eval_jobs.ovsgg import SystemSpec


def _judge_run(tmp_path, a5: dict) -> str:
    run = tmp_path / "judge"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({"a5": a5}))
    return str(run)


def test_a5_from_reads_the_judge_result(tmp_path):
    run = _judge_run(tmp_path, {"ours": 0.62, "freq": None})
    assert SystemSpec(name="ours", a5_from=run).resolve_a5() == pytest.approx(0.62)
    assert SystemSpec(name="ours", a5_from=run + "/result.json").resolve_a5() == pytest.approx(0.62)
    assert SystemSpec(name="freq", a5_from=run).resolve_a5() is None  # judged run left it unscored
    assert SystemSpec(name="ours", a5=0.4).resolve_a5() == 0.4
    assert SystemSpec(name="ours").resolve_a5() is None


def test_a5_sources_are_exclusive_and_bad_paths_name_the_system(tmp_path):
    with pytest.raises(ValidationError, match="a5 or a5_from"):
        SystemSpec(name="ours", a5=0.5, a5_from="x")
    with pytest.raises(FileNotFoundError, match="'ours'.*no judge result"):
        SystemSpec(name="ours", a5_from=str(tmp_path / "missing")).resolve_a5()
    with pytest.raises(KeyError, match="'other' not in judge run"):
        SystemSpec(name="other", a5_from=_judge_run(tmp_path, {"ours": 0.6})).resolve_a5()
