/*
 * bench_peer.h - carmy-bench's carmyd workload run against the stores an
 * agent platform would otherwise keep idempotency keys in: Redis (hiredis)
 * and PostgreSQL (libpq), each over a Unix socket, one connection per
 * worker process, one blocking request at a time.
 *
 *   rt       the store's cheapest round trip: Redis PING, PostgreSQL a
 *            prepared SELECT 1
 *   reserve  fingerprint the call, claim a new identity with it, a new
 *            execution id and state running, and learn whether the claim
 *            won: one round trip
 *   replay   fingerprint the call, read a finished identity, compare the
 *            fingerprint and copy out execution id, status and result: one
 *            round trip
 *   cycle    reserve a new identity, then record status completed and the
 *            same 100-byte result Carmy's cycle records: two round trips
 *
 * The identities are Carmy's (principal "bench", session "carmy-bench",
 * request ids "<nonce>-<run>.<index>-<tag>-<i>"), and the replay figure
 * cycles over the same number of finished identities. The fingerprint is
 * XXH3-128 over the tool name and the raw argument bytes: cheaper than
 * Carmy's canonical one, to the peers' advantage.
 *
 * Each store is a backend (struct peer_backend) that only speaks its
 * protocol; everything else (identities, fingerprints, execution ids, the
 * harness callbacks, checking what came back) is common, in bench_peer.c.
 * The backends use bench_peer.c (peer_fail()), which reaches them only
 * through cfg->be: carmy-bench.c, above both, picks the backend.
 */
#ifndef CARMY_BENCH_PEER_H
#define CARMY_BENCH_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "carmy.h"
#include "bench/bench_run.h"

/* The identity's fixed parts, the same as the carmyd figures'. */
#define PEER_PRINCIPAL "bench"
#define PEER_SESSION "carmy-bench"

#define PEER_RID_MAX 64
#define PEER_RESULT_MAX 256
#define PEER_ERR_MAX 160
#define PEER_SETTINGS_MAX 320

enum peer_kind {
	PEER_REDIS,
	PEER_PG,
	PEER_COUNT,
};

enum peer_op {
	PEER_RT,
	PEER_RESERVE,
	PEER_REPLAY,
	PEER_CYCLE,
	PEER_OP_COUNT,
};

struct peer_backend;

/* One store and the call every op makes. Filled before the fork. */
struct peer_cfg {
	const struct peer_backend *be;
	const char *where;	/* Redis: socket path; PostgreSQL: conninfo */
	char nonce[17];		/* random per run: ids never repeat */
	uint32_t replay_set;
	const uint8_t *args;
	size_t args_len;
	const uint8_t *result;
	size_t result_len;	/* at most PEER_RESULT_MAX */
	enum peer_op op;	/* the figure being run */
	char settings[PEER_SETTINGS_MAX]; /* the server's own words */
};

/* One worker's connection and the call in flight. Backends read the
 * identity, fp and exec of the call, and fill ok and err, and for a replay
 * the got_* fields. */
struct peer_worker {
	const struct peer_cfg *cfg;
	void *conn;
	char rid[PEER_RID_MAX];
	size_t rid_len;
	size_t prefix;		/* bytes of rid before the counter */
	uint8_t fp[16];
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	uint64_t exec_seed;
	uint64_t exec_n;
	bool ok;
	char err[PEER_ERR_MAX];
	uint8_t got_fp[16];
	char got_exec[CARMY_EXECUTION_ID_LEN + 1];
	bool got_completed;
	int got_status;
	uint8_t got_result[PEER_RESULT_MAX];
	size_t got_result_len;
};

/*
 * A store's protocol. Every function blocks for its round trips, sets
 * s->ok, and on failure puts a sentence in s->err. connect leaves s->conn
 * open (or NULL on failure); setup runs once per run on one connection
 * before anything is timed (schema, and what the server says about its
 * durability into cfg->settings).
 */
struct peer_backend {
	const char *name;
	void (*connect)(struct peer_worker *s);
	void (*setup)(struct peer_worker *s, struct peer_cfg *cfg);
	void (*rt)(struct peer_worker *s);
	void (*reserve)(struct peer_worker *s);
	void (*complete)(struct peer_worker *s);
	void (*replay)(struct peer_worker *s);
	void (*close)(struct peer_worker *s);
};

/* The backends: bench_redis.c, built when configure finds hiredis, and
 * bench_pg.c, when it finds libpq. */
extern const struct peer_backend peer_redis;
extern const struct peer_backend peer_pg;

const char *peer_kind_name(enum peer_kind k);

/* Connect once, run the backend's setup and record the replay set's
 * finished identities. Returns 0, or -1 with a sentence in err. */
int peer_prepare(struct peer_cfg *cfg, char *err, size_t errlen);

/* The harness callbacks of one figure; cfg->op is set to op. */
void peer_figure(struct bench_figure *f, struct peer_cfg *cfg,
		 enum peer_op op);

/* For backends: a sentence into s->err, and s->ok false. */
void peer_fail(struct peer_worker *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* v in lowercase hex, no leading zeros. Returns the digits written. */
size_t peer_put_hex(char *p, uint64_t v);

#endif /* CARMY_BENCH_PEER_H */
