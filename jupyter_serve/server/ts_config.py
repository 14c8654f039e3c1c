"""TorchServe's `config.properties`: read the Java properties file, map its keys to ours.

`load_ts_config(path, env)` reads the file (`read_properties`), applies `TS_<KEY>`
environment overrides when the file says `enable_envvars_config=true`
(`apply_env_overrides`), and returns a frozen `TorchServeConfig` with typed fields
(None = not set). The single-server keys of TorchServe 0.12's config.properties that
jupyter_serve honours::

    model_store, load_models, models, number_of_gpu, default_workers_per_model,
    job_queue_size, max_request_size, max_response_size, default_response_timeout,
    default_startup_timeout, unregister_model_timeout (seconds), install_py_dep_per_model,
    allowed_urls, limit_max_image_pixels, decode_input_request, enable_model_api,
    metrics_config (a path, relative to the working directory as in TorchServe),
    model_metrics_auto_detect

`model_snapshot` (TorchServe's snapshot JSON, one line) is checked to be a JSON
object and kept whole: the server restores its models at start, as TorchServe
does, and `load_models` is then not read.

`disable_token_authorization` is ignored with a warning (Jupyter's auth always
applies); `inference_address`, `management_address` and `metrics_address` with an
info note (the routes live under the Jupyter server), and `metrics_mode` (`/metrics`
always answers Prometheus text, TorchServe's `metrics_mode=prometheus`). Every other key is listed
in `TorchServeConfig.unknown`. A value of the wrong type is a `TorchServeConfigError`
naming the key.

`load_models` (`standalone` / `all` / `a.mar,b.mar` / `name=a.mar`) is parsed by
`parse_load_models` into `(name | None, url)` pairs; `all` lists the model store.

`format_properties` writes entries back as a properties file `read_properties` (and
Java) reads to the same values (`jupyter serve export` writes config.properties).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_serve.server.models import ServerDefaults

__all__ = [
    "TorchServeConfig",
    "TorchServeConfigError",
    "apply_env_overrides",
    "format_properties",
    "from_properties",
    "load_ts_config",
    "parse_load_models",
    "parse_properties",
    "read_properties",
]

log = logging.getLogger(__name__)

ARCHIVE_SUFFIXES = (".mar", ".tar.gz", ".model", ".zip")
IGNORED_ADDRESSES = ("inference_address", "management_address", "metrics_address")
ENV_SWITCHES = ("enable_envvars_config", "use_env_allowed_urls")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_KEY_END = re.compile(r"(?<!\\)(?:\\\\)*[=:\s]")


class TorchServeConfigError(ValueError):
    """A config.properties value jupyter_serve cannot use; the message names the key."""


@dataclass(frozen=True)
class TorchServeConfig:
    """The config.properties keys jupyter_serve honours, typed; None means not set."""

    model_store: str | None = None
    load_models: tuple[tuple[str | None, str], ...] | None = None
    models: dict[str, dict[str, dict[str, Any]]] | None = None
    number_of_gpu: int | None = None
    default_workers_per_model: int | None = None
    job_queue_size: int | None = None
    max_request_size: int | None = None
    max_response_size: int | None = None
    default_response_timeout: float | None = None  # seconds
    default_startup_timeout: float | None = None  # seconds
    unregister_model_timeout: float | None = None  # seconds
    install_py_dep_per_model: bool | None = None
    allowed_urls: tuple[str, ...] | None = None  # regexes, each already checked to compile
    limit_max_image_pixels: bool | None = None
    decode_input_request: bool | None = None
    enable_model_api: bool | None = None
    service_envelope: str | None = None  # body, json, kserve, kservev2
    metrics_config: str | None = None  # TorchServe's metrics YAML, resolved from the cwd
    model_metrics_auto_detect: bool | None = None
    model_snapshot: dict[str, Any] | None = None  # TorchServe's snapshot JSON, restored at start
    unknown: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)  # everything read, as text

    def server_defaults(self, base: ServerDefaults | None = None) -> ServerDefaults:
        """`base` (default `ServerDefaults()`) with this file's per-model defaults applied.

        `default_workers_per_model` is left out: TorchServe uses it for startup
        models only; the REST default stays 0.
        """
        changes = {
            "job_queue_size": self.job_queue_size,
            "response_timeout": self.default_response_timeout,
            "startup_timeout": self.default_startup_timeout,
            "limit_max_image_pixels": self.limit_max_image_pixels,
            "decode_input_request": self.decode_input_request,
            "service_envelope": self.service_envelope,
        }
        given: dict[str, Any] = {key: value for key, value in changes.items() if value is not None}
        return dataclasses.replace(base or ServerDefaults(), **given)


def load_ts_config(
    path: str | os.PathLike[str], env: Mapping[str, str] | None = None
) -> TorchServeConfig:
    """Read `path`, apply `TS_*` overrides from `env` (default `os.environ`), map the keys."""
    properties = read_properties(path)
    properties = apply_env_overrides(properties, os.environ if env is None else env)
    return from_properties(properties)


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """A Java properties file as a dict (ISO-8859-1 as Java reads it, `\\uXXXX` escapes)."""
    return parse_properties(Path(path).read_text(encoding="latin-1"))


def parse_properties(text: str) -> dict[str, str]:
    """Java `Properties.load` semantics: comments, `=`/`:`/space separators, continuations."""
    properties: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_entry(line)
        properties[_unescape(key)] = _unescape(value)
    return properties


def _logical_lines(text: str) -> list[str]:
    """Non-comment lines, continuations (odd trailing backslashes) joined, indents dropped."""
    lines: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        joined = line if pending is None else pending + line
        if trailing % 2:
            pending = joined[:-1]
            continue
        lines.append(joined)
        pending = None
    if pending is not None:
        lines.append(pending)
    return lines


def _split_entry(line: str) -> tuple[str, str]:
    match = _KEY_END.search(line)
    if match is None:
        return line, ""
    key, rest = line[: match.end() - 1], line[match.end() - 1 :]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 == len(text):
            out.append(char)
            index += 1
            continue
        code = text[index + 1]
        if code == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[index + 2 : index + 6]):
            out.append(chr(int(text[index + 2 : index + 6], 16)))
            index += 6
            continue
        out.append(_ESCAPES.get(code, code))
        index += 2
    return "".join(out)


def format_properties(entries: Mapping[str, str], comment: str = "") -> str:
    """A properties file of `entries`, one `key=value` line each, escaped for Java."""
    lines = [f"# {line}" for line in comment.splitlines()]
    lines += [f"{_escape(key, key=True)}={_escape(value)}" for key, value in entries.items()]
    return "\n".join(lines) + "\n"


def _escape(text: str, *, key: bool = False) -> str:
    out = []
    for index, char in enumerate(text):
        if char == "\\" or (key and char in "=: #!") or (char == " " and index == 0):
            out.append("\\" + char)
        elif char in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[char])
        elif not " " <= char <= "~":  # Java reads \uXXXX, UTF-16 code units
            units = char.encode("utf-16-be")
            out += [f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2)]
        else:
            out.append(char)
    return "".join(out)


def apply_env_overrides(properties: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """`TS_<KEY>` variables override `<key>` when `enable_envvars_config=true`.

    `TS_ALLOWED_URLS` is read only when `use_env_allowed_urls=true` (as TorchServe).
    """
    result = dict(properties)
    use_env = _flag(properties, "enable_envvars_config")
    use_env_urls = _flag(properties, "use_env_allowed_urls")
    for name, value in env.items():
        if not name.startswith("TS_") or len(name) == 3:
            continue
        key = name[3:].lower()
        if (use_env_urls if key == "allowed_urls" else use_env) and key not in ENV_SWITCHES:
            result[key] = value
    return result


def _flag(properties: Mapping[str, str], key: str) -> bool:
    return properties.get(key, "false").strip().lower() == "true"


def parse_load_models(
    value: str, model_store: str | os.PathLike[str] | None = None
) -> list[tuple[str | None, str]]:
    """`load_models` as `(name | None, url)` pairs; `standalone` is none, `all` the store's.

    `all` lists `model_store`'s archives (`.mar`, `.tar.gz`, `.model`, `.zip`) and
    folders, skipping hidden entries, sorted by name.
    """
    text = value.strip()
    if not text or text.lower() == "standalone":
        return []
    if text.lower() == "all":
        return [(None, url) for url in _store_entries(model_store)]
    pairs: list[tuple[str | None, str]] = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        name, sep, url = entry.partition("=")
        if sep and not (name.strip() and url.strip()):
            raise TorchServeConfigError(f"load_models: {entry!r} is not name=url.")
        pairs.append((name.strip(), url.strip()) if sep else (None, entry))
    return pairs


def _store_entries(model_store: str | os.PathLike[str] | None) -> list[str]:
    if model_store is None or not Path(model_store).is_dir():
        raise TorchServeConfigError("load_models=all needs model_store to name a folder.")
    return sorted(
        path.name
        for path in Path(model_store).iterdir()
        if not path.name.startswith(".") and (path.is_dir() or path.name.endswith(ARCHIVE_SUFFIXES))
    )


def from_properties(properties: Mapping[str, str]) -> TorchServeConfig:
    """Map raw properties (after env overrides) to a `TorchServeConfig`."""
    props = {key: value.strip() for key, value in properties.items()}
    _note_ignored(props)
    store = props.get("model_store")
    loads = props.get("load_models")
    typed: dict[str, Any] = {key: _int(props, key) for key in _INT_KEYS}
    typed.update({key: _seconds(props, key) for key in _SECOND_KEYS})
    typed.update({key: _bool(props, key) for key in _BOOL_KEYS})
    return TorchServeConfig(
        model_store=store or None,
        load_models=None if loads is None else tuple(parse_load_models(loads, store)),
        models=_models(props.get("models")),
        allowed_urls=_allowed_urls(props.get("allowed_urls")),
        service_envelope=props.get("service_envelope") or None,
        metrics_config=_path(props.get("metrics_config")),
        model_snapshot=_model_snapshot(props.get("model_snapshot")),
        **typed,
        unknown=tuple(sorted(key for key in props if key not in _KNOWN)),
        properties=dict(properties),
    )


_INT_KEYS = (
    "number_of_gpu",
    "default_workers_per_model",
    "job_queue_size",
    "max_request_size",
    "max_response_size",
)
_SECOND_KEYS = ("default_response_timeout", "default_startup_timeout", "unregister_model_timeout")
_BOOL_KEYS = (
    "install_py_dep_per_model",
    "limit_max_image_pixels",
    "decode_input_request",
    "enable_model_api",
    "model_metrics_auto_detect",
)
_OTHER_KEYS = (
    "metrics_config",
    "metrics_mode",
    "model_store",
    "load_models",
    "models",
    "allowed_urls",
    "disable_token_authorization",
    "service_envelope",
    "model_snapshot",
)
_KNOWN = frozenset(
    (*_INT_KEYS, *_SECOND_KEYS, *_BOOL_KEYS, *IGNORED_ADDRESSES, *ENV_SWITCHES, *_OTHER_KEYS)
)


def _note_ignored(props: Mapping[str, str]) -> None:
    if "disable_token_authorization" in props:
        log.warning(
            "config.properties: disable_token_authorization is ignored: "
            "the Jupyter server's authentication always applies."
        )
    for key in IGNORED_ADDRESSES:
        if key in props:
            log.info("config.properties: %s is ignored: routes live under the Jupyter server.", key)
    if props.get("metrics_mode", "prometheus").lower() != "prometheus":
        log.info("config.properties: metrics_mode is ignored: /metrics answers Prometheus text.")


def _path(text: str | None) -> str | None:
    """A file path as TorchServe reads it (`getCanonicalPath`: relative to the cwd)."""
    return str(Path(text).expanduser().resolve()) if text else None


def _int(props: Mapping[str, str], key: str) -> int | None:
    if key not in props:
        return None
    try:
        value = int(props[key])
    except ValueError:
        raise TorchServeConfigError(f"{key} must be an integer, got {props[key]!r}.") from None
    if value < 0:
        raise TorchServeConfigError(f"{key} must be >= 0, got {value}.")
    return value


def _seconds(props: Mapping[str, str], key: str) -> float | None:
    value = _int(props, key)
    return None if value is None else float(value)


def _bool(props: Mapping[str, str], key: str) -> bool | None:
    if key not in props:
        return None
    text = props[key].lower()
    if text not in ("true", "false"):
        raise TorchServeConfigError(f"{key} must be true or false, got {props[key]!r}.")
    return text == "true"


def _models(text: str | None) -> dict[str, dict[str, dict[str, Any]]] | None:
    if text is None:
        return None
    try:
        models: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TorchServeConfigError(f"models is not valid JSON: {exc}") from None
    ok = isinstance(models, dict) and all(
        isinstance(versions, dict) and all(isinstance(cfg, dict) for cfg in versions.values())
        for versions in models.values()
    )
    if not ok:
        raise TorchServeConfigError('models must be {"name": {"version": {...}}}.')
    checked: dict[str, dict[str, dict[str, Any]]] = models
    return checked


def _model_snapshot(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        snapshot: Any = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise TorchServeConfigError(f"model_snapshot is not valid JSON: {exc}") from None
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("models"), dict):
        raise TorchServeConfigError('model_snapshot must be {"models": {"name": {...}}, ...}.')
    return snapshot


def _allowed_urls(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    patterns = tuple(part.strip() for part in text.split(",") if part.strip())
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise TorchServeConfigError(f"allowed_urls: bad regex {pattern!r}: {exc}") from None
    return patterns
