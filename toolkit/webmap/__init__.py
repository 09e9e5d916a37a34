"""`toolkit serve`: a web map of a pyramid or a virtual repo, each tile read from the level
that matches its zoom. Needs the `serve` extra (starlette, uvicorn, Pillow, morecantile,
matplotlib); see docs/serve.md."""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import Any, Literal

__all__ = ["bind", "serve"]

MISSING = (
    "toolkit serve needs the `serve` extra: pip install 'zarr-toolkit[serve]' "
    "(make demo and make test install it)"
)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: any free one), refused in one line when taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP said outright: asyncio sets TCP_NODELAY on accepted connections only then,
    # and without it each response waits ~40 ms for the client's delayed ACK (Nagle)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise OSError(
            f"cannot listen on {host}:{port} ({err.strerror}); pick another --port "
            "(--port 0 takes any free one)"
        ) from None
    sock.listen(128)
    return sock


def serve(
    source: str,
    *,
    variable: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    credentials: Literal["anonymous", "env"] = "anonymous",
    store_options: Mapping[str, Any] | None = None,
    branch: str = "main",
    colormap: str | None = None,
    value_range: tuple[float, float] | None = None,
    refresh: float = 2.0,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the map of `source` (a pyramid store or an Icechunk repo) until interrupted.
    Binds to 127.0.0.1 unless `host` says otherwise; `on_ready(url)` is called once it listens."""
    try:
        import uvicorn

        from toolkit.webmap.app import Served, create_app
        from toolkit.webmap.view import Source
    except ImportError as err:
        raise ImportError(f"{MISSING} ({err.name} is missing)") from None

    served = Served(
        Source(source, credentials, dict(store_options or {}), branch),
        variable=variable, colormap=colormap, value_range=value_range, refresh=refresh,
    )  # fmt: skip
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    server = uvicorn.Server(
        uvicorn.Config(create_app(served), log_level="warning", access_log=False, lifespan="off")
    )
    if on_ready is not None:
        on_ready(f"http://{shown}:{bound}/")
    server.run(sockets=[sock])
