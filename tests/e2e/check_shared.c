/*
 * check_shared.c - two carmyds, each with its own segment and socket (two
 * hosts, as far as they can tell), sharing one real PostgreSQL through the
 * PostgreSQL store plugin (stores/pg/). What must hold is Carmy's
 * multi-instance promise: one identity runs once whichever instance its
 * calls reach; a result recorded through one replays through the other with
 * the same execution id; other arguments are a conflict; a call running or
 * interrupted on one is uncertain on the other; a release frees it for all.
 *
 * Run by tests/e2e/shared.test, which starts a throwaway PostgreSQL cluster
 * and exports PG_CONNINFO. Each test uses its own principal, so tests share
 * the database without seeing each other's rows.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "libclient/reservation.h"
#include "tests/e2e/e2e.h"

#define RACERS 6	/* processes, half on each instance */
#define IDS 60		/* identities they all race for */

static char spec_a[1024], spec_b[1024];
static const char *opts_a[] = { "--capacity", "1024", "--max-result", "1K",
				"--store", spec_a, NULL };
static const char *opts_b[] = { "--capacity", "1024", "--max-result", "1K",
				"--store", spec_b, NULL };
static struct carmyd_proc a, b;
static carmy_t *ca, *cb;
static char principal[32];

static void setup(void)
{
	const char *conninfo = getenv("PG_CONNINFO");
	static unsigned serial;
	char so[256];

	ck_assert_msg(conninfo != NULL && conninfo[0] != '\0',
		      "PG_CONNINFO is not set: run tests/e2e/shared.test");
	harness_path("stores/pg/.libs/carmy_store_pg.so", so, sizeof(so));
	ck_assert_msg(access(so, R_OK) == 0, "no plugin at %s", so);
	snprintf(spec_a, sizeof(spec_a), "plugin:%s:instance=a-%d %s", so,
		 (int)getpid(), conninfo);
	snprintf(spec_b, sizeof(spec_b), "plugin:%s:instance=b-%d %s", so,
		 (int)getpid(), conninfo);
	snprintf(principal, sizeof(principal), "p%d-%u", (int)getpid(),
		 serial++);
	/* Every answer that is not a success must be told in the slot
	 * (shm_ack): a client that had to find it by its look at the socket
	 * would wait ten minutes here, and the test would time out. Only
	 * the one whose carmyd is killed under it looks sooner. */
	setenv("CARMY_ACK_CHECK_MS", "600000", 1);
	e2e_start(&a, opts_a);
	e2e_start(&b, opts_b);
	ca = e2e_connect(&a);
	cb = e2e_connect(&b);
}

static pid_t held_pid;	/* hold_lock()'s session, until released */
static long held_key;
static void release_lock(long key, pid_t holder);
static void runs_on_b_and_replays(const struct carmy_call *call,
				  const char *rid);

static void teardown(void)
{
	/* A test that failed while it held its lock: let it go. */
	if (held_pid != 0)
		release_lock(held_key, held_pid);
	carmy_close(ca);
	carmy_close(cb);
	ca = cb = NULL;
	e2e_stop(&a);
	e2e_stop(&b);
}

/* A call of this test's principal; args: msgpack bytes, or NULL. */
static struct carmy_call call_of(const char *rid, const char *args)
{
	struct carmy_call call = E2E_CALL(principal, "s", rid);

	call.args = args;
	call.args_len = args ? strlen(args) : 0;
	return call;
}

static void run_on(carmy_t *c, const char *rid, const char *result,
		   char exec[CARMY_EXECUTION_ID_LEN + 1])
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = call_of(rid, NULL);

	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_RESERVED);
	strcpy(exec, r.execution_id);
	ck_assert_int_eq(carmy_complete(c, &r, CARMY_STATUS_COMPLETED, result,
					strlen(result)), 0);
	carmy_reservation_clear(&r);
}

static void replays_on(carmy_t *c, const char *rid, const char *result,
		       const char *exec)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = call_of(rid, NULL);

	ck_assert_int_eq(carmy_begin(c, &call, &r), CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, exec);
	ck_assert_int_eq(r.status, CARMY_STATUS_COMPLETED);
	ck_assert_uint_eq(r.result_len, strlen(result));
	ck_assert_mem_eq(r.result, result, r.result_len);
	carmy_reservation_clear(&r);
}

/* A result recorded through one instance replays through the other, with
 * the same execution id, from then on from its own segment; other
 * arguments are a conflict there too. */
START_TEST(test_a_result_replays_through_the_other_instance)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call other = call_of("x", "\x02");
	char exec[CARMY_EXECUTION_ID_LEN + 1];

	run_on(ca, "x", "done on a", exec);
	replays_on(cb, "x", "done on a", exec);
	replays_on(cb, "x", "done on a", exec);		/* now cached on b */
	replays_on(ca, "x", "done on a", exec);
	ck_assert_int_eq(carmy_begin(cb, &other, &r), CARMY_ECONFLICT);
	ck_assert_str_eq(r.execution_id, exec);
	ck_assert_int_eq(carmy_begin(ca, &other, &r), CARMY_ECONFLICT);
	ck_assert_str_eq(r.execution_id, exec);
	/* The conflict comes first on this one: b has nothing of it yet. */
	run_on(ca, "y", "done on a", exec);
	other = call_of("y", "\x03");
	ck_assert_int_eq(carmy_begin(cb, &other, &r), CARMY_ECONFLICT);
	ck_assert_str_eq(r.execution_id, exec);
	replays_on(cb, "y", "done on a", exec);
}
END_TEST

/* Running on one instance: uncertain on the other (conflict with other
 * arguments), and a wait there does not pretend to see it; replayed there
 * once it completes. A release frees the identity for every instance. */
START_TEST(test_running_elsewhere_is_uncertain_and_a_release_frees_it)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation held = CARMY_RESERVATION_INIT;
	struct carmy_call call = call_of("run", NULL);
	struct carmy_call other = call_of("run", "\x91\x01");
	char exec[CARMY_EXECUTION_ID_LEN + 1];

	ck_assert_int_eq(carmy_begin(ca, &call, &held), CARMY_RESERVED);
	ck_assert_int_eq(carmy_begin(cb, &call, &r), CARMY_EUNCERTAIN);
	ck_assert_int_eq(r.state, CARMY_STATE_RUNNING);
	ck_assert_str_eq(r.execution_id, held.execution_id);
	ck_assert_int_eq(carmy_begin(cb, &other, &r), CARMY_ECONFLICT);
	ck_assert_str_eq(r.execution_id, held.execution_id);
	/* b cannot see a's process: its wait answers at once. */
	ck_assert_int_eq(carmy_wait(cb, &call, &r, 60000), CARMY_EUNCERTAIN);
	ck_assert_int_eq(r.state, CARMY_STATE_RUNNING);
	/* a's own wait is a real one: here it ends at its deadline. */
	ck_assert_int_eq(carmy_wait(ca, &call, &r, 50), CARMY_EUNCERTAIN);
	strcpy(exec, held.execution_id);
	ck_assert_int_eq(carmy_complete(ca, &held, CARMY_STATUS_FAILED, "no",
					2), 0);
	ck_assert_int_eq(carmy_begin(cb, &call, &r), CARMY_REPLAY);
	ck_assert_str_eq(r.execution_id, exec);
	ck_assert_int_eq(r.status, CARMY_STATUS_FAILED);
	carmy_reservation_clear(&r);

	/* Released on b: a runs it, then b finds a's. */
	call = call_of("rel", NULL);
	ck_assert_int_eq(carmy_begin(cb, &call, &held), CARMY_RESERVED);
	ck_assert_int_eq(carmy_begin(ca, &call, &r), CARMY_EUNCERTAIN);
	ck_assert_int_eq(carmy_release(cb, &held), 0);
	ck_assert_int_eq(carmy_release(cb, &held), CARMY_ENOT_RESERVED);
	ck_assert_int_eq(carmy_begin(ca, &call, &held), CARMY_RESERVED);
	ck_assert_int_eq(carmy_begin(cb, &call, &r), CARMY_EUNCERTAIN);
	ck_assert_str_eq(r.execution_id, held.execution_id);
	/* A release then a reserve on one instance: its own withdrawn call
	 * is not in the way. */
	ck_assert_int_eq(carmy_release(ca, &held), 0);
	ck_assert_int_eq(carmy_begin(ca, &call, &held), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(ca, &held, CARMY_STATUS_COMPLETED, "ok",
					2), 0);
	replays_on(cb, "rel", "ok", held.execution_id);
	carmy_reservation_clear(&held);
}
END_TEST

/* A RELEASE that names a's running execution with an entry not its own
 * (out of the table, or one another call left when it was released) is
 * refused, and the row stays: b still finds the call running, not free to
 * run a second time. */
START_TEST(test_a_release_naming_another_entry_frees_nothing)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation o = CARMY_RESERVATION_INIT;
	struct carmy_call call = call_of("victim", NULL);
	struct carmy_call before = call_of("released-before", NULL);
	uint8_t exec[SHM_EXEC_LEN];
	uint32_t freed;

	ck_assert_int_eq(carmy_begin(ca, &before, &o), CARMY_RESERVED);
	freed = resv_entry(&o);
	ck_assert_int_eq(carmy_release(ca, &o), 0);
	ck_assert_int_eq(carmy_begin(ca, &call, &r), CARMY_RESERVED);
	ck_assert_uint_ne(resv_entry(&r), freed);
	e2e_exec_bytes(r.execution_id, exec);
	ck_assert_int_eq(e2e_raw_release(a.socket, UINT32_MAX, exec),
			 CARMY_ENOT_RESERVED);
	ck_assert_int_eq(e2e_raw_release(a.socket, freed, exec),
			 CARMY_ENOT_RESERVED);
	ck_assert_int_eq(carmy_begin(cb, &call, &o), CARMY_EUNCERTAIN);
	ck_assert_int_eq(o.state, CARMY_STATE_RUNNING);
	ck_assert_str_eq(o.execution_id, r.execution_id);
	ck_assert_int_eq(carmy_complete(ca, &r, CARMY_STATUS_COMPLETED, "once",
					4), 0);
	replays_on(cb, "victim", "once", r.execution_id);
	carmy_reservation_clear(&o);
}
END_TEST

/* Retention on a (--retain 1s) forgets a completed call in the store too:
 * its PURGE deletes the row, so b, which never replayed it, finds the
 * identity free. A call running on a is never forgotten, here or there. */
START_TEST(test_retention_deletes_the_row_and_keeps_what_runs)
{
	static const char *opts_r[] = { "--capacity", "1024", "--max-result",
					"1K", "--store", spec_a, "--retain",
					"1s", NULL };
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_reservation held = CARMY_RESERVATION_INIT;
	struct carmy_call old = call_of("ret-old", NULL);
	struct carmy_call running = call_of("ret-held", NULL);
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	const char *gone[1] = { exec };
	struct shm_view v;

	carmy_close(ca);
	e2e_stop(&a);
	e2e_start(&a, opts_r);
	ca = e2e_connect(&a);
	ck_assert_int_eq(shm_map(a.segment, false, &v), 0);
	run_on(ca, "ret-old", "r", exec);
	ck_assert_int_eq(carmy_begin(ca, &running, &held), CARMY_RESERVED);
	ck_assert_msg(e2e_await_gone(&v, gone, 1, HARNESS_WAIT_MS),
		      "retention never forgot %s", exec);
	ck_assert_int_eq(carmy_begin(cb, &old, &r), CARMY_RESERVED);
	ck_assert_str_ne(r.execution_id, exec);
	ck_assert_int_eq(carmy_release(cb, &r), 0);
	ck_assert_uint_eq(e2e_exec_state(&v, held.execution_id), SHM_RUNNING);
	ck_assert_int_eq(carmy_begin(cb, &running, &r), CARMY_EUNCERTAIN);
	ck_assert_int_eq(r.state, CARMY_STATE_RUNNING);
	ck_assert_str_eq(r.execution_id, held.execution_id);
	ck_assert_int_eq(carmy_complete(ca, &held, CARMY_STATUS_COMPLETED, "h",
					1), 0);
	shm_unmap(&v);
	carmy_reservation_clear(&r);
	carmy_reservation_clear(&held);
}
END_TEST

/* A process killed with -9 while it runs a call on a: uncertain there and
 * on b; an operator resolves it on a, and b replays what was resolved. */
START_TEST(test_a_killed_owner_is_uncertain_everywhere_until_resolved)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = call_of("killed", NULL);
	struct e2e_child ch;

	e2e_child_reserve(&ch, a.socket, &call, E2E_HOLD);
	e2e_child_reap(&ch);
	ck_assert_int_eq(e2e_poll_begin(ca, &call, &r, CARMY_EUNCERTAIN,
					CARMY_STATE_INTERRUPTED, 10000, NULL),
			 CARMY_EUNCERTAIN);
	ck_assert_str_eq(r.execution_id, ch.exec);
	ck_assert_int_eq(carmy_begin(cb, &call, &r), CARMY_EUNCERTAIN);
	ck_assert_str_eq(r.execution_id, ch.exec);
	ck_assert_int_eq(carmy_resolve(ca, &call, ch.exec, 1,
				       CARMY_STATUS_COMPLETED, "by hand", 7), 0);
	replays_on(cb, "killed", "by hand", ch.exec);
	replays_on(ca, "killed", "by hand", ch.exec);

	/* Not committed: the identity is free everywhere. */
	call = call_of("killed-2", NULL);
	e2e_child_reserve(&ch, b.socket, &call, E2E_HOLD);
	e2e_child_reap(&ch);
	ck_assert_int_eq(e2e_poll_begin(cb, &call, &r, CARMY_EUNCERTAIN,
					CARMY_STATE_INTERRUPTED, 10000, NULL),
			 CARMY_EUNCERTAIN);
	ck_assert_int_eq(carmy_begin(ca, &call, &r), CARMY_EUNCERTAIN);
	ck_assert_int_eq(carmy_resolve(cb, &call, ch.exec, 0, 0, NULL, 0), 0);
	ck_assert_int_eq(carmy_begin(ca, &call, &r), CARMY_RESERVED);
	ck_assert_str_ne(r.execution_id, ch.exec);
	ck_assert_int_eq(carmy_release(ca, &r), 0);
}
END_TEST

/* A reboot of one instance (carmyd killed, its segment gone): it gets back
 * what it ran itself from the store, results replaying and its interrupted
 * call uncertain, and the other instance's calls are answered as before. */
START_TEST(test_an_instance_rebooted_gets_its_own_back)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call lost = call_of("lost", NULL);
	char mine[CARMY_EXECUTION_ID_LEN + 1], theirs[CARMY_EXECUTION_ID_LEN + 1];
	struct e2e_child ch;

	run_on(ca, "mine", "a's", mine);
	run_on(cb, "theirs", "b's", theirs);
	e2e_child_reserve(&ch, a.socket, &lost, E2E_HOLD);
	carmy_close(ca);
	ca = NULL;
	e2e_kill9(&a);
	e2e_child_reap(&ch);
	ck_assert_int_eq(shm_unlink(a.segment), 0);
	e2e_restart(&a, opts_a);
	ca = e2e_connect(&a);
	replays_on(ca, "mine", "a's", mine);
	replays_on(ca, "theirs", "b's", theirs);
	ck_assert_int_eq(carmy_begin(ca, &lost, &r), CARMY_EUNCERTAIN);
	ck_assert_int_eq(r.state, CARMY_STATE_INTERRUPTED);
	ck_assert_str_eq(r.execution_id, ch.exec);
	ck_assert_int_eq(carmy_begin(cb, &lost, &r), CARMY_EUNCERTAIN);
	ck_assert_str_eq(r.execution_id, ch.exec);
}
END_TEST

/* What a racer saw of one identity: its outcome and execution id. */
struct seen {
	int rc;
	char exec[CARMY_EXECUTION_ID_LEN + 1];
};

/* Run psql on the test's database with one command; its output (the
 * first line, trimmed) in out if out is not NULL. Asserts it succeeded. */
static void psql(const char *cmd, char *out, size_t outlen)
{
	int fd[2], status;
	pid_t pid;

	ck_assert_int_eq(pipe(fd), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(fd[1], 1);
		close(fd[0]);
		close(fd[1]);
		execlp("psql", "psql", "-X", "-q", "-A", "-t", "-v",
		       "ON_ERROR_STOP=1", "-d", getenv("PG_CONNINFO"), "-c", cmd,
		       (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	if (out != NULL) {
		size_t got = 0;
		ssize_t n;

		/* Until psql exits (EOF); it is bounded by its own query. */
		while (got < outlen - 1 &&
		       (n = read(fd[0], out + got, outlen - 1 - got)) > 0)
			got += (size_t)n;
		out[got] = '\0';
		out[strcspn(out, "\n")] = '\0';
	}
	close(fd[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "psql failed: %s", cmd);
}

/*
 * A session of its own that holds advisory lock key until release_lock():
 * a commit whose trigger takes the same lock (pg_advisory_xact_lock) waits
 * there, as long as the test needs, with no clock involved. Returns once
 * the lock is held.
 */
static pid_t hold_lock(long key)
{
	char cmd[160], n[32];
	pid_t pid;

	snprintf(cmd, sizeof(cmd), "SELECT pg_advisory_lock(%ld), "
		 "pg_sleep(600) /* carmy-hold-%ld */", key, key);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 1);
		dup2(null, 2);
		execlp("psql", "psql", "-X", "-q", "-d", getenv("PG_CONNINFO"),
		       "-c", cmd, (char *)NULL);
		_exit(127);
	}
	snprintf(cmd, sizeof(cmd), "SELECT count(*) FROM pg_locks WHERE "
		 "locktype = 'advisory' AND granted AND objid = %ld", key);
	held_pid = pid;
	held_key = key;
	for (uint64_t t0 = harness_now_ns();;) {
		psql(cmd, n, sizeof(n));
		if (strcmp(n, "0") != 0)
			return pid;
		ck_assert_msg(e2e_ms_since(t0) < 20000,
			      "the lock holder never got the lock");
	}
}

static void release_lock(long key, pid_t holder)
{
	char cmd[200], n[32];

	snprintf(cmd, sizeof(cmd), "SELECT count(pg_terminate_backend(pid)) "
		 "FROM pg_stat_activity WHERE query LIKE "
		 "'%%carmy-hold-%ld */%%' AND pid <> pg_backend_pid()", key);
	held_pid = 0;
	psql(cmd, n, sizeof(n));
	ck_assert_str_eq(n, "1");
	ck_assert_int_ge(harness_waitpid(holder, HARNESS_WAIT_MS), 0);
}

/* Wait until a commit waits for hold_lock()'s lock. */
static void await_held_commit(long key)
{
	char cmd[160], n[32];

	snprintf(cmd, sizeof(cmd), "SELECT count(*) FROM pg_locks WHERE "
		 "locktype = 'advisory' AND NOT granted AND objid = %ld", key);
	for (uint64_t t0 = harness_now_ns();;) {
		psql(cmd, n, sizeof(n));
		if (strcmp(n, "0") != 0)
			return;
		ck_assert_msg(e2e_ms_since(t0) < 20000,
			      "the reservation never reached its commit");
	}
}

/* Have a trigger named name_PID on the table (function of the same name),
 * whose body is plpgsql run for rows of request id rid only, on event
 * (INSERT: a reservation; DELETE: a release). when is BEFORE or a
 * deferred constraint trigger's AFTER. */
static void trigger_on(const char *name, const char *rid, const char *when,
		       const char *event, const char *then, const char *ret)
{
	const char *row = strcmp(event, "DELETE") == 0 ? "OLD" : "NEW";
	char cmd[1024];

	snprintf(cmd, sizeof(cmd),
		 "CREATE FUNCTION %s_%d() RETURNS trigger LANGUAGE plpgsql "
		 "AS $$ BEGIN IF %s.request_id = convert_to('%s', 'UTF8') "
		 "THEN %s; END IF; RETURN %s; END $$; "
		 "CREATE %s %s_%d %s %s ON carmy_executions %s"
		 "FOR EACH ROW EXECUTE FUNCTION %s_%d()", name, (int)getpid(),
		 row, rid, then, ret,
		 strcmp(when, "BEFORE") == 0 ? "TRIGGER" : "CONSTRAINT TRIGGER",
		 name, (int)getpid(), when, event,
		 strcmp(when, "BEFORE") == 0 ? "" :
					       "DEFERRABLE INITIALLY DEFERRED ",
		 name, (int)getpid());
	psql(cmd, NULL, 0);
}

static void drop_trigger(const char *name)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "DROP TRIGGER %s_%d ON carmy_executions",
		 name, (int)getpid());
	psql(cmd, NULL, 0);
}

/* Every reservation of rid is refused from now on (a trigger raises). */
static void refuse(const char *name, const char *rid)
{
	trigger_on(name, rid, "BEFORE", "INSERT",
		   "RAISE EXCEPTION 'refused by the test'", "NEW");
}

/* The commit of each event (INSERT: a reservation, DELETE: a release) of
 * rid waits, in a deferred trigger, on advisory lock key, which a session
 * of the test holds from now on (hold_lock(); its process is returned). */
static pid_t hold_commits_of(const char *name, const char *rid,
			     const char *event, long key)
{
	char then[128];

	/* As long as the test holds it: not the store's lock_timeout. */
	snprintf(then, sizeof(then), "PERFORM set_config('lock_timeout', '0', "
		 "true); PERFORM pg_advisory_xact_lock(%ld)", key);
	trigger_on(name, rid, "AFTER", event, then, "NULL");
	return hold_lock(key);
}

static pid_t hold_commits(const char *name, const char *rid, long key)
{
	return hold_commits_of(name, rid, "INSERT", key);
}

/* What client_on_a()'s process does once its begin is reserved. */
enum then { THEN_STOP, THEN_COMPLETE, THEN_RELEASE };

/* A client process on a: begins call and, if it is reserved, completes it
 * with "late" or releases it, as then says; reports what it saw on up[1]:
 * the begin's answer (-9999 if the completion failed), or with
 * THEN_RELEASE the release's (-9998 if the begin was not reserved). Its
 * carmyd dies while it waits for an answer, so it looks at the socket
 * often. */
static pid_t client_on_a(const struct carmy_call *call, enum then then,
			 int up[2])
{
	pid_t pid;

	ck_assert_int_eq(pipe(up), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct carmy_reservation r = CARMY_RESERVATION_INIT;
		struct seen got;
		carmy_t *c = NULL;

		close(up[0]);
		memset(&got, 0, sizeof(got));
		setenv("CARMY_ACK_CHECK_MS", "100", 1);
		if (carmy_connect(&c, a.socket) != 0)
			_exit(2);
		got.rc = carmy_begin(c, call, &r);
		memcpy(got.exec, r.execution_id, sizeof(got.exec));
		if (then == THEN_COMPLETE && got.rc == CARMY_RESERVED &&
		    carmy_complete(c, &r, CARMY_STATUS_COMPLETED, "late", 4) != 0)
			got.rc = -9999;
		if (then == THEN_RELEASE)
			got.rc = got.rc == CARMY_RESERVED ?
					 carmy_release(c, &r) : -9998;
		if (write(up[1], &got, sizeof(got)) != (ssize_t)sizeof(got))
			_exit(3);
		carmy_close(c);
		_exit(0);
	}
	close(up[1]);
	return pid;
}

/* The held commit is under way: carmyd a dies, then the commit goes
 * through. */
static void kill_a_mid_commit(long key, pid_t holder)
{
	await_held_commit(key);
	carmy_close(ca);
	ca = NULL;
	e2e_kill9(&a);
	release_lock(key, holder);
}

/* What client_on_a()'s process reported, once it is gone. */
static struct seen client_report(pid_t pid, int up[2])
{
	struct seen got;

	ck_assert_msg(e2e_read_full(up[0], &got, sizeof(got), 30000) == 0,
		      "the client did not report");
	close(up[0]);
	ck_assert_int_eq(harness_waitpid(pid, HARNESS_WAIT_MS), 0);
	return got;
}

/* carmyd dies after the store committed a reservation and before it
 * answered. The client must not take the lost answer for a refusal (the
 * identity would be held, on every instance, by a call that never ran):
 * it sends the same reservation to the carmyd that comes back, which the
 * store knows as its own, and runs the call. The store's commit is held
 * up by a deferred trigger waiting, for this one identity, on a lock the
 * test holds until carmyd is dead. */
START_TEST(test_a_reservation_whose_answer_was_lost_is_sent_again)
{
	long key = (long)getpid();
	struct carmy_call call;
	struct seen got;
	char rid[32];
	pid_t holder, pid;
	int up[2];

	snprintf(rid, sizeof(rid), "held-%d", (int)getpid());
	call = call_of(rid, NULL);
	holder = hold_commits("hold", rid, key);
	pid = client_on_a(&call, THEN_COMPLETE, up);
	kill_a_mid_commit(key, holder);
	e2e_restart(&a, opts_a);
	ca = e2e_connect(&a);
	got = client_report(pid, up);
	ck_assert_msg(got.rc == CARMY_RESERVED, "begin: %s",
		      carmy_errname(got.rc));
	replays_on(cb, rid, "late", got.exec);
	replays_on(ca, rid, "late", got.exec);
	drop_trigger("hold");
}
END_TEST

/*
 * As above, but the client's reservation is refused when it comes again
 * (a trigger raises for it by the time carmyd is back). The first one
 * stands in the store, unconfirmed in the segment: no client was told of
 * it, so the carmyd that comes back releases it in the store and gives it
 * back, and the client, finding it gone, begins again and is refused. Its
 * tool never ran: the identity is free everywhere, and runs once, through
 * b.
 */
START_TEST(test_a_reservation_whose_commit_stood_untold_is_released_at_load)
{
	long key = (long)getpid();
	struct carmy_call call;
	struct seen got;
	pid_t holder, pid;
	char rid[32];
	int up[2];

	snprintf(rid, sizeof(rid), "refused-again-%d", (int)getpid());
	call = call_of(rid, NULL);
	holder = hold_commits("hold2", rid, key);
	pid = client_on_a(&call, THEN_STOP, up);
	kill_a_mid_commit(key, holder);
	/* Waits for the first commit (its lock), then refuses the next. */
	refuse("refuse2", rid);
	e2e_restart(&a, opts_a);
	ca = e2e_connect(&a);
	got = client_report(pid, up);
	ck_assert_msg(got.rc == CARMY_ESTORE, "begin: %s",
		      carmy_errname(got.rc));
	drop_trigger("refuse2");
	drop_trigger("hold2");
	runs_on_b_and_replays(&call, rid);
}
END_TEST

/* A reservation the store refuses (a trigger raises for one identity) is
 * answered at once, STORE_FAILED, and its entry is given back: once the
 * store takes it, the same call runs. */
START_TEST(test_a_reservation_the_store_refuses_is_answered_and_given_back)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call;
	char rid[32];

	snprintf(rid, sizeof(rid), "refused-%d", (int)getpid());
	call = call_of(rid, NULL);
	refuse("refuse", rid);
	ck_assert_int_eq(carmy_begin(ca, &call, &r), CARMY_ESTORE);
	ck_assert_int_eq(carmy_begin(cb, &call, &r), CARMY_ESTORE);
	drop_trigger("refuse");
	ck_assert_int_eq(carmy_begin(ca, &call, &r), CARMY_RESERVED);
	ck_assert_int_eq(carmy_complete(ca, &r, CARMY_STATUS_COMPLETED, "ok", 2),
			 0);
	replays_on(cb, rid, "ok", r.execution_id);
	carmy_reservation_clear(&r);
}
END_TEST

/* A client on a begins call, whose commit a trigger holds up (on lock
 * key: hold_commits()), and is killed while it waits for the answer. The
 * holder's process is returned. */
static pid_t begin_held_then_killed(const char *name,
				    const struct carmy_call *call, long key)
{
	pid_t holder, pid;
	int up[2];
	char rid[64];

	snprintf(rid, sizeof(rid), "%.*s", (int)call->request_id_len,
		 (const char *)call->request_id);
	holder = hold_commits(name, rid, key);
	pid = client_on_a(call, THEN_STOP, up);
	await_held_commit(key);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(harness_waitpid(pid, HARNESS_WAIT_MS), SIGKILL);
	close(up[0]);
	return holder;
}

/* The identity, given back on a, runs once through b (polled: until a
 * has given it back, the store's row holds it) and replays alike through
 * both. */
static void runs_on_b_and_replays(const struct carmy_call *call,
				  const char *rid)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	int rc = e2e_poll_begin(cb, call, &r, CARMY_RESERVED, -1, 20000, NULL);

	ck_assert_msg(rc == CARMY_RESERVED, "b: %s (state %d)",
		      carmy_errname(rc), r.state);
	strcpy(exec, r.execution_id);
	ck_assert_int_eq(carmy_complete(cb, &r, CARMY_STATUS_COMPLETED, "b",
					1), 0);
	carmy_reservation_clear(&r);
	replays_on(ca, rid, "b", exec);
	replays_on(cb, rid, "b", exec);
}

/*
 * A client is killed while it waits for the answer to its reservation
 * (its commit held up by a trigger until then). It never learnt that the
 * reservation stands, so its tool never ran: carmyd releases it in the
 * store and gives its entry back, rather than leave it to turn uncertain
 * here while the store's row holds it everywhere for a call that never
 * happened. The identity then runs once, through the other instance, and
 * replays alike through both.
 */
START_TEST(test_a_begin_killed_before_its_answer_is_given_back)
{
	static char logdir[64], logpath[96];
	const char *opts_log[] = { "--capacity", "1024", "--max-result", "1K",
				   "--store", spec_a, "--log-file", logpath,
				   "--log-level", "info", NULL };
	long key = (long)getpid() + 1;
	struct carmy_call call;
	char rid[32];
	pid_t holder;

	strcpy(logdir, "/tmp/carmy-shared.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(logdir));
	snprintf(logpath, sizeof(logpath), "%s/carmyd.log", logdir);
	carmy_close(ca);
	e2e_stop(&a);
	e2e_start(&a, opts_log);
	ca = e2e_connect(&a);

	snprintf(rid, sizeof(rid), "killed-%d", (int)getpid());
	call = call_of(rid, NULL);
	holder = begin_held_then_killed("hold4", &call, key);
	/* carmyd has seen it go before the store answers. */
	ck_assert_msg(e2e_await_logged(logpath, "with a request at the store",
				       0, HARNESS_WAIT_MS),
		      "carmyd never saw the client go");
	release_lock(key, holder);
	drop_trigger("hold4");
	runs_on_b_and_replays(&call, rid);
	ck_assert_int_ge(e2e_logged(logpath, "went away before its "
					     "reservation"), 1);
	unlink(logpath);
	rmdir(logdir);
}
END_TEST

/*
 * carmyd dies while the store's commit of a reservation waits, and the
 * commit never happens (its session is ended); the client is gone too.
 * The carmyd that comes back on the segment finds the reservation there,
 * never confirmed, and not in the store: it gives it back, rather than
 * let it turn uncertain here while the other instance runs the identity
 * and replays its result. Both then replay that one result.
 */
START_TEST(test_a_reservation_the_store_never_recorded_is_given_back_at_load)
{
	long key = (long)getpid() + 2;
	struct carmy_call call;
	char rid[32], cmd[200], n[32];
	pid_t holder;

	snprintf(rid, sizeof(rid), "unrecorded-%d", (int)getpid());
	call = call_of(rid, NULL);
	holder = begin_held_then_killed("hold5", &call, key);
	carmy_close(ca);
	ca = NULL;
	e2e_kill9(&a);
	/* The commit's session ends before it can commit. */
	snprintf(cmd, sizeof(cmd), "SELECT count(pg_terminate_backend(pid)) "
		 "FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
		 "AND objid = %ld", key);
	psql(cmd, n, sizeof(n));
	ck_assert_str_eq(n, "1");
	release_lock(key, holder);
	drop_trigger("hold5");
	e2e_restart(&a, opts_a);
	ca = e2e_connect(&a);
	runs_on_b_and_replays(&call, rid);
}
END_TEST

static uint64_t raw_exec(void *arg, uint8_t out[SHM_EXEC_LEN])
{
	struct timespec ts;

	memcpy(out, arg, SHM_EXEC_LEN);
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * A client dies between its claim in a's segment and its RESERVE (played
 * here by a claim written straight into the segment, pending as a durable
 * store's client makes it, for an owner id nobody holds). The store never
 * heard of it: a's sweep gives it back, rather than turn it uncertain on
 * a alone while b runs the identity. Both then replay b's result.
 */
START_TEST(test_a_claim_the_store_never_heard_of_is_given_back_by_the_sweep)
{
	uint8_t fp[SHM_FP_LEN], exec[SHM_EXEC_LEN];
	char rid[32], hex[CARMY_EXECUTION_ID_LEN + 1] = "exec_";
	const char *const execs[] = { hex };
	uint32_t cursor = 0;
	struct shm_claim claim = { .pid = (uint32_t)getpid(), .fp = fp,
				   .make_exec = raw_exec, .arg = exec,
				   .cursor = &cursor, .pending = true };
	struct carmy_call call;
	struct shm_view v;
	struct shm_found f;
	struct shm_key k;

	snprintf(rid, sizeof(rid), "unsent-%d", (int)getpid());
	call = call_of(rid, NULL);
	memset(fp, 0x5a, sizeof(fp));
	for (int i = 0; i < SHM_EXEC_LEN; i++) {
		exec[i] = (uint8_t)(0xc0 + i);
		snprintf(hex + 5 + 2 * i, 3, "%02x", exec[i]);
	}
	ck_assert_int_eq(shm_map(a.segment, true, &v), 0);
	claim.owner = shm_header(&v)->sh_next_owner + 1000;
	ck_assert_int_eq(shm_key_init(&k, v.seed, principal, strlen(principal),
				      "s", 1, rid, strlen(rid)), 0);
	ck_assert_int_eq(shm_reserve(&v, &k, &claim, &f), SHM_OUT_RESERVED);
	ck_assert_uint_eq(e2e_exec_state(&v, hex), SHM_RUNNING);
	/* The sweep of owners nobody holds runs every second. */
	ck_assert_msg(e2e_await_gone(&v, execs, 1, 20000),
		      "the claim is still in a's table, as %u",
		      e2e_exec_state(&v, hex));
	shm_unmap(&v);
	runs_on_b_and_replays(&call, rid);
}
END_TEST

/* A racing process: waits for the start, then begins every identity once,
 * completing the ones it reserved with its own number as the result. */
static void racer(const char *socket, int go, int out, int me)
{
	carmy_t *c = NULL;
	char buf[16];

	if (carmy_connect(&c, socket) != 0 || read(go, buf, 1) < 0)
		_exit(2);
	for (int i = 0; i < IDS; i++) {
		struct carmy_reservation r = CARMY_RESERVATION_INIT;
		struct seen s = { 0 };
		char rid[24];
		struct carmy_call call;

		snprintf(rid, sizeof(rid), "race-%d", i);
		call = call_of(rid, NULL);
		s.rc = carmy_begin(c, &call, &r);
		memcpy(s.exec, r.execution_id, sizeof(s.exec));
		if (s.rc == CARMY_RESERVED) {
			snprintf(buf, sizeof(buf), "%d", me);
			if (carmy_complete(c, &r, CARMY_STATUS_COMPLETED, buf,
					   strlen(buf)) != 0)
				s.rc = -9999;
		}
		carmy_reservation_clear(&r);
		if (write(out, &s, sizeof(s)) != (ssize_t)sizeof(s))
			_exit(3);
	}
	carmy_close(c);
	_exit(0);
}

/* Processes on both instances race for the same identities: each runs
 * exactly once, every other call is told about that one execution (a
 * replay, or uncertain while it ran), and afterwards both instances
 * replay it. */
START_TEST(test_racing_instances_run_each_identity_once)
{
	int go[2], out[RACERS][2];
	pid_t pid[RACERS];
	struct seen seen[RACERS][IDS];

	ck_assert_int_eq(pipe(go), 0);
	for (int p = 0; p < RACERS; p++) {
		ck_assert_int_eq(pipe(out[p]), 0);
		fflush(NULL);
		pid[p] = fork();
		ck_assert_int_ge(pid[p], 0);
		if (pid[p] == 0) {
			close(go[1]);
			close(out[p][0]);
			racer(p % 2 ? b.socket : a.socket, go[0], out[p][1],
			      p);
		}
		close(out[p][1]);
	}
	close(go[0]);
	close(go[1]);		/* go: every racer's read returns */
	for (int p = 0; p < RACERS; p++) {
		ck_assert_msg(e2e_read_full(out[p][0], seen[p], sizeof(seen[p]),
					    60000) == 0,
			      "racer %d did not report", p);
		close(out[p][0]);
		ck_assert_int_eq(harness_waitpid(pid[p], HARNESS_WAIT_MS), 0);
	}
	for (int i = 0; i < IDS; i++) {
		int winner = -1;
		char rid[24], result[16];

		for (int p = 0; p < RACERS; p++) {
			ck_assert_msg(seen[p][i].rc == CARMY_RESERVED ||
					      seen[p][i].rc == CARMY_REPLAY ||
					      seen[p][i].rc == CARMY_EUNCERTAIN,
				      "race-%d, racer %d: %s", i, p,
				      carmy_errname(seen[p][i].rc));
			if (seen[p][i].rc != CARMY_RESERVED)
				continue;
			ck_assert_msg(winner < 0, "race-%d ran twice (racers "
				      "%d and %d)", i, winner, p);
			winner = p;
		}
		ck_assert_msg(winner >= 0, "race-%d never ran", i);
		for (int p = 0; p < RACERS; p++)
			ck_assert_msg(strcmp(seen[p][i].exec,
					     seen[winner][i].exec) == 0,
				      "race-%d: racer %d (%s) was told %s, "
				      "racer %d ran %s", i, p,
				      carmy_errname(seen[p][i].rc),
				      seen[p][i].exec, winner,
				      seen[winner][i].exec);
		snprintf(rid, sizeof(rid), "race-%d", i);
		snprintf(result, sizeof(result), "%d", winner);
		replays_on(ca, rid, result, seen[winner][i].exec);
		replays_on(cb, rid, result, seen[winner][i].exec);
	}
}
END_TEST

/*
 * A reservation on a whose commit's answer is lost (the store gives up on
 * a server silent for a second, timeout=1, while a trigger holds the
 * commit) is answered STORE_FAILED, and its entry given back; the store
 * is to withdraw the row should the commit stand, but carmyd a is killed
 * first, and the commit then goes through. Its tool never ran: the
 * carmyd that comes back releases the row rather than load it uncertain,
 * so the identity runs once, through b, and replays alike through both.
 */
/* a again, with the store's timeout=1 (into spec, which opts names):
 * a commit that waits longer is taken for lost. */
static void restart_a_with_timeout(char *spec, size_t size,
				   const char *const *opts)
{
	snprintf(spec, size, "%.*s timeout=1 %s", (int)strcspn(spec_a, " "),
		 spec_a, spec_a + strcspn(spec_a, " ") + 1);
	carmy_close(ca);
	e2e_stop(&a);
	e2e_start(&a, opts);
	ca = e2e_connect(&a);
}

START_TEST(test_a_reservation_answered_failed_whose_commit_stood_is_freed_after_a_restart)
{
	static char spec_t[1100];
	const char *opts_t[] = { "--capacity", "1024", "--max-result", "1K",
				 "--store", spec_t, NULL };
	long key = (long)getpid() + 3;
	struct carmy_call call;
	char rid[32], cmd[200], n[32];
	struct seen got;
	pid_t holder, pid;
	int up[2];

	restart_a_with_timeout(spec_t, sizeof(spec_t), opts_t);

	snprintf(rid, sizeof(rid), "withdrawn-%d", (int)getpid());
	call = call_of(rid, NULL);
	holder = hold_commits("hold6", rid, key);
	pid = client_on_a(&call, THEN_STOP, up);
	got = client_report(pid, up);
	ck_assert_msg(got.rc == CARMY_ESTORE, "begin: %s",
		      carmy_errname(got.rc));
	carmy_close(ca);
	ca = NULL;
	e2e_kill9(&a);
	release_lock(key, holder);
	drop_trigger("hold6");
	/* The commit stood, as a's running execution. */
	snprintf(cmd, sizeof(cmd), "SELECT count(*) FROM carmy_executions "
		 "WHERE request_id = convert_to('%s', 'UTF8') AND state = 1",
		 rid);
	for (uint64_t t0 = harness_now_ns();;) {
		psql(cmd, n, sizeof(n));
		if (strcmp(n, "1") == 0)
			break;
		ck_assert_msg(e2e_ms_since(t0) < 20000,
			      "the held commit never stood");
	}
	e2e_restart(&a, opts_t);
	ca = e2e_connect(&a);
	runs_on_b_and_replays(&call, rid);
}
END_TEST

/*
 * A release whose commit went through after the store had given up on it
 * (its commit held past the store's timeout=1): the client is answered
 * STORE_FAILED, and the identity may already be free in the store, where
 * b runs it. a must not keep the execution standing (uncertain here
 * alone, for ever, while b replays its result): it keeps it pending,
 * sends the release again until the store records it, then gives the
 * entry back, and a replays b's result. The release a client tries again
 * then finds nothing to release.
 */
START_TEST(test_a_release_answered_failed_whose_commit_stood_is_sent_until_recorded)
{
	static char spec_t[1100];
	const char *opts_t[] = { "--capacity", "1024", "--max-result", "1K",
				 "--store", spec_t, NULL };
	struct carmy_reservation held = CARMY_RESERVATION_INIT;
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	long key = (long)getpid() + 4;
	char rid[32], exec[CARMY_EXECUTION_ID_LEN + 1];
	struct carmy_call call;
	pid_t holder;
	int rc;

	restart_a_with_timeout(spec_t, sizeof(spec_t), opts_t);
	snprintf(rid, sizeof(rid), "released-late-%d", (int)getpid());
	call = call_of(rid, NULL);
	ck_assert_int_eq(carmy_begin(ca, &call, &held), CARMY_RESERVED);
	holder = hold_commits_of("hold7", rid, "DELETE", key);
	rc = carmy_release(ca, &held);
	ck_assert_msg(rc == CARMY_ESTORE, "release: %s", carmy_errname(rc));
	/* The held commit goes through: the identity is free in the store. */
	release_lock(key, holder);
	drop_trigger("hold7");
	rc = e2e_poll_begin(cb, &call, &r, CARMY_RESERVED, -1, 20000, NULL);
	ck_assert_msg(rc == CARMY_RESERVED, "b: %s", carmy_errname(rc));
	strcpy(exec, r.execution_id);
	ck_assert_int_eq(carmy_complete(cb, &r, CARMY_STATUS_COMPLETED, "b", 1),
			 0);
	carmy_reservation_clear(&r);
	/* a's entry waits for the release sent again; then a replays. */
	rc = e2e_poll_begin(ca, &call, &r, CARMY_REPLAY, -1, 30000, NULL);
	ck_assert_msg(rc == CARMY_REPLAY, "a: %s (state %d)",
		      carmy_errname(rc), r.state);
	ck_assert_str_eq(r.execution_id, exec);
	carmy_reservation_clear(&r);
	replays_on(cb, rid, "b", exec);
	ck_assert_int_eq(carmy_release(ca, &held), CARMY_ENOT_RESERVED);
	carmy_reservation_clear(&held);
}
END_TEST

/*
 * carmyd a dies while the store's commit of a release waits (a trigger
 * holds it); the commit then goes through. The carmyd that comes back
 * finds the entry pending a release and the store without it: it gives
 * it back, rather than keep the execution standing here (uncertain once
 * its owner is swept) while the identity is free everywhere else. With
 * kill_client, the client dies too and never sends its release again;
 * without, it sends it to the carmyd that comes back, which answers it
 * released. Either way the identity runs once, through b, and replays
 * through both.
 */
static void release_stood_while_a_died(const char *name, long key,
				       bool kill_client)
{
	struct carmy_call call;
	struct seen got;
	pid_t holder, pid;
	char rid[48];
	int up[2];

	snprintf(rid, sizeof(rid), "%s-%d", name, (int)getpid());
	call = call_of(rid, NULL);
	holder = hold_commits_of(name, rid, "DELETE", key);
	pid = client_on_a(&call, THEN_RELEASE, up);
	kill_a_mid_commit(key, holder);
	if (kill_client) {
		ck_assert_int_eq(kill(pid, SIGKILL), 0);
		ck_assert_int_eq(harness_waitpid(pid, HARNESS_WAIT_MS),
				 SIGKILL);
		close(up[0]);
	}
	drop_trigger(name);
	e2e_restart(&a, opts_a);
	ca = e2e_connect(&a);
	if (!kill_client) {
		got = client_report(pid, up);
		ck_assert_msg(got.rc == 0, "release: %s",
			      carmy_errname(got.rc));
	}
	runs_on_b_and_replays(&call, rid);
}

START_TEST(test_a_release_whose_carmyd_died_is_given_back_at_load)
{
	release_stood_while_a_died("relkill", (long)getpid() + 5, true);
}
END_TEST

START_TEST(test_a_release_sent_again_after_a_restart_is_answered_released)
{
	release_stood_while_a_died("relagain", (long)getpid() + 6, false);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("shared");
	TCase *tc = tcase_create("shared");
	SRunner *sr;
	int failed;

	e2e_guard(tc);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_a_result_replays_through_the_other_instance);
	tcase_add_test(tc,
		       test_running_elsewhere_is_uncertain_and_a_release_frees_it);
	tcase_add_test(tc, test_a_release_naming_another_entry_frees_nothing);
	tcase_add_test(tc,
		       test_a_killed_owner_is_uncertain_everywhere_until_resolved);
	tcase_add_test(tc, test_an_instance_rebooted_gets_its_own_back);
	tcase_add_test(tc, test_retention_deletes_the_row_and_keeps_what_runs);
	tcase_add_test(tc, test_racing_instances_run_each_identity_once);
	tcase_add_test(tc, test_a_begin_killed_before_its_answer_is_given_back);
	tcase_add_test(tc,
		test_a_reservation_the_store_never_recorded_is_given_back_at_load);
	tcase_add_test(tc,
		test_a_claim_the_store_never_heard_of_is_given_back_by_the_sweep);
	tcase_add_test(tc, test_a_reservation_whose_answer_was_lost_is_sent_again);
	tcase_add_test(tc,
		       test_a_reservation_the_store_refuses_is_answered_and_given_back);
	tcase_add_test(tc,
		test_a_reservation_whose_commit_stood_untold_is_released_at_load);
	tcase_add_test(tc,
		test_a_reservation_answered_failed_whose_commit_stood_is_freed_after_a_restart);
	tcase_add_test(tc,
		test_a_release_answered_failed_whose_commit_stood_is_sent_until_recorded);
	tcase_add_test(tc, test_a_release_whose_carmyd_died_is_given_back_at_load);
	tcase_add_test(tc,
		test_a_release_sent_again_after_a_restart_is_answered_released);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}
