"""The in-process limit: a model's bare forward pass at batch 1, 8, 32, in samples per second.

    python bench/inprocess.py --model cnn [--batches 1,8,32] [--threads N] [--seconds 2]

prints one JSON object `{"model", "threads", "samples_per_s": {batch: rate}}`.
The networks are the handlers' own (`bench/handlers/nets.py`), under
`torch.inference_mode()`; `--threads` calls `torch.set_num_threads` (0 keeps
torch's default). The runner starts it in a subprocess, once alone and once as
two processes of one thread each, so the limit is taken the way workers run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "handlers"))

import nets
import torch


def sample(model: str, batch: int) -> torch.Tensor:
    if model == "cnn":
        return torch.rand(batch, *nets.CNN_SHAPE)
    return torch.rand(batch, nets.MLP_IN)


def rate(network: torch.nn.Module, inputs: torch.Tensor, seconds: float) -> float:
    """Samples per second over at least `seconds` and at least 3 forward passes."""
    with torch.inference_mode():
        network(inputs)  # warm up
        runs, began = 0, time.perf_counter()
        while runs < 3 or time.perf_counter() - began < seconds:
            network(inputs)
            runs += 1
        elapsed = time.perf_counter() - began
    return runs * inputs.shape[0] / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=("mlp", "cnn"), required=True)
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    network = nets.cnn() if args.model == "cnn" else nets.mlp()
    rates = {
        batch: round(rate(network, sample(args.model, batch), args.seconds), 1)
        for batch in (int(b) for b in args.batches.split(","))
    }
    threads = torch.get_num_threads()
    print(json.dumps({"model": args.model, "threads": threads, "samples_per_s": rates}))


if __name__ == "__main__":
    main()
