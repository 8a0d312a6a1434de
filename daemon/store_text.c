/*
 * store_text.c - an example store plugin: every record is one line of text
 * in one file, flushed before it is acknowledged.
 *
 *   carmyd --store plugin:/path/to/carmy_store_text.so:/path/to/file
 *
 * It shows the whole of include/carmy_store.h at its simplest: open, load,
 * submit and close, with durable records and no cleverness. It is correct
 * but not fast: one fsync per request (no group commit) and a load that is
 * quadratic in the number of executions. The journal store (journal.c) is
 * the real thing; start from this one to write yours.
 *
 * Lines (hex for every byte string):
 *   R exec fingerprint rawprint pid started_ns principal session request_id
 *   C exec finished_ns status result_code result
 *   X exec       (released)
 *   P exec       (purged)
 *   S exec committed finished_ns status result_code resolved_ns uid pid result
 * A line is only believed whole if it ends in a newline: a crash mid-line
 * leaves a partial last line, which load() ignores.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "carmy_store.h"

struct text_store {
	int fd;
	pthread_mutex_t lock;	/* one request at a time */
	int broken;		/* -errno after a failed write or fsync */
};

/* One execution as load() reads it back. */
struct text_exec {
	struct carmy_store_record rec;
	uint8_t ident[3 * CARMY_STORE_ID_MAX];
	uint8_t *result;
	int gone;
};

static int put_hex(char *out, size_t room, const uint8_t *p, size_t n)
{
	static const char digits[] = "0123456789abcdef";

	if (room < 2 * n + 2)
		return -1;
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = ' ';
	return (int)(2 * n + 1);
}

/* Decode hex word w into out (at most max bytes); returns the length or
 * -1. Empty results are written as "-". */
static long get_hex(const char *w, uint8_t *out, size_t max)
{
	size_t n = strlen(w);

	if (strcmp(w, "-") == 0)
		return 0;
	if (n % 2 != 0 || n / 2 > max)
		return -1;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v;

		if (sscanf(w + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (uint8_t)v;
	}
	return (long)(n / 2);
}

static int text_open(const char *args, void **store, char *err, size_t errlen)
{
	struct text_store *t;

	if (args[0] == '\0') {
		snprintf(err, errlen, "give a file: --store plugin:SO:FILE");
		return -EINVAL;
	}
	t = calloc(1, sizeof(*t));
	if (t == NULL)
		return -ENOMEM;
	t->fd = open(args, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (t->fd < 0) {
		int rc = -errno;

		snprintf(err, errlen, "cannot open %s: %s", args,
			 strerror(errno));
		free(t);
		return rc;
	}
	pthread_mutex_init(&t->lock, NULL);
	*store = t;
	return 0;
}

static void text_submit(void *store, struct carmy_store_req *req)
{
	struct text_store *t = store;
	const struct carmy_store_record *r = req->rec;
	size_t cap = 256 + 2 * (3 * CARMY_STORE_ID_MAX) + 2 * r->result_len;
	char *line = malloc(cap);
	int n = 0, rc = 0;

	if (line == NULL) {
		req->done(req, -ENOMEM);
		return;
	}
	switch (req->op) {
	case CARMY_STORE_RESERVE:
		n = snprintf(line, cap, "R ");
		n += put_hex(line + n, cap - n, r->exec, 16);
		n += put_hex(line + n, cap - n, r->fingerprint, 16);
		n += put_hex(line + n, cap - n, r->rawprint, 16);
		n += snprintf(line + n, cap - n, "%u %llu ", r->pid,
			      (unsigned long long)r->started_ns);
		for (int i = 0; i < 3; i++)
			n += put_hex(line + n, cap - n, r->part[i], r->len[i]);
		break;
	case CARMY_STORE_COMPLETE:
		n = snprintf(line, cap, "C ");
		n += put_hex(line + n, cap - n, r->exec, 16);
		n += snprintf(line + n, cap - n, "%llu %d %d ",
			      (unsigned long long)r->finished_ns, r->status,
			      r->result_code);
		if (r->result_len == 0)
			n += snprintf(line + n, cap - n, "- ");
		else
			n += put_hex(line + n, cap - n, r->result,
				     r->result_len);
		break;
	case CARMY_STORE_RESOLVE:
		n = snprintf(line, cap, "S ");
		n += put_hex(line + n, cap - n, r->exec, 16);
		n += snprintf(line + n, cap - n, "%d %llu %d %d %llu %u %u ",
			      r->state == CARMY_STORE_COMPLETED,
			      (unsigned long long)r->finished_ns, r->status,
			      r->result_code,
			      (unsigned long long)r->resolved_ns,
			      r->resolved_uid, r->resolved_pid);
		if (r->state != CARMY_STORE_COMPLETED || r->result_len == 0)
			n += snprintf(line + n, cap - n, "- ");
		else
			n += put_hex(line + n, cap - n, r->result,
				     r->result_len);
		break;
	default:
		n = snprintf(line, cap, req->op == CARMY_STORE_PURGE ? "P " :
								       "X ");
		n += put_hex(line + n, cap - n, r->exec, 16);
		break;
	}
	line[n - 1] = '\n';	/* the last word's trailing space */

	pthread_mutex_lock(&t->lock);
	rc = t->broken;
	if (rc == 0 && (write(t->fd, line, (size_t)n) != n ||
			fdatasync(t->fd) != 0)) {
		rc = errno ? -errno : -EIO;
		t->broken = rc;	/* an fsync error poisons what came before */
	}
	pthread_mutex_unlock(&t->lock);
	free(line);
	req->done(req, rc);
}

/* Parse one whole line into the executions read so far. A whole line that
 * does not parse is damage, not a crash: -EBADMSG stops carmyd. */
static int text_line(char *line, struct text_exec **xs, size_t *nx,
		     size_t *cap)
{
	char *w[11];
	int nw = 0;
	uint8_t exec[16];

	for (char *p = strtok(line, " "); p != NULL && nw < 11;
	     p = strtok(NULL, " "))
		w[nw++] = p;
	if (nw < 2 || get_hex(w[1], exec, 16) != 16)
		return -EBADMSG;
	if (w[0][0] == 'R' && nw == 9) {
		struct text_exec *x;
		size_t off = 0;

		if (*nx == *cap) {
			size_t ncap = *cap ? *cap * 2 : 64;
			struct text_exec *nxs = realloc(*xs, ncap * sizeof(**xs));

			if (nxs == NULL)
				return -ENOMEM;
			*xs = nxs;
			*cap = ncap;
		}
		x = &(*xs)[*nx];
		memset(x, 0, sizeof(*x));
		memcpy(x->rec.exec, exec, 16);
		if (get_hex(w[2], x->rec.fingerprint, 16) != 16 ||
		    get_hex(w[3], x->rec.rawprint, 16) != 16)
			return -EBADMSG;
		x->rec.pid = (uint32_t)strtoul(w[4], NULL, 10);
		x->rec.started_ns = strtoull(w[5], NULL, 10);
		for (int i = 0; i < 3; i++) {
			long l = get_hex(w[6 + i], x->ident + off,
					 CARMY_STORE_ID_MAX);

			if (l <= 0)
				return -EBADMSG;
			x->rec.len[i] = (uint16_t)l;	/* part[]: at load */
			off += (size_t)l;
		}
		x->rec.state = CARMY_STORE_RUNNING;
		/* A later reservation of an identity supersedes earlier
		 * ones (they were released). */
		for (size_t i = 0; i < *nx; i++) {
			struct text_exec *y = &(*xs)[i];

			if (!y->gone &&
			    memcmp(y->rec.len, x->rec.len, sizeof(x->rec.len)) == 0 &&
			    memcmp(y->ident, x->ident, off) == 0)
				y->gone = 1;
		}
		(*nx)++;
		return 0;
	}
	for (size_t i = 0; i < *nx; i++) {
		struct text_exec *x = &(*xs)[i];

		if (memcmp(x->rec.exec, exec, 16) != 0 || x->gone)
			continue;
		if (w[0][0] == 'P' && nw == 2) {
			x->gone = x->rec.state == CARMY_STORE_COMPLETED;
			return 0;
		}
		if (x->rec.state != CARMY_STORE_RUNNING)
			return 0;	/* the first result stands */
		/* C: its result. S: an operator's verdict on it, moved
		 * one word along by the committed flag. */
		int at = w[0][0] == 'S' ? 3 : 2;

		if ((w[0][0] == 'X' && nw == 2) ||
		    (w[0][0] == 'S' && nw == 10 && strcmp(w[2], "0") == 0)) {
			x->gone = 1;
		} else if ((w[0][0] == 'C' && nw == 6) ||
			   (w[0][0] == 'S' && nw == 10)) {
			const char *res = w[nw - 1];
			size_t max = strlen(res) / 2 + 1;
			long l;

			x->result = malloc(max);
			if (x->result == NULL)
				return -ENOMEM;
			l = get_hex(res, x->result, max);
			if (l < 0)
				return -EBADMSG;
			x->rec.state = CARMY_STORE_COMPLETED;
			x->rec.finished_ns = strtoull(w[at], NULL, 10);
			x->rec.status = (int32_t)strtol(w[at + 1], NULL, 10);
			x->rec.result_code = (int32_t)strtol(w[at + 2], NULL,
							     10);
			x->rec.result = x->result;
			x->rec.result_len = (uint32_t)l;
			if (w[0][0] == 'S') {
				x->rec.resolved_ns = strtoull(w[6], NULL, 10);
				x->rec.resolved_uid =
					(uint32_t)strtoul(w[7], NULL, 10);
				x->rec.resolved_pid =
					(uint32_t)strtoul(w[8], NULL, 10);
			}
		}
		return 0;
	}
	return 0;	/* about an execution we do not have: ignored */
}

static int text_load(void *store, carmy_store_each_fn each, void *arg)
{
	struct text_store *t = store;
	struct text_exec *xs = NULL;
	size_t nx = 0, cap = 0;
	FILE *f;
	char *line = NULL;
	size_t lcap = 0;
	ssize_t n;
	int rc = 0, fd = dup(t->fd);

	if (fd < 0 || lseek(fd, 0, SEEK_SET) < 0 ||
	    (f = fdopen(fd, "r")) == NULL) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	while (rc == 0 && (n = getline(&line, &lcap, f)) > 0) {
		if (line[n - 1] != '\n')
			break;	/* a partial last line: never acknowledged */
		line[n - 1] = '\0';
		rc = text_line(line, &xs, &nx, &cap);
	}
	free(line);
	fclose(f);
	for (size_t i = 0; i < nx && rc == 0; i++) {
		size_t off = 0;

		if (xs[i].gone)
			continue;
		/* The array moved as it grew: point into where it is now. */
		for (int k = 0; k < 3; k++) {
			xs[i].rec.part[k] = xs[i].ident + off;
			off += xs[i].rec.len[k];
		}
		rc = each(arg, &xs[i].rec);
	}
	for (size_t i = 0; i < nx; i++)
		free(xs[i].result);
	free(xs);
	return rc;
}

static void text_close(void *store)
{
	struct text_store *t = store;

	close(t->fd);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

const struct carmy_store_ops carmy_store_plugin = {
	.abi = CARMY_STORE_ABI,
	.name = "text (example plugin)",
	.open = text_open,
	.load = text_load,
	.submit = text_submit,
	.close = text_close,
	.durable = 1,
};
