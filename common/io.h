/*
 * io.h - whole writes to a descriptor, through short writes and EINTR.
 */
#ifndef CARMY_COMMON_IO_H
#define CARMY_COMMON_IO_H

#include <stddef.h>

/*
 * Write all len bytes of buf to fd with write(2) (io_write_all) or with
 * send(2) and MSG_NOSIGNAL (io_send_all: a socket whose peer has gone gives
 * EPIPE, not SIGPIPE). Returns 0, or -errno of the call that failed; some
 * bytes may have been written then. Blocking or not is the descriptor's:
 * on a non-blocking one, -EAGAIN is returned like any other error.
 */
int io_write_all(int fd, const void *buf, size_t len);
int io_send_all(int fd, const void *buf, size_t len);

#endif
