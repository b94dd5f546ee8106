#ifndef PORTCULLIS_CHIREDIS_SHIM_H
#define PORTCULLIS_CHIREDIS_SHIM_H
// hiredis' variadic redisCommand family does not import into Swift; use the
// ...Argv forms. The reader is used directly over our own Dispatch sockets.
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#endif
