/*
 * io.c - whole writes to a descriptor.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/io.h"

static int put_all(int fd, const void *buf, size_t len, int sock)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = sock ? send(fd, p, len, MSG_NOSIGNAL) :
				   write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int io_write_all(int fd, const void *buf, size_t len)
{
	return put_all(fd, buf, len, 0);
}

int io_send_all(int fd, const void *buf, size_t len)
{
	return put_all(fd, buf, len, 1);
}

int io_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}
