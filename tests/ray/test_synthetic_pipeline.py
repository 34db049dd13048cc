import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from PIL import Image

from pipelines.synthetic import SceneStage, SyntheticJobConfig, main
from relate.data.corpus import read_corpus
from relate.data.synthetic import make_scene


def test_stage_works_on_a_plain_batch(tmp_path):
    cfg = SyntheticJobConfig(out_dir=str(tmp_path))
    table = SceneStage(cfg, str(tmp_path))({"id": np.array([0, 1, 2])})
    assert table.num_rows == 3 and all(Path(u).is_file() for u in table.column("uri").to_pylist())


def test_pipeline_writes_corpus_images_and_stats(ray_session, tmp_path, capsys):
    import re

    cfg = SyntheticJobConfig(num_scenes=60, blocks=4, out_dir=str(tmp_path / "run"), num_cpus=0.5)
    res = main(cfg)
    done = [int(k) for k in re.findall(r"\[synthetic-run\] scenes (\d+)/60 \(\d+%\) elapsed \S+ eta \S+",
                                       capsys.readouterr().out)]
    assert done and done[-1] == 60 and done == sorted(done)  # our own progress lines, the last one at 60/60
    table = read_corpus(tmp_path / "run")
    assert table.num_rows == 60 and len(set(table.column("image_id").to_pylist())) == 60
    assert set(table.column("split").to_pylist()) <= {"train", "val", "test"}
    assert sum(res.stats["splits"].values()) == 60
    for split in ("train", "val", "test"):
        for f in (tmp_path / "run" / "corpus" / split).glob("*.parquet"):
            assert set(pq.read_table(f).column("split").to_pylist()) <= {split}
    row = table.slice(5, 1).to_pylist()[0]
    index = int(row["image_id"].rsplit("-", 1)[1])
    scene = make_scene(index, cfg)
    assert np.array_equal(np.asarray(Image.open(row["uri"]).convert("RGB")), scene.image)  # PNG is lossless
    assert [r["predicate"] for r in row["relations"]] == [r["predicate"] for r in scene.relations]
    stats = json.loads((tmp_path / "run" / "synthetic_stats.json").read_text())
    for k in ("images", "relations", "relations_per_image", "distinct_predicates", "predicate_entropy_nats", "family_share"):
        assert k in stats
    assert stats["relations"] == sum(len(r) for r in table.column("relations").to_pylist())
    assert abs(sum(stats["family_share"].values()) - 1) < 1e-3
