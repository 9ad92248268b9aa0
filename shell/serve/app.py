"""The ASGI app: routes, the bearer-token check, errors as JSON, the page.

Built on Starlette (routing, requests, streaming responses), which runs on
Trio through AnyIO, so handlers call the harness directly - the server
(Hypercorn's Trio worker, cli/serve.py) and the harness share one Trio run.
``open_app`` is an async context manager because the SSE hubs run in a
nursery of their own for as long as the app serves.

Security defaults: every ``/api`` route except the OpenAPI document needs
``Authorization: Bearer <token>`` (compared in constant time; 401 otherwise);
CORS is off unless origins are given; bodies are limited (413). The page and
its static files carry no data and need no token: the page asks for it (or
takes it from the URL's ``#token=`` fragment, which never reaches a server
log) and sends it with every request.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

import attrs
import trio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from pidurable.core.model import AgentConfig

from ..errors import ConversationBusy, HarnessClosed, InvalidInput, NotFound
from ..harness import Harness
from .api import Api, ApiError, json_response
from .hub import Hubs
from .schema import openapi

log = logging.getLogger("pidurable.serve")

#: The largest request body accepted, in bytes (a 413 beyond).
MAX_BODY = 1024 * 1024

#: The static files of the page (shell/serve/static), by URL name.
STATIC_TYPES = {"app.js": "text/javascript", "app.css": "text/css", "index.html": "text/html", "favicon.svg": "image/svg+xml"}

#: Routes that need no token: the page, its files, the API's description.
PUBLIC_API = frozenset({"/api/openapi.json"})


@attrs.frozen(kw_only=True)
class ServeOptions:
    """How the app serves (``pidurable serve`` sets these from its flags)."""

    #: Every ``/api`` request must carry it as a bearer token.
    token: str
    #: The agent of conversations created through the API.
    agent: AgentConfig | None = None
    max_body: int = MAX_BODY
    #: Origins allowed to call the API from a browser (CORS); none by default.
    cors_origins: tuple[str, ...] = ()
    #: Entries a live view holds, and at most one view per this many ms per
    #: conversation (many clients, one busy conversation: docs/serve.md).
    view_entries: int = 50
    view_interval_ms: int = 50

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.token, str) or len(self.token) < 8:
            raise InvalidInput("the API token must be a string of at least 8 characters")


def _version() -> str:
    from pidurable import __version__

    return str(__version__)


class BearerAuth:
    """Pure ASGI middleware: ``/api`` requests need the token (401 JSON)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == "/api" or path.startswith("/api/")) and path not in PUBLIC_API:
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if scope.get("method") != "OPTIONS" and not hmac.compare_digest(given, self.expected):
                response = _error(401, "unauthorized", "This API needs the header 'Authorization: Bearer <token>' (pidurable serve prints the token, or reads --token-file)")
                response.headers["WWW-Authenticate"] = "Bearer"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _error(status: int, code: str, message: str) -> Response:
    return json_response({"error": {"code": code, "message": message}}, status)


async def _on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _error(exc.status, exc.code, exc.message)


async def _on_invalid(request: Request, exc: Exception) -> Response:
    return _error(400, "invalid_input", str(exc))


async def _on_not_found(request: Request, exc: Exception) -> Response:
    return _error(404, "not_found", str(exc) or "Not found")


async def _on_busy(request: Request, exc: Exception) -> Response:
    return _error(409, "busy", str(exc))


async def _on_closed(request: Request, exc: Exception) -> Response:
    return _error(503, "closed", str(exc))


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "invalid_input")
    return _error(exc.status_code, code, str(exc.detail))


async def _on_crash(request: Request, exc: Exception) -> Response:
    log.error("internal error answering %s %s", request.method, request.url.path, exc_info=exc)
    return _error(500, "internal", f"Internal error ({type(exc).__name__}); the server log has the details")


def _static() -> dict[str, bytes]:
    folder = resources.files("pidurable.shell.serve") / "static"
    return {name: (folder / name).read_bytes() for name in STATIC_TYPES if (folder / name).is_file()}


def build_app(harness: Harness, hubs: Hubs, options: ServeOptions) -> Starlette:
    """The app over an open harness and running hubs (see ``open_app``)."""
    api = Api(harness, hubs, agent=options.agent, max_body=options.max_body)
    files = _static()
    document = openapi(_version())

    def static(name: str) -> Callable[[Request], Awaitable[Response]]:
        async def serve(request: Request) -> Response:
            return Response(files[name], media_type=STATIC_TYPES[name], headers={"Cache-Control": "no-cache"})

        return serve

    async def openapi_json(request: Request) -> Response:
        return json_response(document)

    def post(path: str, endpoint: Callable[[Request], Awaitable[Response]]) -> Route:
        return Route(path, endpoint, methods=["POST"])

    routes = [
        Route("/", static("index.html")),
        *(Route(f"/static/{name}", static(name)) for name in files if name != "index.html"),
        Route("/api/openapi.json", openapi_json),
        Route("/api/conversations", api.list_conversations, methods=["GET"]),
        post("/api/conversations", api.create_conversation),
        Route("/api/conversations/{id}", api.get_conversation),
        Route("/api/conversations/{id}/transcript", api.transcript),
        Route("/api/conversations/{id}/events", api.events),
        post("/api/conversations/{id}/submissions", api.submit),
        post("/api/conversations/{id}/abort", api.abort),
        post("/api/conversations/{id}/compact", api.compact),
        post("/api/conversations/{id}/fork", api.fork),
        Route("/api/submissions/{id}", api.submission),
        Route("/api/inspect", api.inspect),
        Route("/api/usage", api.usage),
    ]
    middleware = [Middleware(BearerAuth, token=options.token)]
    if options.cors_origins:  # outermost: preflights are answered before the token check
        middleware.insert(
            0,
            Middleware(CORSMiddleware, allow_origins=list(options.cors_origins), allow_methods=["GET", "POST"], allow_headers=["Authorization", "Content-Type"]),
        )
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        ApiError: _on_api_error,
        InvalidInput: _on_invalid,
        NotFound: _on_not_found,
        ConversationBusy: _on_busy,
        HarnessClosed: _on_closed,
        HTTPException: _on_http,
        Exception: _on_crash,
    }
    return Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)


@asynccontextmanager
async def open_app(harness: Harness, options: ServeOptions) -> AsyncIterator[Starlette]:
    """``async with open_app(harness, options) as app:`` - the ASGI app of
    ``harness``, serving until the block ends (serve it in the block)."""
    hubs = Hubs(harness, entries=options.view_entries, interval_ms=options.view_interval_ms)
    async with trio.open_nursery() as nursery:
        await nursery.start(hubs.run)
        try:
            yield build_app(harness, hubs, options)
        finally:
            nursery.cancel_scope.cancel()
