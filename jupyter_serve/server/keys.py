"""Inference keys: secrets that may only run models, kept hashed in the server's workdir.

A key is shown once, when it is minted, and has the form ``jsk_<id>_<secret>``:
``<id>`` is 12 hex characters (the lookup index, not secret) and ``<secret>`` is
`secrets.token_urlsafe(32)` (256 random bits). A key may scope itself to named
models; without a scope it may run every model. Keys authorize only ``execute`` on
``serve`` (server/http/base.py); this module knows nothing of HTTP. `key_table` is the
text listing of keys that `jupyter serve keys list` prints.

The store is ``keys.json`` in `ServeApp.workdir` (next to ``snapshot.json``),
rewritten atomically on every change (a temporary file in the same folder, mode
0600, then `os.replace`). It holds no secret, only the SHA-256 of each whole key::

    {
      "version": 1,
      "keys": {
        "3f9a0c1b2d4e": {
          "name": "ci job",
          "models": ["resnet", "bert"],
          "created": "2025-01-31T12:00:00Z",
          "sha256": "<hex digest of jsk_3f9a0c1b2d4e_...>"
        }
      }
    }

``"models": null`` means every model. One SHA-256 without salt or slow KDF is
enough: keys are 256-bit random strings, not passwords a dictionary could guess.

For the fast path: `KeyStore.allows(key, model_name)` (the store is the tornado
setting ``serve_keys``) costs one dict lookup and one hash, and `bearer_key`
takes a key out of an ``Authorization: Bearer|token K`` header value.
Standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["FILE_NAME", "KEY_PREFIX", "KeyInfo", "KeyStore", "bearer_key", "key_id_of", "scope"]

KEY_PREFIX = "jsk_"
FILE_NAME = "keys.json"
FORMAT_VERSION = 1
MAX_NAME = 200
_ID = re.compile(r"[0-9a-f]{12}")
_AUTH = re.compile(r"(?:token|bearer)\s+(\S+)\s*", re.IGNORECASE)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyInfo:
    """What the store knows of one key: never the key itself."""

    key_id: str
    name: str
    models: tuple[str, ...] | None  # None: every model
    created: str
    digest: str = field(repr=False)

    def may_run(self, model: str | None) -> bool:
        """True when this key's scope covers `model` (a scoped key needs a model name)."""
        return self.models is None or (model is not None and model in self.models)

    def to_json(self) -> dict[str, Any]:
        """The public listing: id, name, models (None: all) and creation time."""
        models = list(self.models) if self.models is not None else None
        return {"id": self.key_id, "name": self.name, "models": models, "created": self.created}


def key_id_of(key: str) -> str | None:
    """The id inside a key of the form ``jsk_<id>_<secret>``; None for anything else."""
    if not key.startswith(KEY_PREFIX):
        return None
    key_id, _, secret = key[len(KEY_PREFIX) :].partition("_")
    return key_id if secret and _ID.fullmatch(key_id) else None


def bearer_key(authorization: str) -> str | None:
    """The inference key an ``Authorization: Bearer K`` (or ``token K``) value carries.

    None when the header carries no credential shaped like a key (a Jupyter token).
    """
    found = _AUTH.fullmatch(authorization)
    key = found.group(1) if found else ""
    return key if key_id_of(key) is not None else None


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def scope(models: Iterable[str] | None) -> tuple[str, ...] | None:
    """Model names as a key's scope: stripped, deduplicated; nothing left means all."""
    names = tuple(dict.fromkeys(name.strip() for name in models or () if name.strip()))
    return names or None


class KeyStore:
    """The inference keys of one server, loaded from and saved to ``<folder>/keys.json``."""

    def __init__(self, folder: Path | str) -> None:
        self.path = Path(folder) / FILE_NAME
        self._keys: dict[str, KeyInfo] = _load(self.path)

    def mint(self, name: str = "", models: Iterable[str] | None = None) -> tuple[str, KeyInfo]:
        """A new key and its record; the key itself is returned here and nowhere else.

        Raises:
            ValueError: the name is longer than `MAX_NAME` characters.
        """
        name = name.strip()
        if len(name) > MAX_NAME:
            raise ValueError(f"A key name has at most {MAX_NAME} characters.")
        key_id = secrets.token_hex(6)
        while key_id in self._keys:  # pragma: no cover - 48 random bits
            key_id = secrets.token_hex(6)
        key = f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
        info = KeyInfo(key_id, name, scope(models), _now(), _digest(key))
        self._keys[key_id] = info
        self._save()
        return key, info

    def list_keys(self) -> list[KeyInfo]:
        """Every key, oldest first (the file keeps them in the order they were minted)."""
        return list(self._keys.values())

    def revoke(self, key_id: str) -> bool:
        """Forget a key at once; False when there is no key with that id."""
        if self._keys.pop(key_id, None) is None:
            return False
        self._save()
        return True

    def lookup(self, key: str) -> KeyInfo | None:
        """The record of a valid key (constant-time hash compare); None when invalid."""
        key_id = key_id_of(key)
        info = self._keys.get(key_id) if key_id is not None else None
        if info is None or not hmac.compare_digest(info.digest, _digest(key)):
            return None
        return info

    def allows(self, key: str, model_name: str | None) -> bool:
        """True when `key` is valid and may run `model_name` (the fast path's check)."""
        info = self.lookup(key)
        return info is not None and info.may_run(model_name)

    def _save(self) -> None:
        records = {info.key_id: _record(info) for info in self.list_keys()}
        text = json.dumps({"version": FORMAT_VERSION, "keys": records}, indent=2) + "\n"
        _write_atomic(self.path, text)


def _record(info: KeyInfo) -> dict[str, Any]:
    fields = info.to_json()
    del fields["id"]
    return {**fields, "sha256": info.digest}


def _load(path: Path) -> dict[str, KeyInfo]:
    """The keys in `path`; none when it is missing. A malformed file counts as no keys
    (every key is then refused) and is logged; the next change rewrites it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {key_id: _info(key_id, record) for key_id, record in data["keys"].items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        log.warning("jupyter_serve: ignoring unreadable key store %s: %r", path, error)
        return {}


def _info(key_id: str, record: dict[str, Any]) -> KeyInfo:
    if not _ID.fullmatch(key_id) or not isinstance(record["sha256"], str):
        raise ValueError(f"malformed key record {key_id!r}")
    models = record.get("models")
    return KeyInfo(
        key_id,
        str(record.get("name") or ""),
        scope(str(m) for m in models) if models is not None else None,
        str(record.get("created") or ""),
        record["sha256"],
    )


def _write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` at once: a 0600 temporary file, fsync, `os.replace`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def key_table(keys: Iterable[Mapping[str, Any]]) -> str:
    """Inference keys as a text table (the CLI's and the magic's listing)."""
    rows = [("ID", "NAME", "MODELS", "CREATED")]
    for key in keys:
        models = ",".join(key.get("models") or ["(all)"])
        rows.append((str(key["id"]), key.get("name") or "-", models, str(key.get("created"))))
    if len(rows) == 1:
        return "(no inference keys)"
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(line.rstrip() for line in lines)
