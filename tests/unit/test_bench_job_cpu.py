"""benchmarks.train_step's input share from sampled process CPU, worked by hand: the share over a
window of steps leaves out what the input path spent before it (its start-up), and a time between
samples reads the last sample taken by then."""

from benchmarks.train_step import _JobCpu, _part


def _cpu(t, inp, tr):
    return (t, {"input": inp, "trainer": tr, "other": 0.0})


def test_window_share_leaves_out_the_start_up():
    # start-up: 6 s of input CPU by t=10 while the trainer spent 4; then 1 s input against 19 s trainer
    job = _JobCpu([_cpu(0.0, 0.0, 0.0), _cpu(10.0, 6.0, 4.0), _cpu(20.0, 6.5, 14.0), _cpu(30.0, 7.0, 23.0)])
    assert job.share(10.0, 30.0) == 1.0 / 20.0
    assert job.share() == 7.0 / 30.0
    assert job.at(25.0)["input"] == 6.5  # between samples: the one at 20
    assert job.share(15.0, 30.0) == (7.0 - 6.0) / ((7.0 - 6.0) + (23.0 - 4.0))


def test_processes_by_part():
    assert _part("ray::MapWorker(MapBatches(DecodeStage))") == "input"
    assert _part("ray::SplitCoordinator") == "input"
    assert _part("ray::DatasetManager") == "input"
    assert _part("ray::RayTrainWorker") == "trainer"
    assert _part("ray::TrainController.run") == "other"
