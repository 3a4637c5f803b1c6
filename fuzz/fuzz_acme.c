/* A JSON body from an ACME server read as the directory, an order, an authorization, a challenge,
 * a failed object and a problem document. */
#include "fuzz.h"

FZ_SWIFT_TARGET("acme")
