/*
 * journal_uncall.c - rewrite a journal file's RESERVE records in the
 * layout of a carmyd that kept no call (rv_flags 0, nothing after the
 * identity), for carmyctl.test: the entries a journal of an earlier
 * release gives back. The records are moved together and sealed as the
 * store seals them. Usage: journal_uncall FILE (carmyd not running).
 * Exit 0 with the count of records rewritten on standard output.
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "carmy_store.h"
#include "stores/journal/internal.h"

/* The RESERVE record at p, of rl bytes, without its call: its new length. */
static size_t uncall(uint8_t *p, size_t rl)
{
	struct jrec_head h;
	struct jrec_reserve rv;
	size_t body;

	memcpy(&h, p, sizeof(h));
	memcpy(&rv, p + sizeof(h), sizeof(rv));
	rv.rv_flags = 0;
	memcpy(p + sizeof(h), &rv, sizeof(rv));
	body = sizeof(rv) + rv.rv_len[0] + rv.rv_len[1] + rv.rv_len[2];
	memset(p + sizeof(h) + body, 0, rl - sizeof(h) - body);
	h.jr_len = (uint32_t)((sizeof(h) + body + 7) / 8 * 8 + 8);
	memcpy(p, &h, sizeof(h));
	return h.jr_len;
}

int main(int argc, char **argv)
{
	struct jrec_reserve rv;
	struct stat st;
	size_t at = sizeof(struct jfile_head), out = at, len;
	uint64_t salt;
	uint8_t *buf, *to;
	int fd, n = 0;

	if (argc != 2 || (fd = open(argv[1], O_RDWR)) < 0 ||
	    fstat(fd, &st) != 0 || (size_t)st.st_size < at) {
		fprintf(stderr, "usage: journal_uncall FILE (a journal)\n");
		return 64;
	}
	len = (size_t)st.st_size;
	buf = malloc(len);
	to = calloc(1, len);
	if (buf == NULL || to == NULL ||
	    pread(fd, buf, len, 0) != (ssize_t)len)
		return 1;
	memcpy(to, buf, at);
	memcpy(&salt, buf + offsetof(struct jfile_head, jf_salt), 8);
	/* Each record moves up to where the one before now ends, and is
	 * sealed for its new offset. */
	while (at + sizeof(struct jrec_head) + sizeof(rv) <= len) {
		struct jrec_head h;
		size_t rl;

		memcpy(&h, buf + at, sizeof(h));
		if (h.jr_len == 0 || h.jr_len > len - at)
			break;
		memcpy(to + out, buf + at, h.jr_len);
		memcpy(&rv, buf + at + sizeof(h), sizeof(rv));
		rl = h.jr_len;
		if (h.jr_op == CARMY_STORE_RESERVE && (rv.rv_flags & JRV_CALL)) {
			rl = uncall(to + out, h.jr_len);
			n++;
		}
		jnl_rec_seal(to + out, out, salt);
		out += rl;
		at += h.jr_len;
	}
	if (pwrite(fd, to, len, 0) != (ssize_t)len || fsync(fd) != 0 ||
	    close(fd) != 0)
		return 1;
	free(buf);
	free(to);
	printf("%d\n", n);
	return 0;
}
