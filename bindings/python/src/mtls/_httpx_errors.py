"""libmtls's failures as httpx's own exceptions (private; shared by mtls.httpx.Transport and
AsyncTransport), so ``except httpx.ConnectError`` / ``httpx.TimeoutException`` and httpx-based
retry code catch them. The exception raised is also of libmtls's class (``.code``, ``.name``,
``.message``, a refused server's ``.evaluation``): see :func:`mtls.errors.as_http_error`."""
import httpx

from .errors import TLS_FAILURES, Closed, ConnectError, Error, Timeout, as_http_error


class ConnectFailed(Exception):
    """A libmtls failure while connecting, carried to the transport's handle_request (which
    raises it as httpx's connect error) apart from failures on a connection already made. Not an
    OSError, so nothing between (http.client, httpcore) takes it for one of its own."""

    def __init__(self, error: Error) -> None:
        super().__init__(str(error))
        self.error = error


def as_httpx_error(e: Error, request: httpx.Request, connecting: bool) -> BaseException:
    """`e` as httpx raises it: while connecting (TCP, TLS handshake, the server's verdict on our
    certificate) a timeout is ``httpx.ConnectTimeout`` and any other connection or TLS failure
    ``httpx.ConnectError`` (httpx's class for TLS failures too); afterwards a timeout is
    ``httpx.ReadTimeout`` and a closed connection ``httpx.ReadError``. Other failures (a bad
    argument, a store or token error) are returned as they are."""
    if isinstance(e, Timeout):
        return as_http_error(e, httpx.ConnectTimeout if connecting else httpx.ReadTimeout, request=request)
    if connecting and isinstance(e, (ConnectError, Closed) + TLS_FAILURES):
        return as_http_error(e, httpx.ConnectError, request=request)
    if isinstance(e, (ConnectError, Closed) + TLS_FAILURES):
        return as_http_error(e, httpx.ReadError, request=request)
    return e
