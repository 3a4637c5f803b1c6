/* An ACME renewalInfo answer (RFC 9773): the suggested window and the time chosen in it. */
#include "fuzz.h"

FZ_SWIFT_TARGET("renewal_info")
