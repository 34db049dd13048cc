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


def test_masks_match_pycocotools_and_stay_compact():
    from pycocotools import mask as coco

    from relate.rle import decode_rle, encode_rle

    rng = np.random.default_rng(0)
    for h, w in ((4, 3), (17, 29), (1, 1)):
        m = rng.random((h, w)) < 0.4
        m[0, 0] = True
        runs = encode_rle(m)
        ref = coco.decode(coco.frPyObjects({"size": [h, w], "counts": runs}, h, w)).astype(bool)
        assert np.array_equal(ref, m)  # pycocotools reads our runs as the same mask
        out = S.validate_masks([RLEMask(size=[h, w], counts=runs)] * 2, w, h, SEC)
        assert set(out) == {"rle_counts", "height", "width"}  # runs, not pixels
        assert np.array_equal(decode_rle(out["rle_counts"][0], h, w), m)
    # and pycocotools' own encoding of a mask decodes to the same pixels through our decoder
    m = np.eye(5, 4, dtype=bool)
    assert np.array_equal(coco.decode(coco.encode(np.asfortranarray(m.astype(np.uint8)))).astype(bool),
                          decode_rle(np.asarray(encode_rle(m)), 5, 4))


@pytest.mark.parametrize("counts,needle", [
    ([5], "sum to 5, the image has 12"),
    ([2**62, 2**62, 2**62, 2**62, 12], "every run must lie in [0, 12]"),   # int64 sum wraps to 12
    ([-4, 16], "every run must lie in [0, 12]"),                           # negative run, right total
    ([2**70, 12], "every run must lie in [0, 12]"),                        # beyond int64
    ([12], "empty mask"),
    ([0] * 14, "14 runs for 12 pixels"),
    ([11, 1], None),                                                       # at the limit: the last pixel
    ([0, 12], None),                                                       # a full mask
])
def test_mask_runs_checked_in_exact_arithmetic(counts, needle):
    h, w = 4, 3
    masks = [RLEMask(size=[h, w], counts=counts), RLEMask(size=[h, w], counts=[0, 12])]
    if needle is None:
        assert len(S.validate_masks(masks, w, h, SEC)["rle_counts"]) == 2
        return
    with pytest.raises(S.ApiError) as e:
        S.validate_masks(masks, w, h, SEC)
    assert e.value.status_code == 422 and needle in str(e.value.detail) and "masks[0].counts" in str(e.value.detail)


def test_mask_pixels_bounded_before_expansion():
    sec = SecuritySettings(max_mask_pixels=3 * 100 * 100, max_regions=10)
    ok = [RLEMask(size=[100, 100], counts=[0, 10_000])] * 3  # exactly at the limit
    assert len(S.validate_masks(ok, 100, 100, sec)["rle_counts"]) == 3
    with pytest.raises(S.ApiError) as e:  # one mask more: refused from the header, nothing expanded
        S.validate_masks(ok + ok[:1], 100, 100, sec)
    assert e.value.status_code == 413 and "limit of 30000" in str(e.value.detail)
    with pytest.raises(S.ApiError, match=r"must be \[4, 3\]"):
        S.validate_masks([RLEMask(size=[3, 4], counts=[12])] * 2, 3, 4, SEC)


def test_render_triplets_bounded():
    from serve_apps.schemas import RelationClaim

    sec = SecuritySettings(max_render_triplets=2, max_string_chars=10)
    t = RelationClaim(subject=0, object=1, predicate="near")
    assert S.validate_triplets([t, t], 2, sec) == [{"subject": 0, "object": 1, "predicate": "near"}] * 2
    with pytest.raises(S.ApiError, match="3 edges exceed the limit of 2"):
        S.validate_triplets([t] * 3, 2, sec)
    with pytest.raises(S.ApiError, match=r"triplets\[0\].predicate"):
        S.validate_triplets([RelationClaim(subject=0, object=1, predicate="x" * 11)], 2, sec)
    with pytest.raises(S.ApiError, match="out of range"):
        S.validate_triplets([RelationClaim(subject=0, object=2, predicate="on")], 2, sec)


def test_camera_images_exif_orientation_and_16_bit_grey():
    # EXIF orientation 6 (rotate 90 clockwise to display): a 40x30 stored frame is shown 30x40
    arr = np.zeros((30, 40, 3), np.uint8)
    arr[:, :20] = 255  # left half white as stored
    im = Image.fromarray(arr)
    exif = im.getexif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    im.save(buf, "JPEG", exif=exif.tobytes(), quality=95)
    out = S.decode_image(buf.getvalue(), SEC)
    assert out.shape == (40, 30, 3)  # width and height swapped, as a viewer shows it
    assert out[:20].mean() > 200 and out[20:].mean() < 50  # the white half is now on top
    # 16-bit greyscale: mid-grey must stay mid-grey (PIL's own convert('RGB') clips it to white)
    grey = np.full((8, 8), 32768, np.uint16)
    grey[0, 0], grey[0, 1] = 0, 65535
    buf = io.BytesIO()
    Image.fromarray(grey).save(buf, "PNG")
    assert Image.open(io.BytesIO(buf.getvalue())).mode.startswith("I")
    out = S.decode_image(buf.getvalue(), SEC)
    assert out.shape == (8, 8, 3) and out[4, 4, 0] == 128 and out[0, 0, 0] == 0 and out[0, 1, 0] == 255
    for mode in ("RGBA", "CMYK", "L", "P"):  # every other mode a camera or browser writes
        buf = io.BytesIO()
        Image.new(mode, (5, 4)).save(buf, "JPEG" if mode == "CMYK" else "PNG")
        assert S.decode_image(buf.getvalue(), SEC).shape == (4, 5, 3)


def test_validate_strings():
    assert S.validate_strings([" on ", "near"], 3, 10, "vocabulary") == ["on", "near"]
    for bad, msg in (([], "at least one"), (["a", "b", "c", "d"], "limit of 3"), (["a", " a"], "repeats"),
                     (["x" * 11], "1..10"), (["  "], "1..10")):
        with pytest.raises(S.ApiError, match=msg):
            S.validate_strings(bad, 3, 10, "vocabulary")


def test_token_resolution(monkeypatch, tmp_path):
    token = "a-token-of-24-characters"
    assert S.resolve_token(SecuritySettings()) is None
    assert S.resolve_token(SecuritySettings(bearer_token=token)) == token
    monkeypatch.setenv("RELATE_TEST_TOKEN", token)
    assert S.resolve_token(SecuritySettings(bearer_token_env="RELATE_TEST_TOKEN")) == token
    (tmp_path / "tok").write_text(token + "\n")
    assert S.resolve_token(SecuritySettings(bearer_token_file=str(tmp_path / "tok"))) == token
    with pytest.raises(ValueError, match="RELATE_MISSING"):
        S.resolve_token(SecuritySettings(bearer_token_env="RELATE_MISSING"))
    with pytest.raises(ValueError, match="at least 16"):
        S.resolve_token(SecuritySettings(bearer_token="short"))
    with pytest.raises(ValueError, match="one token source"):
        SecuritySettings(bearer_token=token, bearer_token_env="RELATE_TEST_TOKEN")


def test_bind_rule_and_constant_time_match():
    from serve_apps.auth import AuthConfigError, is_loopback, require_token_for_bind, token_matches

    for host in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"):
        assert is_loopback(host)
        require_token_for_bind(host, None, "x")  # loopback: a token is optional
    for host in ("0.0.0.0", "::", "10.0.0.5", "example.org", "192.168.1.1"):
        assert not is_loopback(host)
        with pytest.raises(AuthConfigError, match="no bearer token"):
            require_token_for_bind(host, None, "x")
        require_token_for_bind(host, "t" * 16, "x")
    token = "t" * 20
    assert token_matches(f"Bearer {token}", token) and token_matches(f"bearer  {token} ", token)
    for bad in (None, "", token, f"Basic {token}", f"Bearer {token[:-1]}", f"Bearer {token}x"):
        assert not token_matches(bad, token)


def test_only_the_pages_static_files_pass_without_the_token():
    """The proxy's middleware as installed (proxy_middlewares' arguments) in front of a catch-all
    app: GET/HEAD of the page's three files under any prefix pass; their POST, look-alike paths
    and everything else answer 401."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from serve_apps.auth import PAGE_SUFFIXES, PROBE_PATHS, BearerAuthMiddleware

    async def anything(request):
        return PlainTextResponse("served")

    inner = Starlette(routes=[Route("/{path:path}", anything, methods=["GET", "HEAD", "POST"])])
    client = TestClient(BearerAuthMiddleware(inner, token="t" * 20, open_paths=PROBE_PATHS,
                                             open_suffixes=PAGE_SUFFIXES))
    for path in ("/ui/relate.html", "/ui/relate.js", "/ui/relate.css", "/my-prefix/ui/relate.html", "/-/healthz"):
        assert client.get(path).status_code == 200, path
        assert client.head(path).status_code == 200, path
    assert client.post("/-/healthz").status_code == 200  # probe paths are open whatever the method
    for path in ("/ui/relate.html", "/ui/relate.js"):
        assert client.post(path).status_code == 401, path
    for path in ("/ui/relate.htmlx", "/ui/relate.html/x", "/ui/", "/ui", "/v1/relations", "/ui/relate.json",
                 "/docs", "/ui/other.js"):
        assert client.get(path).status_code == 401, path
    assert client.get("/v1/relations", headers={"Authorization": "Bearer " + "t" * 20}).status_code == 200


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
    """/v1/render's renderer (relate.render): edges drawn on the picture, the same bytes every time."""
    from relate.render import render_graph_png

    img = np.full((80, 120, 3), 255, np.uint8)
    boxes = np.array([[5, 5, 40, 40], [70, 30, 115, 75]], float)
    edge = [{"subject": 0, "object": 1, "predicate": "near"}]
    plain = np.asarray(Image.open(io.BytesIO(render_graph_png(img, boxes, []))).convert("RGB"))
    edged = np.asarray(Image.open(io.BytesIO(render_graph_png(img, boxes, edge))).convert("RGB"))
    assert plain.shape == (480, 720, 3)  # scaled up to 720 px; the edged one adds the table on the right
    assert (plain != edged[:, :720]).any(axis=-1).sum() > 50  # the arrow and its label on the picture
    assert render_graph_png(img, boxes, edge) == render_graph_png(img, boxes, edge)  # deterministic bytes


def test_model_calls_are_never_replayed_and_backpressure_is_503():
    """A request whose replica dies is answered 503 once, not re-sent (it may be what killed the
    replica); a full model queue is 503 with Retry-After; a slow model is 504."""
    import asyncio
    import types

    from ray.exceptions import ActorDiedError
    from ray.serve.exceptions import BackPressureError

    from serve_apps.app import IngressDeployment

    cls = IngressDeployment.func_or_class
    me = types.SimpleNamespace(sec=SecuritySettings(model_timeout_s=0.2))

    class Method:
        def __init__(self, exc=None, sleep=0.0):
            self.calls, self.exc, self.sleep = 0, exc, sleep

        def remote(self, *args):
            self.calls += 1

            async def run():
                await asyncio.sleep(self.sleep)
                if self.exc is not None:
                    raise self.exc
                return {"ok": 1}
            return run()

    died = Method(ActorDiedError())
    with pytest.raises(S.ApiError) as e:
        asyncio.run(cls._call(me, died, 1))
    assert died.calls == 1 and e.value.status_code == 503 and "not retried" in str(e.value.detail)
    assert e.value.headers == {"Retry-After": "1"}
    full = Method(BackPressureError(num_queued_requests=4, max_queued_requests=4, retry_after_s=2.5))
    with pytest.raises(S.ApiError) as e:
        asyncio.run(cls._call(me, full))
    assert full.calls == 1 and e.value.status_code == 503 and e.value.headers == {"Retry-After": "3"}
    slow = Method(sleep=1.0)
    with pytest.raises(S.ApiError) as e:
        asyncio.run(cls._call(me, slow))
    assert e.value.status_code == 504 and "0.2 s" in str(e.value.detail)
    assert asyncio.run(cls._call(me, Method())) == {"ok": 1}


def test_ingress_must_have_room_beyond_the_model_queue():
    base = {"relation": {"checkpoint": "x", "deployment": {"max_ongoing_requests": 8, "max_queued_requests": 8}}}
    with pytest.raises(ValueError, match=r"ingress.max_ongoing_requests \(16\) must exceed .* \(16\)"):
        ServeAppConfig.model_validate({**base, "ingress": {"max_ongoing_requests": 16}})
    assert ServeAppConfig.model_validate({**base, "ingress": {"max_ongoing_requests": 17}}).ingress.max_ongoing_requests == 17
    opts = ServeAppConfig.model_validate(base).relation.deployment.serve_options()
    assert opts["max_queued_requests"] == 8 and opts["backpressure_config"] == {"status_code": 503, "retry_after_s": 1.0}


def test_cluster_nodes_guard_every_serve_app():
    """Wherever a node gets RELATE_API_TOKEN it also gets the proxy callback, and the relate app's
    judge client sends that token to the judge-llm app behind the same proxy."""
    import re
    from pathlib import Path

    import yaml

    from serve_apps.auth import PROXY_CALLBACK, TOKEN_ENV

    repo = Path(__file__).resolve().parents[2]
    for name in ("cluster/aws.yaml", "cluster/gcp.yaml"):
        text = (repo / name).read_text()
        for cmd in re.findall(r"export RELATE_API_TOKEN=.*?ray start", text, flags=re.S):
            assert f"RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH={PROXY_CALLBACK}" in cmd, name
        assert text.count("ray start") == text.count("RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"), name
    service = yaml.safe_load((repo / "cluster/kuberay/rayservice.yaml").read_text())
    spec = service["spec"]["rayClusterConfig"]
    pods = [spec["headGroupSpec"]] + spec["workerGroupSpecs"]
    for pod in pods:
        for c in pod["template"]["spec"]["containers"][:1]:  # the Ray container (the nginx sidecar runs no Serve)
            env = {e["name"]: e for e in c.get("env", [])}
            assert TOKEN_ENV in env and env["RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"]["value"] == PROXY_CALLBACK
    for image in ("cluster/Dockerfile.cpu", "cluster/Dockerfile.gpu"):  # every node image
        assert f"ENV RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH={PROXY_CALLBACK}" in (repo / image).read_text()
    gpu = yaml.safe_load((repo / "serve_apps/configs/gpu.yaml").read_text())
    relate = next(a["args"] for a in gpu["applications"] if a["import_path"].endswith("app_builder"))
    assert relate["security"]["bearer_token_env"] == TOKEN_ENV
    assert relate["judge"]["judge"]["openai"]["api_key_env"] == TOKEN_ENV
