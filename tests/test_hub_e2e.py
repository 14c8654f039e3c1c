"""jupyter_serve in a real JupyterHub 6 (issue 24): keys, scopes and the OpenAPI base URL.

One hub (configurable-http-proxy, SimpleLocalProcessSpawner, on loopback with free ports,
its database, cookie secret and proxy token in a temporary folder) serves the users:

* `ann` owns the server (spawned through the hub API) and may do everything;
* `bob` has the README's "predict-only on ann's models" role: `access:servers` on ann's
  server plus the custom scopes `read` and `execute` on `serve`;
* `dan` has only `access:servers` on it, which used to open everything (allow-all);
* `cat` has no permission on ann's server at all.

Every request goes through the proxy (`/user/ann/...`). The single-user server runs
`jupyter_serve.hub.HubScopesAuthorizer` (the README's JupyterHub section). Skipped, with
the reason, when jupyterhub or configurable-http-proxy is missing, unless CI=true.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hub_process import HubProcess, available
from mar_builder import build_handler_mar

MISSING = available()
pytestmark = pytest.mark.skipif(
    MISSING is not None and os.environ.get("CI") != "true",
    reason=f"a real JupyterHub is needed: {MISSING} (CI=true runs it anyway)",
)

SERVE = "/user/ann/serve"
PASSWORD = "hub-e2e-password"
ECHO = "def handle(data, context):\n    return None if data is None else [row.get('body') for row in data]\n"  # noqa: E501
TESTER = ["admin:users", "admin:servers", "tokens", "read:servers"]  # makes tokens, spawns
SCOPES = [f"custom:jupyter_server:{action}:serve" for action in ("read", "execute", "write")]


def hub_settings(folder: Path) -> dict[str, object]:
    """The hub's config of the README's recipe (custom scopes, a predict-only role)."""
    access = "access:servers!user=ann"
    predict = [f"custom:jupyter_server:{action}:serve!user=ann" for action in ("read", "execute")]
    return {
        "Authenticator.allowed_users": {"ann", "bob", "cat", "dan"},
        "JupyterHub.authenticator_class": "dummy",
        "DummyAuthenticator.password": PASSWORD,
        "JupyterHub.custom_scopes": {scope: {"description": scope} for scope in SCOPES},
        "JupyterHub.load_roles": [
            {"name": "tester", "services": ["tester"], "scopes": TESTER},
            {"name": "ann-predict", "users": ["bob"], "scopes": [access, *predict]},
            {"name": "ann-access", "users": ["dan"], "scopes": [access]},
        ],
        # the README's browser-login recipe: OAuth tokens of each server may carry its scopes
        "Spawner.oauth_client_allowed_scopes": [f"{scope}!server" for scope in SCOPES],
        "Spawner.args": [
            "--allow-root",  # these machines and CI run as root
            "--ServerApp.authorizer_class=jupyter_serve.hub.HubScopesAuthorizer",
            f"--ServeApp.model_store={folder / 'store'}",
            "--ServeApp.fork_workers=False",
            "--ServeApp.snapshots=False",
        ],
    }


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    """The hub with ann's server spawned and `demo` (an echo handler) in its model store."""
    folder = tmp_path_factory.mktemp("hub")
    (folder / "store").mkdir()
    build_handler_mar(folder / "store", "demo", ECHO)
    with HubProcess.serving(folder, hub_settings(folder), "ann") as hub:
        yield hub


@pytest.fixture(scope="module")
def tokens(hub: HubProcess) -> dict[str, str]:
    return {user: hub.token(user) for user in ("ann", "bob", "cat", "dan")}


@pytest.fixture(scope="module")
def registered(hub: HubProcess, tokens: dict[str, str]) -> None:
    """The owner registers `demo` through the proxy (write on serve)."""
    with hub.client(tokens["ann"]) as ann:
        answer = ann.post(f"{SERVE}/models", params={"url": "demo.mar", "initial_workers": 1})
    assert answer.status_code == 200, answer.text


def codes(client: httpx.Client, calls: list[tuple[str, str, dict[str, str]]]) -> list[int]:
    return [client.request(verb, path, params=params).status_code for verb, path, params in calls]


WRITES = [
    ("POST", f"{SERVE}/models", {"url": "demo.mar", "model_name": "again"}),
    ("PUT", f"{SERVE}/models/demo", {"min_worker": "2"}),
    ("DELETE", f"{SERVE}/models/demo", {}),
    ("GET", f"{SERVE}/keys", {}),
    ("POST", f"{SERVE}/keys", {"name": "mine"}),
]
JUPYTER = [
    ("GET", "/user/ann/api/contents", {}),
    ("GET", "/user/ann/api/kernels", {}),
    ("POST", "/user/ann/api/kernels", {}),
    ("GET", "/user/ann/api/sessions", {}),
    ("GET", "/user/ann/api/terminals", {}),
    ("POST", "/user/ann/api/terminals", {}),
]
RUN = ("POST", f"{SERVE}/predictions/demo", {})
READS = [("GET", f"{SERVE}/ping", {}), ("GET", f"{SERVE}/models", {})]


def test_the_owner_may_do_everything(
    hub: HubProcess, tokens: dict[str, str], registered: None
) -> None:
    with hub.client(tokens["ann"]) as ann:
        assert ann.post(f"{SERVE}/predictions/demo", content=b"hi").content == b"hi"
        assert codes(ann, READS) == [200, 200]
        assert ann.get("/user/ann/api/contents").status_code == 200
        listed = ann.get(f"{SERVE}/keys")
        assert (listed.status_code, listed.json()) == (200, {"keys": []})


def test_a_predict_only_teammate_reads_and_runs_and_nothing_more(
    hub: HubProcess, tokens: dict[str, str], registered: None
) -> None:
    with hub.client(tokens["bob"]) as bob:
        assert codes(bob, READS) == [200, 200]
        answer = bob.post(f"{SERVE}/predictions/demo", content=b"from bob")
        assert (answer.status_code, answer.content) == (200, b"from bob")
        assert codes(bob, WRITES) == [403] * len(WRITES)
        assert codes(bob, JUPYTER) == [403] * len(JUPYTER)
    with hub.client(tokens["ann"]) as ann:  # nothing bob tried changed anything
        described = ann.get(f"{SERVE}/models/demo").json()
        assert [model["minWorkers"] for model in described] == [1]
        assert ann.get(f"{SERVE}/keys").json() == {"keys": []}


@pytest.mark.parametrize("user", ["dan", "cat", None])
def test_access_alone_another_user_and_no_token_get_nothing(
    hub: HubProcess, tokens: dict[str, str], registered: None, user: str | None
) -> None:
    with hub.client(tokens[user] if user else None) as client:
        calls = [*READS, RUN, *WRITES, *JUPYTER]
        assert codes(client, calls) == [403] * len(calls)


@pytest.mark.parametrize(("user", "status"), [("ann", 200), ("bob", 200), ("dan", 403),
                                              ("cat", 403), (None, 403)])  # fmt: skip
def test_every_prediction_of_a_connection_gets_the_hubs_decision(
    hub: HubProcess, tokens: dict[str, str], registered: None, user: str | None, status: int
) -> None:
    """Predictions first and only on a connection: the single-user server's fast path
    answers them once the hub has said who the token is (server/http/hub_verdicts.py), and only
    for whom the full route would."""
    with hub.client(tokens[user] if user else None) as client:
        answers = [client.post(f"{SERVE}/predictions/demo", content=f"run {n}".encode())
                   for n in range(4)]  # fmt: skip
    assert [answer.status_code for answer in answers] == [status] * 4
    if status == 200:
        assert [answer.content for answer in answers] == [f"run {n}".encode() for n in range(4)]


def test_an_inference_key_runs_its_model_through_the_proxy(
    hub: HubProcess, tokens: dict[str, str], registered: None
) -> None:
    with hub.client(tokens["ann"]) as ann:
        minted = ann.post(f"{SERVE}/keys", json={"name": "ci", "models": ["demo"]})
    assert minted.status_code == 200, minted.text
    key = minted.json()["key"]
    with hub.client() as anyone:
        for scheme in ("Bearer", "token"):
            answer = anyone.post(f"{SERVE}/predictions/demo", content=b"keyed",
                                 headers={"Authorization": f"{scheme} {key}"})  # fmt: skip
            assert (answer.status_code, answer.content) == (200, b"keyed"), answer.text
        anyone.headers["Authorization"] = f"Bearer {key}"
        assert anyone.post(f"{SERVE}/predictions/other").status_code == 403  # not in its scope
        calls = [*READS, *WRITES, *JUPYTER]
        assert codes(anyone, calls) == [403] * len(calls)
        anyone.headers["Authorization"] = f"Bearer {key[:-2]}zz"
        assert anyone.post(f"{SERVE}/predictions/demo").status_code == 403  # a wrong token


def test_the_login_cookie_needs_xsrf_on_every_unsafe_verb(
    hub: HubProcess, registered: None
) -> None:
    with hub.browser("ann", PASSWORD, "/user/ann/lab") as browser:
        xsrf = browser.cookies.get("_xsrf", path="/user/ann/")
        assert xsrf
        unsafe = [
            RUN,
            ("PUT", f"{SERVE}/models/demo", {"min_worker": "1"}),
            ("DELETE", f"{SERVE}/models/nobody", {}),
            ("POST", f"{SERVE}/keys", {}),
        ]
        assert codes(browser, unsafe) == [403] * len(unsafe)
        browser.headers["Authorization"] = "Bearer jsk_0123456789ab_wrong"  # a wrong key
        assert codes(browser, unsafe) == [403] * len(unsafe)
        del browser.headers["Authorization"]
        browser.headers["X-XSRFToken"] = xsrf
        answer = browser.post(f"{SERVE}/predictions/demo", content=b"cookie")
        assert (answer.status_code, answer.content) == (200, b"cookie")
        assert codes(browser, unsafe[1:3]) == [202, 404]  # scaled; no such model


def test_a_predict_only_teammate_logged_in_with_a_browser_reads_and_runs(
    hub: HubProcess, registered: None
) -> None:
    """The recipe's `oauth_client_allowed_scopes` lets bob's login to ann's server carry his
    serve scopes (without it his browser token holds `access:servers` alone: 403 on all)."""
    with hub.browser("bob", PASSWORD, "/user/ann/lab", opens=False) as browser:
        browser.headers["X-XSRFToken"] = browser.cookies.get("_xsrf", path="/user/ann/") or ""
        assert codes(browser, READS) == [200, 200]
        answer = browser.post(f"{SERVE}/predictions/demo", content=b"bob's browser")
        assert (answer.status_code, answer.content) == (200, b"bob's browser")
        assert codes(browser, WRITES) == [403] * len(WRITES)
        assert codes(browser, JUPYTER) == [403] * len(JUPYTER)


def test_the_openapi_document_names_the_servers_prefix(
    hub: HubProcess, tokens: dict[str, str]
) -> None:
    with hub.client(tokens["bob"]) as bob:
        document = bob.get(f"{SERVE}/api-description").json()
    assert [server["url"] for server in document["servers"]] == [SERVE]


def page_config(page: str) -> dict[str, str]:
    """The JSON JupyterLab's `PageConfig` reads: the `jupyter-config-data` script's."""
    found = re.search(r'<script id="jupyter-config-data"[^>]*>(.*?)</script>', page, re.S)
    assert found, page[:2000]
    config: dict[str, str] = json.loads(html.unescape(found.group(1)))
    return config


def test_the_lab_page_tells_the_panel_it_runs_under_the_hub(hub: HubProcess) -> None:
    """The options labextension/src/hub.ts reads are in the page, and name the hub's token
    page, which opens for the logged-in user (the panel's curl note links it)."""
    with hub.browser("ann", PASSWORD, "/user/ann/lab") as browser:
        config = page_config(browser.get("/user/ann/lab").text)
        assert (config["hubPrefix"], config["hubHost"]) == ("/hub/", "")
        assert (config["hubUser"], config["hubServerName"]) == ("ann", "")
        assert config["baseUrl"] == "/user/ann/"  # the panel's serve URL is under it
        token_page = browser.get(f"{config['hubHost']}{config['hubPrefix']}token")
        assert token_page.status_code == 200
        assert "API Tokens" in token_page.text
