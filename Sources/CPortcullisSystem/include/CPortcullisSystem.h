#ifndef PORTCULLIS_SYSTEM_H
#define PORTCULLIS_SYSTEM_H
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>

/// accept4(2) with SOCK_NONBLOCK | SOCK_CLOEXEC: Glibc's Swift module does not export accept4.
int portcullis_accept_nonblocking(int fd, struct sockaddr *addr, socklen_t *len);
/// Sets O_NONBLOCK (fcntl is variadic in C and awkward from Swift).
int portcullis_set_nonblocking(int fd);
int portcullis_duplicate(int fd);
/// Ignores SIGPIPE and SIGXFSZ process-wide: a write to a closed peer or past a file-size
/// limit fails with EPIPE or EFBIG (and is handled) instead of ending the process.
void portcullis_ignore_write_signals(void);

// epoll(7), wrapped: Glibc's Swift module lacks <sys/epoll.h>, and `struct epoll_event`
// is packed on x86_64, so Swift sees only tokens and a two-bit readiness mask.

/// Readiness bits reported by `portcullis_epoll_wait`.
#define PORTCULLIS_READABLE 1u  /* EPOLLIN, EPOLLRDHUP, EPOLLHUP or EPOLLERR */
#define PORTCULLIS_WRITABLE 2u  /* EPOLLOUT, EPOLLHUP or EPOLLERR */
/* The peer closed its side (EPOLLRDHUP/HUP/ERR): a short read may leave an end of file unread. */
#define PORTCULLIS_PEER_CLOSED 4u

/// epoll_create1(EPOLL_CLOEXEC).
int portcullis_epoll_create(void);
/// Registers `fd` once, edge-triggered, for input and output (EPOLLIN | EPOLLOUT |
/// EPOLLRDHUP | EPOLLET) with `token` as its user data. 0 or -1 with errno.
int portcullis_epoll_add(int epfd, int fd, unsigned long long token);
/// Registers a listening `fd` level-triggered for input only (EPOLLIN): the poller reports
/// it again on every wait while connections are queued. 0 or -1 with errno.
int portcullis_epoll_add_listener(int epfd, int fd, unsigned long long token);
/// Turns a listener's reports on (EPOLLIN) or off (no events) with EPOLL_CTL_MOD.
int portcullis_epoll_listen(int epfd, int fd, unsigned long long token, int on);
/// epoll_wait into up to `max` (<= 256) parallel slots of tokens and readiness bits.
/// Retries EINTR; returns the count, or -1 with errno.
int portcullis_epoll_wait(int epfd, unsigned long long *tokens, unsigned int *ready, int max, int timeout_ms);

/// How many CPUs this process may run on (sched_getaffinity and CPU_COUNT, a macro Swift
/// cannot call); 0 when it cannot be read.
int portcullis_affinity_cpu_count(void);
#endif
