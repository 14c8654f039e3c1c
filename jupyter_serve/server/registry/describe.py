"""TorchServe's JSON views of registered models: the describe objects and the model list.

Key names and units follow TorchServe 0.12's describe answer: `maxBatchDelay` in milliseconds,
`responseTimeout`/`startupTimeout`/`maxRetryTimeoutInSec` in whole seconds.
Features jupyter_serve does not have (model parallelism, job tickets, venvs) show
TorchServe's off values. Sequence batching shows as TorchServe's `stateful`, and its four
figures are 0 unless `sequenceMaxIdleMSec` is set, as TorchServe's describe has them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jupyter_serve.server.models import ModelSpec
    from jupyter_serve.server.registry.registry import Model

__all__ = ["MAX_PAGE", "describe_model", "model_page", "model_status"]

MAX_PAGE = 100
SEQUENCE_FIGURES = (
    "sequenceMaxIdleMSec",
    "sequenceTimeoutMSec",
    "maxNumSequence",
    "maxSequenceJobQueueSize",
)
_PARALLEL_OFF: dict[str, Any] = {"parallelType": "", "parallelLevel": 0}


def model_status(model: Model) -> str:
    """ "Healthy" with >= minWorkers serving, "Partial Healthy" with fewer, else "Unhealthy"."""
    healthy = model.pool.healthy_count
    if healthy >= model.spec.min_workers:
        return "Healthy"
    return "Partial Healthy" if healthy > 0 else "Unhealthy"


def describe_model(model: Model) -> dict[str, Any]:
    """One element of TorchServe's describe-model array.

    As TorchServe 0.12 answers it: `deviceIds` only when the model names GPUs (its
    null is left out), and no model-level `status` (TorchServe never sets it; the
    panel's summary has `model_status`).
    """
    spec = model.spec
    return {
        "modelName": spec.model_name,
        "modelVersion": spec.version,
        "modelUrl": spec.model_url,
        "runtime": spec.runtime,
        "minWorkers": spec.min_workers,
        "maxWorkers": spec.max_workers,
        "batchSize": spec.batch_size,
        "maxBatchDelay": round(spec.max_batch_delay * 1000),
        "responseTimeout": round(spec.response_timeout),
        "startupTimeout": round(spec.startup_timeout),
        "maxRetryTimeoutInSec": round(spec.max_retry_timeout),
        "clientTimeoutInMills": spec.client_timeout_ms,
        **_PARALLEL_OFF,
        "deviceType": spec.device_type.value,
        **({"deviceIds": list(spec.device_ids)} if spec.device_ids else {}),
        "continuousBatching": spec.continuous_batching,
        "useJobTicket": False,
        "useVenv": False,
        "stateful": spec.sequence_batching,
        **_sequence_figures(spec),
        "loadedAtStartup": model.loaded_at_startup,
        "workers": model.pool.workers,
        "jobQueueStatus": {
            "remainingCapacity": model.batcher.remaining_capacity,
            "pendingRequests": model.batcher.pending_count,
        },
    }


def _sequence_figures(spec: ModelSpec) -> dict[str, int]:
    """TorchServe's sequence settings, all 0 unless `sequenceMaxIdleMSec` is set (there,
    the model only takes them then)."""
    if spec.sequence_max_idle_ms <= 0:
        return dict.fromkeys(SEQUENCE_FIGURES, 0)
    return {
        "sequenceMaxIdleMSec": spec.sequence_max_idle_ms,
        "sequenceTimeoutMSec": spec.sequence_timeout_ms,
        "maxNumSequence": spec.max_num_sequence,
        "maxSequenceJobQueueSize": spec.max_sequence_job_queue_size,
    }


def model_page(
    entries: Sequence[tuple[str, str]], limit: int = MAX_PAGE, next_page_token: int = 0
) -> dict[str, Any]:
    """TorchServe's `GET /models` body for `(name, url)` entries sorted by name."""
    if limit > MAX_PAGE or limit < 0:
        limit = MAX_PAGE
    start = max(next_page_token, 0)
    end = start + limit
    page: dict[str, Any] = {}
    if end <= len(entries):  # TorchServe's rule: a page ending at the last model has one too
        page["nextPageToken"] = str(end)
    page["models"] = [{"modelName": name, "modelUrl": url} for name, url in entries[start:end]]
    return page
