"""Input limits, decoding, configs and rendering of the Serve app (no Ray)."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from serve_apps import security as S
from serve_apps.config import HttpSettings, RelationSettings, SecuritySettings, ServeAppConfig
from serve_apps.schemas import Box, RelationsRequest, RLEMask


def _png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


def _bomb_png(w: int, h: int) -> bytes:
    """A few hundred bytes declaring a w x h image (the header is all a bomb needs)."""
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


SEC = SecuritySettings(max_image_pixels=1_000_000, max_regions=5, max_vocabulary=3, max_string_chars=10)


def test_decode_image_roundtrip_and_limits():
    arr = np.random.default_rng(0).integers(0, 255, (30, 40, 3), dtype=np.uint8)
    assert np.array_equal(S.decode_image(_png(arr), SEC), arr)
    with pytest.raises(S.ApiError) as e:  # our limit, read from the header before decoding
        S.decode_image(_bomb_png(3000, 3000), SEC)
    assert e.value.status_code == 413 and "3000x3000 exceeds" in str(e.value.detail)
    with pytest.raises(S.ApiError) as e:  # far beyond: PIL's own guard fires inside open()
        S.decode_image(_bomb_png(50_000, 50_000), SEC)
    assert e.value.status_code == 413 and "decompression bomb" in str(e.value.detail)
    with pytest.raises(S.ApiError) as e:
        S.decode_image(b"GIF89a not really", SEC)
    assert e.value.status_code in (400, 415)
    with pytest.raises(S.ApiError) as e:
        S.decode_image(_png(arr)[:60], SEC)  # truncated
    assert e.value.status_code == 400 and "not a decodable image" in str(e.value.detail)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "GIF")
    with pytest.raises(S.ApiError) as e:
        S.decode_image(buf.getvalue(), SEC)
    assert e.value.status_code == 415 and "GIF" in str(e.value.detail)


def test_decode_base64_accepts_data_url_and_rejects_garbage():
    assert S.decode_base64("data:image/png;base64,aGVsbG8=") == b"hello"
    with pytest.raises(S.ApiError, match="not valid base64"):
        S.decode_base64("@@@")


def test_validate_boxes_names_the_bad_box():
    ok = [Box(x1=0, y1=0, x2=10, y2=10), Box(x1=5, y1=5, x2=40, y2=30)]
    assert S.validate_boxes(ok, 40, 30, SEC).shape == (2, 4)
    bad = ok + [Box(x1=5, y1=5, x2=41, y2=30)]
    with pytest.raises(S.ApiError, match=r"boxes\[2\].*<= 40"):
        S.validate_boxes(bad, 40, 30, SEC)
    with pytest.raises(S.ApiError, match="at least 2"):
        S.validate_boxes(ok[:1], 40, 30, SEC)
    with pytest.raises(S.ApiError, match="limit of 5"):
        S.validate_boxes(ok * 3, 40, 30, SEC)
    with pytest.raises(S.ApiError, match="finite"):
        S.validate_boxes([ok[0], Box(x1=float("nan"), y1=0, x2=1, y2=1)], 40, 30, SEC)


def test_decode_masks_coco_rle_column_major():
    h, w = 4, 3
    m = np.zeros((h, w), bool)
    m[1:3, 1] = True  # column 1, rows 1..2
    flat = m.T.reshape(-1)  # column-major
    runs, cur, n = [], False, 0
    for v in flat:
        if v != cur:
            runs.append(n)
            cur, n = v, 0
        n += 1
    runs.append(n)
    out = S.decode_masks([RLEMask(size=[h, w], counts=runs)] * 2, w, h, SEC)
    assert np.array_equal(out[0], m)
    with pytest.raises(S.ApiError, match="sum to 12"):
        S.decode_masks([RLEMask(size=[h, w], counts=[5])] * 2, w, h, SEC)
    with pytest.raises(S.ApiError, match=r"must be \[4, 3\]"):
        S.decode_masks([RLEMask(size=[3, 4], counts=[12])] * 2, w, h, SEC)


def test_validate_strings():
    assert S.validate_strings([" on ", "near"], 3, 10, "vocabulary") == ["on", "near"]
    for bad, msg in (([], "at least one"), (["a", "b", "c", "d"], "limit of 3"), (["a", " a"], "repeats"),
                     (["x" * 11], "1..10"), (["  "], "1..10")):
        with pytest.raises(S.ApiError, match=msg):
            S.validate_strings(bad, 3, 10, "vocabulary")


def test_token_resolution(monkeypatch):
    assert S.resolve_token(SecuritySettings()) is None
    assert S.resolve_token(SecuritySettings(bearer_token="s3cret")) == "s3cret"
    monkeypatch.setenv("RELATE_TEST_TOKEN", "abc")
    assert S.resolve_token(SecuritySettings(bearer_token_env="RELATE_TEST_TOKEN")) == "abc"
    with pytest.raises(ValueError, match="RELATE_MISSING"):
        S.resolve_token(SecuritySettings(bearer_token_env="RELATE_MISSING"))


def test_configs_refuse_public_bind_and_ambiguous_model():
    with pytest.raises(ValueError, match="allow_public"):
        HttpSettings(host="0.0.0.0")
    assert HttpSettings(host="0.0.0.0", allow_public=True).host == "0.0.0.0"
    with pytest.raises(ValueError, match="exactly one"):
        RelationSettings()
    with pytest.raises(ValueError, match="reserved"):
        RelationSettings(checkpoint="x", banks={"default": ["on"]})
    with pytest.raises(ValueError):
        ServeAppConfig.model_validate({"unknown": 1})
    opts = ServeAppConfig.model_validate({"relation": {"checkpoint": "x", "deployment": {
        "autoscaling": {"min_replicas": 1, "max_replicas": 3}, "num_gpus": 0.25}}}).relation.deployment.serve_options()
    assert opts["num_replicas"] == "auto" and opts["autoscaling_config"]["max_replicas"] == 3
    assert opts["ray_actor_options"] == {"num_cpus": 0.5, "num_gpus": 0.25}


def test_request_schema_exclusive_fields():
    with pytest.raises(ValueError, match="exactly one of 'boxes' or 'masks'"):
        RelationsRequest(image="x")
    with pytest.raises(ValueError, match="not both"):
        RelationsRequest(image="x", boxes=[], vocabulary=["on"], bank="default")


def test_serve_yaml_configs_validate():
    import yaml
    from ray.serve.schema import ServeDeploySchema

    from serve_apps.deployments.judge import JudgeLLMConfig

    for name in ("local", "gpu"):
        doc = yaml.safe_load(open(f"serve_apps/configs/{name}.yaml"))
        ServeDeploySchema.model_validate(doc)
        for app in doc["applications"]:
            model = ServeAppConfig if app["import_path"].endswith("app_builder") else JudgeLLMConfig
            model.model_validate(app["args"])
    local = yaml.safe_load(open("serve_apps/configs/local.yaml"))
    assert local["http_options"]["host"] == "127.0.0.1"


def test_render_graph_png_draws_edges():
    from serve_apps.render import render_graph_png

    img = np.full((80, 120, 3), 255, np.uint8)
    boxes = np.array([[5, 5, 40, 40], [70, 30, 115, 75]], float)
    plain = np.asarray(Image.open(io.BytesIO(render_graph_png(img, boxes, []))))
    edged = np.asarray(Image.open(io.BytesIO(render_graph_png(img, boxes, [{"subject": 0, "object": 1, "predicate": "near"}]))))
    assert plain.shape == (80, 120, 3)
    assert (plain != edged).any(axis=-1).sum() > 50  # the arrow and its label
    assert render_graph_png(img, boxes, []) == render_graph_png(img, boxes, [])  # deterministic bytes
