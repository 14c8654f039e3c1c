"""TorchServe's management-API parameters: query args or a JSON body, typed for the registry.

Every parameter is checked before anything changes, and a client's mistake is a
400 (`BadRequest`) saying which parameter and why. Numbers are read as TorchServe
reads them (Java's `Integer.parseInt`, `NettyUtils.getIntParameter`): a text that is
not a 32-bit integer (`abc`, `1.5`, ` 1`, `99999999999`) means "not given", so
`min_worker=nan` scales to the default and `batch_size=abc` registers with batch
size 1, as TorchServe's own API tests expect. A JSON body's value of the wrong type
(a float, a list) is a 400. Where TorchServe answers an integer out of range with
a 500 or quietly misbehaves, here it is a 400: a negative `min_worker`, a
`batch_size` below 1, a negative `max_batch_delay`, worker counts above the
server's `max_workers_per_model`; a negative `initial_workers` registers with none,
as in TorchServe. An explicitly empty `model_name` is refused. An empty value
still means "not given", and so do TorchServe's timeout sentinels (a
`response_timeout` of 0 or less, a negative `startup_timeout`: the server
default). Booleans follow Java's `Boolean.parseBoolean`: only "true" (any case)
is true.

The functions here read an `Args` mapping (name -> the first query value as a
string, or any JSON value of a body), so they are free of tornado.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_serve.archive.manifest import RUNTIMES
from jupyter_serve.server.models import RegisterParams
from jupyter_serve.server.registry.describe import MAX_PAGE
from jupyter_serve.wire.errors import BadRequest

__all__ = [
    "Args",
    "RegisterArgs",
    "ScaleArgs",
    "bool_arg",
    "check_worker_ceiling",
    "int_arg",
    "json_args",
    "optional_int",
    "page_args",
    "query_args",
    "register_args",
    "scale_args",
]

Args = Mapping[str, Any]
_INT = re.compile(r"[+-]?\d+")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def query_args(arguments: Mapping[str, list[bytes]]) -> dict[str, str]:
    """The first value of each query argument, decoded (TorchServe reads the first one)."""
    return {
        name: values[0].decode("utf-8", "replace") for name, values in arguments.items() if values
    }


def json_args(body: bytes) -> dict[str, Any]:
    """A JSON object body as `Args`; anything else is a 400."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"Invalid JSON body: {exc}") from None
    except RecursionError:
        raise BadRequest("Invalid JSON body: it nests too deeply.") from None
    if not isinstance(data, dict):
        raise BadRequest("The JSON body must be an object of register parameters.")
    return data


def optional_int(args: Args, name: str) -> int | None:
    """An integer argument; None when absent, empty, or a text Java's `Integer.parseInt`
    refuses (TorchServe's "not given"); 400 for a JSON value of another type."""
    value = args.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _java_int(value)
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
    raise BadRequest(f"Invalid value for {name}: {shown} (an integer is expected).")


def _java_int(text: str) -> int | None:
    """`text` as Java's `Integer.parseInt` reads it (a 32-bit integer), else None."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    return value if _INT32_MIN <= value <= _INT32_MAX else None


def int_arg(args: Args, name: str, default: int) -> int:
    """An integer argument, or `default` when absent or empty."""
    value = optional_int(args, name)
    return default if value is None else value


def count_arg(args: Args, name: str, minimum: int) -> int | None:
    """An integer argument of at least `minimum` (None when absent); 400 below it."""
    value = optional_int(args, name)
    if value is not None and value < minimum:
        raise BadRequest(f"Invalid value for {name}: {value} (at least {minimum}).")
    return value


def check_worker_ceiling(ceiling: int, **counts: int | None) -> None:
    """400 when a worker count exceeds the server's `max_workers_per_model`."""
    for name, count in counts.items():
        if count is not None and count > ceiling:
            raise BadRequest(
                f"Invalid value for {name}: {count} (at most {ceiling} workers per model on "
                "this server: ServeApp.max_workers_per_model)."
            )


def bool_arg(args: Args, name: str, default: bool) -> bool:
    """A boolean argument: true only for "true" in any case (Java's Boolean.parseBoolean)."""
    if name not in args or args[name] is None:
        return default
    value = args[name]
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and value.lower() == "true"


def _str_arg(args: Args, name: str) -> str | None:
    value = args.get(name)
    return None if value is None else str(value)


@dataclass(frozen=True)
class RegisterArgs:
    """`POST models`: what to register, how, and whether to wait for the workers."""

    url: str
    params: RegisterParams
    synchronous: bool


def register_args(args: Args) -> RegisterArgs:
    """Register arguments with TorchServe's defaults (synchronous defaults to TRUE)."""
    url = _str_arg(args, "url")
    if url is None:
        raise BadRequest("Parameter url is required.")
    runtime = _str_arg(args, "runtime")
    if runtime is not None and runtime not in RUNTIMES:
        raise BadRequest(f"Invalid RuntimeType value: {runtime}")
    model_name = _str_arg(args, "model_name")
    if model_name is not None and not model_name.strip() and "model_name" in args:
        raise BadRequest("Invalid value for model_name: an empty name (leave it out to take "
                         "the archive's).")  # fmt: skip
    params = RegisterParams(
        model_name=model_name or None,
        handler=_str_arg(args, "handler") or None,
        runtime=runtime,
        batch_size=count_arg(args, "batch_size", 1),
        max_batch_delay_ms=count_arg(args, "max_batch_delay", 0),
        initial_workers=_at_least_zero(optional_int(args, "initial_workers")),
        response_timeout=_at_least(optional_int(args, "response_timeout"), 1),
        startup_timeout=_at_least(optional_int(args, "startup_timeout"), 0),
    )
    return RegisterArgs(url, params, bool_arg(args, "synchronous", True))


def _at_least_zero(value: int | None) -> int | None:
    """A worker count where TorchServe takes a negative one as none."""
    return None if value is None else max(value, 0)


def _at_least(value: int | None, minimum: int) -> int | None:
    """`value`, or None ("not given") below `minimum`: TorchServe's sentinel values."""
    return value if value is not None and value >= minimum else None


@dataclass(frozen=True)
class ScaleArgs:
    """`PUT models/{m}[/{v}]`: worker counts and whether to wait for them."""

    version: str | None
    min_worker: int
    max_worker: int
    synchronous: bool


def scale_args(args: Args, version: str | None) -> ScaleArgs:
    """Scale arguments: min_worker 1, max_worker = min_worker, synchronous FALSE.

    `model_version` in the query names the version when the path does not;
    `timeout` and `number_gpu` are accepted and ignored, as in TorchServe 0.12.
    """
    min_worker = count_arg(args, "min_worker", 0)
    min_worker = 1 if min_worker is None else min_worker
    max_worker = optional_int(args, "max_worker")  # below min_worker: TorchServe's own 400
    max_worker = min_worker if max_worker is None else max_worker
    version = version or _str_arg(args, "model_version") or None
    return ScaleArgs(version, min_worker, max_worker, bool_arg(args, "synchronous", False))


def page_args(args: Args) -> tuple[int, int]:
    """`GET models` paging: (limit, next_page_token), TorchServe's 100 and 0 by default."""
    return int_arg(args, "limit", MAX_PAGE), int_arg(args, "next_page_token", 0)
