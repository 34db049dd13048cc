"""relate.inputs without the Serve stack: refusals carry a code, and the ingress has a status for each."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from relate.inputs import INPUT_ERROR_CODES, InputError, check_boxes, decode_image


def _encoded(arr: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, fmt)
    return buf.getvalue()


def test_decode_image_codes():
    arr = np.random.default_rng(0).integers(0, 255, (30, 40, 3), dtype=np.uint8)
    assert np.array_equal(decode_image(_encoded(arr, "PNG"), 10_000, 100), arr)
    cases = [(b"", "bad_image"), (_encoded(arr, "PNG")[:60], "bad_image"), (_encoded(arr, "GIF"), "unsupported_image")]
    for data, code in cases:
        with pytest.raises(InputError) as e:
            decode_image(data, 10_000, 100)
        assert e.value.code == code
    with pytest.raises(InputError, match="40x30 exceeds") as e:
        decode_image(_encoded(arr, "PNG"), 10_000, 39)
    assert e.value.code == "image_too_large"


def test_check_boxes_codes():
    assert check_boxes([[0, 0, 10, 10], (5, 5, 40, 30)], 40, 30, max_regions=3).shape == (2, 4)
    with pytest.raises(InputError, match=r"b\[1\].*<= 40") as e:
        check_boxes([[0, 0, 10, 10], [5, 5, 41, 30]], 40, 30, max_regions=3, field="b")
    assert e.value.code == "invalid_regions"
    with pytest.raises(InputError) as e:
        check_boxes([[0, 0, 1, 1]] * 4, 40, 30, max_regions=3)
    assert e.value.code == "too_many_regions"


def test_unknown_code_is_refused_and_every_code_has_an_http_status():
    with pytest.raises(ValueError, match="not one of"):
        InputError("no_such_code", "x")
    from serve_apps import security as S

    for code in INPUT_ERROR_CODES:
        assert 400 <= S._STATUS[code] < 500, code


def test_an_unrecognised_file_is_named_without_a_python_object_repr():
    from relate.inputs import InputError, decode_image

    for data in (b"%PDF-1.7 not an image", b"\x89PNG\r\n\x1a\nbroken", b"plain text"):
        with pytest.raises(InputError) as e:
            decode_image(data, 10**6, 4096, "image")
        assert e.value.code == "bad_image" and str(e.value).startswith("image: not a decodable image")
        assert "object at 0x" not in str(e.value) and "BytesIO" not in str(e.value)
