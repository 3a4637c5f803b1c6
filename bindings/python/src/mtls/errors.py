"""One exception class per libmtls status code, under MTLSError."""
from ._lib import lib


class MTLSError(Exception):
    """A libmtls failure: .code (the C status), .name (stable snake_case), .message."""
    code = -3
    name = "internal"

    def __init__(self, message, code=None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message


_CODES = {
    -1: "InvalidArgument", -2: "NoMemory", -3: "Internal", -4: "IOError_", -5: "ParseError",
    -6: "BufferTooSmall", -7: "NotFound", -10: "BadPassword", -11: "Corrupt", -12: "NotPKCS12",
    -13: "NoIdentity", -14: "Unsupported", -15: "KeyMismatch", -16: "LimitExceeded",
    -20: "Duplicate", -21: "BadSecret", -22: "NotAStore", -23: "SchemaTooNew", -24: "Locked",
    -25: "ReadOnly", -26: "DiskFull", -30: "InvalidPolicy", -31: "Untrusted", -40: "ConnectError",
    -41: "Timeout", -42: "HandshakeError", -43: "PeerAlert", -44: "WantRead", -45: "WantWrite",
    -46: "Closed", -47: "NoMatchingIdentity", -50: "TokenError", -51: "PinIncorrect",
    -52: "PinLocked", -53: "TokenNotPresent", -54: "TokenRemoved", -55: "BadURI", -56: "PinRequired",
}
BY_CODE = {}
for _code, _cls in _CODES.items():
    _t = type(_cls, (MTLSError,), {"code": _code, "name": lib.mtls_error_name(_code).decode()})
    globals()[_cls] = _t
    BY_CODE[_code] = _t


def check(rc):
    """Raises the exception for a non-zero status, with the thread's last error message."""
    if rc == 0:
        return
    msg = (lib.mtls_last_error() or b"").decode("utf-8", "replace") or lib.mtls_strerror(rc).decode()
    raise BY_CODE.get(rc, MTLSError)(msg, rc)
