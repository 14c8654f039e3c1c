"""The worker process: one fresh interpreter serving one model over the framed protocol.

Run as ``python -m jupyter_serve.worker --fd N`` (see `__main__`). The modules:

* `service`  - the frame loop: answer `L` once, then one `R`/`E` per `I`
* `loader`   - turn a handler string into an entry point and initialize it
* `context`  - TorchServe's `Context`, built fresh for every batch
* `metrics`  - the `context.metrics` cache whose records travel back in `R` frames
* `inputs`   - wire requests into TorchServe's batch input (`data`, request headers);
               a request that cannot be decoded is answered alone with 400
* `outputs`  - handler output items into response bodies
* `failures` - exceptions into `E` frames or per-request error results (status by type)
* `factory`  - the worker factory: a warm interpreter that forks new workers
* `warm`     - the factory's warm-up, and the per-worker settings of the `L` frame
* `compat/`  - tiny `ts` and `mms` packages for handlers written for TorchServe or MMS

Nothing here imports tornado or jupyter_server, nor torch at import: a handler
imports torch when it needs it, and the worker factory imports it ahead of its
model. This package's `__init__` imports nothing on purpose.
"""

from __future__ import annotations
