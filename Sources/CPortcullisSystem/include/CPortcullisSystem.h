#ifndef PORTCULLIS_SYSTEM_H
#define PORTCULLIS_SYSTEM_H
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>

/// accept4(2) with SOCK_NONBLOCK | SOCK_CLOEXEC: Glibc's Swift module does not export accept4.
int portcullis_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len);
/// Sets O_NONBLOCK (fcntl is variadic in C and awkward from Swift).
int portcullis_set_nonblocking(int fd);
/// Ignores SIGPIPE process-wide: write errors come back as EPIPE instead.
void portcullis_ignore_sigpipe(void);
#endif
