#ifndef PORTCULLIS_CZLIB_SHIM_H
#define PORTCULLIS_CZLIB_SHIM_H
#include <zlib.h>

// deflateInit2 is a macro (it passes the library's version and stream size): wrapped here.
// windowBits 15 + 16: a gzip wrapper (RFC 1952), as Content-Encoding: gzip asks.
static inline int portcullis_deflate_init_gzip(z_stream *stream, int level) {
    return deflateInit2(stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
}
#endif
