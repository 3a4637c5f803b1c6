"""PKCS#12 import and export (mtls_pkcs12). The Identity class lives in mtls.identity and is
re-exported here, so ``from mtls.pkcs12 import Identity`` keeps working."""
import os
from typing import List, Optional, Union

from ._lib import lib
from ._handle import utf8, out_handle
from .certificate import Certificate
from .identity import (  # noqa: F401 - re-exported: the names this module has always had
    Identity, ChainCheck, read_pkcs12, CHAIN_VERIFIED, CHAIN_COMPLETE, CHAIN_SIGNATURES_OK, CHAIN_WITHIN_VALIDITY,
    PKCS12_MODERN, PKCS12_LEGACY,
)


class PKCS12:
    """The result of a PKCS#12 import: .identities and .certificates (both in file order)."""

    def __init__(self, identities: List[Identity], certificates: List[Certificate],
                 password_encoding: str = "given") -> None:
        self.identities = identities
        self.certificates = certificates
        #: Which password encoding opened the file: "given", or for None/"" "empty" or "absent"
        #: (both are tried, as OpenSSL does).
        self.password_encoding = password_encoding

    @classmethod
    def _from_handle(cls, h):
        return cls(*read_pkcs12(h))

    @classmethod
    def parse(cls, data: bytes, password: Optional[Union[str, bytes]] = None) -> "PKCS12":
        """Imports PKCS#12 bytes. password=None is "no password" and "" the empty password: given
        either, both encodings are tried, and .password_encoding says which opened the file."""
        data = bytes(data)
        return cls._from_handle(out_handle(lib.mtls_pkcs12_import, data, len(data), utf8(password)))

    @classmethod
    def load(cls, path: "Union[str, os.PathLike[str]]", password: Optional[Union[str, bytes]] = None) -> "PKCS12":
        return cls._from_handle(out_handle(lib.mtls_pkcs12_load, utf8(os.fspath(path)), utf8(password)))

    def __repr__(self):
        return f"<PKCS12 {len(self.identities)} identities, {len(self.certificates)} certificates>"


__all__ = ["PKCS12", "Identity", "ChainCheck", "CHAIN_VERIFIED", "CHAIN_COMPLETE", "CHAIN_SIGNATURES_OK",
           "CHAIN_WITHIN_VALIDITY", "PKCS12_MODERN", "PKCS12_LEGACY"]
