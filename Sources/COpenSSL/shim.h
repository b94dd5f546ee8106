#ifndef PORTCULLIS_COPENSSL_SHIM_H
#define PORTCULLIS_COPENSSL_SHIM_H
// OpenSSL 3 headers used by Portcullis. Function-like macros and variadic
// functions do not import into Swift: wrap them here as static inline functions.
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/param_build.h>
#include <openssl/params.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

static inline unsigned long portcullis_openssl_version_number(void) { return OPENSSL_VERSION_NUMBER; }

#endif
