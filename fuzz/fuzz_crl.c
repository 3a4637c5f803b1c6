/* A CRL as a distribution point serves it (DER or PEM), accepted for fuzz/data/rev-ca.pem at a fixed
 * time (issuer, signature, extensions, dates) and fuzz/data/rev-leaf.pem looked up in it. */
#include "fuzz.h"

FZ_SWIFT_TARGET("crl")
