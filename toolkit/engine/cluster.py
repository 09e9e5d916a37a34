"""Where a plan runs: `connect()` turns whatever the user has into a distributed Client.

The embedded default is decided here and only here: threads when the plan's services release
the GIL (numba kernels, zarr and Icechunk I/O; start-up takes milliseconds), spawned processes
when they hold it (GRIB decoding; Icechunk sessions do not survive fork, so never forked).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.engine.ship import checked

if TYPE_CHECKING:  # distributed is imported when a cluster is wanted: a run in this process
    from distributed import Client, LocalCluster  # does not pay half a second for it

ClusterLike = Any  # None | str | Client | Session | anything with .get_client()


class ClusterUnreachable(ConnectionError):
    """No Dask scheduler answered at the given address."""


class BadOption(ValueError):
    """A cluster option that cannot work (a malformed address, a report nobody can write):
    refused when the command starts, before anything is written."""


def check_address(address: str) -> None:
    """`address` names a scheduler distributed can reach from here, or BadOption naming it:
    its parser decides the form (tcp://host:port, tls://, ws://, a bare host:port), its comm
    registry the scheme, its Security the certificates a tls:// address needs. Distributed
    itself says a raw ValueError or TypeError only once it connects."""
    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port

    named = f"--cluster / TOOLKIT_CLUSTER {address!r}"
    try:
        scheme, location = parse_address(address)
        if scheme in ("tcp", "tls", "ws", "wss"):
            parse_host_port(location)
    except ValueError as err:
        raise BadOption(
            f"{named} is not a scheduler address ({err}); "
            "want tcp://host:port, or leave it unset for the embedded cluster"
        ) from None
    why = _unknown_scheme(scheme) or _unsecured(scheme)
    if why is not None:
        raise BadOption(f"{named}: {why}")


def _unknown_scheme(scheme: str) -> str | None:
    """Why distributed cannot speak `scheme` (its comm registry, entry points included), with
    where to go instead, or None."""
    from distributed.comm import registry

    if scheme == "gateway":  # dask-gateway registers it once imported, yet an address alone
        return (  # cannot carry the credentials the gateway gives its own client
            "a dask-gateway address cannot be reached from its address alone (the gateway "
            "hands its credentials to its own client): run the job from Python with "
            "cluster=gateway.connect(NAME) (docs/clusters.md, dask-gateway)"
        )
    try:
        registry.get_backend(scheme)
    except ValueError:
        pass
    else:
        return None
    known = ", ".join(f"{s}://" for s in sorted(registry.backends))
    if scheme in ("http", "https"):
        fix = (
            "that is a web address, such as the dashboard's; give the scheduler's, which "
            "`dask scheduler` prints as 'Scheduler at:' (usually tcp://HOST:8786)"
        )
    else:
        fix = "want tcp://host:port"
    return f"unknown scheme {scheme!r} (distributed speaks {known}); {fix}"


TLS_SETTINGS = "distributed.comm.tls.ca-file and distributed.comm.tls.client.cert (and .key)"
TLS_ENV = "DASK_DISTRIBUTED__COMM__TLS__CA_FILE, ...__CLIENT__CERT, ...__CLIENT__KEY"


def _unsecured(scheme: str) -> str | None:
    """Why the client's Dask security settings cannot reach a `scheme` address (tls:// without
    certificates, or certificates that do not load; tcp:// when encryption is required), or
    None. A `distributed.client.security-loader` supplies its own: then the Client decides."""
    import ssl

    import dask
    from distributed.security import Security

    if dask.config.get("distributed.client.security-loader", None):
        return None
    security = Security()
    if scheme in ("tcp", "ws") and security.require_encryption:
        return (
            f"{scheme}:// is not encrypted and distributed.comm.require-encryption is set; "
            "give the scheduler's tls:// address, or unset it"
        )
    if scheme not in ("tls", "gateway"):
        return None
    try:
        context = security.get_connection_args("client")["ssl_context"]
    except (OSError, ValueError, ssl.SSLError) as err:
        return f"its TLS certificates do not load ({err}); correct {TLS_SETTINGS}"
    if context is None:
        return (
            f"{scheme}:// needs certificates and none are configured: set {TLS_SETTINGS} "
            f"({TLS_ENV})"
        )
    return None


def check_dask_env(environ: Mapping[str, str] | None = None) -> None:
    """Every DASK_* setting in the environment fits what dask and distributed declare for it
    (their published schemas; a duration or a size where the default is one), or BadOption naming
    the variable. Distributed reads most of them only as a cluster starts: a bad one failed
    mid-run (`MemoryError:`), after the job had written."""
    env = os.environ if environ is None else environ
    names = sorted(n for n in env if n.startswith("DASK_") and n != "DASK_INTERNAL_INHERIT_CONFIG")
    if not names:
        return
    import dask.config
    import jsonschema
    from dask.utils import parse_bytes, parse_timedelta

    schema, defaults = _dask_declared()
    for name in names:
        path = name[5:].lower().split("__")
        value = dask.config.interpret_value(env[name])
        rule, default = _declared(schema, path, schema=True), _declared(defaults, path)
        why = None
        if isinstance(rule, dict) and not jsonschema.Draft7Validator(rule).is_valid(value):
            why = f"want {_accepted(rule)}"
        elif isinstance(default, str) and isinstance(value, str):
            for parse, what in ((parse_timedelta, "a duration"), (parse_bytes, "a size")):
                if _parses(parse, default) and not _parses(parse, value):
                    why = f"want {what} such as {default}"
        if why:
            raise BadOption(
                f"{name}={env[name]!r}: not a valid Dask setting {'.'.join(path)} ({why}); "
                "correct or unset it"
            )


def _parses(parse: Callable[[str], Any], text: str) -> bool:
    try:
        parse(text)
    except (ValueError, KeyError, TypeError):
        return False
    return True


def _dask_declared() -> tuple[dict[str, Any], dict[str, Any]]:
    """(schema, defaults) of dask and distributed, from the YAML files they ship."""
    import importlib.util

    import yaml

    schema: dict[str, Any] = {"properties": {}}
    defaults: dict[str, Any] = {}
    for package in ("dask", "distributed"):
        spec = importlib.util.find_spec(package)
        folder = Path(spec.origin).parent if spec and spec.origin else None
        if folder is None or not (folder / f"{package}.yaml").is_file():
            continue
        defaults.update(yaml.safe_load((folder / f"{package}.yaml").read_text()) or {})
        declared = yaml.safe_load((folder / f"{package}-schema.yaml").read_text()) or {}
        schema["properties"].update(declared.get("properties", {}))
    return schema, defaults


def _declared(node: Any, path: list[str], schema: bool = False) -> Any:
    """The schema rule (or the default) at a config path, or None; dask reads `_` and `-`
    in a key alike."""
    for part in path:
        if schema:
            node = node.get("properties") if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return None
        key = next((k for k in (part, part.replace("_", "-")) if k in node), None)
        if key is None:
            return None
        node = node[key]
    return node


def _accepted(rule: dict[str, Any]) -> str:
    """What a schema rule accepts, in words: `number > 0 and <= 1 or false`."""
    for key in ("oneOf", "anyOf"):
        if key in rule:
            return " or ".join(_accepted(r) for r in rule[key])
    if "enum" in rule:
        return " or ".join(json.dumps(v) for v in rule["enum"])
    kind = rule.get("type", "a value")
    kind = " or ".join(kind) if isinstance(kind, list) else kind
    ops = (
        ("minimum", ">="),
        ("exclusiveMinimum", ">"),
        ("maximum", "<="),
        ("exclusiveMaximum", "<"),
    )
    bounds = " and ".join(f"{op} {rule[k]}" for k, op in ops if k in rule)
    return f"{kind} {bounds}".strip()


CONNECT_SECONDS = 10.0  # a scheduler address gets at most this long to answer (or Dask's own)
REFUSED_SECONDS = 2.0  # a port nobody listens on is retried this long (a scheduler starting)
GREETING_SECONDS = 3.0  # a Dask scheduler greets a connection at once; this long is silence
REPLY_SECONDS = 2.0  # then a silent server is asked in HTTP, and given this long to answer
HTTP_PROBE = b"GET / HTTP/1.0\r\n\r\n"


def _no_scheduler(address: str) -> str | None:
    """Why no Dask scheduler answers at a tcp:// or tls:// address, or None when one may: its
    port refuses, or (tcp://) what listens there does not greet as a scheduler does. Distributed
    retries a refused port until its timeout, and reads whatever another server sends as a
    frame: an HTTP server (the dashboard's port) hung it, or raised `MemoryError` for exabytes."""
    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port

    scheme, location = parse_address(address)
    if scheme not in ("tcp", "tls"):
        return None
    host, port = parse_host_port(location)
    dialled = _dial(host, port)
    if not isinstance(dialled, socket.socket):
        return dialled
    with dialled:
        return None if scheme == "tls" else _not_greeted(dialled)


no_scheduler = _no_scheduler  # the engine's loop asks, after an error, whether it is gone


def _dial(host: str, port: int) -> socket.socket | str | None:
    """A connection to host:port; why none, when the port refused every attempt for
    REFUSED_SECONDS; or None when the Client should find out (unresolvable, filtered)."""
    deadline = time.monotonic() + REFUSED_SECONDS
    while True:
        try:
            return socket.create_connection((host, port), timeout=REFUSED_SECONDS)
        except ConnectionRefusedError:
            if time.monotonic() >= deadline:
                return f"nothing listens on port {port} of {host}: connection refused"
            time.sleep(0.1)  # a scheduler that is starting binds within moments
        except OSError:
            return None  # unresolvable, filtered, slow: the Client says what it finds


def _not_greeted(sock: socket.socket) -> str | None:
    """Why the server on `sock` is not a Dask scheduler, or None. A scheduler writes its
    handshake first, a msgpack frame behind an 8-byte length and a frame count; a web server
    waits for a request, so a silent one is sent an HTTP line to name what it is."""
    waited = min(GREETING_SECONDS, _connect_seconds())
    said, closed = _read(sock, 16, waited)
    if _greets(said):
        return None
    silent = not said and not closed
    if silent:
        try:
            sock.sendall(HTTP_PROBE)
        except OSError:
            return "the server there closed the connection without a Dask handshake"
        said, closed = _read(sock, 16, REPLY_SECONDS)
        waited += REPLY_SECONDS
        if _greets(said):  # a scheduler slow to greet (its event loop was busy)
            return None
    if said.startswith(b"HTTP/"):
        return (
            "an HTTP server answers there, not a Dask scheduler: is it the dashboard port? "
            "the scheduler's port is usually 8786, printed by `dask scheduler` as 'Scheduler at:'"
        )
    if said[:1] in (b"\x15", b"\x16") and said[1:2] == b"\x03":  # a TLS alert or handshake
        return "a TLS server answers there: give the address as tls://HOST:PORT"
    if said:
        return f"something other than a Dask scheduler answers there (it sent {said[:16]!r})"
    if silent and not closed:
        return (
            f"a server there accepted the connection but said nothing in {waited:g} s, "
            "where a Dask scheduler greets at once"
        )
    return "the server there closed the connection without a Dask handshake"


def _read(sock: socket.socket, size: int, seconds: float) -> tuple[bytes, bool]:
    """Up to `size` bytes the server sends within `seconds`, and whether it closed."""
    said = b""
    deadline = time.monotonic() + seconds
    while len(said) < size:
        left = deadline - time.monotonic()
        if left <= 0:
            return said, False
        sock.settimeout(left)
        try:
            got = sock.recv(size - len(said))
        except TimeoutError:
            return said, False
        except OSError:
            return said, True
        if not got:
            return said, True
        said += got
    return said, False


def _greets(said: bytes) -> bool:
    """`said` opens as distributed's TCP frames do: a total length, then a frame count."""
    import struct

    if len(said) < 16:
        return False
    total, frames = struct.unpack("QQ", said[:16])
    return 0 < total <= 2**24 and 0 < frames <= 2**10


def _connect_seconds() -> float:
    """Dask's connect timeout (`distributed.comm.timeouts.connect`), at most CONNECT_SECONDS."""
    import dask
    from dask.utils import parse_timedelta

    configured = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), "s")
    return min(float(configured or CONNECT_SECONDS), CONNECT_SECONDS)


def check_report_path(path: Path | str) -> None:
    """The performance report can be written where asked, or BadOption before the run (not
    after it, with the work done and its report lost)."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        why = "is a directory"
    elif not parent.is_dir():
        why = f"its folder {parent} does not exist"
    elif not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        why = "is not writable here"
    else:
        return
    raise BadOption(f"--performance-report {target}: {why}; give a writable file path")


# Run by each embedded worker process as it starts (a preload script): a terminal's Ctrl-C
# reaches the whole process group, and only the toolkit process answers it, closing the workers
# (toolkit.engine.interrupt); a worker answering too would print a traceback of its own.
IGNORE_SIGINT = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"


WAIT_FOR_WORKERS = 60.0  # seconds a run waits for a scheduler's first worker


def await_workers(client: Client, seconds: float, say: Callable[[str], None] | None) -> None:
    """Return once the scheduler has a worker; with none after `seconds`, ClusterUnreachable
    naming its address (a scheduler without workers would take the graph and never answer)."""
    if client.nthreads():
        return
    address = client.scheduler.address
    if say is not None:
        say(f"waiting up to {seconds:g} s for a worker to join the scheduler at {address}")
    try:
        client.wait_for_workers(1, timeout=seconds)
    except TimeoutError:
        raise ClusterUnreachable(
            f"no worker joined the scheduler at {address} within {seconds:g} s: start workers "
            f"(dask worker {address}), or wait longer with --wait-for-workers"
        ) from None


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def embedded(
    holds_gil: bool = True, n_workers: int | None = None, quiet: bool = True
) -> LocalCluster:
    """The cluster a run starts when it is given none.

    `quiet`: its workers log nothing below CRITICAL. A failed task reaches the caller as its own
    exception naming the stage and task, so the worker's "Compute Failed" dump would only
    repeat it; `--debug` keeps distributed's logging as it is.
    """
    from distributed import LocalCluster

    common: dict[str, Any] = {"dashboard_address": ":0"}
    if quiet:
        common["silence_logs"] = logging.CRITICAL
    if holds_gil:
        return LocalCluster(
            n_workers=n_workers or default_workers(),
            threads_per_worker=1,
            processes=True,
            preload=[IGNORE_SIGINT],
            **common,
        )
    return LocalCluster(
        n_workers=1, threads_per_worker=n_workers or default_workers(), processes=False, **common
    )


def total_threads(client: Client) -> int:
    """Threads across the cluster's workers now (at least 1: an adaptive cluster may have none)."""
    return max(1, sum(client.nthreads().values()))


def dashboard(client: Client) -> str:
    """The dashboard link of the client's cluster, or why there is none."""
    link = client.dashboard_link
    return link or "no dashboard (install bokeh on the scheduler)"


def _current_client() -> Client | None:
    from distributed import Client

    try:
        return Client.current(allow_global=True)
    except ValueError:
        return None


@contextmanager
def connect(
    cluster: ClusterLike = None,
    *,
    n_workers: int | None = None,
    holds_gil: bool = True,
    check: bool = True,
    quiet: bool = True,
    wait_for_workers: float = WAIT_FOR_WORKERS,
    say: Callable[[str], None] | None = None,
) -> Iterator[Client]:
    """Yield a Client for `cluster` and close every client and cluster this call created.

    None: an embedded cluster (`embedded`). A string: a scheduler address. A `Client` or a
    `Session`: used as is. Anything with `.get_client()`: dask-gateway, Coiled, a LocalCluster
    you made yourself (dask-gateway makes a new client per call: that one is closed on exit).
    `check`: compare toolkit's code and its dependencies' versions on client, scheduler and
    workers (`check_versions`), and check every worker that joins an external cluster during
    the run (`toolkit.engine.ship.guard`).
    `quiet`: an embedded cluster's workers do not log what the caller is told anyway.
    `wait_for_workers`: a scheduler address with no worker yet is given this long for one to
    join (`say` tells the user it waits); an adaptive cluster object scales on demand instead.
    """
    from distributed import Client

    if isinstance(cluster, Session):
        yield cluster.client(holds_gil=holds_gil)
        return
    with ExitStack() as stack:
        if cluster is None:
            local = stack.enter_context(embedded(holds_gil, n_workers, quiet))
            client = stack.enter_context(Client(local))
        elif isinstance(cluster, str):
            check_address(cluster)  # from Python too: a scheme or TLS setting that cannot work
            why = _no_scheduler(cluster)
            if why is not None:
                raise ClusterUnreachable(
                    f"no Dask scheduler reachable at {cluster} ({why}); "
                    "check --cluster / TOOLKIT_CLUSTER"
                )
            try:
                client = Client(cluster, timeout=_connect_seconds())
            except OSError as err:
                raise ClusterUnreachable(
                    f"no Dask scheduler reachable at {cluster} ({err}); "
                    "check --cluster / TOOLKIT_CLUSTER"
                ) from err
            stack.enter_context(client)
            await_workers(client, wait_for_workers, say)
        elif isinstance(cluster, Client):
            client = cluster
        elif hasattr(cluster, "get_client"):
            before = _current_client()
            client = cluster.get_client()
            if client is not before:
                stack.enter_context(client)
        else:
            raise TypeError(
                f"cannot connect to {cluster!r}: pass None, a scheduler address, a "
                "distributed.Client, or a cluster object with .get_client() "
                "(dask-gateway, Coiled, LocalCluster)"
            )
        if check:
            stack.enter_context(checked(client, joins=cluster is not None))
        yield client


class Session:
    """One cluster for a whole command: connected on first use, closed on exit.

    A command validates its input before it needs a cluster, so nothing starts (and no
    dashboard link is printed) for a command that fails on bad arguments. `eager`: a given
    cluster the command will run on is reached on entry instead, so that an unreachable
    scheduler, one without workers or with other versions stops it before it writes. At first use it
    connects, checks versions, ships the running toolkit if asked, announces the dashboard
    link and starts distributed's performance report, which is written on exit. An embedded
    cluster is of the kind the first plan asks for (threads, or processes for GIL-holding work).
    """

    def __init__(
        self,
        cluster: ClusterLike = None,
        *,
        announce: Callable[[str], None] | None = None,
        performance_report: Path | str | None = None,
        ship: bool = False,
        quiet: bool = True,
        wait_for_workers: float = WAIT_FOR_WORKERS,
        eager: bool = False,
    ) -> None:
        if isinstance(cluster, str):
            check_address(cluster)
        check_dask_env()
        if performance_report is not None:
            check_report_path(performance_report)
        self.cluster = cluster
        self.quiet = quiet
        self.wait_for_workers = wait_for_workers
        self.eager = eager
        self.announce = announce
        self.performance_report = performance_report
        self.ship = ship
        self._stack = ExitStack()
        self._client: Client | None = None

    def client(self, holds_gil: bool = True) -> Client:
        if self._client is None:
            from distributed import performance_report

            if self.quiet:  # a lost scheduler is said in one line (engine.stream.ClusterLost),
                chatty = logging.getLogger("distributed.client")  # not as a logged traceback
                self._stack.callback(chatty.setLevel, chatty.level)
                chatty.setLevel(logging.CRITICAL)

            client = self._stack.enter_context(
                connect(
                    self.cluster,
                    holds_gil=holds_gil,
                    check=False,
                    quiet=self.quiet,
                    wait_for_workers=self.wait_for_workers,
                    say=self.announce,
                )
            )
            joins = self.cluster is not None  # an embedded cluster's workers are this install
            self._stack.enter_context(
                checked(client, shipping=self.ship, joins=joins, say=self.announce)
            )
            if self.announce is not None:
                self.announce(f"dashboard: {dashboard(client)}")
            if self.performance_report is not None:
                self._stack.enter_context(performance_report(str(self.performance_report)))
            self._client = client
        return self._client

    @property
    def embedded_unstarted(self) -> bool:
        """Nothing given, nothing started and no cluster report asked for: the `auto` executor
        may stay in this process (distributed's performance report needs a cluster)."""
        return self.cluster is None and self._client is None and self.performance_report is None

    def get_client(self) -> Client:
        return self.client()

    def close(self) -> None:
        self._client = None
        self._stack.close()

    def __enter__(self) -> Session:
        if self.eager:  # a given cluster the run will use: reached, workers there, versions
            self.client()  # checked -- before the command writes anything
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
