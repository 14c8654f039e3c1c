"""The auth crawl: every route of `server.http.ROUTES`, every verb, needs Jupyter auth.

For each pattern of the table a concrete URL is generated from the pattern's own
regex (so routes added later are crawled too), and each verb the route class
defines is sent without credentials (403 expected) and with the token as a
header (`token X`, `Bearer X`) and as `?token=X` (anything but 403 expected).

"Defines" means a jupyter_serve class implements it: the only verb a route
inherits implemented is jupyter_server's `APIHandler.options`, the CORS
preflight, which is deliberately open (browsers send preflights without
credentials); a separate test shows it answers no data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from jupyter_server.utils import url_path_join
from route_models import server_config
from tornado import web
from tornado.routing import PathMatches, Rule

from jupyter_serve.server.http import ROUTES
from jupyter_serve.server.http.base import ServeRoute

StatusFetch = Callable[..., Awaitable[int]]
VERBS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")
WITH_BODY = ("POST", "PUT", "PATCH")


def _parser() -> Any:
    """The stdlib's regex parser: `re._parser` (3.11+) or `sre_parse` (3.10; warns later)."""
    import importlib

    try:
        return importlib.import_module("re._parser")
    except ImportError:  # Python 3.10
        return importlib.import_module("sre_parse")


def sample_path(pattern: str, earlier: Sequence[str] = ()) -> str:
    """A path `pattern` fully matches and no `earlier` pattern does (tornado takes the first).

    Tried in turn: optional parts left out, then every optional part present once.
    """
    parser = _parser()
    for full in (False, True):
        text = "".join(_emit(parser.parse(pattern), full))
        if re.fullmatch(pattern, text) and not any(re.fullmatch(e, text) for e in earlier):
            return text
    raise AssertionError(f"no sample path reaches route pattern {pattern!r}")


def routed_path(pattern: str) -> str:
    """The sample path of a pattern of the route table, routed to that pattern."""
    patterns = [entry for entry, _ in ROUTES]
    return sample_path(pattern, patterns[: patterns.index(pattern)])


def _emit(items: Any, full: bool) -> list[str]:
    out: list[str] = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name in ("NOT_LITERAL", "ANY", "IN", "CATEGORY"):
            out.append(_one_char(op, arg))
        elif name == "SUBPATTERN":
            out.extend(_emit(arg[-1], full))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, body = arg
            out.extend(_emit(body, full) * (max(low, min(high, 1)) if full else low))
        elif name == "BRANCH":
            out.extend(_emit(arg[1][0], full))
    return out


def _one_char(op: Any, arg: Any) -> str:
    """A character the single-character node (op, arg) accepts: tried from a short list."""
    node = re.compile(_node_regex(op, arg))
    return next(char for char in "m1a_-." if node.fullmatch(char))


def _node_regex(op: Any, arg: Any) -> str:
    name = str(op)
    if name == "NOT_LITERAL":
        return f"[^{re.escape(chr(arg))}]"
    if name == "ANY":
        return "."
    if name == "CATEGORY":
        return {"CATEGORY_DIGIT": r"\d", "CATEGORY_WORD": r"\w"}.get(str(arg), r"\S")
    negate = any(str(kind) == "NEGATE" for kind, _ in arg)
    chars = "".join(re.escape(chr(value)) for kind, value in arg if str(kind) == "LITERAL")
    ranges = "".join(
        f"{re.escape(chr(low))}-{re.escape(chr(high))}"
        for kind, (low, high) in ((k, v) for k, v in arg if str(k) == "RANGE")
    )
    return f"[{'^' if negate else ''}{chars}{ranges}]"


def own_verbs(route: type[Any]) -> list[str]:
    """The verbs a jupyter_serve class implements for `route`."""
    verbs = []
    for verb in VERBS:
        if verb == "OPTIONS" and not hasattr(route, "options_document"):
            continue  # ServeRoute.options then is jupyter_server's open CORS preflight
        method = getattr(route, verb.lower(), None)
        module = getattr(method, "__module__", "") or ""
        if module.startswith("jupyter_serve."):
            verbs.append(verb)
    return verbs


CASES = [
    pytest.param(pattern, verb, id=f"{verb} {pattern}")
    for pattern, route in ROUTES
    for verb in own_verbs(route)
]


def test_the_crawl_covers_every_route_and_finds_verbs() -> None:
    crawled = {pattern for pattern, _ in (case.values[:2] for case in CASES)}
    assert crawled == {pattern for pattern, _ in ROUTES}
    assert len(CASES) >= len(ROUTES)


@pytest.mark.parametrize(("pattern", "route"), ROUTES)
def test_every_route_is_a_serve_route_reached_by_its_sample_path(
    pattern: str, route: type[Any]
) -> None:
    """(What the authorizer is asked per verb is tested in test_routes_access.py.)"""
    assert issubclass(route, ServeRoute)
    assert re.fullmatch(pattern, routed_path(pattern))


def test_sample_paths_fill_groups_and_drop_optional_parts() -> None:
    assert sample_path(r"models/?") == "models"
    assert sample_path(r"models/([^/]+)(?:/([^/]+))?/?") == "models/m"
    assert sample_path(r"models/([^/]+)/([^/]+)/set-default/?") == "models/m/m/set-default"
    assert sample_path(r"v1/models/([^/:]+):(predict|explain)") == "v1/models/m:predict"
    assert sample_path(r"v2/models/([a-z0-9_\-.]+)/infer") == "v2/models/m/infer"
    assert sample_path(r".*") == ""
    assert sample_path(r".*", earlier=["/?"]) == "m"
    assert sample_path(r"p/([^/]+)(?:/(.+))?", earlier=[r"p/m"]) == "p/m/m"


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    """Crawl under jupyter_server's default, where an undecorated verb would be open."""
    server = {**jp_server_config.get("ServerApp", {}), "allow_unauthenticated_access": True}
    return {**jp_server_config, "ServerApp": server}


@pytest.fixture
def fetch_status(http_server_client: Any, jp_base_url: str) -> StatusFetch:
    """The status of `verb` on `serve/<path>`, the path sent as it is (":" unescaped)."""

    async def fetch(verb: str, path: str, headers: dict[str, str], token: str = "") -> int:
        url = url_path_join(jp_base_url, "serve", path) + (f"?token={token}" if token else "")
        body = b"" if verb in WITH_BODY else None
        response = await http_server_client.fetch(
            url, method=verb, body=body, headers=headers, raise_error=False
        )
        return int(response.code)

    return fetch


XSRF = "6a73657276652d78737266"  # a matching cookie + header pair passes the XSRF check
NO_CREDENTIALS = {"Authorization": "", "Cookie": f"_xsrf={XSRF}", "X-XSRFToken": XSRF}


async def refused(fetch: StatusFetch, verb: str, path: str) -> bool:
    """True when a request without credentials (but with valid XSRF) gets 403.

    The XSRF pair matters: without it jupyter_server refuses a POST/PUT/DELETE for
    its missing `_xsrf` before auth runs, which would hide a verb left undecorated.
    """
    return await fetch(verb, path, dict(NO_CREDENTIALS)) == 403


@pytest.mark.parametrize(("pattern", "verb"), CASES)
async def test_every_verb_of_every_route_refuses_requests_without_credentials(
    fetch_status: StatusFetch, pattern: str, verb: str
) -> None:
    path = routed_path(pattern)
    assert await refused(fetch_status, verb, path)
    wrong = {**NO_CREDENTIALS, "Authorization": "token wrong"}
    assert await fetch_status(verb, path, wrong) == 403


class _Undecorated(ServeRoute):
    """A route that forgot `@web.authenticated` on one verb: the probe must notice."""

    @web.authenticated
    def get(self) -> None:
        self.write_json({"ok": True})

    def post(self) -> None:
        self.write_json({"ok": True})


@pytest.mark.parametrize(("verb", "expected"), [("GET", True), ("POST", False)])
async def test_the_probe_tells_an_undecorated_verb_from_a_decorated_one(
    fetch_status: StatusFetch, jp_serverapp: Any, jp_base_url: str, verb: str, expected: bool
) -> None:
    pattern = url_path_join(jp_base_url, "serve", "probe-check")
    jp_serverapp.web_app.default_router.rules.insert(
        0, Rule(PathMatches(pattern), _Undecorated, {"name": "jupyter_serve"})
    )
    assert await refused(fetch_status, verb, "probe-check") is expected


@pytest.mark.parametrize(("pattern", "verb"), CASES)
async def test_every_verb_of_every_route_accepts_the_token_three_ways(
    fetch_status: StatusFetch, jp_serverapp: Any, pattern: str, verb: str
) -> None:
    path = routed_path(pattern)
    token = jp_serverapp.identity_provider.token
    for scheme in ("token", "Bearer"):
        assert await fetch_status(verb, path, {"Authorization": f"{scheme} {token}"}) != 403
    assert await fetch_status(verb, path, {"Authorization": ""}, token=token) != 403


OPEN_PREFLIGHT = [pattern for pattern, route in ROUTES if "OPTIONS" not in own_verbs(route)]


@pytest.mark.parametrize("pattern", OPEN_PREFLIGHT)
async def test_the_open_cors_preflight_reveals_nothing(
    http_server_client: Any, jp_base_url: str, pattern: str
) -> None:
    url = url_path_join(jp_base_url, "serve", routed_path(pattern))
    response = await http_server_client.fetch(url, method="OPTIONS")
    assert (response.code, response.body) == (200, b"")
    assert "GET" in response.headers["Access-Control-Allow-Methods"]


async def test_a_refusal_says_forbidden_in_torchserves_error_shape(
    http_server_client: Any, jp_base_url: str
) -> None:
    for headers in ({"Authorization": ""}, {"Authorization": "token wrong"}):
        response = await http_server_client.fetch(
            url_path_join(jp_base_url, "serve", "models"), headers=headers, raise_error=False
        )
        assert response.code == 403
        assert json.loads(response.body) == {
            "code": 403,
            "type": "ForbiddenException",
            "message": "Forbidden",
        }


def _own_body_limit(pattern: str) -> Any:
    """The route's own `body_size_error` (the upload route's is `max_download_size`), else
    None: the base's `max_request_size` check (test_routes_store.py tests the other)."""
    method = dict(ROUTES)[pattern].body_size_error
    return None if method is ServeRoute.body_size_error else method


class TestOversizeBodies:
    """A body over `max_request_size` is a 413 on every route, after authentication (but
    the upload route's, whose limit is `max_download_size`)."""

    @pytest.fixture
    def jp_server_config(self, tmp_path: Any) -> dict[str, Any]:
        return server_config(tmp_path, max_request_size=1024)

    @pytest.mark.parametrize(
        ("pattern", "verb"),
        [case for case in CASES if case.values[1] not in ("HEAD", "OPTIONS")
         and _own_body_limit(case.values[0]) is None],
    )  # fmt: skip
    async def test_every_route_answers_413(
        self, http_server_client: Any, jp_serverapp: Any, jp_base_url: str, pattern: str,
        verb: str,
    ) -> None:  # fmt: skip
        token = jp_serverapp.identity_provider.token
        response = await http_server_client.fetch(
            url_path_join(jp_base_url, "serve", routed_path(pattern)), method=verb,
            body=b"x" * 2048, headers={"Authorization": f"token {token}"},
            allow_nonstandard_methods=True, raise_error=False,
        )  # fmt: skip
        assert response.code == 413
        assert json.loads(response.body)["type"] == "RequestEntityTooLargeException"
