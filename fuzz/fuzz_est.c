/* An EST body: base64 or DER PKCS#7 certs-only (RFC 7030), and the same bytes as an error body. */
#include "fuzz.h"

FZ_SWIFT_TARGET("est")
