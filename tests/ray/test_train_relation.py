"""The relation train job on a local Ray instance: a short DDP run on the synthetic world, and the
fault drill (one worker SIGKILLed mid-epoch resumes from the last checkpoint and finishes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from relate.config import load_config

CONFIG = Path(__file__).resolve().parents[2] / "train_jobs" / "configs" / "cpu_small.yaml"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A small corpus in the project layout, written straight from the synthetic world."""
    from relate.data.synthetic import SyntheticConfig
    from relate.data.synthetic_corpus import write_corpus

    from relate.config import dump_config

    world = SyntheticConfig(num_scenes=40, min_size=64, max_size=96, max_objects=6)
    root = write_corpus(tmp_path_factory.mktemp("synth"), world, lambda i: "val" if i % 5 == 0 else "train")
    dump_config(world, root / "synthetic_config.yaml")  # the world's rules: validation scores against its truth
    return root


def _cfg(corpus: Path, storage: Path, name: str, **run):
    from train_jobs.train_relation import TrainRelationConfig

    over = [f"data.corpus_root={corpus}", f"run.storage_path={storage}", f"run.name={name}",
            "model.backbone.img_size=32", "model.backbone.depth=2", "model.backbone.taps=[-2, -1]",
            "model.dim=32", "model.scene_grid=2", "model.sampler.geometry_keep=24", "model.sampler.learned_keep=12",
            "data.rungs=[1.0]", "optim.batch_size=4", "optim.max_steps=4", "optim.warmup_steps=2",
            "run.checkpoint_every=2", "run.val_images=8", "run.evaluate_test=false", "run.log_every=100",
            "run.worker.num_cpus=0.5", f"data.cache_dir={storage / 'cache'}",
            "data.source_scopes.synthetic=observed"]
    over += [f"run.{k}={v}" for k, v in run.items()]
    return load_config(TrainRelationConfig, CONFIG, over)


@pytest.mark.slow
def test_killed_worker_resumes_from_last_checkpoint_and_matches_clean_run(ray_session, corpus, tmp_path):
    from relate.api import load_model
    from train_jobs.train_relation import main

    clean = main(_cfg(corpus, tmp_path, "clean", torch_threads=2))  # 2 threads, not Ray's 1 for 0.5 CPU
    drill = main(_cfg(corpus, tmp_path, "drill", kill_worker_at_step=3, max_failures=1))
    assert drill.run.startswith("drill-") and clean.run.startswith("clean-")  # each run in a folder of its own
    assert (tmp_path / drill.run / ".fault_drill_done").exists()  # the worker really was killed
    assert drill.metrics["step"] == clean.metrics["step"] == 4
    assert drill.metrics["resumed_from_step"] == 2  # the checkpoint before the kill, not step 0
    assert clean.metrics["resumed_from_step"] == 0
    for key in ("val/syn/R@50", "val/exact/R@50"):
        assert abs(drill.metrics[key] - clean.metrics[key]) <= 0.15, key  # same seed: within noise
    pred = load_model(drill.checkpoint)  # the Ray checkpoint folder is the API's checkpoint format
    assert len(pred.vocabulary) > 0
    # TensorBoard reads the run folder: every step's loss, the final validation, wall time, one curve per tag
    # even across the drill's restart (the events past the resumed step are purged, not repeated)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for run, res in ((clean.run, clean), (drill.run, drill)):
        acc = EventAccumulator(str(tmp_path / run / "tensorboard"))
        acc.Reload()
        tags = acc.Tags()["scalars"]
        assert {"loss/total", "loss/infonce", "train_seconds", "lr/head", "val/syn/R@50",
                "val/truth/family/spatial_ap", "val/truth/top10_precision"} <= set(tags), tags
        steps = [e.step for e in acc.Scalars("loss/total")]
        assert sorted(set(steps)) == [1, 2, 3, 4], (run, steps)
        assert acc.Scalars("val/syn/R@50")[-1].value == pytest.approx(res.metrics["val/syn/R@50"])
    assert [c[1]["step"] for c in clean.checkpoints] == [2, 4]  # each kept checkpoint with its step's metrics
    # a report is a barrier across workers: only checkpoint, validation and log steps report (2 and 4
    # here, not all 4 steps), as Ray Train's own checkpoint manager counts them
    snapshot = json.loads((tmp_path / clean.run / "checkpoint_manager_snapshot.json").read_text())
    assert snapshot["current_report_index"] == 2, snapshot["current_report_index"]
    assert clean.checkpoints[-1][0] == clean.checkpoint and clean.checkpoints[0][1]["train_seconds"] > 0
    progress = (tmp_path / clean.run / "progress.log").read_text()
    assert "AP vs truth spatial" in progress  # the per-family val line
    assert "2 worker(s), each computing with 2 torch thread(s)" in progress  # run.torch_threads reached the workers


@pytest.mark.slow
@pytest.mark.timeout(1500)  # three short fits; each starts a worker group and a Ray Data pipeline
def test_rerun_starts_a_new_run_and_resume_continues_the_old_one(ray_session, corpus, tmp_path, capsys):
    """The same config twice trains two runs in two folders; --resume continues the first from its
    last checkpoint (saying from which step); resuming it once finished is refused, not returned."""
    from train_jobs.run_files import RunError
    from train_jobs.train_relation import main

    def cfg(name, steps, **run):
        c = _cfg(corpus, tmp_path, name, **run)
        c.optim.max_steps = steps
        c.data.decode_cache = True  # decoded once, by the first run, before its first step
        return c

    first = main(cfg("fixed", 2))
    assert "decode cache: 32 rows decoded once" in capsys.readouterr().out
    again = main(cfg("fixed", 2))
    assert "decode cache: reading 32 decoded rows" in capsys.readouterr().out
    assert first.run != again.run and {first.run[:6], again.run[:6]} == {"fixed-"}
    assert first.metrics["step"] == again.metrics["step"] == 2 and again.metrics["resumed_from_step"] == 0
    assert first.checkpoint.startswith(str(tmp_path / first.run)) and again.checkpoint.startswith(str(tmp_path / again.run))
    capsys.readouterr()
    with pytest.raises(RunError, match=rf"run '{first.run}' already finished: its latest checkpoint is at step 2 of 2"):
        main(cfg(first.run, 2, resume="true"))
    assert "resuming" not in capsys.readouterr().out  # refused before anything claims to resume
    cont = main(cfg(first.run, 4, resume="true"))
    assert f"resuming run {first.run} from step 2 (checkpoint {tmp_path / first.run}/checkpoint_" in capsys.readouterr().out
    assert cont.run == first.run and cont.metrics["resumed_from_step"] == 2 and cont.metrics["step"] == 4
    assert "resumed from step 2/4" in (tmp_path / first.run / "progress.log").read_text()


def test_decode_stage_resizes_scales_boxes_and_never_flips(tmp_path):
    import numpy as np
    import pyarrow as pa
    from PIL import Image

    from train_jobs.relation_data import DataConfig, DecodeStage

    img = np.zeros((40, 80, 3), np.uint8)
    img[:, :40] = 255  # bright left half: a flip would move it right
    Image.fromarray(img).save(tmp_path / "a.png")
    boxes = [dict(x1=0.0, y1=0.0, x2=40.0, y2=40.0, category="cup"), dict(x1=40.0, y1=0.0, x2=80.0, y2=20.0, category="dog"),
             dict(x1=10.0, y1=10.0, x2=20.0, y2=20.0, category="cup")]
    rels = [dict(subject=0, object=1, predicate="left of"), dict(subject=2, object=1, predicate="near"),
            dict(subject=1, object=1, predicate="near")]
    table = pa.table({"uri": [str(tmp_path / "a.png")], "width": [80], "height": [40], "boxes": [boxes],
                      "relations": [rels]})
    stage = DecodeStage(32, DataConfig(max_boxes=2, photometric=0.2), ["left of", "near"], ["cup", "dog"], seed=0)
    out = stage(table)
    assert out["image"].shape == (1, 32, 32, 3)
    assert out["image"][0, :, :14].mean() > out["image"][0, :, 18:].mean() + 100
    assert np.allclose(out["boxes"][0, 1], [16, 0, 32, 16])
    assert out["categories"][0].tolist() == [0, 1]
    # box 2 was dropped by max_boxes, so is its relation; the self-loop is never kept
    assert out["rels"][0, 0].tolist() == [0, 1, 0] and (out["rels"][0, 1:] == -1).all()


def test_epoch_order_is_a_fresh_permutation_each_epoch_and_reproducible():
    from train_jobs.relation_data import epoch_order

    order = epoch_order(50, 3, seed=7)
    assert order.shape == (150,)
    epochs = order.reshape(3, 50)
    for e in epochs:
        assert sorted(e.tolist()) == list(range(50))  # every row once an epoch: none lost, none twice
    assert not (epochs[0] == epochs[1]).all() and not (epochs[1] == epochs[2]).all()  # reshuffled each epoch
    assert (epoch_order(50, 3, seed=7) == order).all() and not (epoch_order(50, 3, seed=8) == order).all()
    with pytest.raises(ValueError, match="at least one row"):
        epoch_order(0, 1, seed=0)


def test_training_stream_holds_each_row_once_an_epoch_for_the_whole_run(ray_session, corpus, tmp_path):
    """The train job's own stream over a corpus: as many epochs as the run's steps need, each row
    exactly once an epoch (fingerprinted by its decoded boxes, so order does not matter), in blocks of
    data.block_rows rather than one block of the whole table, paced under output backpressure; the
    decode stage given row indices reads the same rows as when given the rows themselves."""
    import math
    from collections import Counter

    import numpy as np
    import pyarrow as pa

    from train_jobs.relation_data import DecodeStage, build_space, training_table
    from train_jobs.stream_pacing import PaceUnderOutputBackpressure
    from train_jobs.train_relation import train_dataset

    cfg = _cfg(corpus, tmp_path, "stream")
    cfg.data.block_rows = 8
    space = build_space(cfg.data, cfg.model.text_dim)
    table = training_table(cfg.data, quiet=True)
    steps = 20
    epochs = math.ceil(steps * cfg.optim.batch_size * cfg.run.num_workers / len(table))
    assert epochs >= 2
    ds = train_dataset(cfg, table, space, steps)
    assert PaceUnderOutputBackpressure in ds.context.custom_execution_callback_classes  # tests/ray/test_stream_pacing.py
    batches = list(ds.iter_batches(batch_size=None, batch_format="numpy"))
    assert len(batches) > 1 and max(len(b["boxes"]) for b in batches) <= 8  # blocks of block_rows
    got = Counter(b.tobytes() for batch in batches for b in batch["boxes"])
    args = (cfg.model.backbone.img_size, cfg.data, space["forms"], space["categories"])
    direct = DecodeStage(*args)(table)["boxes"]
    assert got == Counter([b.tobytes() for b in direct] * epochs)
    out = DecodeStage(*args, rows=table)(pa.table({"row": np.array([3, 0])}))
    assert (out["boxes"] == direct[[3, 0]]).all()
    assert (out["rels"] == DecodeStage(*args)(table.take([3, 0]))["rels"]).all()


def test_the_decode_cache_built_by_ray_data_streams_what_decoding_streams(ray_session, corpus, tmp_path):
    """The cache train_relation builds before the first step (Ray Data, one decode actor a free CPU) holds
    what decoding in process gives, bit for bit, and the training stream read from it hands the trainer
    the batches the decoding stream does: the same rows, pictures, boxes, conditions and relations."""
    from collections import Counter

    import numpy as np

    from train_jobs.decode_cache import decode_in_process, ensure_decode_cache
    from train_jobs.relation_data import DECODED_KEYS, build_space, training_table
    from train_jobs.train_relation import decode_stage_kwargs, train_dataset

    cfg = _cfg(corpus, tmp_path, "cached")
    cfg.data.block_rows, cfg.data.photometric, cfg.data.implied_relations = 8, 0.0, True
    space = build_space(cfg.data, cfg.model.text_dim)
    table = training_table(cfg.data, quiet=True)
    kwargs = decode_stage_kwargs(cfg, table, space)
    cache = ensure_decode_cache(kwargs, str(tmp_path / "ray"))
    by_ray = cache.arrays
    here = ensure_decode_cache(kwargs, str(tmp_path / "here"), decode=decode_in_process).arrays
    assert sorted(by_ray) == sorted(DECODED_KEYS)
    assert all(np.array_equal(by_ray[k], here[k]) for k in DECODED_KEYS)

    def rows(ds):
        return Counter(b"".join(batch[k][i].tobytes() for k in DECODED_KEYS)
                       for batch in ds.iter_batches(batch_size=None, batch_format="numpy")
                       for i in range(len(batch["boxes"])))

    cached = rows(train_dataset(cfg, table, space, 12, cache=cache))
    assert cached == rows(train_dataset(cfg, table, space, 12))
    assert len(cached) == len(table) and len(set(cached.values())) == 1  # every row, each as often


@pytest.mark.timeout(300)  # a factory that waits for a CPU the workers hold hangs: fail, do not hang
def test_a_restarted_run_streams_from_the_rows_of_its_restored_step(ray_session, corpus, tmp_path):
    """Ray Train calls the train dataset's factory at each worker-group start, in its controller, while
    the workers hold their CPUs (here 1.5 of 2, more than cpu_long's one 1-CPU worker holds). A new run
    streams the whole order; once the run folder records a checkpoint at step 3 (Ray Train's
    snapshot, as ``run_files`` reads it after a worker failure or for --resume), the stream starts at
    the rows of step 3: none of the first three steps' rows again, and none of the rest left out."""
    import json
    import math
    from collections import Counter

    from train_jobs.relation_data import DecodeStage, build_space, epoch_order, training_table
    from train_jobs.run_files import SNAPSHOT
    from train_jobs.train_relation import ResumableStream

    cfg = _cfg(corpus, tmp_path, "resumable")
    cfg.data.block_rows = 8
    space = build_space(cfg.data, cfg.model.text_dim)
    table = training_table(cfg.data, quiet=True)
    steps, per_step = 10, cfg.optim.batch_size * cfg.run.num_workers
    order = epoch_order(len(table), math.ceil(steps * per_step / len(table)), cfg.run.seed)
    direct = DecodeStage(cfg.model.backbone.img_size, cfg.data, space["forms"], space["categories"])(table)["boxes"]
    stream = ResumableStream(cfg, table, space, steps, str(tmp_path))

    def streamed():
        return Counter(b.tobytes() for batch in stream().iter_batches(batch_size=None, batch_format="numpy")
                       for b in batch["boxes"])

    @ray_session.remote(num_cpus=1.5)
    class Workers:
        def ready(self):
            return True

    workers = Workers.remote()
    ray_session.get(workers.ready.remote())
    try:
        assert streamed() == Counter(direct[i].tobytes() for i in order)
        (tmp_path / "resumable").mkdir()
        record = {"checkpoint_dir_name": "checkpoint_3", "metrics": {"step": 3}}
        (tmp_path / "resumable" / SNAPSHOT).write_text(json.dumps({"latest_checkpoint_result": record}))
        assert streamed() == Counter(direct[i].tobytes() for i in order[3 * per_step:])
    finally:
        ray_session.kill(workers)
