"""Request and response bodies of the /v1 HTTP API (the OpenAPI spec is generated from these).

Images travel in the request (base64 in JSON, or a multipart upload on the ``/upload`` twin of
each endpoint), never as a server-side path. Box coordinates are pixels of the uploaded image,
``x2 > x1`` and ``y2 > y1``; limits that depend on the deployment (region count, vocabulary size,
image pixels) are enforced by the ingress and answered with a 4xx naming the limit.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Box", "RLEMask", "RelationsParams", "RelationsRequest", "RelationsResponse", "Triplet", "GraphParams",
           "GraphRequest", "GraphResponse", "DetectedBox", "JudgeParams", "JudgeRequest", "JudgeResponse",
           "JudgedRelation", "RelationClaim", "RenderParams", "RenderRequest", "ErrorBody", "HealthResponse",
           "ReadyResponse"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Box(_Body):
    x1: float = Field(..., description="left edge in pixels")
    y1: float = Field(..., description="top edge in pixels")
    x2: float = Field(..., description="right edge in pixels (> x1)")
    y2: float = Field(..., description="bottom edge in pixels (> y1)")
    label: str | None = Field(None, max_length=200, description="optional category, echoed in renders")


class RLEMask(_Body):
    size: list[int] = Field(..., min_length=2, max_length=2, description="[height, width]; must equal the image's")
    counts: list[int] = Field(..., min_length=1, description="uncompressed COCO RLE: alternating run lengths of 0s "
                                                             "and 1s in column-major order, starting with 0s")


class _Image(_Body):
    image: str = Field(..., min_length=1, description="the image file (PNG/JPEG/WebP/BMP) base64-encoded; "
                                                      "a data: URL prefix is accepted")


class _Vocabulary(_Body):
    vocabulary: list[str] | None = Field(None, description="predicate strings to score (embedded by the "
                                                           "checkpoint's text encoder; cached by content hash)")
    bank: str | None = Field(None, max_length=100, description="name of a configured vocabulary ('default' = the "
                                                               "checkpoint's own); exclusive with vocabulary")
    topk: int | None = Field(None, ge=1, description="return the k best triplets (default from config)")
    threshold: float | None = Field(None, ge=0, le=1, description="keep triplets with calibrated score >= threshold "
                                                                  "(needs a calibrated checkpoint)")

    @model_validator(mode="after")
    def _one_vocabulary(self):
        if self.vocabulary is not None and self.bank is not None:
            raise ValueError("give either 'vocabulary' or 'bank', not both")
        return self


class RelationsParams(_Vocabulary):
    boxes: list[Box] | None = Field(None, description="regions as boxes (exclusive with masks)")
    masks: list[RLEMask] | None = Field(None, description="regions as masks (exclusive with boxes)")

    @model_validator(mode="after")
    def _one_region_kind(self):
        if (self.boxes is None) == (self.masks is None):
            raise ValueError("give exactly one of 'boxes' or 'masks'")
        return self


class RelationsRequest(RelationsParams, _Image):
    """Score every ordered pair of the given regions against a vocabulary."""


class Triplet(BaseModel):
    subject: int = Field(..., description="subject region index (0-based, request order)")
    object: int = Field(..., description="object region index (0-based)")
    predicate: str = Field(..., description="vocabulary string")
    score: float = Field(..., description="Eq. 6 score from both channels")
    spatial_score: float = Field(..., description="Eq. 6 score of the spatial (layout) channel alone")
    semantic_score: float = Field(..., description="Eq. 6 score of the semantic (content) channel alone")


class RelationsResponse(BaseModel):
    width: int = Field(..., description="image width in pixels")
    height: int = Field(..., description="image height in pixels")
    bank: str = Field(..., description="vocabulary used: a configured name or 'request:<sha256 prefix>'")
    vocabulary_size: int = Field(..., description="number of predicate strings scored")
    calibrated: bool = Field(..., description="whether scores are Platt-calibrated probabilities")
    triplets: list[Triplet] = Field(..., description="best triplets over both channels, best first")
    layout: list[Triplet] = Field(..., description="graph ranked by the spatial channel (layout split)")
    content: list[Triplet] = Field(..., description="graph ranked by the semantic channel (content split)")


class GraphParams(_Vocabulary):
    queries: list[str] | None = Field(None, description="detector text queries (default from config)")
    detector_threshold: float | None = Field(None, ge=0, le=1, description="detector confidence threshold")
    max_boxes: int | None = Field(None, ge=1, description="cap on detected boxes (sets the pair-recall ceiling)")


class GraphRequest(GraphParams, _Image):
    """Detect regions, then score their relations."""


class DetectedBox(BaseModel):
    x1: float = Field(..., description="left edge in pixels")
    y1: float = Field(..., description="top edge in pixels")
    x2: float = Field(..., description="right edge in pixels")
    y2: float = Field(..., description="bottom edge in pixels")
    score: float = Field(..., description="detector confidence")
    label: str = Field(..., description="the text query the box matched")


class GraphResponse(RelationsResponse):
    regions: list[DetectedBox] = Field(..., description="detected regions; triplet indices refer to this list")


class RelationClaim(_Body):
    subject: int = Field(..., ge=0, description="subject box index (0-based)")
    object: int = Field(..., ge=0, description="object box index (0-based)")
    predicate: str = Field(..., min_length=1, description="the claimed predicate")


class JudgeParams(_Body):
    boxes: list[Box] = Field(..., min_length=2, description="the image's boxes")
    relations: list[RelationClaim] = Field(..., min_length=1, description="relations to judge one at a time")
    corruption_share: float = Field(0.0, ge=0, le=1, description="share of relations also judged with a predicate "
                                                                "swapped in from the same image (the control)")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="seed choosing the corrupted relations")


class JudgeRequest(JudgeParams, _Image):
    """Ask the VLM judge whether each relation holds (A5b, highlighted rendering)."""


class JudgedRelation(BaseModel):
    subject: int = Field(..., description="subject box index")
    object: int = Field(..., description="object box index")
    predicate: str = Field(..., description="predicate judged")
    verdict: bool | None = Field(..., description="true/false, null when the answer had no parsable verdict")
    original_predicate: str | None = Field(None, description="for controls: the predicate that was replaced")


class JudgeResponse(BaseModel):
    verdicts: list[JudgedRelation] = Field(..., description="one per requested relation, in order")
    controls: list[JudgedRelation] = Field(..., description="corrupted relations and their verdicts")
    control_acceptance: float | None = Field(..., description="share of parsable controls the judge accepted")


class RenderParams(_Vocabulary):
    boxes: list[Box] = Field(..., min_length=1, description="regions to draw, numbered from 1")
    triplets: list[RelationClaim] | None = Field(None, description="edges to draw; null scores them with the model")


class RenderRequest(RenderParams, _Image):
    """PNG of the image with numbered boxes and the relation graph drawn."""


class ErrorBody(BaseModel):
    error: str = Field(..., description="short machine-readable code")
    message: str = Field(..., description="what is wrong and where")


class HealthResponse(BaseModel):
    status: Literal["ok"] = Field(..., description="the ingress is alive")


class ReadyResponse(BaseModel):
    status: Literal["ready", "not_ready"] = Field(..., description="all deployments answered")
    deployments: dict[str, str] = Field(..., description="per deployment: 'ok' or the error")
