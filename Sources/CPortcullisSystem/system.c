#define _GNU_SOURCE
#include "CPortcullisSystem.h"
#include <fcntl.h>
#include <signal.h>

int portcullis_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len) {
    return accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

int portcullis_set_nonblocking(int fd) {
    int flags = fcntl(fd, F_GETFL, 0);
    if (flags < 0) return -1;
    return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void portcullis_ignore_sigpipe(void) { signal(SIGPIPE, SIG_IGN); }
