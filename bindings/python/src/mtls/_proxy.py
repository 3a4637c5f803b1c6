"""HTTPS through an HTTP proxy with libmtls's TLS (private; used by mtls.requests, mtls.httpx and
mtls.http).

The proxy is asked for a tunnel with ``CONNECT host:port HTTP/1.1`` over a plain TCP connection;
once it answers 200, libmtls runs its TLS over that socket (mtls_conn_wrap_fd) with the TARGET's
host and port: the SNI, the name checked, the host rule, the pins and the identity are the
target's, exactly as on a direct connection. The proxy sees only the target's host and port and
the encrypted bytes. Only ``http://`` proxies are honoured: TLS to the proxy itself (an
``https://`` proxy) and SOCKS are refused with :class:`UnsupportedProxy`, never handed to another
TLS stack or done without a tunnel."""
import base64
import contextlib
import select
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional, Tuple
from urllib.parse import unquote, urlsplit

from ._url import bracketed, url_origin
from .errors import Error, InvalidArgument, Timeout, WantRead, WantWrite
from .tls import Connection, effective_timeout

# Without timeouts from the caller, libmtls's own defaults (read from the library, see
# mtls.tls.effective_timeout): for the TCP connection to the proxy and its answer to CONNECT, and
# for the handshake through the tunnel.
# The proxy's answer to CONNECT (status line and headers) is read up to this size.
_MAX_REPLY = 64 * 1024


class UnsupportedProxy(ValueError):
    """A proxy libmtls cannot use without another TLS stack or protocol (https://, socks...)."""


class TunnelError(OSError):
    """The proxy could not be reached, or did not open the tunnel (``status`` is its answer's
    status code, None when it gave none)."""

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class HTTPProxy:
    """An ``http://`` proxy: where it listens and the headers sent with CONNECT (a
    Proxy-Authorization made from the URL's user information, and any the caller adds)."""
    host: str
    port: int
    headers: Tuple[Tuple[str, str], ...] = ()

    @classmethod
    def from_url(cls, url: str, headers: Optional[Mapping[str, str]] = None,
                 auth: Optional[Tuple[str, str]] = None) -> "HTTPProxy":
        """The proxy a URL names (``http://[user:password@]host[:port]``, port 80 by default;
        a URL without a scheme is http, as requests and httpx read it). `auth`, when given,
        wins over the URL's user information. Other schemes raise UnsupportedProxy."""
        text = url if "://" in url else "http://" + url
        parts = urlsplit(text)
        scheme = parts.scheme.lower()
        if scheme != "http":
            what = ("TLS to the proxy itself would need a second TLS layer, which libmtls does not run"
                    if scheme == "https" else
                    "SOCKS and other proxy protocols are not supported" if scheme.startswith("socks") else
                    "unknown proxy scheme")
            raise UnsupportedProxy(f"cannot use the proxy {_redact(parts)}: libmtls tunnels HTTPS only through "
                                   f"http:// proxies (HTTP CONNECT); {what}")
        if not parts.hostname:
            raise UnsupportedProxy(f"the proxy URL {_redact(parts)} has no host")
        # The host and port as the core reads every URL it connects to (an RFC 6874 zone,
        # "[fe80::1%25eth0]", decoded; a malformed port or zone refused); the user information,
        # which the core does not take in a URL, read here.
        try:
            host, port = url_origin(text)
        except InvalidArgument as e:
            raise UnsupportedProxy(f"the proxy URL {_redact(parts)} is not usable: {e}") from e
        hdrs = dict(headers or {})
        if auth is None and parts.username is not None:
            auth = (unquote(parts.username), unquote(parts.password or ""))
        if auth is not None and not any(k.lower() == "proxy-authorization" for k in hdrs):
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode("latin-1")).decode("ascii")
            hdrs["Proxy-Authorization"] = "Basic " + token
        return cls(host, port, tuple(hdrs.items()))

    def __str__(self) -> str:
        """The proxy's address, without credentials (for messages)."""
        return f"http://{_authority(self.host, self.port)}"


def _redact(parts: Any) -> str:
    """A URL for a message, without its user information."""
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{parts.scheme}://{_authority(host, port) if port else bracketed(host)}"


def _authority(host: str, port: Optional[int]) -> str:
    """host:port as CONNECT and Host want it (an IPv6 literal in brackets)."""
    return f"{bracketed(host)}:{port}"


def connect_request(proxy: HTTPProxy, host: str, port: int) -> bytes:
    """The CONNECT request asking `proxy` for a tunnel to host:port (sync and asyncio send the
    same bytes). A line break in the target or a header is refused: it would smuggle a request."""
    target = _authority(host, port)
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"] + [f"{k}: {v}" for k, v in proxy.headers]
    if any(c in line for line in lines for c in "\r\n\0"):
        raise UnsupportedProxy(f"a line break in the CONNECT request for {target!r} (target or proxy headers)")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class ConnectReply:
    """The proxy's answer to CONNECT, read without I/O of its own so that the blocking and the
    asyncio tunnels share it: the caller peeks at the socket (MSG_PEEK), gives the bytes to
    :meth:`take`, and consumes from the socket exactly the count it returns — never a byte past
    the answer's blank line, which belongs to the server's TLS — until :attr:`complete`; then
    :meth:`check` raises TunnelError unless the tunnel is open."""

    def __init__(self, proxy: HTTPProxy, host: str, port: int) -> None:
        self.proxy, self.target = proxy, _authority(host, port)
        self.head = bytearray()
        self.complete = False

    def take(self, peeked: bytes) -> int:
        """How many of `peeked` (what the socket holds now, b"" at its end) belong to the answer."""
        if not peeked:
            raise TunnelError(f"the proxy {self.proxy} closed the connection before answering CONNECT")
        data = self.head + peeked
        ends = [i + len(sep) for sep in (b"\r\n\r\n", b"\n\n") for i in [data.find(sep)] if i >= 0]
        if ends:
            end = min(ends)
            used = end - len(self.head)
            self.head, self.complete = data[:end], True
            return used
        if len(data) > _MAX_REPLY:
            raise TunnelError(f"the proxy {self.proxy} answered CONNECT with more than {_MAX_REPLY} bytes of headers")
        self.head = data
        return len(peeked)

    def check(self) -> None:
        """TunnelError (with the status) unless the proxy answered 200."""
        status_line = bytes(self.head).split(b"\n", 1)[0].decode("latin-1").strip()
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise TunnelError(f"the proxy {self.proxy} answered CONNECT with {status_line[:100]!r}, not HTTP")
        status, reason = int(parts[1]), parts[2] if len(parts) > 2 else ""
        if status != 200:
            raise TunnelError(f"the proxy {self.proxy} refused the tunnel to {self.target}: {status} {reason}".rstrip(),
                              status)


def open_tunnel(proxy: HTTPProxy, host: str, port: int, timeout: Optional[float] = None) -> socket.socket:
    """A TCP connection to `proxy` on which it has opened a tunnel to host:port (answered 200 to
    CONNECT). Anything else raises TunnelError naming the proxy and its answer."""
    t = effective_timeout(timeout, "connect_timeout_ms")
    request = connect_request(proxy, host, port)
    try:
        sock = socket.create_connection((proxy.host, proxy.port), timeout=t)
    except OSError as e:
        raise TunnelError(f"cannot connect to the proxy {proxy}: {e}") from e
    with closed_on_failure(sock, proxy):
        try:
            sock.sendall(request)
            reply = ConnectReply(proxy, host, port)
            while not reply.complete:
                used = reply.take(sock.recv(_MAX_REPLY, socket.MSG_PEEK))
                sock.recv(used, socket.MSG_WAITALL)  # bytes already queued: returns them all at once
            reply.check()
            sock.settimeout(None)  # from here on TunnelConnection keeps the timeouts (the socket is made non-blocking)
            return sock
        except socket.timeout as e:
            raise TunnelError(f"the proxy {proxy} did not answer CONNECT within {t} s") from e


@contextlib.contextmanager
def closed_on_failure(sock: socket.socket, proxy: HTTPProxy) -> Iterator[None]:
    """Around the CONNECT exchange of open_tunnel and its asyncio form: on any failure `sock` is
    closed, and an OSError that is not already a TunnelError becomes one naming the proxy."""
    try:
        yield
    except OSError as e:
        sock.close()
        if isinstance(e, TunnelError):
            raise
        raise TunnelError(f"the tunnel through the proxy {proxy} failed: {e}") from e
    except BaseException:
        sock.close()
        raise


class TunnelConnection(Connection):
    """A libmtls connection over a proxy's tunnel, that behaves as a blocking Connection.

    It owns the tunnel's socket and closes it after the TLS connection (mtls_conn_wrap_fd leaves
    a wrapped socket to its caller). mtls_conn_wrap_fd has no form that stops before the
    handshake, as mtls_conn_open does for mtls_conn_connect, and a handshake that fails inside it
    leaves no connection whose evaluation could be read: so the connection is made non-blocking
    and its handshake, reads and writes wait for the socket here, within the connection's
    handshake and I/O timeouts. A refused server's TrustError then carries the evaluation and its
    reasons, as on a direct connection."""
    _sock: Optional[socket.socket] = None
    _io_timeout: Optional[float] = None

    def _wait(self, want: Error, deadline: Optional[float], what: str) -> None:
        """Waits until the socket is readable (WantRead) or writable (WantWrite); Timeout at
        the deadline (a time.monotonic() value; None: none)."""
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise Timeout(f"the {what} timed out", Timeout.code)
        poller = select.poll()
        poller.register(self.fileno(), select.POLLIN if isinstance(want, WantRead) else select.POLLOUT)
        poller.poll(None if remaining is None else max(1, int(remaining * 1000)))

    @staticmethod
    def _deadline(seconds: Optional[float]) -> Optional[float]:
        return None if seconds is None or seconds == float("inf") else time.monotonic() + seconds

    def _blocking(self, call: Callable[[], Any], seconds: Optional[float], what: str) -> Any:
        deadline = self._deadline(seconds)
        while True:
            try:
                return call()
            except (WantRead, WantWrite) as want:
                self._wait(want, deadline, what)

    def handshake_within(self, seconds: Optional[float]) -> None:
        """Runs the handshake to its end within `seconds` (None: no limit)."""
        self._blocking(super().handshake, seconds, "TLS handshake through the proxy's tunnel")

    def read(self, n: int = 16384) -> bytes:
        return self._blocking(lambda: super(TunnelConnection, self).read(n), self._io_timeout, "read")

    def readinto(self, buffer: Any) -> int:
        return self._blocking(lambda: super(TunnelConnection, self).readinto(buffer), self._io_timeout, "read")

    def write(self, data: bytes) -> int:
        return self._blocking(lambda: super(TunnelConnection, self).write(data), self._io_timeout, "write")

    def close(self) -> None:
        try:
            super().close()
        finally:
            sock, self._sock = self._sock, None
            if sock is not None:
                sock.close()


def connect_via(proxy: HTTPProxy, host: str, port: int, *, timeout: Optional[float] = None,
                handshake_timeout: Optional[float] = None, io_timeout: Optional[float] = None,
                **options: Any) -> TunnelConnection:
    """A handshaken libmtls connection to host:port through `proxy`'s CONNECT tunnel. `options`
    are :class:`mtls.ConnectOptions` fields (the identity an Identity already resolved); they and
    the policy apply to the target, never to the proxy. `timeout` bounds reaching the proxy and
    its answer, `handshake_timeout` the handshake (None or 0: libmtls's default; negative or inf: no
    limit), `io_timeout` each
    read and write (None: none), in seconds. A refused server raises TrustError with the
    evaluation."""
    sock = open_tunnel(proxy, host, port, timeout)
    try:
        options["non_blocking"] = True
        conn = TunnelConnection.wrap(sock, host, port, **options)
    except BaseException:
        sock.close()
        raise
    conn._sock = sock
    conn._io_timeout = io_timeout
    try:
        conn.handshake_within(effective_timeout(handshake_timeout, "handshake_timeout_ms"))
    except BaseException:
        conn.close()
        raise
    return conn
