"""The inference key store: mint, list, revoke, scope, hashing, the file on disk."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from jupyter_serve.server.keys import FILE_NAME, KEY_PREFIX, KeyStore, bearer_key, key_id_of, scope


def test_a_minted_key_is_valid_for_every_model_and_shown_only_once(tmp_path: Path) -> None:
    store = KeyStore(tmp_path)
    key, info = store.mint("ci job")
    assert key.startswith(f"{KEY_PREFIX}{info.key_id}_")
    assert len(key) > 50  # 256 random bits after the id
    assert store.lookup(key) == info
    assert store.allows(key, "resnet")
    assert store.allows(key, None)  # an unscoped key may run `invocations` without a name
    assert info.to_json() == {
        "id": info.key_id, "name": "ci job", "models": None, "created": info.created,
    }  # fmt: skip
    assert key not in json.dumps([entry.to_json() for entry in store.list_keys()])


def test_a_scoped_key_runs_only_its_models(tmp_path: Path) -> None:
    store = KeyStore(tmp_path)
    key, info = store.mint(models=[" a", "b", "", "a"])
    assert info.models == ("a", "b")
    assert store.allows(key, "a")
    assert store.allows(key, "b")
    assert not store.allows(key, "c")
    assert not store.allows(key, None)  # a scoped key needs the model's name


def test_wrong_keys_are_refused(tmp_path: Path) -> None:
    store = KeyStore(tmp_path)
    key, info = store.mint()
    other, _ = KeyStore(tmp_path / "other").mint()
    forged = key[:-1] + ("A" if key[-1] != "A" else "B")
    for wrong in (forged, other, f"{KEY_PREFIX}{info.key_id}_", "token", "", key + "x"):
        assert store.lookup(wrong) is None, wrong
        assert not store.allows(wrong, "a")


def test_revoke_forgets_the_key_at_once(tmp_path: Path) -> None:
    store = KeyStore(tmp_path)
    key, info = store.mint()
    kept, kept_info = store.mint()
    assert store.revoke(info.key_id)
    assert not store.allows(key, "a")
    assert store.allows(kept, "a")
    assert not store.revoke(info.key_id)
    assert store.list_keys() == [kept_info]
    assert not KeyStore(tmp_path).allows(key, "a")  # the file forgot it too


def test_keys_survive_a_restart_of_the_store(tmp_path: Path) -> None:
    first = KeyStore(tmp_path)
    key, info = first.mint("nightly", models=["m"])
    again = KeyStore(tmp_path)
    assert again.list_keys() == [info]
    assert again.allows(key, "m")
    assert not again.allows(key, "n")


def test_the_file_holds_hashes_only_and_is_private(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "work")  # the folder is created on the first save
    key, info = store.mint("label", models=["m"])
    path = tmp_path / "work" / FILE_NAME
    text = path.read_text()
    secret = key[len(KEY_PREFIX) :].partition("_")[2]  # jsk_<id>_<secret>; "_" may be in it
    assert key not in text
    assert secret not in text
    assert json.loads(text) == {
        "version": 1,
        "keys": {
            info.key_id: {
                "name": "label", "models": ["m"], "created": info.created, "sha256": info.digest,
            }
        },
    }  # fmt: skip
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == [FILE_NAME]  # no temporary left


def test_an_unreadable_file_means_no_key_is_valid(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / FILE_NAME).write_text("{not json")
    store = KeyStore(tmp_path)
    assert store.list_keys() == []
    assert "ignoring unreadable key store" in caplog.text
    key, _ = store.mint()
    assert KeyStore(tmp_path).allows(key, "m")  # the next change rewrote the file


def test_a_long_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at most"):
        KeyStore(tmp_path).mint("x" * 201)
    assert not (tmp_path / FILE_NAME).exists()


def test_key_shapes_and_authorization_headers() -> None:
    key = f"{KEY_PREFIX}0123456789ab_s3cr-et_x"
    assert key_id_of(key) == "0123456789ab"
    assert key_id_of("jsk_0123456789ab") is None
    assert key_id_of("jsk_XYZ_secret") is None
    assert key_id_of("a-jupyter-token") is None
    assert bearer_key(f"Bearer {key}") == key
    assert bearer_key(f"token {key}") == key
    assert bearer_key(f"bearer   {key} ") == key
    assert bearer_key("token a-jupyter-token") is None
    assert bearer_key(key) is None  # no scheme
    assert bearer_key(f"Basic {key}") is None
    assert scope(["", " "]) is None
    assert scope(None) is None
