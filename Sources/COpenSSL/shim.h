#ifndef PORTCULLIS_COPENSSL_SHIM_H
#define PORTCULLIS_COPENSSL_SHIM_H
// OpenSSL 3 headers used by Portcullis. Function-like macros and variadic
// functions do not import into Swift: wrap them here as static inline functions.
#include <string.h>
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
#include <openssl/x509v3.h>
#include <openssl/tls1.h>

static inline unsigned long portcullis_openssl_version_number(void) { return OPENSSL_VERSION_NUMBER; }

// PortcullisAuth: selection for EVP_PKEY_fromdata of a public key (a composite macro).
static inline int portcullis_evp_pkey_public_key_selection(void) { return EVP_PKEY_PUBLIC_KEY; }
// PortcullisAuth: selection for EVP_PKEY_fromdata of a key pair.
static inline int portcullis_evp_pkey_keypair_selection(void) { return EVP_PKEY_KEYPAIR; }

// PortcullisTLS (client): SNI is a macro over SSL_ctrl.
static inline long portcullis_ssl_set_sni(SSL *ssl, const char *name) { return SSL_set_tlsext_host_name(ssl, name); }
// PortcullisTLS (client): TLS 1.2 minimum (a macro over SSL_CTX_ctrl).
static inline long portcullis_ssl_ctx_min_tls12(SSL_CTX *ctx) { return SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION); }

// ---- PortcullisTLS: the one Swift owner of libssl. Macros over SSL_ctrl / SSL_CTX_ctrl / BIO_ctrl.
static inline long portcullis_ssl_ctx_set_min_version(SSL_CTX *ctx, int v) { return SSL_CTX_set_min_proto_version(ctx, v); }
static inline long portcullis_ssl_ctx_set_max_version(SSL_CTX *ctx, int v) { return SSL_CTX_set_max_proto_version(ctx, v); }
static inline long portcullis_ssl_ctx_set_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_set_mode(ctx, mode); }
static inline long portcullis_ssl_ctx_set_read_ahead(SSL_CTX *ctx, int on) { return SSL_CTX_set_read_ahead(ctx, on); }
static inline long portcullis_ssl_ctx_set_session_cache_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_set_session_cache_mode(ctx, mode); }
static inline long portcullis_ssl_ctx_set_groups(SSL_CTX *ctx, const char *list) { return SSL_CTX_set1_groups_list(ctx, list); }
static inline long portcullis_ssl_ctx_set_servername_callback(SSL_CTX *ctx, int (*cb)(SSL *, int *, void *), void *arg) {
    SSL_CTX_set_tlsext_servername_arg(ctx, arg);
    return SSL_CTX_set_tlsext_servername_callback(ctx, cb);
}
static inline long portcullis_ssl_ctx_set_ticket_callback(SSL_CTX *ctx,
        int (*cb)(SSL *, unsigned char *, unsigned char *, EVP_CIPHER_CTX *, EVP_MAC_CTX *, int)) {
    return SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, cb);
}
// SSL_OP_* are built with SSL_OP_BIT(n), which does not import.
static inline uint64_t portcullis_ssl_default_options(void) {
    return SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF;
}
static inline uint64_t portcullis_ssl_op_server_preference(void) { return SSL_OP_CIPHER_SERVER_PREFERENCE; }
static inline int portcullis_ssl_is_server(SSL *ssl) { return SSL_is_server(ssl); }
// The reason code of the oldest error in this thread's queue (0: none), for classifying a
// failed handshake without building its text.
static inline int portcullis_err_peek_reason(void) {
    unsigned long e = ERR_peek_error();
    return e == 0 ? 0 : ERR_GET_REASON(e);
}
static inline long portcullis_ssl_session_reused(SSL *ssl) { return SSL_session_reused(ssl); }
static inline void portcullis_bio_set_retry_read(BIO *b) { BIO_set_retry_read(b); }
static inline void portcullis_bio_clear_retry_flags(BIO *b) { BIO_clear_retry_flags(b); }
static inline int portcullis_ssl_tlsext_err_ok(void) { return SSL_TLSEXT_ERR_OK; }
static inline int portcullis_ssl_tlsext_err_noack(void) { return SSL_TLSEXT_ERR_NOACK; }
static inline long portcullis_ssl_ctx_add_chain_cert(SSL_CTX *ctx, X509 *x) { return SSL_CTX_add1_chain_cert(ctx, x); }

// Client certificates: a client without one notes (in the SSL's app data) that the
// server asked for one, so a failure that follows can say why (under TLS 1.3 the server
// refuses after the client's handshake is done, often with a reset before its alert).
static int portcullis_client_certificate_requested(SSL *ssl, X509 **x509, EVP_PKEY **pkey) {
    (void)x509; (void)pkey;
    SSL_set_app_data(ssl, (void *)1);
    return 0;  // no certificate to send
}
static inline void portcullis_ssl_ctx_note_certificate_requests(SSL_CTX *ctx) {
    SSL_CTX_set_client_cert_cb(ctx, portcullis_client_certificate_requested);
}
static inline int portcullis_ssl_certificate_was_requested(SSL *ssl) { return SSL_get_app_data(ssl) != NULL; }

// Ticket keys: HMAC-SHA256 over the ticket (the parameters are an OSSL_PARAM array).
static inline int portcullis_ticket_mac_init(EVP_MAC_CTX *mac, const unsigned char *key, size_t length) {
    OSSL_PARAM params[2];
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();
    return EVP_MAC_init(mac, key, length, params);
}

// Certificates: DNS names of the subjectAltName extension. Returns how many there are;
// copies the index-th (when 0 <= index < count) into out (truncated to capacity) and sets *length.
static inline int portcullis_x509_dns_name(X509 *x, int index, unsigned char *out, int capacity, int *length) {
    GENERAL_NAMES *names = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    if (names == NULL) return 0;
    int count = 0;
    for (int i = 0; i < sk_GENERAL_NAME_num(names); i++) {
        GENERAL_NAME *n = sk_GENERAL_NAME_value(names, i);
        if (n->type != GEN_DNS) continue;
        if (count == index) {
            int len = ASN1_STRING_length(n->d.dNSName);
            if (len > capacity) len = capacity;
            memcpy(out, ASN1_STRING_get0_data(n->d.dNSName), (size_t)len);
            *length = len;
        }
        count++;
    }
    GENERAL_NAMES_free(names);
    return count;
}

// ALPN on the server: the first of our protocols (in our order) that the client offers.
typedef struct { unsigned int length; unsigned char bytes[255]; } portcullis_alpn_list;
static inline int portcullis_alpn_select_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                                            const unsigned char *in, unsigned int inlen, void *arg) {
    (void)ssl;
    portcullis_alpn_list *ours = (portcullis_alpn_list *)arg;
    if (SSL_select_next_proto((unsigned char **)out, outlen, ours->bytes, ours->length, in, inlen) == OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_OK;
    return SSL_TLSEXT_ERR_NOACK;
}
static inline void portcullis_ssl_ctx_set_alpn_list(SSL_CTX *ctx, portcullis_alpn_list *list) {
    SSL_CTX_set_alpn_select_cb(ctx, portcullis_alpn_select_cb, list);
}

#endif
