/* An HTTP/1.x response as the one HTTP client reads it (ACME, EST, CRL and OCSP fetches):
 * status line, headers, Content-Length, chunked and connection-delimited bodies, for GET and HEAD;
 * read whole and in pieces, which must agree. */
#include "fuzz.h"

FZ_SWIFT_TARGET("http_response")
