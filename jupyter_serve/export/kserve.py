"""`DIR/inferenceservice.yaml`: a KServe `InferenceService` serving the export with TorchServe.

`serving.kserve.io/v1beta1`, model format `pytorch` (what KServe's TorchServe
runtime serves), `protocolVersion` v1 (KServe v1: `/v1/models/{m}:predict`) or v2
(the Open Inference Protocol: `/v2/models/{m}/infer`), `storageUri` as given, else a
placeholder to replace (`gs://REPLACE-WITH-YOUR-BUCKET/<name>`). Resources follow
what the notebook ran, the same for requests and limits:

* cpu: one core per worker (every version's minWorkers), at least one and at most
  `MAX_CPUS` (4): a notebook server's defaults can start many workers (one per CPU of
  the notebook's machine), and a pod asking for that many cores may never be
  scheduled; the file's comment says so, so raise it where the cluster has the cores;
* memory: 1 GiB for TorchServe's frontend (its JVM used about 550 MB here) plus, per
  worker, the most one of that version's workers used (512 MiB when not measured,
  as from a snapshot), rounded up to 256 MiB;
* `nvidia.com/gpu`: when a version ran on a GPU, the GPUs named in `deviceIds` (one
  when it used whichever it was given).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import yaml

from jupyter_serve.export.plan import ExportItem

__all__ = [
    "MAX_CPUS",
    "PLACEHOLDER",
    "cpus",
    "inference_service",
    "inference_service_yaml",
    "resources",
    "service_name",
]

PLACEHOLDER = "gs://REPLACE-WITH-YOUR-BUCKET/{name}"
FRONTEND_MIB = 1024
WORKER_MIB = 512
ROUND_MIB = 256
MIB = 1024 * 1024
PROTOCOLS = ("v1", "v2")
MAX_CPUS = 4


def service_name(text: str) -> str:
    """`text` as a KServe name (a DNS-1035 label: lower case, digits, '-', a letter first)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    name = name if name[:1].isalpha() else f"model-{name}".rstrip("-")
    return name[:63].rstrip("-")


def resources(items: Sequence[ExportItem]) -> dict[str, dict[str, str]]:
    """Requests and limits from the versions' workers and devices (module docstring)."""
    memory = FRONTEND_MIB + sum(item.min_workers * _worker_mib(item) for item in items)
    amounts = {"cpu": str(cpus(items)), "memory": f"{memory}Mi"}
    gpu_items = [item for item in items if item.on_gpu]
    if gpu_items:
        named = {gpu for item in gpu_items for gpu in item.device_ids}
        amounts["nvidia.com/gpu"] = str(max(1, len(named)))
    return {"requests": dict(amounts), "limits": dict(amounts)}


def cpus(items: Sequence[ExportItem]) -> int:
    """One core per worker, at least 1 and at most `MAX_CPUS`."""
    return min(MAX_CPUS, max(1, sum(item.min_workers for item in items)))


def resources_comment(items: Sequence[ExportItem]) -> str:
    """Why the resources are what they are (the yaml's comment)."""
    workers = sum(item.min_workers for item in items)
    return (
        f"# resources: cpu is one core per TorchServe worker ({workers} in all, minWorkers of "
        f"every version), at most {MAX_CPUS};\n# memory is 1 GiB for TorchServe's frontend "
        "plus what each worker used in the notebook. Change both to suit your cluster."
    )


def _worker_mib(item: ExportItem) -> int:
    if item.worker_memory is None:
        return WORKER_MIB
    return max(ROUND_MIB, math.ceil(item.worker_memory / MIB / ROUND_MIB) * ROUND_MIB)


def inference_service(
    name: str, items: Sequence[ExportItem], protocol: str, storage_uri: str | None
) -> dict[str, Any]:
    """The InferenceService object."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be v1 or v2, got {protocol!r}")
    model = {
        "modelFormat": {"name": "pytorch"},
        "protocolVersion": protocol,
        "storageUri": storage_uri or PLACEHOLDER.format(name=name),
        "resources": resources(items),
    }
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {"predictor": {"model": model}},
    }


def inference_service_yaml(
    service: dict[str, Any], items: Sequence[ExportItem], placeholder: bool
) -> str:
    """The file's text: comments (what to do, why the resources), then the object."""
    head = ["# Written by `jupyter serve export`: `kubectl apply -f inferenceservice.yaml`."]
    if placeholder:
        head.append("# REPLACE storageUri: upload this folder and put its URI there (README.md).")
    head.append(resources_comment(items))
    return "\n".join(head) + "\n" + yaml.safe_dump(service, sort_keys=False)
