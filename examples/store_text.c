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
 *     tool_len args_len result_format tool args
 *     (the last five, what the call was, may be absent: none kept)
 *   C exec finished_ns status result_code result
 *   X exec       (released)
 *   P exec       (purged)
 *   S exec committed finished_ns status result_code resolved_ns uid pid result
 * Words are separated by one space; numbers are decimal. A line is only
 * believed whole if it ends in a newline: a crash mid-line leaves a partial
 * last line, never acknowledged, which load() cuts off before anything is
 * appended (appended to, it would glue the next record onto it). A whole
 * line that is not one of the above, exactly, is damage: load() refuses
 * the file (-EBADMSG) rather than guess, since a record it skipped could be
 * a result that must replay.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
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
	uint8_t call[CARMY_STORE_TOOL_MAX + CARMY_STORE_ARGS_MAX];
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

/* put_hex(), or "-" for no bytes. */
static int put_bytes(char *out, size_t room, const uint8_t *p, size_t n)
{
	if (n == 0)
		return snprintf(out, room, "- ");
	return put_hex(out, room, p, n);
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decode hex word w into out (at most max bytes); returns the length or
 * -1. Empty results are written as "-". */
static long get_hex(const char *w, uint8_t *out, size_t max)
{
	size_t n = strlen(w);

	if (strcmp(w, "-") == 0)
		return 0;
	if (n == 0 || n % 2 != 0 || n / 2 > max)
		return -1;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hex_digit(w[2 * i]), lo = hex_digit(w[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return (long)(n / 2);
}

/* Decimal word w, all of it, at most max: 0, or -1. */
static int get_u64(const char *w, uint64_t max, uint64_t *v)
{
	uint64_t x = 0;

	if (w[0] == '\0')
		return -1;
	for (const char *p = w; *p != '\0'; p++) {
		if (*p < '0' || *p > '9' || x > (max - (uint64_t)(*p - '0')) / 10)
			return -1;
		x = x * 10 + (uint64_t)(*p - '0');
	}
	*v = x;
	return 0;
}

static int get_u32(const char *w, uint32_t *v)
{
	uint64_t x;

	if (get_u64(w, UINT32_MAX, &x) != 0)
		return -1;
	*v = (uint32_t)x;
	return 0;
}

static int get_i32(const char *w, int32_t *v)
{
	uint64_t x;

	if (w[0] == '-') {
		if (get_u64(w + 1, (uint64_t)INT32_MAX + 1, &x) != 0)
			return -1;
		*v = (int32_t)(-(int64_t)x);
		return 0;
	}
	if (get_u64(w, INT32_MAX, &x) != 0)
		return -1;
	*v = (int32_t)x;
	return 0;
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
	size_t cap = 256 + 2 * (3 * CARMY_STORE_ID_MAX) +
		     2 * (CARMY_STORE_TOOL_MAX + CARMY_STORE_ARGS_MAX) +
		     2 * (size_t)r->result_len;
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
		n += snprintf(line + n, cap - n, "%u %u %u ", r->tool_len,
			      r->args_len, r->result_format);
		n += put_bytes(line + n, cap - n, r->tool,
			       r->tool_kept <= CARMY_STORE_TOOL_MAX ?
				       r->tool_kept : 0);
		n += put_bytes(line + n, cap - n, r->args,
			       r->args_kept <= CARMY_STORE_ARGS_MAX ?
				       r->args_kept : 0);
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

/* Split line into words at single spaces: how many, or -1 for an empty
 * word or more than max. */
static int split(char *line, char **w, int max)
{
	int nw = 0;

	for (char *p = line;;) {
		char *sp = strchr(p, ' ');

		if (nw == max || *p == '\0' || sp == p)
			return -1;
		w[nw++] = p;
		if (sp == NULL)
			return nw;
		*sp = '\0';
		p = sp + 1;
	}
}

/* A result: the last word of a C or S line, and its fields from at. */
static int get_result(struct text_exec *x, char **w, int at, const char *res)
{
	size_t max = strlen(res) / 2 + 1;
	long l;

	x->result = malloc(max);
	if (x->result == NULL)
		return -ENOMEM;
	l = get_hex(res, x->result, max);
	if (l < 0 || get_u64(w[at], UINT64_MAX, &x->rec.finished_ns) != 0 ||
	    get_i32(w[at + 1], &x->rec.status) != 0 ||
	    get_i32(w[at + 2], &x->rec.result_code) != 0)
		return -EBADMSG;
	x->rec.state = CARMY_STORE_COMPLETED;
	x->rec.result = x->result;
	x->rec.result_len = (uint32_t)l;
	return 0;
}

/* The call at the end of an R line: its lengths, format and kept bytes
 * (tool and args: at load), no more than carmy_store.h allows. */
static int call_words(char **w, struct text_exec *x)
{
	uint32_t format;
	long tk, ak;

	if (get_u32(w[0], &x->rec.tool_len) != 0 ||
	    get_u32(w[1], &x->rec.args_len) != 0 ||
	    get_u32(w[2], &format) != 0 || format > UINT8_MAX)
		return -1;
	tk = get_hex(w[3], x->call, CARMY_STORE_TOOL_MAX);
	ak = tk < 0 ? -1 : get_hex(w[4], x->call + tk, CARMY_STORE_ARGS_MAX);
	if (ak < 0 || (uint32_t)tk > x->rec.tool_len ||
	    (uint32_t)ak > x->rec.args_len)
		return -1;
	x->rec.tool_kept = (uint32_t)tk;
	x->rec.args_kept = (uint32_t)ak;
	x->rec.result_format = (uint8_t)format;
	return 0;
}

/* A new execution from the nw words of an R line. */
static int reserve_line(char **w, int nw, struct text_exec **xs, size_t *nx,
			size_t *cap)
{
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
	if (get_hex(w[1], x->rec.exec, 16) != 16 ||
	    get_hex(w[2], x->rec.fingerprint, 16) != 16 ||
	    get_hex(w[3], x->rec.rawprint, 16) != 16 ||
	    get_u32(w[4], &x->rec.pid) != 0 ||
	    get_u64(w[5], UINT64_MAX, &x->rec.started_ns) != 0)
		return -EBADMSG;
	for (int i = 0; i < 3; i++) {
		long l = get_hex(w[6 + i], x->ident + off, CARMY_STORE_ID_MAX);

		if (l <= 0)
			return -EBADMSG;
		x->rec.len[i] = (uint16_t)l;	/* part[]: at load */
		off += (size_t)l;
	}
	if (nw == 14 && call_words(w + 9, x) != 0)
		return -EBADMSG;
	x->rec.state = CARMY_STORE_RUNNING;
	/* A later reservation of an identity supersedes earlier ones (they
	 * were released). */
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

/* Parse one whole line into the executions read so far. A whole line that
 * does not parse is damage, not a crash: -EBADMSG stops carmyd. */
static int text_line(char *line, struct text_exec **xs, size_t *nx,
		     size_t *cap)
{
	char *w[14];
	int nw = split(line, w, 14), want;
	uint8_t exec[16];
	char op;

	if (nw < 2 || w[0][1] != '\0')
		return -EBADMSG;
	op = w[0][0];
	want = op == 'R' ? (nw == 14 ? 14 : 9) : op == 'C' ? 6 :
	       op == 'S' ? 10 : op == 'X' || op == 'P' ? 2 : -1;
	if (nw != want)
		return -EBADMSG;
	if (op == 'R')
		return reserve_line(w, nw, xs, nx, cap);
	if (get_hex(w[1], exec, 16) != 16)
		return -EBADMSG;
	if (op == 'S') {
		/* Checked whatever it is about: damage is damage. */
		uint32_t u;
		uint64_t t;

		if ((strcmp(w[2], "0") != 0 && strcmp(w[2], "1") != 0) ||
		    get_u64(w[6], UINT64_MAX, &t) != 0 ||
		    get_u32(w[7], &u) != 0 || get_u32(w[8], &u) != 0)
			return -EBADMSG;
	}
	for (size_t i = 0; i < *nx; i++) {
		struct text_exec *x = &(*xs)[i];
		int rc;

		if (memcmp(x->rec.exec, exec, 16) != 0 || x->gone)
			continue;
		if (op == 'P') {
			x->gone = x->rec.state == CARMY_STORE_COMPLETED;
			return 0;
		}
		if (x->rec.state != CARMY_STORE_RUNNING)
			return 0;	/* the first result stands */
		if (op == 'X' || (op == 'S' && w[2][0] == '0')) {
			x->gone = 1;
			return 0;
		}
		/* C: its result. S: an operator's verdict on it, moved one
		 * word along by the committed flag. */
		rc = get_result(x, w, op == 'S' ? 3 : 2, w[nw - 1]);
		if (rc == 0 && op == 'S') {
			get_u64(w[6], UINT64_MAX, &x->rec.resolved_ns);
			get_u32(w[7], &x->rec.resolved_uid);
			get_u32(w[8], &x->rec.resolved_pid);
		}
		return rc;
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
	off_t whole = 0;	/* where the last whole line ends */
	int rc = 0, fd = dup(t->fd);

	if (fd < 0 || lseek(fd, 0, SEEK_SET) < 0 ||
	    (f = fdopen(fd, "r")) == NULL) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	while (rc == 0 && (n = getline(&line, &lcap, f)) > 0) {
		if (line[n - 1] != '\n') {
			/* A partial last line, never acknowledged: cut it
			 * off (and flush the cut), or the next record would
			 * be appended to it and read back as damage. */
			if (ftruncate(t->fd, whole) != 0 ||
			    fdatasync(t->fd) != 0)
				rc = -errno;
			break;
		}
		whole += n;
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
		xs[i].rec.tool = xs[i].call;
		xs[i].rec.args = xs[i].call + xs[i].rec.tool_kept;
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
