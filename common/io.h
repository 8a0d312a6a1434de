/*
 * io.h - whole writes to a descriptor, through short writes and EINTR.
 */
#ifndef CARMY_COMMON_IO_H
#define CARMY_COMMON_IO_H

#include <stddef.h>
#include <stdint.h>

/*
 * Write all len bytes of buf to fd with write(2) (io_write_all) or with
 * send(2) and MSG_NOSIGNAL (io_send_all: a socket whose peer has gone gives
 * EPIPE, not SIGPIPE). Returns 0, or -errno of the call that failed; some
 * bytes may have been written then. Blocking or not is the descriptor's:
 * on a non-blocking one, -EAGAIN is returned like any other error.
 */
int io_write_all(int fd, const void *buf, size_t len);
int io_send_all(int fd, const void *buf, size_t len);

/*
 * Write all len bytes of buf to fd at offset off with pwrite(2), the file
 * offset untouched. Returns 0, or -errno of the call that failed (-EIO if
 * pwrite wrote nothing, which a regular file never does); some bytes may
 * have been written then.
 */
int io_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);

#endif
