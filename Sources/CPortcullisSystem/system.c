#define _GNU_SOURCE
#include "CPortcullisSystem.h"
#include <fcntl.h>
#include <signal.h>
#include <errno.h>
#include <sys/epoll.h>

int portcullis_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len) {
    return accept4(fd, addr, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

int portcullis_set_nonblocking(int fd) {
    int flags = fcntl(fd, F_GETFL, 0);
    if (flags < 0) return -1;
    return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

int portcullis_duplicate(int fd) { return fcntl(fd, F_DUPFD_CLOEXEC, 0); }

void portcullis_ignore_write_signals(void) { signal(SIGPIPE, SIG_IGN); signal(SIGXFSZ, SIG_IGN); }

int portcullis_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int portcullis_epoll_add(int epfd, int fd, unsigned long long token) {
    struct epoll_event ev;
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = token;
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* A listening socket is shared by every loop's poller: EPOLLEXCLUSIVE wakes one
   waiting loop per new connection, not all of them (nginx does the same). */
int portcullis_epoll_add_listener(int epfd, int fd, unsigned long long token) {
    struct epoll_event ev;
    ev.events = EPOLLIN | EPOLLEXCLUSIVE;
    ev.data.u64 = token;
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* EPOLL_CTL_MOD is refused for an EPOLLEXCLUSIVE entry: reports are turned off by
   removing it and on by adding it again. */
int portcullis_epoll_listen(int epfd, int fd, unsigned long long token, int on) {
    if (!on) {
        struct epoll_event unused;
        int rc = epoll_ctl(epfd, EPOLL_CTL_DEL, fd, &unused);
        return rc == 0 || errno == ENOENT ? 0 : rc;
    }
    int rc = portcullis_epoll_add_listener(epfd, fd, token);
    return rc == 0 || errno == EEXIST ? 0 : rc;
}

int portcullis_epoll_wait(int epfd, unsigned long long *tokens, unsigned int *ready, int max, int timeout_ms) {
    struct epoll_event events[256];
    if (max > 256) max = 256;
    int n;
    do { n = epoll_wait(epfd, events, max, timeout_ms); } while (n < 0 && errno == EINTR);
    for (int i = 0; i < n; i++) {
        uint32_t e = events[i].events;
        unsigned int r = 0;
        if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) r |= PORTCULLIS_READABLE;
        if (e & (EPOLLOUT | EPOLLHUP | EPOLLERR)) r |= PORTCULLIS_WRITABLE;
        if (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) r |= PORTCULLIS_PEER_CLOSED;
        tokens[i] = events[i].data.u64;
        ready[i] = r;
    }
    return n;
}

#include <sched.h>

int portcullis_affinity_cpu_count(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
    return CPU_COUNT(&set);
}
