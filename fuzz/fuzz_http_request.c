/* A request head as the one responder reads it (the metrics endpoint, the ACME http-01
 * challenge responder), and the answer it makes, which must read back as an HTTP response. */
#include "fuzz.h"

FZ_SWIFT_TARGET("http_request")
