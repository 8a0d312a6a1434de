/*
 * worker.c - a thread of the PostgreSQL store, one a connection: it takes
 * what submit() queued on it, up to BATCH_MAX requests, puts their
 * statements in an order every instance shares, runs them as one
 * transaction (send.c, read.c) until each is answered, reconnects with a
 * backoff when the connection is gone, withdraws the RESERVEs that failed
 * but may have committed, and sends again the COMPLETEs whose commit's
 * answer was lost until the database takes them. Why: the top of
 * store_pg.c.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "carmy_store.h"
#include "common/clock.h"
#include "common/execid.h"
#include "common/thread.h"
#include "stores/pg/pg.h"

#define TRIES_MAX 20		/* runs of one batch before -EAGAIN */
#define ASKEW_MAX 2		/* runs out of step before -EIO */
#define BACKOFF_MIN_MS 200	/* after a failed reconnect */
#define BACKOFF_MAX_MS 2000

static void plan(struct pg_worker *s, size_t n);
static void run_batch(struct pg_worker *s, size_t n);
static int run_once(struct pg_worker *s, size_t n);

static uint64_t now_ms(void)
{
	return clock_mono_ns() / 1000000u;
}

/* The held COMPLETEs into slots[0..), each still of unknown outcome: the
 * head of the next batch. Their number. */
static size_t take_held(struct pg_worker *s)
{
	size_t n = s->nhold;

	for (size_t i = 0; i < n; i++) {
		memset(&s->slots[i], 0, sizeof(s->slots[i]));
		s->slots[i].req = s->hold[i].req;
		s->slots[i].unsure = true;
		s->slots[i].full = true;	/* most likely committed */
		s->slots[i].until_ms = s->hold[i].until_ms;
		s->slots[i].alone = s->hold[i].until_ms == UINT64_MAX;
	}
	s->nhold = 0;
	return n;
}

/*
 * When a batch runs with nothing queued: the held COMPLETEs after the
 * backoff, or when one of carmyd's is to be answered; the withdrawals
 * after the backoff too. A withdrawal waits for no request to carry it:
 * until it commits, every instance finds its identity held by an
 * execution that never ran. UINT64_MAX: nothing to run.
 */
static uint64_t next_run_ms(const struct pg_worker *s)
{
	uint64_t next = s->nhold > 0 ? s->hold_retry_ms : UINT64_MAX;

	for (size_t i = 0; i < s->nhold; i++)
		if (s->hold[i].until_ms < next)
			next = s->hold[i].until_ms;
	if (s->nwd > 0 && s->wd_retry_ms < next)
		next = s->wd_retry_ms;
	return next;
}

/* Under s->lock: wait for requests, or for the next run of what is held
 * or left to withdraw. */
static void wait_for_work(struct pg_worker *s)
{
	uint64_t now = now_ms(), next = next_run_ms(s);
	struct timespec dl;

	if (next == UINT64_MAX) {
		pthread_cond_wait(&s->wake, &s->lock);
		return;
	}
	if (next <= now)
		return;
	/* s->wake runs on CLOCK_MONOTONIC (store_pg.c: worker_init()), as
	 * next does: a step of the wall clock moves neither. */
	dl.tv_sec = (time_t)(next / 1000u);
	dl.tv_nsec = (long)(next % 1000u) * 1000000L;
	pthread_cond_timedwait(&s->wake, &s->lock, &dl);
}

/* The next run of what failed for want of the database: not before the
 * reconnect's backoff, nor sooner than its shortest interval. */
static uint64_t after_backoff(const struct pg_worker *s)
{
	uint64_t soonest = now_ms() + BACKOFF_MIN_MS;

	return s->retry_ms > soonest ? s->retry_ms : soonest;
}

static bool run_due(const struct pg_worker *s)
{
	return next_run_ms(s) <= now_ms();
}

/* At close: one last attempt at what is left to withdraw and the held
 * COMPLETEs, whatever the backoff, then name what stands for an operator
 * to resolve. */
static void at_close(struct pg_worker *s)
{
	char exec_text[EXECID_TEXT_LEN + 1];
	size_t n;

	s->closing = true;
	if (s->nwd == 0 && s->nhold == 0)
		return;
	s->retry_ms = 0;
	n = take_held(s);
	plan(s, n);
	run_batch(s, n);
	for (size_t i = 0; i < s->nwd; i++)
		pg_say("instance %s: %s may stand as running though its "
		       "reservation was reported failed: resolve it as not "
		       "committed", s->instance, (execid_format(exec_text, s->wd[i].exec), exec_text));
}

/* Take what is queued, up to BATCH_MAX after the held COMPLETEs, and
 * write it; until close. */
void *pg_work(void *arg)
{
	struct pg_worker *s = arg;

	thread_name("carmyd-pg%u", s->index);
	pthread_mutex_lock(&s->lock);
	for (;;) {
		size_t n;

		while (s->head == NULL && !s->stopping && !run_due(s))
			wait_for_work(s);
		if (s->head == NULL && s->stopping)
			break;
		n = take_held(s);
		while (s->head != NULL && n < BATCH_MAX) {
			memset(&s->slots[n], 0, sizeof(s->slots[n]));
			s->slots[n++].req = s->head;
			s->head = s->head->next;
		}
		if (s->head == NULL)
			s->tail = &s->head;
		pthread_mutex_unlock(&s->lock);
		plan(s, n);
		run_batch(s, n);
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	at_close(s);
	return NULL;
}


/* Fenced: the name goes (worker 0's), for the next carmyd of it, and is
 * never taken again. */
static void let_go_name(struct pg_worker *s)
{
	if (!s->named || s->index != 0)
		return;
	s->named = false;
	if (s->session && PQstatus(s->conn) == CONNECTION_OK)
		PQclear(pg_exec(s->conn, "SELECT pg_advisory_unlock_all()"));
}

/*
 * The connection, working, set up and holding its lock (the instance's
 * name, or the connection's), for a batch: 0, or why not (s->why says
 * more). After a failed reconnect, batches fail at once until the backoff
 * has passed: each attempt blocks the worker up to connect_timeout, and
 * each statement of its setup up to the store's timeout (wait.c).
 */
static int ready(struct pg_worker *s)
{
	bool fresh = false;
	char err[256];
	int rc = 0;

	if (__atomic_load_n(&s->store->fenced, __ATOMIC_ACQUIRE)) {
		let_go_name(s);
		snprintf(s->why, sizeof(s->why), "instance %s was opened "
			 "again elsewhere", s->instance);
		return FENCED;
	}
	if (!s->session || PQstatus(s->conn) != CONNECTION_OK) {
		s->session = s->named = false;
		if (s->down != 0 && clock_mono_ns() / 1000000 < s->retry_ms)
			return s->down;	/* s->why: the last attempt's */
		rc = pg_reconnect(s, err, sizeof(err));
		if (rc != 0) {
			s->backoff_ms = s->backoff_ms == 0 ? BACKOFF_MIN_MS :
					s->backoff_ms * 2 > BACKOFF_MAX_MS ?
					BACKOFF_MAX_MS : s->backoff_ms * 2;
			s->retry_ms = clock_mono_ns() / 1000000 + s->backoff_ms;
		} else {
			s->backoff_ms = 0;
			s->session = fresh = true;
		}
	}
	/* Never a request without the name: another carmyd holding it
	 * would take this one's running executions for interrupted ones.
	 * Worker 0 holds it; the others' batches are fenced (carmy_fence()),
	 * as are worker 0's. Nor on a new connection while the backend of
	 * the old one lives: a transaction of it stalled in its commit
	 * could commit after this connection's withdrawal found nothing to
	 * delete. Worker 0's old backend holds the name, each other's its
	 * connection's lock, until it exits. Either is waited for on a new
	 * connection (the old backend may still be letting it go), only
	 * tried after that. */
	if (rc == 0 && !s->named) {
		rc = s->index == 0 ?
		     pg_take_name(s, fresh ? NAME_WAIT_MS : 0, false, err,
				  sizeof(err)) :
		     pg_take_conn_lock(s, fresh ? NAME_WAIT_MS : 0, err,
				       sizeof(err));
		if (rc == 0)
			s->named = true;
		else if (rc != -EBUSY)
			s->session = false;
	}
	if (rc != 0) {
		snprintf(s->why, sizeof(s->why), "%s", err);
		if (rc != s->down)
			pg_say("instance %s: the database cannot take "
			       "requests, failing them until it can: %s",
			       s->instance, err);
	} else if (s->down != 0) {
		pg_say("instance %s: connected to the database again",
		       s->instance);
	}
	s->down = rc;
	return rc;
}

/* One order of identities, the same in every instance: any will do. */
static int identity_cmp(const struct carmy_store_record *a,
			const struct carmy_store_record *b)
{
	for (int k = 0; k < 3; k++) {
		size_t n = a->len[k] < b->len[k] ? a->len[k] : b->len[k];
		int c = memcmp(a->part[k], b->part[k], n);

		if (c != 0)
			return c;
		if (a->len[k] != b->len[k])
			return a->len[k] < b->len[k] ? -1 : 1;
	}
	return 0;
}

/* Equal identities keep their submission order (the slots' addresses). */
static int by_identity(const void *pa, const void *pb)
{
	const struct slot *a = *(const struct slot *const *)pa;
	const struct slot *b = *(const struct slot *const *)pb;
	int c = identity_cmp(a->req->rec, b->req->rec);

	return c != 0 ? c : a < b ? -1 : a > b;
}

/* The order of a batch's requests (s->order): runs of RESERVEs and
 * COMPLETEs split by the requests that may free an identity (RELEASE,
 * RESOLVE, PURGE), each of those after the run before it, as submitted;
 * within a run, its RESERVEs first, in the order of their identities,
 * then its COMPLETEs, as submitted. Then two instances whose batches
 * reserve the same identities insert them in the same order, and neither
 * waits for a row the other inserted while the other waits for one of
 * its own; and each kind of a run goes as one set-based statement
 * (send.c). A RESERVE never passes a request that may free its identity:
 * carmyd sends the RELEASE first, and the new RESERVE after it. A
 * COMPLETE never meets a RESERVE of its batch: it settles an execution
 * whose reservation committed before, and its identity's RESERVEs are
 * answered from carmyd's segment meanwhile. */
static void plan(struct pg_worker *s, size_t n)
{
	size_t from = 0, k = 0;

	while (from < n) {
		size_t to = from, first = k;

		/* [from, to): no request in it frees an identity */
		while (to < n && (s->slots[to].req->op ==
				  CARMY_STORE_RESERVE ||
				  s->slots[to].req->op ==
				  CARMY_STORE_COMPLETE))
			to++;
		for (size_t i = from; i < to; i++)
			if (s->slots[i].req->op == CARMY_STORE_RESERVE)
				s->order[k++] = &s->slots[i];
		qsort(s->order + first, k - first, sizeof(*s->order),
		      by_identity);
		for (size_t i = from; i < to; i++)
			if (s->slots[i].req->op == CARMY_STORE_COMPLETE)
				s->order[k++] = &s->slots[i];
		if (to < n)
			s->order[k++] = &s->slots[to];
		from = to + 1;	/* past the one that frees an identity */
	}
}

/* Keep what it takes to delete the row a failed RESERVE may have left. */
static void remember(struct pg_worker *s, const struct carmy_store_record *r)
{
	struct withdrawal *w;
	size_t len = (size_t)r->len[0] + r->len[1] + r->len[2], off = 0;
	char exec_text[EXECID_TEXT_LEN + 1];

	if (s->nwd == WITHDRAW_MAX || (w = &s->wd[s->nwd],
				       w->id = malloc(len)) == NULL) {
		pg_say("instance %s: cannot remember to withdraw %s, "
		       "whose reservation was reported failed but may have "
		       "committed: if it stands as running, resolve it as not "
		       "committed",
		       s->instance, (execid_format(exec_text, r->exec), exec_text));
		return;
	}
	memcpy(w->exec, r->exec, 16);
	for (int k = 0; k < 3; k++) {
		w->len[k] = r->len[k];
		memcpy(w->id + off, r->part[k], r->len[k]);
		off += r->len[k];
	}
	s->nwd++;
}

/* After a commit: the withdrawals it carried are done. */
static void withdrawn(struct pg_worker *s)
{
	for (size_t i = 0; i < s->nwd; i++)
		free(s->wd[i].id);
	s->nwd = 0;
}

/*
 * Give the answer due, if any, then make req's (NULL: none) the one due.
 * A run settles its requests together: each done() but the last of a run
 * to one callback carries CARMY_STORE_ANSWERS_FOLLOW, so that carmyd
 * wakes the loops it answers once a run, not once a request. The answer
 * due is given when the next is known, at the latest at the end of the
 * run (deliver(s, NULL, 0)), before the worker waits again.
 */
static void deliver(struct pg_worker *s, struct carmy_store_req *req, int rc)
{
	struct carmy_store_req *due = s->due;
	int due_rc = s->due_rc;

	s->due = req;
	s->due_rc = rc;
	if (due == NULL)
		return;
	if (req != NULL && req->done == due->done)
		due->flags |= CARMY_STORE_ANSWERS_FOLLOW;
	else
		due->flags &= ~CARMY_STORE_ANSWERS_FOLLOW;
	due->done(due, due_rc);	/* due may be gone after this */
}

static void answer(struct pg_worker *s, struct slot *sl)
{
	struct carmy_store_req *req = sl->req;

	if (sl->rc == 0 && sl->kept)
		req->taken(req, &sl->standing);
	sl->kept = false;
	sl->answered = true;
	deliver(s, req, sl->rc);
}

/* The store's own copy of a COMPLETE whose request was answered failed
 * though it may have committed: sent again until the database takes it. */
struct kept {
	struct carmy_store_req req;
	struct carmy_store_record rec;
	struct pg_worker *s;
	uint8_t result[];
};

static void kept_done(struct carmy_store_req *req, int rc)
{
	struct kept *k = req->cookie;
	char exec_text[EXECID_TEXT_LEN + 1];

	execid_format(exec_text, k->rec.exec);
	if (rc == 0)
		pg_say("instance %s: the completion of %s is recorded (it was "
		       "reported failed)", k->s->instance, exec_text);
	else if (k->s->closing)
		pg_say("instance %s: %s may stand as running though it "
		       "completed (its completion was reported failed and "
		       "could not be sent again): resolve it as committed",
		       k->s->instance, exec_text);
	else
		pg_say("instance %s: the completion of %s, reported failed, "
		       "was refused when sent again (%s): if it stands as "
		       "running, resolve it as committed", k->s->instance,
		       exec_text, strerror(-rc));
	free(k);
}

static struct carmy_store_req *kept_copy(struct pg_worker *s,
					 const struct carmy_store_req *req)
{
	const struct carmy_store_record *r = req->rec;
	struct kept *k = malloc(sizeof(*k) + r->result_len);

	if (k == NULL)
		return NULL;
	memset(k, 0, sizeof(*k));
	k->s = s;
	memcpy(k->rec.exec, r->exec, 16);
	k->rec.finished_ns = r->finished_ns;
	k->rec.status = r->status;
	k->rec.result_code = r->result_code;
	k->rec.result_len = r->result_len;
	if (r->result_len > 0)
		memcpy(k->result, r->result, r->result_len);
	k->rec.result = k->result;
	k->req.op = CARMY_STORE_COMPLETE;
	k->req.rec = &k->rec;
	k->req.done = kept_done;
	k->req.cookie = k;
	return &k->req;
}

/*
 * A COMPLETE that may have committed and cannot run again now (no
 * connection, answers out of step) is held, unanswered, to run again at
 * the head of the next batch: its answer is then what the database says.
 * carmyd's request is held up to the store's timeout (pg_answer_ms, from
 * its first failure), then answered with rc while a copy of it is held
 * until the database takes it. True if held.
 */
static bool hold(struct pg_worker *s, struct slot *sl, int rc)
{
	struct carmy_store_req *req = sl->req;
	uint64_t now = now_ms(), until = sl->until_ms;
	char exec_text[EXECID_TEXT_LEN + 1];

	if (!sl->unsure || req->op != CARMY_STORE_COMPLETE || s->closing ||
	    __atomic_load_n(&s->store->fenced, __ATOMIC_ACQUIRE))
		return false;
	/* A copy is sent again for want of a connection, and after a batch
	 * that failed for another request's sake; not once a database that
	 * works has failed its own statement or answered it out of step
	 * (it could be why, and would fail every batch it rides in). It
	 * goes as a statement of its own (slot.alone): a failure names it
	 * or not. */
	if (req->done == kept_done && rc == -EIO && s->session && sl->blamed)
		return false;
	execid_format(exec_text, req->rec->exec);
	if (s->nhold == HOLD_MAX) {
		pg_say("instance %s: cannot hold the completion of %s, whose "
		       "commit's answer was lost: if it stands as running, "
		       "resolve it", s->instance, exec_text);
		return false;
	}
	if (req->done != kept_done && until == 0)
		until = now + pg_answer_ms;
	if (req->done != kept_done && now >= until) {
		req = kept_copy(s, sl->req);
		if (req == NULL) {
			pg_say("instance %s: cannot keep the completion of %s "
			       "to send it again: if it stands as running, "
			       "resolve it", s->instance, exec_text);
			return false;
		}
		pg_say("instance %s: the completion of %s is reported failed "
		       "after %u ms without the database; it is sent again "
		       "until the database takes it", s->instance, exec_text,
		       pg_answer_ms);
		sl->rc = rc;
		answer(s, sl);
		until = UINT64_MAX;
	}
	s->hold[s->nhold].req = req;
	s->hold[s->nhold++].until_ms = until;
	s->hold_retry_ms = after_backoff(s);
	sl->answered = true;
	return true;
}

/* Answer sl with a failure, no commit behind it: a RESERVE that may have
 * committed in an earlier run is to be withdrawn, a COMPLETE held. True
 * if answered (not held). */
static bool fail(struct pg_worker *s, struct slot *sl, int rc)
{
	if (sl->unsure && sl->req->op == CARMY_STORE_RESERVE)
		remember(s, sl->req->rec);
	if (hold(s, sl, rc))
		return false;
	sl->rc = rc;
	answer(s, sl);
	return true;
}

/* After a commit: answer what it settled, in order; count what must run
 * again. */
static size_t answer_settled(struct pg_worker *s, size_t n)
{
	size_t left = 0;

	for (size_t i = 0; i < n; i++) {
		struct slot *sl = &s->slots[i];

		if (sl->answered)
			continue;
		if (sl->again) {
			sl->again = false;
			snprintf(s->why, sizeof(s->why), "a row kept "
				 "changing under a request that looked again");
			left++;
		} else {
			answer(s, sl);
		}
	}
	deliver(s, NULL, 0);
	pg_drop_held(s);
	return left;
}

/* A batch failed its fence: a carmyd of this name took a new generation
 * since this one's open, and may have loaded the instance's executions.
 * Every worker fails its requests from then on (-EBUSY); said once. */
static void fenced(struct pg_worker *s)
{
	let_go_name(s);
	if (!__atomic_exchange_n(&s->store->fenced, true, __ATOMIC_ACQ_REL))
		pg_say("instance %s: another carmyd opened this instance "
		       "since (%s): failing every request from now on",
		       s->instance, s->why);
}

/* After a rollback, or a run that may have committed (unsure): forget
 * what the run decided. A slot's full stays: the full form is right in
 * any run. One whose run may have committed goes full: its bare form
 * would most likely take nothing. */
static void forget(struct pg_worker *s, size_t n, bool unsure)
{
	for (size_t i = 0; i < n; i++) {
		struct slot *sl = &s->slots[i];

		sl->kept = false;
		sl->rc = 0;
		sl->again = false;
		if (unsure && !sl->answered)
			sl->unsure = sl->full = true;
	}
	pg_drop_held(s);
}

/*
 * Write slots[0..n), and what is left to withdraw, until each is answered:
 * one transaction per run, runs again after a conflict, a lost connection,
 * an answer out of step (up to ASKEW_MAX runs that end so: one that is
 * every time fails the batch, as one the database refused) or a request
 * that must look again (a bare statement that took nothing costs one), at
 * most TRIES_MAX runs in all.
 */
static void run_batch(struct pg_worker *s, size_t n)
{
	size_t left = n;
	int rc = 0, tries = 0, askew = 0;
	bool said = false;

	s->wd_held = false;
	s->single = false;
	while (left > 0 || (s->nwd > 0 && !s->wd_held)) {
		if (tries++ == TRIES_MAX) {
			rc = -EAGAIN;	/* s->why: the last trouble */
			break;
		}
		rc = ready(s);
		if (rc != 0) {
			said = true;	/* ready() did */
			break;
		}
		rc = run_once(s, n);
		if (rc == 0) {
			if (!s->wd_held)
				withdrawn(s);
			left = answer_settled(s, n);
			continue;
		}
		forget(s, n, rc == LOST || rc == ASKEW);
		if (rc == FENCED) {
			fenced(s);
			said = true;
			break;
		} else if (rc == LOST) {
			pg_say("instance %s: connection lost (%s): "
			       "reconnecting to run the batch again",
			       s->instance, s->why);
			s->session = false;
		} else if (rc == ASKEW && ++askew == ASKEW_MAX) {
			rc = -EIO;	/* s->why: this run's */
			break;
		} else if (rc == ASKEW) {
			pg_say("instance %s: an answer out of step with what "
			       "was sent (%s): running the batch again, as one "
			       "that may have committed", s->instance, s->why);
		} else if (rc == WAITED && s->wd_waited) {
			pg_say("instance %s: a withdrawal waited on a lock "
			       "(%s): left for the next batch", s->instance,
			       s->why);
			s->wd_held = true;
		} else if (rc == WAITED && s->single && s->culprit == NULL) {
			pg_say("instance %s: a statement of a batch waited "
			       "(%s): running it again a statement a request",
			       s->instance, s->why);
		} else if (rc == WAITED && s->culprit != NULL) {
			pg_say("instance %s: a request failed, alone (%s): "
			       "running the rest of its batch again",
			       s->instance, s->why);
			(void)fail(s, s->culprit, -EAGAIN);
			left--;
		} else if (rc != RETRY && rc != WAITED) {
			break;
		}
	}
	if (left > 0) {
		left = 0;
		for (size_t i = 0; i < n; i++)
			if (!s->slots[i].answered &&
			    fail(s, &s->slots[i], rc))
				left++;
	}
	deliver(s, NULL, 0);
	/* Left to withdraw (no connection, a lock waited on, a failed
	 * run): again after the backoff, whether requests come or not. */
	if (s->nwd > 0)
		s->wd_retry_ms = after_backoff(s);
	if (!said && left > 0)
		pg_say("instance %s: failed %zu requests (%s): %s", s->instance,
		       left, strerror(-rc), s->why);
}

/* One run: what is left to withdraw and the unanswered slots as one
 * pipelined transaction. 0 once it committed (each slot's rc and again
 * say what it decided), else RETRY, WAITED, ASKEW (may have committed),
 * LOST or -EIO, with the transaction rolled back or the connection to be
 * reset. */
static int run_once(struct pg_worker *s, size_t n)
{
	PGconn *c = s->conn;
	int rc;

	s->culprit = NULL;
	s->wd_waited = false;
	s->why[0] = '\0';
	if (PQenterPipelineMode(c)) {
		rc = pg_send_batch(s, n);
		if (rc == 0)
			rc = pg_read_batch(s);
		else if (rc == -ENOMEM)
			rc = pg_read_to_sync(s, rc);
	} else {
		rc = LOST;
	}
	if (rc == LOST || !PQexitPipelineMode(c)) {
		/* libpq's words, unless the run has its own (an answer out
		 * of step, the server's FATAL) */
		if (rc != LOST || s->why[0] == '\0')
			pg_pq_error(PQerrorMessage(c), s->why, sizeof(s->why));
		return LOST;
	}
	/* The sync ends the run's transaction; one still open (a server out
	 * of step with the protocol) is rolled back here, and the run is
	 * not taken as committed. */
	if (PQtransactionStatus(c) != PQTRANS_IDLE) {
		PGresult *r = pg_exec(c, "ROLLBACK");

		if (PQresultStatus(r) != PGRES_COMMAND_OK) {
			snprintf(s->why, sizeof(s->why), "cannot roll back "
				 "a transaction left open after the sync");
			rc = LOST;
		} else if (rc == 0) {
			snprintf(s->why, sizeof(s->why), "a transaction left "
				 "open after the sync");
			rc = ASKEW;
		}
		PQclear(r);
	}
	return rc;
}
