"""`jupyter_serve.ts_config`: the public import path of the TorchServe `config.properties`
reader and writer (`server/ts_config.py`), as notebooks use it."""

from __future__ import annotations

from jupyter_serve.server.ts_config import (
    TorchServeConfig,
    TorchServeConfigError,
    apply_env_overrides,
    format_properties,
    from_properties,
    load_ts_config,
    parse_properties,
    read_properties,
)

__all__ = [
    "TorchServeConfig",
    "TorchServeConfigError",
    "apply_env_overrides",
    "format_properties",
    "from_properties",
    "load_ts_config",
    "parse_properties",
    "read_properties",
]
