#ifndef MTLS_CP11KIT_SHIM_H
#define MTLS_CP11KIT_SHIM_H
/* p11-kit ships the PKCS#11 headers (standard CK_* names). */
#include <p11-kit/p11-kit.h>
#include <p11-kit/pkcs11.h>
#include <p11-kit/uri.h>
#include <p11-kit/pin.h>
#endif
