"""`DIR/inferenceservice.yaml`: KServe `InferenceService`s serving the export.

One YAML document per service (`kubectl apply -f` takes them all):

* the models TorchServe serves: model format `pytorch` (what KServe's TorchServe
  runtime serves), `protocolVersion` v1 (KServe v1: `/v1/models/{m}:predict`) or v2
  (the Open Inference Protocol: `/v2/models/{m}/infer`), `storageUri` as given, else a
  placeholder to replace (`gs://REPLACE-WITH-YOUR-BUCKET/<name>`);
* each language model (handler `causal_lm`, `language_models`): its own service on
  KServe's Hugging Face runtime (model format `huggingface`, which serves one model
  folder, with OpenAI's API), args `--model_name=<model>` and, for a model that ran on
  CPUs, `--backend=huggingface` (transformers, as in the notebook; on a GPU the runtime
  picks vLLM), `storageUri` `<storage uri>/huggingface/<model>` (the folder the export
  writes, lm_archive.py). Its default version is the one served. Named after the
  export, with `-<model>` unless it is the only service.

`serving.kserve.io/v1beta1` throughout. Resources follow what the notebook ran, the
same for requests and limits:

* cpu: one core per worker (every version's minWorkers), at least one and at most
  `MAX_CPUS` (4): a notebook server's defaults can start many workers (one per CPU of
  the notebook's machine), and a pod asking for that many cores may never be
  scheduled; the file's comment says so, so raise it where the cluster has the cores;
* memory: 1 GiB for TorchServe's frontend (its JVM used about 550 MB here; for a
  language model, its model server) plus, per worker, the most one of that version's
  workers used (512 MiB when not measured, as from a snapshot), rounded up to 256 MiB;
* `nvidia.com/gpu`: when a version ran on a GPU, the GPUs named in `deviceIds` (one
  when it used whichever it was given).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from jupyter_serve.export.plan import ExportItem

__all__ = [
    "MAX_CPUS",
    "PLACEHOLDER",
    "Service",
    "cpus",
    "inference_service",
    "inference_services",
    "inference_services_yaml",
    "language_model_service",
    "model_folder",
    "resources",
    "service_name",
]

PLACEHOLDER = "gs://REPLACE-WITH-YOUR-BUCKET/{name}"
MODEL_FOLDERS = "huggingface"  # DIR/huggingface/<model>: a language model's folder
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
    """Why the TorchServe service's resources are what they are (the yaml's comment)."""
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


@dataclass(frozen=True)
class Service:
    """One InferenceService: the object, the comment written above it, and the language
    model it serves (None: TorchServe's service)."""

    body: dict[str, Any]
    comment: str
    model: str | None = None

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


def model_folder(model: str) -> str:
    """Where the export writes a language model's folder, relative to DIR."""
    return f"{MODEL_FOLDERS}/{model}"


def inference_services(
    name: str,
    items: Sequence[ExportItem],
    protocol: str,
    storage_uri: str | None,
    language_models: Collection[str] = (),
) -> list[Service]:
    """The services of an export (module docstring): TorchServe's, then one per language
    model (`language_models`: their names)."""
    served = [item for item in items if item.name not in language_models]
    lms = [item for item in items if item.name in language_models and item.default]
    base = (storage_uri or PLACEHOLDER.format(name=name)).rstrip("/")
    services = []
    if served:
        services.append(Service(inference_service(name, served, protocol, base),
                                resources_comment(served)))  # fmt: skip
    for item in lms:
        own = name if not served and len(lms) == 1 else service_name(f"{name}-{item.name}")
        body = language_model_service(own, item, f"{base}/{model_folder(item.name)}")
        comment = (
            f"# {item.name} {item.version}, a language model: KServe's Hugging Face runtime "
            f"serves its folder ({model_folder(item.name)}/)\n# with OpenAI's API. resources: "
            "a core per worker it had (at most 4); 1 GiB plus what a worker used in the notebook."
        )
        services.append(Service(body, comment, item.name))
    return services


def inference_service(
    name: str, items: Sequence[ExportItem], protocol: str, storage_uri: str | None
) -> dict[str, Any]:
    """The InferenceService of the models TorchServe serves."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be v1 or v2, got {protocol!r}")
    model = {
        "modelFormat": {"name": "pytorch"},
        "protocolVersion": protocol,
        "storageUri": storage_uri or PLACEHOLDER.format(name=name),
        "resources": resources(items),
    }
    return _service(name, model)


def language_model_service(name: str, item: ExportItem, storage_uri: str) -> dict[str, Any]:
    """The InferenceService of a language model on KServe's Hugging Face runtime."""
    args = [f"--model_name={item.name}"]
    if not item.on_gpu:
        args.append("--backend=huggingface")
    model = {
        "modelFormat": {"name": "huggingface"},
        "args": args,
        "storageUri": storage_uri,
        "resources": resources([item]),
    }
    return _service(name, model)


def _service(name: str, model: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {"predictor": {"model": model}},
    }


def inference_services_yaml(services: Sequence[Service], placeholder: bool) -> str:
    """The file's text: what to do, then each service with its comment (one document each)."""
    head = ["# Written by `jupyter serve export`: `kubectl apply -f inferenceservice.yaml`."]
    if placeholder:
        head.append("# REPLACE storageUri: upload this folder and put its URI there (README.md).")
    documents = [f"{s.comment}\n{yaml.safe_dump(s.body, sort_keys=False)}" for s in services]
    return "\n".join(head) + "\n" + "---\n".join(documents)
