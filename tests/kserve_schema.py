"""KServe's own schema of an `InferenceService`, for validating what export writes.

`validate_inference_service(obj)` checks an object against the `openAPIV3Schema` of
KServe's v1beta1 InferenceService CRD (tests/data/README.md says where it comes from),
as `kubectl apply` (strict field validation, its default since Kubernetes 1.27) would:
unknown fields are errors, except where the schema keeps unknown fields
(`x-kubernetes-preserve-unknown-fields`). `metadata.name` must be the DNS-1035 label
KServe requires. Raises `jsonschema.ValidationError` on the first problem.
"""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA = Path(__file__).parent / "data" / "kserve-inferenceservice-v1beta1.schema.json.gz"
NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def strict(schema: Any) -> Any:
    """`schema` with `additionalProperties: false` on every object that lists properties and
    neither keeps unknown fields nor says otherwise."""
    if isinstance(schema, list):
        return [strict(entry) for entry in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    keeps = schema.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in schema and "additionalProperties" not in schema and not keeps:
        out["additionalProperties"] = False
    return out


@cache
def validator() -> jsonschema.Draft4Validator:
    schema = json.loads(gzip.decompress(SCHEMA.read_bytes()))
    return jsonschema.Draft4Validator(strict(schema))


def validate_inference_service(obj: Any) -> None:
    validator().validate(obj)
    name = obj["metadata"]["name"]
    if not (NAME.fullmatch(name) and len(name) <= 63):
        raise jsonschema.ValidationError(f"metadata.name {name!r} is not a DNS-1035 label")
