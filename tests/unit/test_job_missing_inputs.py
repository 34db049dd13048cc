"""Each job's command line, given an input that does not exist, ends with one line and no traceback.

Every command runs as a user types it, from an empty folder (so nothing under runs/ exists), with a
shipped config. It must exit non-zero, print no traceback, and print exactly one error line that
names the missing path and the command that makes it (``relate.job_inputs``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from relate.job_inputs import MissingInputError, user_error_line

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # one interpreter per job (~5 s of imports each)

# (argv after `python -m`, the missing path the line names, a piece of the command that makes it)
CASES = {
    "synthetic": (["pipelines.synthetic", "--config", "no_such.yaml"], "no_such.yaml", "config file not found"),
    "annotate": (["pipelines.annotate", "--config", f"{REPO}/pipelines/configs/annotate_synthetic.yaml"],
                 "runs/demo/synthetic", "python -m pipelines.synthetic --set out_dir=runs/demo/synthetic"),
    "train": (["train_jobs.train_relation", "--config", f"{REPO}/train_jobs/configs/cpu_small.yaml",
               "--set", "data.corpus_root=runs/annotated"], "runs/annotated", "python -m pipelines.annotate"),
    "calibrate": (["train_jobs.calibrate", "--checkpoint", "runs/demo/checkpoint", "--on", "val"],
                  "runs/demo/checkpoint", "make demo"),
    "learning_curve": (["train_jobs.learning_curve", "--config", f"{REPO}/train_jobs/configs/learning_curve.yaml",
                        "--set", f"recipe={REPO}/train_jobs/configs/cpu_small.yaml",
                        "--set", "sources=[{name: truth, corpus_root: runs/w}]", "--set", "truth_root=runs/w"],
                       "runs/w", "python -m pipelines."),
    "prepare": (["eval_jobs.prepare", "synthetic", "--root", "runs/demo/synthetic", "--out", "runs/demo/prepared"],
                "runs/demo/synthetic", "python -m pipelines.synthetic"),
    "ovsgg": (["eval_jobs.ovsgg", "--config", f"{REPO}/eval_jobs/configs/ovsgg_synthetic.yaml"],
              "runs/demo/prepared/synthetic/vg150", "python -m eval_jobs.prepare synthetic"),
    "judge": (["eval_jobs.judge", "--config", f"{REPO}/eval_jobs/configs/judge_synthetic.yaml"],
              "runs/demo/synthetic", "python -m pipelines.synthetic"),
    "triplet_probe": (["eval_jobs.triplet_probe", "--config", f"{REPO}/eval_jobs/configs/triplet_probe.yaml"],
                      "data/poporo/manifest.csv", "python -m pipelines.poporo_in"),
    "audit_sample": (["relate.audit", "--set", "corpus=runs/annotated", "--set", "out=batch.json"],
                     "runs/annotated", "python -m pipelines.annotate"),
    "audit_report": (["eval_jobs.audit_report", "--db", "audit.sqlite", "--corpus", "runs/annotated"],
                     "audit.sqlite", "python -m serve_apps.audit_app"),
    "relation_eval": (["train_jobs.relation_eval", "runs/demo/checkpoint", "runs/demo/synthetic"],
                      "runs/demo/checkpoint", "make demo"),
    "ovr_sgg": (["eval_jobs.ovr_sgg", "--config", f"{REPO}/eval_jobs/configs/ovr_sgg_synthetic.yaml"],
                "runs/ovr/world", "python -m pipelines.synthetic --set out_dir=runs/ovr/world"),
    "predict": (["relate", "predict", "photo.png", "--boxes", "boxes.json", "--checkpoint", "runs/demo/checkpoint"],
                "runs/demo/checkpoint", "make demo"),
}


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_ADDRESS": "", "RELATE_ROOT": ""}
    return subprocess.run([sys.executable, "-m", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    empty = tmp_path_factory.mktemp("fresh")
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(CASES, pool.map(lambda c: _run(c[0], empty), CASES.values())))


@pytest.mark.parametrize("job", sorted(CASES))
def test_a_missing_input_is_one_line_naming_what_makes_it(outcomes, job):
    argv, path, make = CASES[job]
    proc = outcomes[job]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode != 0, (proc.stdout[-1000:], proc.stderr[-1000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [ln for ln in lines if ": error: " in ln]
    assert len(errors) == 1 and errors[0] == lines[-1], proc.stderr[-3000:]
    assert path in errors[0] and make in errors[0], errors[0]


def test_an_error_from_a_ray_task_counts_by_its_cause():
    class RemoteError(RuntimeError):  # what Ray raises on the driver: the task's exception as `cause`
        def __init__(self, cause):
            super().__init__("a traceback from the worker\n  File ...")
            self.cause = cause

    missing = MissingInputError("corpus", "runs/x", "python -m pipelines.annotate --set out_dir=runs/x")
    assert user_error_line(RemoteError(missing)) == str(missing)
    assert user_error_line(RemoteError(ValueError("a bug"))) is None
    assert user_error_line(KeyError("a bug")) is None


def test_a_missing_input_raised_in_a_worker_reaches_the_driver_whole():
    """Ray moves a worker's exception to the driver by pickle: it must come back as itself."""
    import pickle

    missing = MissingInputError("corpus (split val)", "runs/x/corpus", "python -m pipelines.synthetic")
    back = pickle.loads(pickle.dumps(missing))
    assert type(back) is MissingInputError and str(back) == str(missing)
    assert (back.what, back.path, back.make) == (missing.what, missing.path, missing.make)
    assert user_error_line(back) == str(missing)


def test_training_refuses_a_corpus_without_a_validation_split_before_it_starts(tmp_path):
    """The loop validates at its last step and the job scores the test split after it: a corpus without
    either is one line before Ray starts, not a failure after training."""
    from relate.data.synthetic import SyntheticConfig
    from relate.data.synthetic_corpus import write_corpus

    world = SyntheticConfig(num_scenes=3, min_size=64, max_size=64)
    write_corpus(tmp_path / "train_only", world)
    write_corpus(tmp_path / "no_test", world, lambda i: "val" if i == 0 else "train")
    for corpus, split, what in (("train_only", "val", "validation split"), ("no_test", "test", "test split")):
        proc = _run(["train_jobs.train_relation", "--config", f"{REPO}/train_jobs/configs/cpu_small.yaml",
                     "--set", f"data.corpus_root={tmp_path / corpus}"], tmp_path)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert what in lines[-1] and f"(splits ['{split}'])" in lines[-1], lines[-1]
        assert "Started a local Ray instance" not in proc.stderr + proc.stdout
