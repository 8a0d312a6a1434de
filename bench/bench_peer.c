/*
 * bench_peer.c - what the peer figures share: identities, fingerprints,
 * execution ids, the harness callbacks and the checks. See bench_peer.h.
 *
 * The timed op holds everything a client of the store would do per call
 * (build the identity's key, fingerprint, make an execution id, the round
 * trips, compare the fingerprint, copy the result out); picking the next
 * request id and checking the answer against what was recorded are
 * untimed, as in the carmyd figures.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <xxhash.h>

#include "bench/bench_peer.h"

#define TOOL "bench.echo"

static int worker_open(struct peer_worker *s, const struct peer_cfg *cfg,
		       char tag, const struct bench_worker *w);
static void new_exec(struct peer_worker *s);
static void fingerprint(struct peer_worker *s);
static void do_reserve(struct peer_worker *s);
static void do_replay(struct peer_worker *s);
static int setup_new(struct bench_worker *w);
static int setup_replay(struct bench_worker *w);
static void new_id_prep(struct bench_worker *w, uint64_t i);
static void replay_prep(struct bench_worker *w, uint64_t i);
static void rt_op(struct bench_worker *w, uint64_t i);
static void reserve_op(struct bench_worker *w, uint64_t i);
static void replay_op(struct bench_worker *w, uint64_t i);
static void cycle_op(struct bench_worker *w, uint64_t i);
static int check(struct bench_worker *w, uint64_t i);
static int replay_check(struct bench_worker *w, uint64_t i);
static int teardown(struct bench_worker *w, uint64_t done);

/* ---------------------------------------------------------------- API */

const char *peer_kind_name(enum peer_kind k)
{
	return k == PEER_REDIS ? "redis" : "pg";
}

int peer_prepare(struct peer_cfg *cfg, char *err, size_t errlen)
{
	struct peer_worker *s = calloc(1, sizeof(*s));
	int rc = -1;

	if (s == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (worker_open(s, cfg, 0, NULL) != 0)
		goto out;
	cfg->be->setup(s, cfg);
	for (uint32_t j = 0; s->ok && j < cfg->replay_set; j++) {
		s->rid_len = s->prefix + peer_put_hex(s->rid + s->prefix, j);
		do_reserve(s);
		if (s->ok)
			cfg->be->complete(s);
		if (!s->ok) {
			char why[PEER_ERR_MAX];

			memcpy(why, s->err, sizeof(why));
			peer_fail(s, "replay identity %u: %s", j, why);
		}
	}
	rc = s->ok ? 0 : -1;
out:
	if (rc != 0)
		snprintf(err, errlen, "%s", s->err);
	if (s->conn != NULL)
		cfg->be->close(s);
	free(s);
	return rc;
}

void peer_figure(struct bench_figure *f, struct peer_cfg *cfg,
		 enum peer_op op)
{
	static const char *const names[PEER_OP_COUNT] = {
		"rt", "reserve", "replay", "cycle",
	};

	*f = (struct bench_figure){
		.name = names[op], .arg = cfg, .setup = setup_new,
		.prep = new_id_prep, .check = check, .teardown = teardown,
	};
	cfg->op = op;
	switch (op) {
	case PEER_RT:
		f->prep = NULL;
		f->op = rt_op;
		break;
	case PEER_RESERVE:
		f->op = reserve_op;
		break;
	case PEER_REPLAY:
		f->setup = setup_replay;
		f->prep = replay_prep;
		f->op = replay_op;
		f->check = replay_check;
		break;
	default:
		f->op = cycle_op;
		break;
	}
}

void peer_fail(struct peer_worker *s, const char *fmt, ...)
{
	va_list ap;

	s->ok = false;
	va_start(ap, fmt);
	vsnprintf(s->err, sizeof(s->err), fmt, ap);
	va_end(ap);
}

size_t peer_put_hex(char *p, uint64_t v)
{
	static const char hex[] = "0123456789abcdef";
	char tmp[16];
	size_t n = 0;

	do {
		tmp[n++] = hex[v & 15];
		v >>= 4;
	} while (v != 0);
	for (size_t k = 0; k < n; k++)
		p[k] = tmp[n - 1 - k];
	return n;
}

/* ------------------------------------------------------------ the call */

/* Connect, and lay out the request id's prefix: "<nonce>-<run>.<index>-
 * <tag>-" for new identities (w names the worker), "<nonce>-replay-" for
 * the replay set (tag 0, w NULL), as the carmyd figures do. Returns 0, or
 * -1 with s->err set. */
static int worker_open(struct peer_worker *s, const struct peer_cfg *cfg,
		       char tag, const struct bench_worker *w)
{
	s->cfg = cfg;
	if (tag != 0)
		s->prefix = (size_t)snprintf(s->rid, sizeof(s->rid),
					     "%s-%u.%d-%c-", cfg->nonce,
					     w->run, w->index, tag);
	else
		s->prefix = (size_t)snprintf(s->rid, sizeof(s->rid),
					     "%s-replay-", cfg->nonce);
	if (getrandom(&s->exec_seed, sizeof(s->exec_seed), 0) !=
	    (ssize_t)sizeof(s->exec_seed)) {
		peer_fail(s, "getrandom: %s", strerror(errno));
		return -1;
	}
	cfg->be->connect(s);
	return s->ok ? 0 : -1;
}

/* "exec_" and 32 hex digits, like Carmy's: this process's random seed and
 * a counter, so that ids never repeat within a run. */
static void new_exec(struct peer_worker *s)
{
	static const char hex[] = "0123456789abcdef";
	uint64_t v[2] = { s->exec_seed, ++s->exec_n };
	char *p = s->exec + 5;

	memcpy(s->exec, "exec_", 5);
	for (int h = 0; h < 2; h++)
		for (int sh = 60; sh >= 0; sh -= 4)
			*p++ = hex[(v[h] >> sh) & 15];
	*p = '\0';
}

static void fingerprint(struct peer_worker *s)
{
	const struct peer_cfg *cfg = s->cfg;
	XXH128_hash_t h = XXH3_128bits_withSeed(cfg->args, cfg->args_len,
						XXH3_64bits(TOOL,
							    sizeof(TOOL) - 1));

	memcpy(s->fp, &h.high64, 8);
	memcpy(s->fp + 8, &h.low64, 8);
}

static void do_reserve(struct peer_worker *s)
{
	fingerprint(s);
	new_exec(s);
	s->cfg->be->reserve(s);
}

/* A replay is only a replay if the recorded call is finished and is the
 * same call: otherwise Carmy would answer CONFLICT or UNCERTAIN. */
static void do_replay(struct peer_worker *s)
{
	fingerprint(s);
	s->cfg->be->replay(s);
	if (!s->ok)
		return;
	if (memcmp(s->got_fp, s->fp, sizeof(s->fp)) != 0)
		peer_fail(s, "recorded with another fingerprint");
	else if (!s->got_completed)
		peer_fail(s, "not finished");
}

/* ------------------------------------------------------------ harness */

static int setup_any(struct bench_worker *w, char tag)
{
	struct peer_cfg *cfg = w->arg;
	struct peer_worker *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return bench_failf(w, BENCH_FAIL, "out of memory");
	w->state = s;
	if (worker_open(s, cfg, tag, w) != 0)
		return bench_failf(w, BENCH_FAIL, "%s: %s", cfg->be->name,
				   s->err);
	return BENCH_OK;
}

static int setup_new(struct bench_worker *w)
{
	const struct peer_cfg *cfg = w->arg;

	return setup_any(w, cfg->op == PEER_RESERVE ? 'r' : 'c');
}

static int setup_replay(struct bench_worker *w)
{
	return setup_any(w, 0);
}

static void new_id_prep(struct bench_worker *w, uint64_t i)
{
	struct peer_worker *s = w->state;

	s->rid_len = s->prefix + peer_put_hex(s->rid + s->prefix, i);
}

/* Workers start at different points of the replay set, as in carmyd's. */
static void replay_prep(struct bench_worker *w, uint64_t i)
{
	const struct peer_cfg *cfg = w->arg;
	struct peer_worker *s = w->state;
	uint64_t j = (i + (uint64_t)w->index * cfg->replay_set / w->procs) %
		     cfg->replay_set;

	s->rid_len = s->prefix + peer_put_hex(s->rid + s->prefix, j);
}

static void rt_op(struct bench_worker *w, uint64_t i)
{
	struct peer_worker *s = w->state;

	(void)i;
	s->cfg->be->rt(s);
}

static void reserve_op(struct bench_worker *w, uint64_t i)
{
	(void)i;
	do_reserve(w->state);
}

static void replay_op(struct bench_worker *w, uint64_t i)
{
	(void)i;
	do_replay(w->state);
}

static void cycle_op(struct bench_worker *w, uint64_t i)
{
	struct peer_worker *s = w->state;

	(void)i;
	do_reserve(s);
	if (s->ok)
		s->cfg->be->complete(s);
}

static int check(struct bench_worker *w, uint64_t i)
{
	struct peer_worker *s = w->state;

	if (!s->ok)
		return bench_failf(w, BENCH_FAIL, "%s op %llu (request_id "
				   "%.*s): %s", s->cfg->be->name,
				   (unsigned long long)i, (int)s->rid_len,
				   s->rid, s->err);
	return BENCH_OK;
}

static int replay_check(struct bench_worker *w, uint64_t i)
{
	struct peer_worker *s = w->state;
	const struct peer_cfg *cfg = s->cfg;

	if (s->ok && (s->got_status != CARMY_STATUS_COMPLETED ||
		      s->got_result_len != cfg->result_len ||
		      memcmp(s->got_result, cfg->result, cfg->result_len) != 0 ||
		      strncmp(s->got_exec, "exec_", 5) != 0))
		peer_fail(s, "replayed status %d, %zu result bytes, "
			  "execution_id '%s': not what was recorded",
			  s->got_status, s->got_result_len, s->got_exec);
	return check(w, i);
}

static int teardown(struct bench_worker *w, uint64_t done)
{
	struct peer_worker *s = w->state;

	(void)done;
	if (s == NULL)
		return BENCH_OK;
	if (s->conn != NULL)
		s->cfg->be->close(s);
	free(s);
	w->state = NULL;
	return BENCH_OK;
}
