"""TorchServe's management-API parameters: query args or a JSON body, typed for the registry.

TorchServe (`NettyUtils.getIntParameter`, `RegisterModelRequest`) never fails on
a malformed number: `batch_size=dd` or `min_worker=nan` simply means "not
given", and the default applies. Booleans follow Java's `Boolean.parseBoolean`:
only "true" (any case) is true, so `synchronous=-1` is false. Its sentinels
carry over too: a `batch_size` below 1, a negative `max_batch_delay` or
`startup_timeout`, and a `response_timeout` of 0 or less mean "server default";
a negative `initial_workers` registers with 0 workers, as TorchServe does.

The functions here read an `Args` mapping (name -> the first query value as a
string, or any JSON value of a body), so they are free of tornado.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..archive.manifest import RUNTIMES
from ..errors import BadRequest, ServeError
from ..models import RegisterParams
from ..registry.describe import MAX_PAGE

__all__ = [
    "Args",
    "RegisterArgs",
    "ScaleArgs",
    "bool_arg",
    "check_min_worker",
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
    if not isinstance(data, dict):
        raise BadRequest("The JSON body must be an object of register parameters.")
    return data


def optional_int(args: Args, name: str) -> int | None:
    """An integer argument, or None when absent or not an integer (Java's parseInt)."""
    value = args.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _INT.fullmatch(value):
        return int(value)
    return None


def int_arg(args: Args, name: str, default: int) -> int:
    """An integer argument, or `default` when absent or not an integer."""
    value = optional_int(args, name)
    return default if value is None else value


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
    params = RegisterParams(
        model_name=_str_arg(args, "model_name") or None,
        handler=_str_arg(args, "handler") or None,
        runtime=runtime,
        batch_size=_at_least(optional_int(args, "batch_size"), 1),
        max_batch_delay_ms=_at_least(optional_int(args, "max_batch_delay"), 0),
        initial_workers=_workers(optional_int(args, "initial_workers")),
        response_timeout=_at_least(optional_int(args, "response_timeout"), 1),
        startup_timeout=_at_least(optional_int(args, "startup_timeout"), 0),
    )
    return RegisterArgs(url, params, bool_arg(args, "synchronous", True))


def _at_least(value: int | None, minimum: int) -> int | None:
    """`value`, or None ("not given") below `minimum`: TorchServe's sentinel values."""
    return value if value is not None and value >= minimum else None


def _workers(value: int | None) -> int | None:
    return None if value is None else max(value, 0)


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
    min_worker = int_arg(args, "min_worker", 1)
    max_worker = int_arg(args, "max_worker", min_worker)
    version = version or _str_arg(args, "model_version") or None
    return ScaleArgs(version, min_worker, max_worker, bool_arg(args, "synchronous", False))


def page_args(args: Args) -> tuple[int, int]:
    """`GET models` paging: (limit, next_page_token), TorchServe's 100 and 0 by default."""
    return int_arg(args, "limit", MAX_PAGE), int_arg(args, "next_page_token", 0)


def check_min_worker(min_worker: int) -> None:
    """A negative min_worker is a 500 (InternalServerException), as TorchServe answers it:
    its worker manager fails on the count rather than refusing it as a bad request."""
    if min_worker < 0:
        raise ServeError(f"Invalid worker count: min_worker={min_worker} (must be >= 0).")
