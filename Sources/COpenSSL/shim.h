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

// PortcullisAuth: selection for EVP_PKEY_fromdata of a public key (a composite macro).
static inline int portcullis_evp_pkey_public_key_selection(void) { return EVP_PKEY_PUBLIC_KEY; }
// PortcullisAuth: selection for EVP_PKEY_fromdata of a key pair.
static inline int portcullis_evp_pkey_keypair_selection(void) { return EVP_PKEY_KEYPAIR; }

// PortcullisKeys (TLS client): SNI is a macro over SSL_ctrl.
static inline long portcullis_ssl_set_sni(SSL *ssl, const char *name) { return SSL_set_tlsext_host_name(ssl, name); }
// PortcullisKeys (TLS client): TLS 1.2 minimum (a macro over SSL_CTX_ctrl).
static inline long portcullis_ssl_ctx_min_tls12(SSL_CTX *ctx) { return SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION); }

#endif
