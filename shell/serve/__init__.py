"""``pidurable serve``: a harness over HTTP - a JSON API, a live page, SSE.

- :mod:`.app`: the ASGI app (Starlette on Trio): routes, token, errors, page;
- :mod:`.api`: the handlers, one library call each;
- :mod:`.schema`: the OpenAPI document and the request-body validator;
- :mod:`.hub`: Server-Sent Events shared by many clients (latest value);
- :mod:`.wire`: records as JSON (the store's converter);
- :mod:`.server`: Hypercorn's Trio worker;
- :mod:`.setup`: ``--app module:factory``.

Needs the ``serve`` extra (``pip install 'pidurable[serve]'``: Starlette and
Hypercorn). docs/serve.md describes the API and the page.
"""

from .app import MAX_BODY, ServeOptions, build_app, open_app
from .server import DEFAULT_HOST, DEFAULT_PORT, is_loopback, serve
from .setup import Setup, load_setup

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "MAX_BODY",
    "ServeOptions",
    "Setup",
    "build_app",
    "is_loopback",
    "load_setup",
    "open_app",
    "serve",
]
