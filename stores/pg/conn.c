/*
 * conn.c - the PostgreSQL store's connection, made ready for requests:
 * the arguments, the connection and its defaults, the session's bounds,
 * the schema, the prepared statements, the instance's name held as a
 * session advisory lock (worker 0's) and each other connection's lock,
 * and the instance's generation. The connection is non-blocking: every
 * wait on the server, sending included, is wait.c's, and bounded. At open
 * (store_pg.c) and after every reconnect (worker.c). Why each is as it
 * is: the top of store_pg.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "stores/pg/pg.h"

#define MIN_SERVER 90600	/* ADD COLUMN IF NOT EXISTS (and 9.5's
				 * INSERT ... ON CONFLICT) */
/* Half of each page of carmy_executions is left free by INSERTs, for the
 * version of its rows that COMPLETE writes (a row is inserted once and
 * settled once): the new version then lands on the row's page, and no
 * index is touched (a heap-only update). At the default of 100, a settle
 * on a full page wrote a new entry in each of the three indexes: 23% of
 * settles on the benchmark (16 clients), 0.1% at 50, where a settle's
 * statement ran 30% faster and wrote half the WAL records. The price:
 * pages hold half as many rows before their results arrive. */
#define FILLFACTOR "50"
/* Whether carmy_executions has a fillfactor, the store's or another (and
 * while there is no such table: false). */
#define HAS_FILLFACTOR \
	"EXISTS (SELECT 1 FROM pg_class AS c, unnest(c.reloptions) AS o" \
	" WHERE c.oid = to_regclass('carmy_executions')" \
	" AND o LIKE 'fillfactor=%')"
/* pg_advisory_xact_lock key of schema creation: "CarmyPgS" */
#define SCHEMA_LOCK "4855287687794419539"


static const char *const schema_sql[] = {
	"BEGIN",
	"SELECT pg_advisory_xact_lock(" SCHEMA_LOCK ")",
	"CREATE TABLE IF NOT EXISTS carmy_executions ("
	" principal bytea NOT NULL,"
	" session bytea NOT NULL,"
	" request_id bytea NOT NULL,"
	" exec bytea NOT NULL UNIQUE,"
	" instance text NOT NULL,"
	" fingerprint bytea NOT NULL,"
	" rawprint bytea NOT NULL,"
	" pid bigint NOT NULL,"
	" started_ns bigint NOT NULL,"
	" state smallint NOT NULL,"
	" finished_ns bigint,"
	" status integer,"
	" result_code integer,"
	" result bytea,"
	" resolved_ns bigint,"
	" resolved_uid bigint,"
	" resolved_pid bigint,"
	" PRIMARY KEY (principal, session, request_id))"
	" WITH (fillfactor = " FILLFACTOR ")",
	/* A table made before the fillfactor was set gets it, for the pages
	 * it fills from now on; one an operator set stays as it is. */
	"DO $d$ BEGIN"
	" IF NOT " HAS_FILLFACTOR " THEN"
	" ALTER TABLE carmy_executions SET (fillfactor = " FILLFACTOR ");"
	" END IF;"
	" END $d$",
	"CREATE INDEX IF NOT EXISTS carmy_executions_instance"
	" ON carmy_executions (instance)",
	/* What the call was (carmy_store.h): a table made before them gets
	 * them here, in place; its rows hold NULL there, read as none. */
	"ALTER TABLE carmy_executions"
	" ADD COLUMN IF NOT EXISTS tool bytea,"
	" ADD COLUMN IF NOT EXISTS tool_len integer,"
	" ADD COLUMN IF NOT EXISTS args bytea,"
	" ADD COLUMN IF NOT EXISTS args_len bigint,"
	" ADD COLUMN IF NOT EXISTS result_format smallint",
	/* Each instance's generation: open() adds one (pg_new_generation())
	 * and every batch checks it (carmy_fence()). */
	"CREATE TABLE IF NOT EXISTS carmy_instances ("
	" name text PRIMARY KEY,"
	" gen bigint NOT NULL)",
	/* The fence, a batch's first statement: k, the instance's fence key
	 * (pg_fence_key()), taken shared until the transaction ends, so that
	 * a new generation waits for every batch in flight; then n's
	 * generation must still be g, read after the lock (a volatile
	 * function's statements each take a new snapshot in READ
	 * COMMITTED). Else FENCE_STATE, and the whole batch rolls back. */
	"CREATE OR REPLACE FUNCTION carmy_fence(k bigint, n text, g bigint)"
	" RETURNS void LANGUAGE plpgsql VOLATILE AS $f$"
	" BEGIN"
	" PERFORM pg_advisory_xact_lock_shared(k);"
	" IF NOT EXISTS (SELECT 1 FROM carmy_instances AS i"
	" WHERE i.name = n AND i.gen = g) THEN"
	" RAISE EXCEPTION 'instance % was opened again: generation % is"
	" superseded', n, g USING ERRCODE = '" FENCE_STATE "';"
	" END IF;"
	" END $f$",
	"COMMIT",
};

/* The session's bounds (the top of store_pg.c), each where nothing set
 * it: not the connection's options, the role's or the database's
 * settings, nor the server's configuration (pg_settings.source
 * 'default'). Not by its value: over TCP the keepalive settings read the
 * system's defaults (7200 s...), not 0, and 0 may be an explicit choice.
 * pg_settings lists only what the server knows
 * (idle_in_transaction_session_timeout is 9.6's, tcp_user_timeout 12's).
 * idle_session_timeout (14's) is turned off whatever set it: the session
 * holds the instance's name, and must not be dropped for sitting idle
 * between requests. The statements are planned once per connection and
 * the plan kept (plan_cache_mode, 12's, force_generic_plan): planning one
 * request's RESERVE took twice as long as running it (0.2 ms against
 * 0.08). A plan made while the table is small would scan the whole table
 * for an identity ever after (a benchmark's cycles fell from 2,534 to
 * 1,170 a second over 8,000 of them): so the plans must take the keys
 * whatever the table's size was when they were made. Sequential scans,
 * hash and merge joins are off for the session (a generic plan made on a
 * small table would read all of it to hash it), every statement below
 * names rows by a unique key (the identity, or exec), its instance is
 * matched with IS NOT DISTINCT FROM (the same for a NOT NULL column, but
 * no index can serve it: carmy_executions_instance, which holds every
 * row of the instance, is load()'s alone), and RESERVES asks whether a
 * row holds an exec id with a scalar subquery (an EXISTS could become a
 * hash of the whole table). Each statement is then one index probe a
 * request.
 */
#define BOUNDS_FMT \
	"SELECT set_config(d.name, d.value, false) FROM (VALUES" \
	" ('lock_timeout', '%ums'), ('statement_timeout', '%ums')," \
	" ('idle_in_transaction_session_timeout', '60s')," \
	" ('tcp_keepalives_idle', '30'), ('tcp_keepalives_interval', '10')," \
	" ('tcp_keepalives_count', '3'), ('tcp_user_timeout', '30000'))" \
	" AS d (name, value) JOIN pg_settings AS s USING (name)" \
	" WHERE s.source = 'default' UNION ALL SELECT set_config(name, '0'," \
	" false) FROM pg_settings WHERE name = 'idle_session_timeout'" \
	" UNION ALL SELECT set_config(name, 'force_generic_plan', false)" \
	" FROM pg_settings WHERE name = 'plan_cache_mode'" \
	" UNION ALL SELECT set_config(name, 'off', false) FROM pg_settings" \
	" WHERE name IN ('enable_seqscan', 'enable_hashjoin'," \
	" 'enable_mergejoin')"

/* Columns 0 to 3: was it inserted, is a row standing for the identity,
 * is that row this instance's, does a row hold the exec id; then ROW_COLS.
 * The reads see the statement's snapshot, not the insert's row: a row
 * shows only if it stood before. */
#define RESERVE_SQL \
	"WITH ins AS (INSERT INTO carmy_executions (principal, session," \
	" request_id, exec, instance, fingerprint, rawprint, pid, started_ns," \
	" tool, tool_len, args, args_len, result_format, state)" \
	" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13," \
	" $14, 1)" \
	" ON CONFLICT DO NOTHING RETURNING 1)" \
	" SELECT EXISTS (SELECT 1 FROM ins), e.ctid IS NOT NULL," \
	" e.instance = $5," \
	" EXISTS (SELECT 1 FROM carmy_executions AS o WHERE o.exec = $4), " \
	ROW_COLS \
	" FROM (VALUES (1)) AS one (x) LEFT JOIN carmy_executions AS e" \
	" ON e.principal = $1 AND e.session = $2 AND e.request_id = $3"
/* A lone RESERVE's first form: the insert alone, its command tag saying
 * whether it took (INSERT 0 1). Most identities are vacant, and for them
 * this is all the server needs to do: none of RESERVE_SQL's reads, and no
 * result columns to describe and send (docs/performance.md, "A lone
 * reservation as a bare insert"). One that takes nothing (the identity or
 * the exec id held, or this very RESERVE submitted again after a lost
 * answer) decides nothing: RESERVE_SQL runs for it in the next
 * transaction, and tells those cases apart. A RESERVE whose run may have
 * committed goes as RESERVE_SQL at once (worker.c, forget()). */
#define RESERVE_PLAIN_SQL \
	"INSERT INTO carmy_executions (principal, session, request_id, exec," \
	" instance, fingerprint, rawprint, pid, started_ns, tool, tool_len," \
	" args, args_len, result_format, state)" \
	" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13," \
	" $14, 1) ON CONFLICT DO NOTHING"
/* COMPLETE, and RESOLVE as committed ($6..$8 NULL for COMPLETE). Columns:
 * updated, row found, its state, whether it holds exactly this result. */
#define SETTLE_SQL \
	"WITH upd AS (UPDATE carmy_executions SET state = 2," \
	" finished_ns = $2, status = $3, result_code = $4, result = $5," \
	" resolved_ns = $6, resolved_uid = $7, resolved_pid = $8" \
	" WHERE exec = $1 AND instance IS NOT DISTINCT FROM $9 AND state = 1" \
	" RETURNING 1)" \
	" SELECT EXISTS (SELECT 1 FROM upd), e.ctid IS NOT NULL, e.state," \
	" e.status = $3 AND e.result_code = $4 AND e.result = $5" \
	" FROM (VALUES (1)) AS one (x) LEFT JOIN carmy_executions AS e" \
	" ON e.exec = $1 AND e.instance IS NOT DISTINCT FROM $9"
/* A lone COMPLETE's or RESOLVE's first form: the update alone, its
 * command tag saying whether it took (UPDATE 1). One that took nothing
 * (this very settle submitted again after a lost answer, or a row not
 * this instance's running one) decides nothing: SETTLE_SQL runs for it in
 * the next transaction. */
#define SETTLE_PLAIN_SQL \
	"UPDATE carmy_executions SET state = 2," \
	" finished_ns = $2, status = $3, result_code = $4, result = $5," \
	" resolved_ns = $6, resolved_uid = $7, resolved_pid = $8" \
	" WHERE exec = $1 AND instance IS NOT DISTINCT FROM $9 AND state = 1"
#define RELEASE_SQL \
	"DELETE FROM carmy_executions WHERE exec = $1" \
	" AND instance IS NOT DISTINCT FROM $2" \
	" AND state = 1"
#define PURGE_SQL \
	"DELETE FROM carmy_executions WHERE exec = $1 AND state = 2"
/* The row a RESERVE reported failed may have inserted, and only it. */
#define WITHDRAW_SQL \
	"DELETE FROM carmy_executions WHERE principal = $1 AND session = $2" \
	" AND request_id = $3 AND exec = $4" \
	" AND instance IS NOT DISTINCT FROM $5 AND state = 1"

/*
 * The set-based forms: one statement for a group of a batch's RESERVEs,
 * or of its settles, each column an array with one element a request
 * ($14, $9: the instance). The full forms send one row a request out, in
 * their order (column 0: the element's ordinal), the per-request
 * statement's columns after it; v holds the elements, read once (a CTE
 * named twice is materialised); every read of the table sees the
 * statement's snapshot, as one request's statement does. The bare forms
 * send only the ordinals of the elements that took.
 *
 * RESERVES inserts in the elements' order (the worker sorts them by
 * identity) and tells an element's own insert by its identity and exec id
 * together: of two elements of one identity the first is inserted and the
 * second, finding no row in the snapshot, looks again in the next
 * transaction; of two of one exec id, the second conflicts on it. */
#define RESERVES_INS \
	"WITH v AS (SELECT * FROM unnest($1::bytea[], $2::bytea[]," \
	" $3::bytea[], $4::bytea[], $5::bytea[], $6::bytea[], $7::int8[]," \
	" $8::int8[], $9::bytea[], $10::int4[], $11::bytea[], $12::int8[]," \
	" $13::int2[]) WITH ORDINALITY AS v (v_principal, v_session," \
	" v_request_id, v_exec, v_fingerprint, v_rawprint, v_pid, v_started," \
	" v_tool, v_tool_len, v_args, v_args_len, v_format, v_i))," \
	" ins AS (INSERT INTO carmy_executions (principal, session," \
	" request_id, exec, instance, fingerprint, rawprint, pid, started_ns," \
	" tool, tool_len, args, args_len, result_format, state)" \
	" SELECT v_principal, v_session, v_request_id, v_exec, $14," \
	" v_fingerprint, v_rawprint, v_pid, v_started, v_tool, v_tool_len," \
	" v_args, v_args_len, v_format, 1 FROM v ORDER BY v_i" \
	" ON CONFLICT DO NOTHING RETURNING principal, session, request_id," \
	" exec)"
#define RESERVES_MINE \
	" EXISTS (SELECT 1 FROM ins WHERE ins.exec = v_exec AND" \
	" ins.principal = v_principal AND ins.session = v_session AND" \
	" ins.request_id = v_request_id)"
#define RESERVES_SQL \
	RESERVES_INS \
	" SELECT v_i," RESERVES_MINE ", e.ctid IS NOT NULL," \
	" e.instance = $14," \
	" (SELECT 1 FROM carmy_executions AS o WHERE o.exec = v_exec LIMIT 1)" \
	" IS NOT NULL, " \
	ROW_COLS \
	" FROM v LEFT JOIN carmy_executions AS e ON e.principal = v_principal" \
	" AND e.session = v_session AND e.request_id = v_request_id" \
	" ORDER BY v_i"
/* The bare form, as a lone RESERVE's: the ordinals of the elements
 * inserted, in order; the others look again in the next transaction, as
 * RESERVES_SQL or RESERVE_SQL. */
#define RESERVES_PLAIN_SQL \
	RESERVES_INS " SELECT v_i FROM v WHERE" RESERVES_MINE " ORDER BY v_i"
/* SETTLES updates each row once, for the first element naming its exec
 * id (the others look again, and find the result standing). */
#define SETTLES_UPD \
	"WITH v AS (SELECT * FROM unnest($1::bytea[], $2::int8[]," \
	" $3::int4[], $4::int4[], $5::bytea[], $6::int8[], $7::int8[]," \
	" $8::int8[]) WITH ORDINALITY AS v (v_exec, v_finished, v_status," \
	" v_code, v_result, v_rns, v_ruid, v_rpid, v_i))," \
	" upd AS (UPDATE carmy_executions AS t SET state = 2," \
	" finished_ns = d.v_finished, status = d.v_status," \
	" result_code = d.v_code, result = d.v_result, resolved_ns = d.v_rns," \
	" resolved_uid = d.v_ruid, resolved_pid = d.v_rpid" \
	" FROM (SELECT DISTINCT ON (v_exec) * FROM v ORDER BY v_exec, v_i)" \
	" AS d WHERE t.exec = d.v_exec AND t.instance IS NOT DISTINCT FROM $9" \
	" AND t.state = 1" \
	" RETURNING d.v_i)"
#define SETTLES_SQL \
	SETTLES_UPD \
	" SELECT v.v_i, EXISTS (SELECT 1 FROM upd WHERE upd.v_i = v.v_i)," \
	" e.ctid IS NOT NULL, e.state, e.status = v_status AND" \
	" e.result_code = v_code AND e.result = v_result" \
	" FROM v LEFT JOIN carmy_executions AS e ON e.exec = v_exec AND" \
	" e.instance IS NOT DISTINCT FROM $9 ORDER BY v.v_i"
/* The bare form: the ordinals of the elements that updated, in order. */
#define SETTLES_PLAIN_SQL SETTLES_UPD " SELECT v_i FROM upd ORDER BY v_i"

/* Each bare form takes its full twin's parameters. */
#define RESERVE_TYPES 14, { BYTEAOID, BYTEAOID, BYTEAOID, BYTEAOID, \
	TEXTOID, BYTEAOID, BYTEAOID, INT8OID, INT8OID, BYTEAOID, INT4OID, \
	BYTEAOID, INT8OID, INT2OID }
#define SETTLE_TYPES 9, { BYTEAOID, INT8OID, INT4OID, INT4OID, BYTEAOID, \
	INT8OID, INT8OID, INT8OID, TEXTOID }
#define RESERVES_TYPES 14, { BYTEAARRAYOID, BYTEAARRAYOID, BYTEAARRAYOID, \
	BYTEAARRAYOID, BYTEAARRAYOID, BYTEAARRAYOID, INT8ARRAYOID, \
	INT8ARRAYOID, BYTEAARRAYOID, INT4ARRAYOID, BYTEAARRAYOID, \
	INT8ARRAYOID, INT2ARRAYOID, TEXTOID }
#define SETTLES_TYPES 9, { BYTEAARRAYOID, INT8ARRAYOID, INT4ARRAYOID, \
	INT4ARRAYOID, BYTEAARRAYOID, INT8ARRAYOID, INT8ARRAYOID, \
	INT8ARRAYOID, TEXTOID }

const struct pg_stmt pg_stmts[ST_COUNT] = {
	[ST_RESERVE] = { "carmy_reserve", RESERVE_SQL, RESERVE_TYPES },
	[ST_RESERVE_PLAIN] = { "carmy_reserve_plain", RESERVE_PLAIN_SQL,
	  RESERVE_TYPES },
	[ST_SETTLE] = { "carmy_settle", SETTLE_SQL, SETTLE_TYPES },
	[ST_SETTLE_PLAIN] = { "carmy_settle_plain", SETTLE_PLAIN_SQL,
	  SETTLE_TYPES },
	[ST_RELEASE] = { "carmy_release", RELEASE_SQL, 2, { BYTEAOID,
	  TEXTOID } },
	[ST_PURGE] = { "carmy_purge", PURGE_SQL, 1, { BYTEAOID } },
	[ST_WITHDRAW] = { "carmy_withdraw", WITHDRAW_SQL, 5, { BYTEAOID,
	  BYTEAOID, BYTEAOID, BYTEAOID, TEXTOID } },
	[ST_RESERVES] = { "carmy_reserves", RESERVES_SQL, RESERVES_TYPES },
	[ST_SETTLES] = { "carmy_settles", SETTLES_SQL, SETTLES_TYPES },
	[ST_RESERVES_PLAIN] = { "carmy_reserves_plain", RESERVES_PLAIN_SQL,
	  RESERVES_TYPES },
	[ST_SETTLES_PLAIN] = { "carmy_settles_plain", SETTLES_PLAIN_SQL,
	  SETTLES_TYPES },
	[ST_FENCE] = { "carmy_fence", "SELECT carmy_fence($1, $2, $3)", 3, {
	  INT8OID, TEXTOID, INT8OID } },
};

static bool name_ok(const char *p, size_t n)
{
	if (n == 0 || n > INSTANCE_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((p[i] >= 'a' && p[i] <= 'z') ||
		      (p[i] >= 'A' && p[i] <= 'Z') ||
		      (p[i] >= '0' && p[i] <= '9') ||
		      p[i] == '.' || p[i] == '_' || p[i] == '-'))
			return false;
	return true;
}

/* timeout=SECONDS: 1 to 3600 whole seconds, into pg_answer_ms. */
static int parse_timeout(const char *v, size_t n, char *err, size_t errlen)
{
	unsigned long secs = 0;
	size_t i;

	for (i = 0; i < n && i < 5 && v[i] >= '0' && v[i] <= '9'; i++)
		secs = secs * 10 + (unsigned long)(v[i] - '0');
	if (i == 0 || i != n || secs < 1 || secs > 3600) {
		snprintf(err, errlen, "timeout=\"%.*s\" is not a number of "
			 "seconds from 1 to 3600", n > 20 ? 20 : (int)n, v);
		return -EINVAL;
	}
	pg_answer_ms = (unsigned)secs * 1000u;
	return 0;
}

/* connections=N: 1 to CONNECTIONS_MAX workers. */
static int parse_connections(const char *v, size_t n, unsigned *out,
			     char *err, size_t errlen)
{
	unsigned long k = 0;
	size_t i;

	for (i = 0; i < n && i < 3 && v[i] >= '0' && v[i] <= '9'; i++)
		k = k * 10 + (unsigned long)(v[i] - '0');
	if (i == 0 || i != n || k < 1 || k > CONNECTIONS_MAX) {
		snprintf(err, errlen, "connections=\"%.*s\" is not a number "
			 "of connections from 1 to %d", n > 20 ? 20 : (int)n,
			 v, CONNECTIONS_MAX);
		return -EINVAL;
	}
	*out = (unsigned)k;
	return 0;
}

/* ARGS: [instance=NAME ][timeout=SECONDS ][connections=N ]CONNINFO, the
 * first three in any order; each value ends at the first space. */
int pg_parse_args(const char *args, char *instance, unsigned *connections,
		  const char **conninfo, char *err, size_t errlen)
{
	char host[256];
	bool named = false;
	size_t n;

	for (;;) {
		const char *v;

		if (strncmp(args, "connections=", 12) == 0) {
			v = args + 12;
			n = strcspn(v, " ");
			if (parse_connections(v, n, connections, err,
					      errlen) != 0)
				return -EINVAL;
		} else if (strncmp(args, "timeout=", 8) == 0) {
			v = args + 8;
			n = strcspn(v, " ");
			if (parse_timeout(v, n, err, errlen) != 0)
				return -EINVAL;
		} else if (strncmp(args, "instance=", 9) == 0) {
			v = args + 9;
			n = strcspn(v, " ");
			if (!name_ok(v, n)) {
				snprintf(err, errlen, "instance name \"%.*s\" "
					 "is not 1 to %d bytes of A-Z a-z 0-9 "
					 ". _ -", n > 80 ? 80 : (int)n, v,
					 INSTANCE_MAX);
				return -EINVAL;
			}
			memcpy(instance, v, n);
			instance[n] = '\0';
			named = true;
		} else {
			break;
		}
		args = v + n + strspn(v + n, " ");
	}
	*conninfo = args;
	if (named)
		return 0;
	if (gethostname(host, sizeof(host)) != 0) {
		snprintf(err, errlen, "cannot read the host name (%s) to name "
			 "this instance: give one with instance=NAME",
			 strerror(errno));
		return -EINVAL;
	}
	host[sizeof(host) - 1] = '\0';
	n = strlen(host);
	if (!name_ok(host, n)) {
		snprintf(err, errlen, "the host name \"%.80s\" cannot name "
			 "this instance (1 to %d bytes of A-Z a-z 0-9 . _ -): "
			 "give one with instance=NAME", host, INSTANCE_MAX);
		return -EINVAL;
	}
	memcpy(instance, host, n + 1);
	return 0;
}

static void no_notices(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

/* Connect, with defaults that conninfo overrides (it is expanded where
 * dbname stands, after them). Refuse a server without ON CONFLICT. */
int pg_connect_db(struct pg_worker *s, const char *conninfo, char *err,
		  size_t errlen)
{
	static const char *const keys[] = { "connect_timeout",
		"keepalives_idle", "keepalives_interval", "keepalives_count",
		"tcp_user_timeout", "fallback_application_name", "dbname",
		NULL };
	const char *values[] = { "10", "30", "10", "3", "30000", "carmyd",
				 conninfo, NULL };
	char msg[256];
	int v;

	s->conn = PQconnectdbParams(keys, values, 1);
	if (s->conn == NULL) {
		snprintf(err, errlen, "cannot connect to PostgreSQL: out of "
			 "memory");
		return -ENOMEM;
	}
	if (PQstatus(s->conn) != CONNECTION_OK) {
		snprintf(err, errlen, "cannot connect to PostgreSQL: %s",
			 pg_pq_error(PQerrorMessage(s->conn), msg,
				     sizeof(msg)));
		return -ECONNREFUSED;
	}
	PQsetNoticeProcessor(s->conn, no_notices, NULL);
	if (PQsetnonblocking(s->conn, 1) != 0) {
		snprintf(err, errlen, "cannot make the connection to "
			 "PostgreSQL non-blocking: %s",
			 pg_pq_error(PQerrorMessage(s->conn), msg,
				     sizeof(msg)));
		return -EIO;
	}
	v = PQserverVersion(s->conn);
	if (v < MIN_SERVER) {
		snprintf(err, errlen, "PostgreSQL server version %d is too "
			 "old: the store needs 9.6 or later (INSERT ... ON "
			 "CONFLICT, ADD COLUMN IF NOT EXISTS)", v);
		return -EPROTONOSUPPORT;
	}
	return 0;
}

/* One statement outside a pipeline: 0, or -EIO with a sentence in err. */
static int exec_ok(PGconn *c, const char *sql, const char *doing, char *err,
		   size_t errlen)
{
	PGresult *r = pg_exec(c, sql);
	ExecStatusType st = PQresultStatus(r);
	char msg[256];

	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
		PQclear(r);
		return 0;
	}
	snprintf(err, errlen, "%s: %s", doing,
		 pg_pq_error(r ? PQresultErrorMessage(r) : PQerrorMessage(c),
			     msg, sizeof(msg)));
	PQclear(r);
	return -EIO;
}

/* CREATE ... IF NOT EXISTS still races with itself (two creators both
 * find the table absent): the advisory lock makes them take turns. It is
 * not run at all once the tables, the index, the last column, the
 * fence and a fillfactor exist:
 * CREATE INDEX IF NOT EXISTS and ALTER TABLE take a lock on the table even
 * then, which waits for every instance's writes in flight and holds up
 * those behind it. */
int pg_create_schema(PGconn *c, char *err, size_t errlen)
{
	size_t n = sizeof(schema_sql) / sizeof(schema_sql[0]);
	PGresult *r = pg_exec(c, "SELECT to_regclass('carmy_executions') IS NOT"
			     " NULL AND to_regclass('carmy_executions_instance')"
			     " IS NOT NULL AND EXISTS (SELECT 1 FROM"
			     " pg_attribute WHERE attrelid ="
			     " to_regclass('carmy_executions') AND attname ="
			     " 'result_format' AND NOT attisdropped) AND"
			     " to_regclass('carmy_instances') IS NOT NULL AND"
			     " to_regprocedure('carmy_fence(bigint,text,bigint)')"
			     " IS NOT NULL AND " HAS_FILLFACTOR);
	bool exists = PQresultStatus(r) == PGRES_TUPLES_OK &&
		      PQntuples(r) == 1 && PQnfields(r) == 1 &&
		      strcmp(PQgetvalue(r, 0, 0), "t") == 0;

	PQclear(r);
	if (exists)
		return 0;
	for (size_t i = 0; i < n; i++) {
		int rc = exec_ok(c, schema_sql[i], "cannot create the table "
				 "carmy_executions", err, errlen);

		if (rc != 0) {
			PQclear(pg_exec(c, "ROLLBACK"));
			return rc;
		}
	}
	return 0;
}

/* What every connection needs first, at open and after every reconnect:
 * commits that wait for the flush, transactions in READ COMMITTED that
 * may write (a batch runs as the protocol's implicit transaction, with
 * the session's defaults, whatever the role's or the database's), and
 * bounded waits. */
int pg_setup_session(PGconn *c, char *err, size_t errlen)
{
	int rc = exec_ok(c, "SET synchronous_commit = on", "cannot set "
			 "synchronous_commit", err, errlen);

	if (rc == 0)
		rc = exec_ok(c, "SET SESSION CHARACTERISTICS AS TRANSACTION "
			     "ISOLATION LEVEL READ COMMITTED, READ WRITE",
			     "cannot set the session's transactions", err,
			     errlen);

	if (rc == 0) {
		char sql[sizeof(BOUNDS_FMT) + 16];

		snprintf(sql, sizeof(sql), BOUNDS_FMT,
			 pg_server_wait_ms(LOCK_TIMEOUT_MS, true),
			 pg_server_wait_ms(STATEMENT_TIMEOUT_MS, false));
		rc = exec_ok(c, sql, "cannot bound the session's waits", err,
			     errlen);
	}
	return rc;
}

/* The statements, once the table is there. Each waits for its answer
 * as every statement does (wait.c): a server silent past the store's
 * timeout fails it, and the open or the reconnect with it. */
int pg_prepare_all(PGconn *c, char *err, size_t errlen)
{
	int rc = 0;

	for (size_t i = 0; i < ST_COUNT && rc == 0; i++) {
		PGresult *r = pg_prepare(c, pg_stmts[i].name, pg_stmts[i].sql,
					 pg_stmts[i].nparams,
					 pg_stmts[i].types);
		char msg[256];

		if (PQresultStatus(r) != PGRES_COMMAND_OK) {
			snprintf(err, errlen, "cannot prepare %s: %s",
				 pg_stmts[i].name, pg_pq_error(r ?
				 PQresultErrorMessage(r) : PQerrorMessage(c),
				 msg, sizeof(msg)));
			rc = -EIO;
		}
		PQclear(r);
	}
	return rc;
}

/* A new connection, set up: 0, or why not in err. */
int pg_reconnect(struct pg_worker *s, char *err, size_t errlen)
{
	PQreset(s->conn);
	if (PQstatus(s->conn) != CONNECTION_OK) {
		pg_pq_error(PQerrorMessage(s->conn), err, errlen);
		return -ECONNREFUSED;
	}
	if (PQserverVersion(s->conn) < MIN_SERVER) {
		snprintf(err, errlen, "server version %d is too old",
			 PQserverVersion(s->conn));
		return -EPROTONOSUPPORT;
	}
	PQsetNoticeProcessor(s->conn, no_notices, NULL);
	if (PQsetnonblocking(s->conn, 1) != 0) {
		pg_pq_error(PQerrorMessage(s->conn), err, errlen);
		return -EIO;
	}
	if (pg_setup_session(s->conn, err, errlen) != 0 ||
	    pg_prepare_all(s->conn, err, errlen) != 0)
		return -EIO;
	return 0;
}

/* The name's advisory lock key: FNV-1a, 64 bits, of the name. */
static uint64_t name_hash(const char *name)
{
	uint64_t h = 14695981039346656037u;

	for (const char *p = name; *p != '\0'; p++) {
		h ^= (uint8_t)*p;
		h *= 1099511628211u;
	}
	return h;
}

/* A lock's one statement outside a pipeline: 0, -EBUSY (its holder
 * would not let go of it in time), or -EIO with a sentence in err. */
static int lock_sql(struct pg_worker *s, const char *sql, PGresult **out,
		    char *err, size_t errlen)
{
	PGresult *r = pg_exec(s->conn, sql);
	const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	ExecStatusType st = PQresultStatus(r);
	char msg[256];
	int rc = 0;

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
		rc = state != NULL && strcmp(state, "55P03") == 0 ? -EBUSY :
		     -EIO;
		if (rc == -EIO)
			snprintf(err, errlen, "cannot take an advisory lock "
				 "of instance %s: %s", s->instance,
				 pg_pq_error(r ? PQresultErrorMessage(r) :
					     PQerrorMessage(s->conn), msg,
					     sizeof(msg)));
	}
	if (PQtransactionStatus(s->conn) == PQTRANS_INERROR)
		PQclear(pg_exec(s->conn, "ROLLBACK"));
	if (rc == 0 && out != NULL)
		*out = r;
	else
		PQclear(r);
	return rc;
}

/*
 * Hold the session advisory lock h for this session: 0, -EBUSY while
 * another session holds it, -EIO (with a sentence in err) if the server
 * would not say. A holder that sits idle is refused at once unless
 * wait_idle; one in the middle of something (or, with wait_idle, any) is
 * waited for up to wait_ms, within the store's timeout (a session lock
 * taken in a transaction outlives it), unless wait_ms is 0. The holder
 * is told by
 * the key as pg_locks shows it: high half in classid, low half in objid,
 * objsubid 1.
 */
static int take_lock(struct pg_worker *s, uint64_t h, unsigned wait_ms,
		     bool wait_idle, char *err, size_t errlen)
{
	char sql[640];
	PGresult *r = NULL;
	bool got, idle;
	int rc;

	snprintf(sql, sizeof(sql), "SELECT pg_try_advisory_lock(%" PRId64 "),"
		 " EXISTS (SELECT 1 FROM pg_locks AS l JOIN pg_stat_activity"
		 " AS a USING (pid) WHERE l.locktype = 'advisory' AND"
		 " l.database = (SELECT oid FROM pg_database WHERE datname ="
		 " current_database()) AND l.classid = %" PRIu32 " AND"
		 " l.objid = %" PRIu32 " AND l.objsubid = 1 AND l.granted AND"
		 " a.state = 'idle')", (int64_t)h, (uint32_t)(h >> 32),
		 (uint32_t)h);
	rc = lock_sql(s, sql, &r, err, errlen);
	if (rc == 0 && (PQresultStatus(r) != PGRES_TUPLES_OK ||
			PQntuples(r) != 1 || PQnfields(r) != 2)) {
		snprintf(err, errlen, "cannot take an advisory lock of "
			 "instance %s: unexpected answer", s->instance);
		rc = -EIO;
	}
	if (rc == 0) {
		got = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
		idle = strcmp(PQgetvalue(r, 0, 1), "t") == 0;
		if (!got && ((idle && !wait_idle) || wait_ms == 0)) {
			rc = -EBUSY;
		} else if (!got) {
			snprintf(sql, sizeof(sql), "BEGIN; SET LOCAL "
				 "lock_timeout = '%ums'; SELECT "
				 "pg_advisory_lock(%" PRId64 "); COMMIT",
				 pg_server_wait_ms(wait_ms, true), (int64_t)h);
			rc = lock_sql(s, sql, NULL, err, errlen);
		}
	}
	PQclear(r);
	return rc;
}

/*
 * Hold the instance's name for this session (worker 0's): 0, -EBUSY
 * (with the sentence in err) while another session holds it, -EIO if the
 * server would not say. After a reconnect, a holder that sits idle is a
 * live carmyd: refused at once. One in the middle of something may be
 * the backend of a carmyd that died, to notice only at the end of its
 * statement; at open, an idle one may be the backend of a carmyd that
 * just stopped (a restart), still exiting though it looks idle: those
 * are waited for up to wait_ms, unless it is 0.
 */
int pg_take_name(struct pg_worker *s, unsigned wait_ms, bool at_open,
		 char *err, size_t errlen)
{
	int rc = take_lock(s, name_hash(s->instance), wait_ms, at_open, err,
			   errlen);

	if (rc == -EBUSY)
		snprintf(err, errlen, "another carmyd is running as instance "
			 "%s on this database (give each its own "
			 "instance=NAME)", s->instance);
	return rc;
}

/* The key of worker s's connection lock: the name's hash, with a seed of
 * its own, this open's generation and the worker's index. */
static uint64_t conn_key(const struct pg_worker *s)
{
	/* "CarConn" */
	uint64_t h = name_hash(s->instance) ^ 0x436172436f6e6e00u;
	uint64_t gen = (uint64_t)s->store->gen;

	for (int i = 0; i < 8; i++) {
		h ^= (uint8_t)(gen >> (8 * i));
		h *= 1099511628211u;
	}
	for (int i = 0; i < 4; i++) {
		h ^= (uint8_t)(s->index >> (8 * i));
		h *= 1099511628211u;
	}
	return h;
}

/*
 * Hold worker s's connection lock (the workers but 0, which holds the
 * name): 0, -EBUSY (with the sentence in err) while another session
 * holds it, -EIO if the server would not say. Its key is this open's
 * and this worker's alone, so the one holder it can meet is the backend
 * of the worker's own previous connection, which lets it go as it exits:
 * idle or busy, it is waited for up to wait_ms, unless it is 0.
 */
int pg_take_conn_lock(struct pg_worker *s, unsigned wait_ms, char *err,
		      size_t errlen)
{
	int rc = take_lock(s, conn_key(s), wait_ms, true, err, errlen);

	if (rc == -EBUSY)
		snprintf(err, errlen, "the backend of connection %u's "
			 "previous session has not ended (a transaction of it "
			 "may yet commit): its requests wait for it",
			 s->index);
	return rc;
}

/* The fence's advisory lock key: the name's, with a second seed, so that
 * it is not the name's own lock. */
int64_t pg_fence_key(const char *instance)
{
	uint64_t h = name_hash(instance) ^ 0x43617266656e6365u; /* "Carfence" */

	h *= 1099511628211u;
	return (int64_t)h;
}

/*
 * A new generation of the instance, held in s->store->gen: in one
 * transaction, the fence's key taken exclusive, which waits for every
 * batch in flight of any carmyd of the name (each holds it shared to its
 * commit), then the name's row given gen + 1 (1 for a new name). Every
 * batch that starts after the commit finds the new value: one of an
 * earlier generation fails its fence. At open, with the name held,
 * before load(). 0, -EBUSY (a batch held the key past NAME_WAIT_OPEN_MS), or
 * -EIO with a sentence in err.
 */
int pg_new_generation(struct pg_worker *s, char *err, size_t errlen)
{
	struct pg_store *st = s->store;
	char sql[256], msg[256];
	PGresult *r;
	const char *state;
	int rc = exec_ok(s->conn, "BEGIN", "cannot begin a new generation",
			 err, errlen);

	if (rc == 0) {
		snprintf(sql, sizeof(sql), "SET LOCAL lock_timeout = '%ums'",
			 pg_server_wait_ms(NAME_WAIT_OPEN_MS, true));
		rc = exec_ok(s->conn, sql, "cannot bound the generation's "
			     "wait", err, errlen);
	}
	if (rc == 0) {
		snprintf(sql, sizeof(sql), "SELECT pg_advisory_xact_lock(%"
			 PRId64 ")", st->fence_key);
		r = pg_exec(s->conn, sql);
		state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		if (PQresultStatus(r) != PGRES_TUPLES_OK) {
			rc = state != NULL && strcmp(state, "55P03") == 0 ?
			     -EBUSY : -EIO;
			snprintf(err, errlen, "cannot fence the earlier "
				 "generations of instance %s: %s",
				 st->instance, pg_pq_error(r ?
				 PQresultErrorMessage(r) :
				 PQerrorMessage(s->conn), msg, sizeof(msg)));
		}
		PQclear(r);
	}
	if (rc == 0) {
		/* The name is [A-Za-z0-9._-] (name_ok()): a literal. */
		snprintf(sql, sizeof(sql), "INSERT INTO carmy_instances (name, "
			 "gen) VALUES ('%s', 1) ON CONFLICT (name) DO UPDATE "
			 "SET gen = carmy_instances.gen + 1 RETURNING gen",
			 st->instance);
		r = pg_exec(s->conn, sql);
		if (PQresultStatus(r) != PGRES_TUPLES_OK ||
		    PQntuples(r) != 1 || PQnfields(r) != 1 ||
		    sscanf(PQgetvalue(r, 0, 0), "%" SCNd64, &st->gen) != 1) {
			snprintf(err, errlen, "cannot take a new generation of "
				 "instance %s: %s", st->instance,
				 pg_pq_error(r ? PQresultErrorMessage(r) :
					     PQerrorMessage(s->conn), msg,
					     sizeof(msg)));
			rc = -EIO;
		}
		PQclear(r);
	}
	if (rc == 0)
		rc = exec_ok(s->conn, "COMMIT", "cannot commit a new "
			     "generation", err, errlen);
	if (rc != 0 && PQtransactionStatus(s->conn) != PQTRANS_IDLE)
		PQclear(pg_exec(s->conn, "ROLLBACK"));
	return rc;
}
