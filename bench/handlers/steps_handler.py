"""Benchmark handler `steps`: a generative model's shape without its compute.

Each request takes a number of steps drawn from its request id (geometric, mean
`MEAN_STEPS`, as generated lengths are: most short, a few long); a step costs `step_ms`
(its model-config.yaml's `handler: {step_ms: ...}`, else `STEP_MS`) for the whole batch,
as a batched decoder's step does (a sleep, so that the machine's two cores go to the
servers, not to the model); each step is one chunk of the answer.

With `continuousBatching: true` in its model-config.yaml each call is one step of every
running request, which stays while it has steps left (TorchServe's stopping_criteria).
Without it, a call runs its batch to the end of its longest request, streaming each step
with `send_intermediate_predict_response`: static batching.
"""

from __future__ import annotations

import math
import time
import zlib

from ts.handler_utils.utils import send_intermediate_predict_response

STEP_MS = 5.0
MEAN_STEPS = 8
MAX_STEPS = 64
CHUNK = b"tok "


def steps_for(request_id: str) -> int:
    """A geometric number of steps (mean MEAN_STEPS, at most MAX_STEPS) from the id."""
    uniform = (zlib.crc32(request_id.encode()) + 0.5) / 2**32
    steps = math.ceil(math.log(1 - uniform) / math.log(1 - 1 / MEAN_STEPS))
    return min(MAX_STEPS, max(1, steps))


class Steps:
    def initialize(self, context):
        config = context.model_yaml_config
        self.continuous = bool(config.get("continuousBatching"))
        self.step_s = float((config.get("handler") or {}).get("step_ms", STEP_MS)) / 1000
        self.left = {}
        self.initialized = True

    def handle(self, data, context):
        ids = [context.get_request_id(idx) for idx in range(len(data))]
        if self.continuous:
            return self.step(ids, context)
        return self.whole(ids, context)

    def step(self, ids, context):
        time.sleep(self.step_s)
        criteria = []
        for request_id in ids:
            if request_id not in self.left:
                self.left[request_id] = [steps_for(request_id), 0]
            self.left[request_id][1] += 1
            criteria.append(self.stop_for(request_id))
        context.stopping_criteria = criteria
        return [CHUNK for _ in ids]

    def stop_for(self, request_id):
        def stop(item):
            total, done = self.left[request_id]
            if done < total:
                return False
            del self.left[request_id]
            return None if total == 1 else True  # one step: a plain answer

        return stop

    def whole(self, ids, context):
        totals = [steps_for(request_id) for request_id in ids]
        for step in range(1, max(totals)):
            time.sleep(self.step_s)
            going = {idx: rid for idx, rid in enumerate(ids) if step < totals[idx]}
            chunks = [CHUNK for _ in ids]
            send_intermediate_predict_response(chunks, going, "Intermediate", 200, context)
        time.sleep(self.step_s)
        return [CHUNK for _ in ids]
