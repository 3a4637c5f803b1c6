/* An OCSP response for fuzz/data/rev-leaf.pem, checked against its issuer fuzz/data/rev-ca.pem at a
 * fixed time (signature, status, dates). */
#include "fuzz.h"

FZ_SWIFT_TARGET("ocsp")
