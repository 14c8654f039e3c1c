"""The model registry: registered model versions, their workers, and snapshots of them.

* `registry.ModelRegistry`: register / scale / set-default / unregister / describe,
  with TorchServe's statuses and messages; one `Model` (spec + batcher + pool) each.
* `sources`: where a register url points (model store, local path, allowed download).
* `workdir`: an archive extracted (and its requirements installed) under the workdir.
* `start_failure`: TorchServe's error when a model's workers fail to start.
* `describe`: TorchServe's describe and list JSON.
* `snapshot`: the `model_snapshot` file written after every change, read by `restore()`.

Runs in the Jupyter server process: asyncio only, never torch or tornado.
"""

from __future__ import annotations

from jupyter_serve.server.registry.registry import Model, ModelRegistry, PoolFactory, RegistryConfig
from jupyter_serve.server.registry.snapshot import SnapshotItem, read_snapshot, snapshot_items

__all__ = [
    "Model",
    "ModelRegistry",
    "PoolFactory",
    "RegistryConfig",
    "SnapshotItem",
    "read_snapshot",
    "snapshot_items",
]
