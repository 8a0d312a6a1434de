/*
 * bench_redis.c - the peer workload against Redis, through hiredis over a
 * Unix socket. See bench_peer.h.
 *
 * An identity is one key, its three parts length-prefixed so that no two
 * identities share a key: "idem:5:bench:11:carmy-bench:<request_id>". Its
 * value is one binary record:
 *
 *   state  'R' running or 'C' completed        1 byte
 *   fingerprint                               16 bytes
 *   execution id                              37 bytes
 *   status (completed only)                    1 byte
 *   result (completed only)                    result_len bytes
 *
 *   reserve   SET key <R record> NX   -> OK if it won, nil if taken
 *   complete  SET key <C record>      -> OK
 *   replay    GET key                 -> the record
 *   rt        PING                    -> PONG
 *
 * The completion is a plain SET: it does not check that the entry is
 * still running and still ours (Carmy's completion does; in Redis that
 * takes WATCH/MULTI or a script, another round trip or more server work),
 * which can only flatter Redis.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "bench/bench_peer.h"

#define KEY_PREFIX "idem:5:" PEER_PRINCIPAL ":11:" PEER_SESSION ":"
#define REC_HEAD (1 + 16 + CARMY_EXECUTION_ID_LEN)
#define REC_MAX (REC_HEAD + 1 + PEER_RESULT_MAX)

struct redis_conn {
	redisContext *c;
	char key[sizeof(KEY_PREFIX) + PEER_RID_MAX];
	size_t key_len;
	uint8_t rec[REC_MAX];
};

static void r_connect(struct peer_worker *s);
static void r_setup(struct peer_worker *s, struct peer_cfg *cfg);
static void r_rt(struct peer_worker *s);
static void r_reserve(struct peer_worker *s);
static void r_complete(struct peer_worker *s);
static void r_replay(struct peer_worker *s);
static void r_close(struct peer_worker *s);
static redisReply *command(struct peer_worker *s, int argc, const char **argv,
			   const size_t *lens);
static void expect_status(struct peer_worker *s, redisReply *r,
			  const char *want, bool nx);
static size_t set_key(struct peer_worker *s);
static size_t put_record(struct peer_worker *s, char state);
static void config_get(struct peer_worker *s, const char *name, char *out,
		       size_t len);

const struct peer_backend peer_redis = {
	.name = "redis",
	.connect = r_connect,
	.setup = r_setup,
	.rt = r_rt,
	.reserve = r_reserve,
	.complete = r_complete,
	.replay = r_replay,
	.close = r_close,
};

/* ------------------------------------------------------------ backend */

static void r_connect(struct peer_worker *s)
{
	struct redis_conn *rc = calloc(1, sizeof(*rc));

	s->ok = false;
	if (rc == NULL) {
		peer_fail(s, "out of memory");
		return;
	}
	rc->c = redisConnectUnix(s->cfg->where);
	if (rc->c == NULL || rc->c->err != 0) {
		peer_fail(s, "cannot connect to %s: %s", s->cfg->where,
			  rc->c != NULL ? rc->c->errstr : "out of memory");
		if (rc->c != NULL)
			redisFree(rc->c);
		free(rc);
		return;
	}
	s->conn = rc;
	s->ok = true;
}

/* Nothing to create; say how the server keeps its data. */
static void r_setup(struct peer_worker *s, struct peer_cfg *cfg)
{
	char save[64], aof[16], fsync[16], ver[32] = "?";
	const char *argv[] = { "INFO", "server" };
	redisReply *r = command(s, 2, argv, NULL);

	if (r == NULL)
		return;
	if (r->type == REDIS_REPLY_STRING) {
		const char *v = strstr(r->str, "redis_version:");

		if (v != NULL)
			snprintf(ver, sizeof(ver), "%.*s",
				 (int)strcspn(v + 14, "\r\n"), v + 14);
	}
	freeReplyObject(r);
	config_get(s, "save", save, sizeof(save));
	config_get(s, "appendonly", aof, sizeof(aof));
	config_get(s, "appendfsync", fsync, sizeof(fsync));
	if (s->ok)
		snprintf(cfg->settings, sizeof(cfg->settings),
			 "redis %s; save '%s'; appendonly %s (appendfsync %s)",
			 ver, save, aof, fsync);
}

static void r_rt(struct peer_worker *s)
{
	const char *argv[] = { "PING" };

	expect_status(s, command(s, 1, argv, NULL), "PONG", false);
}

static void r_reserve(struct peer_worker *s)
{
	struct redis_conn *rc = s->conn;
	const char *argv[] = { "SET", rc->key, (const char *)rc->rec, "NX" };
	size_t lens[] = { 3, set_key(s), put_record(s, 'R'), 2 };

	expect_status(s, command(s, 4, argv, lens), "OK", true);
}

/* The key is still the one reserve built. */
static void r_complete(struct peer_worker *s)
{
	struct redis_conn *rc = s->conn;
	const char *argv[] = { "SET", rc->key, (const char *)rc->rec };
	size_t lens[] = { 3, rc->key_len, put_record(s, 'C') };

	expect_status(s, command(s, 3, argv, lens), "OK", false);
}

static void r_replay(struct peer_worker *s)
{
	struct redis_conn *rc = s->conn;
	const char *argv[] = { "GET", rc->key };
	size_t lens[] = { 3, set_key(s) };
	redisReply *r = command(s, 2, argv, lens);
	const uint8_t *v;

	if (r == NULL)
		return;
	v = (const uint8_t *)r->str;
	if (r->type != REDIS_REPLY_STRING || r->len < REC_HEAD ||
	    (v[0] == 'C' && r->len <= REC_HEAD) ||
	    r->len > REC_HEAD + 1 + PEER_RESULT_MAX) {
		peer_fail(s, "GET: reply type %d, %zu bytes: not a record",
			  r->type, r->type == REDIS_REPLY_STRING ? r->len : 0);
		freeReplyObject(r);
		return;
	}
	memcpy(s->got_fp, v + 1, 16);
	memcpy(s->got_exec, v + 17, CARMY_EXECUTION_ID_LEN);
	s->got_exec[CARMY_EXECUTION_ID_LEN] = '\0';
	s->got_completed = v[0] == 'C';
	s->got_status = s->got_completed ? v[REC_HEAD] : 0;
	s->got_result_len = s->got_completed ? r->len - REC_HEAD - 1 : 0;
	memcpy(s->got_result, v + REC_HEAD + 1, s->got_result_len);
	freeReplyObject(r);
}

static void r_close(struct peer_worker *s)
{
	struct redis_conn *rc = s->conn;

	redisFree(rc->c);
	free(rc);
	s->conn = NULL;
}

/* ------------------------------------------------------------ helpers */

/* One blocking round trip. Returns the reply, or NULL with s->err set (a
 * Redis error reply is a failure too). s->ok is true on success. */
static redisReply *command(struct peer_worker *s, int argc, const char **argv,
			   const size_t *lens)
{
	struct redis_conn *rc = s->conn;
	redisReply *r = redisCommandArgv(rc->c, argc, argv, lens);

	if (r == NULL) {
		peer_fail(s, "%s: %s", argv[0], rc->c->errstr);
		return NULL;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		peer_fail(s, "%s: %s", argv[0], r->str);
		freeReplyObject(r);
		return NULL;
	}
	s->ok = true;
	return r;
}

/* Whether r (freed here) is the status reply want; with nx, a nil reply
 * means SET NX lost: the identity was taken. */
static void expect_status(struct peer_worker *s, redisReply *r,
			  const char *want, bool nx)
{
	if (r == NULL)
		return;
	if (nx && r->type == REDIS_REPLY_NIL)
		peer_fail(s, "SET NX: the identity is taken");
	else if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, want) != 0)
		peer_fail(s, "expected %s, got a reply of type %d", want,
			  r->type);
	freeReplyObject(r);
}

/* The identity's key into rc->key. Returns its length. */
static size_t set_key(struct peer_worker *s)
{
	struct redis_conn *rc = s->conn;

	memcpy(rc->key, KEY_PREFIX, sizeof(KEY_PREFIX) - 1);
	memcpy(rc->key + sizeof(KEY_PREFIX) - 1, s->rid, s->rid_len);
	rc->key_len = sizeof(KEY_PREFIX) - 1 + s->rid_len;
	return rc->key_len;
}

/* The value for state 'R' or 'C' into rc->rec. Returns its length. */
static size_t put_record(struct peer_worker *s, char state)
{
	struct redis_conn *rc = s->conn;
	const struct peer_cfg *cfg = s->cfg;

	rc->rec[0] = (uint8_t)state;
	memcpy(rc->rec + 1, s->fp, 16);
	memcpy(rc->rec + 17, s->exec, CARMY_EXECUTION_ID_LEN);
	if (state == 'R')
		return REC_HEAD;
	rc->rec[REC_HEAD] = CARMY_STATUS_COMPLETED;
	memcpy(rc->rec + REC_HEAD + 1, cfg->result, cfg->result_len);
	return REC_HEAD + 1 + cfg->result_len;
}

static void config_get(struct peer_worker *s, const char *name, char *out,
		       size_t len)
{
	const char *argv[] = { "CONFIG", "GET", name };
	redisReply *r;

	snprintf(out, len, "?");
	if (!s->ok || (r = command(s, 3, argv, NULL)) == NULL)
		return;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[1]->type == REDIS_REPLY_STRING)
		snprintf(out, len, "%s", r->element[1]->str);
	freeReplyObject(r);
}
