"""`DIR/config/config.properties`: TorchServe's settings as KServe's TorchServe runtime uses them.

KServe mounts the export at `/mnt/models` and starts `torchserve --start
--model-store=/mnt/models/model-store --ts-config=/mnt/models/config/config.properties`;
its wrapper answers the KServe protocol on 8080 and reaches TorchServe at the
`inference_address` (8085), and learns the model names from `model_snapshot`. So::

    inference_address    http://0.0.0.0:8085 (the wrapper's upstream)
    management_address   http://0.0.0.0:8081 (KServe's examples share 8085, where
                         TorchServe 0.12 then answers only the inference API: no describe)
    metrics_address      http://0.0.0.0:8082 (KServe scrapes /metrics)
    grpc_inference_port, grpc_management_port  7070, 7071
    enable_metrics_api=true, metrics_mode=prometheus
    enable_envvars_config=true     KServe picks the protocol with TS_SERVICE_ENVELOPE
    disable_token_authorization=true   KServe's wrapper sends no TorchServe key
    install_py_dep_per_model=true  only when an archive ships requirements
    number_of_gpu=0                when no version ran on a GPU (TorchServe would use any)
    model_store=/mnt/models/model-store, load_models=<the archives>
    model_snapshot={...}           every version: default, workers, batch size, max
                                   batch delay (ms), response and startup timeout (s)

TorchServe restores `model_snapshot` and then reads no `load_models` (jupyter_serve
with `--ts-config` does the same: startup.py), so `load_models` only names the archives.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from jupyter_serve.export.plan import ExportItem
from jupyter_serve.server.ts_config import format_properties

__all__ = ["KSERVE_MOUNT", "config_properties", "model_snapshot"]

KSERVE_MOUNT = "/mnt/models"  # where KServe's storage initializer puts the export
ADDRESSES = {
    "inference_address": "http://0.0.0.0:8085",
    "management_address": "http://0.0.0.0:8081",
    "metrics_address": "http://0.0.0.0:8082",
    "grpc_inference_port": "7070",
    "grpc_management_port": "7071",
}


def config_properties(
    items: Sequence[tuple[ExportItem, str]], requirements: bool, written: str
) -> str:
    """The file's text for `(item, archive file name)` pairs."""
    entries = {
        **ADDRESSES,
        "enable_metrics_api": "true",
        "metrics_mode": "prometheus",
        "enable_envvars_config": "true",
        "disable_token_authorization": "true",
    }
    if requirements:
        entries["install_py_dep_per_model"] = "true"
    if not any(item.on_gpu for item, _ in items):
        entries["number_of_gpu"] = "0"
    entries["model_store"] = f"{KSERVE_MOUNT}/model-store"
    entries["load_models"] = ",".join(sorted({mar for _, mar in items}))
    entries["model_snapshot"] = json.dumps(model_snapshot(items), separators=(",", ":"))
    comment = (
        f"Written by `jupyter serve export` on {written}: TorchServe 0.12 settings for\n"
        "KServe's TorchServe runtime (README.md says how to run it yourself)."
    )
    return format_properties(entries, comment)


def model_snapshot(items: Sequence[tuple[ExportItem, str]]) -> dict[str, Any]:
    """TorchServe's snapshot JSON of the exported versions."""
    models: dict[str, dict[str, Any]] = {}
    for item, mar in items:
        models.setdefault(item.name, {})[item.version] = {
            "defaultVersion": item.default,
            "marName": mar,
            "minWorkers": item.min_workers,
            "maxWorkers": item.max_workers,
            "batchSize": item.batch_size,
            "maxBatchDelay": item.max_batch_delay_ms,
            "responseTimeout": item.response_timeout,
            "startupTimeout": item.startup_timeout,
            "runtimeType": item.runtime,
        }
    return {
        "name": "startup.cfg",
        "modelCount": len(items),
        "created": int(time.time() * 1000),
        "models": models,
    }
