"""A socket-like object over a libmtls connection (private), so that http.client, urllib3 (and
through them urllib, requests, httpx) speak HTTP over libmtls: recv/recv_into/send/sendall,
makefile, fileno, settimeout, shutdown and close with the reference counting of socket.socket
(a file made by makefile keeps the connection open until it is closed too)."""
import io
import socket
from typing import Any, Optional

from .errors import Closed
from .tls import Connection


# The most one write copies out of a caller's buffer.
_CHUNK = 1 << 20


class TLSSocket:
    """Looks like a connected socket.socket; reads and writes go through libmtls."""

    def __init__(self, conn: Connection) -> None:
        self.connection = conn
        self._fd = conn.fileno()  # fixed for the connection's life; select() asks often
        self._timeout: Optional[float] = None
        self._io_refs = 0
        self._closed = False

    # reading and writing
    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        if nbytes:
            buffer = memoryview(buffer).cast("B")[:nbytes]
        try:
            return self.connection.readinto(buffer)
        except Closed:
            return 0

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        try:
            return self.connection.read(bufsize)
        except Closed:
            return b""

    def send(self, data: Any, flags: int = 0) -> int:
        return self.connection.write(bytes(data))

    def sendall(self, data: Any, flags: int = 0) -> None:
        if type(data) is bytes and len(data) <= _CHUNK:
            # http.client's requests: one write, the bytes passed as they are.
            n = self.connection.write(data)
            if n == len(data):
                return
            view = memoryview(data)[n:]
        else:
            view = memoryview(data).cast("B")
        while len(view):
            n = self.connection.write(bytes(view[:_CHUNK]))
            view = view[n:]

    def makefile(self, mode: str = "r", buffering: Optional[int] = None, *, encoding: Optional[str] = None,
                 errors: Optional[str] = None, newline: Optional[str] = None) -> Any:
        """A file over the connection, as socket.socket.makefile makes one."""
        if not set(mode) <= {"r", "w", "b"}:
            raise ValueError(f"invalid mode {mode!r} (only r, w, b allowed)")
        reading, writing = "r" in mode, "w" in mode
        rawmode = ("r" if reading else "") + ("w" if writing else "")
        raw = socket.SocketIO(self, rawmode)  # type: ignore[arg-type]  # duck-typed: recv_into, send
        self._io_refs += 1
        if buffering is None:
            buffering = -1
        if buffering < 0:
            buffering = io.DEFAULT_BUFFER_SIZE
        if buffering == 0:
            if "b" not in mode:
                raise ValueError("unbuffered streams must be binary")
            return raw
        if reading and writing:
            buf: Any = io.BufferedRWPair(raw, raw, buffering)
        elif reading:
            buf = io.BufferedReader(raw, buffering)
        else:
            buf = io.BufferedWriter(raw, buffering)
        if "b" in mode:
            return buf
        text = io.TextIOWrapper(buf, encoding, errors, newline)
        text.mode = mode  # type: ignore[misc]
        return text

    def _decref_socketios(self) -> None:
        if self._io_refs > 0:
            self._io_refs -= 1
        if self._closed:
            self.close()

    # socket odds and ends the HTTP clients call
    def fileno(self) -> int:
        return -1 if self.connection._h is None else self._fd

    def settimeout(self, timeout: Optional[float]) -> None:
        # The connection's I/O timeout is fixed when it is made (the pool's timeout); kept here
        # for gettimeout.
        self._timeout = timeout

    def gettimeout(self) -> Optional[float]:
        return self._timeout

    def setblocking(self, flag: bool) -> None:
        self._timeout = None if flag else 0.0

    def setsockopt(self, *args: Any) -> None:
        pass  # TCP_NODELAY and keep-alive are set by libmtls on its own socket

    def shutdown(self, how: int = socket.SHUT_RDWR) -> None:
        try:
            if self.connection._h is not None:
                self.connection.shutdown()
        except Exception:  # noqa: BLE001 - the peer may have gone: shutting down is best effort
            pass

    def close(self) -> None:
        self._closed = True
        if self._io_refs <= 0:
            self.connection.close()

    @property
    def closed(self) -> bool:
        return self.connection._h is None

    def __enter__(self) -> "TLSSocket":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
