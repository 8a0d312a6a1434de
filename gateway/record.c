/*
 * record.c - the end of an execution whose tool ran, or provably did not:
 * its answer recorded in carmyd as the execution's result (the bytes every
 * replay sends), or its reservation given back.
 *
 * A durable store may fail to record a result (CARMY_ESTORE: the
 * journal's disk is full, the PostgreSQL server is away) while carmyd
 * keeps the reservation live, and carmyd itself may be away longer than
 * libcarmy waits for it (CARMY_EUNAVAILABLE: restarting; the restarted
 * carmyd holds the gateway's calls for it): completing it again with the
 * same bytes answers 0 once they are recorded. Until then the identity is
 * running to everyone, and stays so while the gateway's connection lives.
 * So the result is sent again, GW_RECORD_RETRY_MS after the failure, then
 * twice as long each time, GW_RECORD_RETRY_MAX_MS at most between two
 * tries:
 *
 *   - for GW_RECORD_WAIT_MS, before the call is answered: recorded by
 *     then, it is answered as any other;
 *   - then the call is answered EXECUTION_UNCERTAIN (running), whose
 *     retries replay the result once recorded, and its thread goes on in
 *     the background until the store records it, carmyd gives up the
 *     handle (CARMY_EDISCONNECTED: carmyd makes the call interrupted) or
 *     the gateway stops (its connection to carmyd closes, and the call
 *     turns interrupted: carmyctl resolve settles it).
 *
 * A result that cannot be recorded at all (carmyd died while the tool
 * ran: DISCONNECTED) leaves an execution dropped mid-flight, which the
 * contract answers 409 EXECUTION_UNCERTAIN (interrupted): the tool ran,
 * and the agent is to reconcile, not retry.
 */
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "gateway/gateway.h"

/* ms of CLOCK_MONOTONIC; no signal is delivered to this thread. */
static void nap(unsigned ms)
{
	struct timespec ts = {
		.tv_sec = ms / 1000,
		.tv_nsec = (long)(ms % 1000) * 1000000,
	};

	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

/* Not recorded yet, the reservation still live: worth sending again. */
static bool not_yet(int rc)
{
	return rc == CARMY_ESTORE || rc == CARMY_EUNAVAILABLE;
}

/*
 * The wait before the next try, in ms: *ms, which then doubles, from
 * GW_RECORD_RETRY_MS to GW_RECORD_RETRY_MAX_MS, cut to what is left before
 * deadline (ns, CLOCK_MONOTONIC; 0: none). 0 once the deadline has passed.
 */
static unsigned next_wait(unsigned *ms, uint64_t deadline)
{
	unsigned w = *ms;

	if (deadline != 0) {
		uint64_t now = clock_mono_ns(), left;

		if (now >= deadline)
			return 0;
		left = (deadline - now) / 1000000u + 1;
		if (left < w)
			w = (unsigned)left;
	}
	*ms = *ms >= GW_RECORD_RETRY_MAX_MS / 2 ? GW_RECORD_RETRY_MAX_MS :
						   *ms * 2;
	return w;
}

/*
 * Complete x's reservation with buf again while it is not_yet() (rc: the
 * last answer): until deadline (ns, CLOCK_MONOTONIC), or with deadline 0
 * until the gateway stops (then once more, at once, unless carmyd was
 * away). *tries counts the completions sent. Returns the last answer.
 */
static int again(struct gw_exec *x, int rc, int status, const char *buf,
		 size_t len, uint64_t deadline, unsigned *tries)
{
	unsigned ms = GW_RECORD_RETRY_MS;
	bool last = false;

	while (not_yet(rc) && !last) {
		unsigned w = next_wait(&ms, deadline);

		if (deadline != 0) {
			if (w == 0)
				break;
			nap(w);
		} else {
			last = gw_stop_sleep(x->gw, w);
			/* Stopping: once more at once, unless carmyd was
			 * just not there (another try waits for it). */
			if (last && rc == CARMY_EUNAVAILABLE)
				break;
		}
		rc = carmy_complete(x->h->c, &x->r, status, buf, len);
		(*tries)++;
	}
	return rc;
}

void gw_exec_record(struct gw_exec *x, int status)
{
	struct gw_answer *a = x->answer;
	unsigned tries = 1;
	carmy_t *c;
	int rc;

	if (x->h == NULL)
		return;
	c = x->h->c;
	if (a->len > carmy_max_result(c)) {
		status = CARMY_STATUS_FAILED;
		gw_answer_too_large(a, x->execution_id);
	}
	rc = carmy_complete(c, &x->r, status, a->body, a->len);
	if (not_yet(rc)) {
		log_warn("execution %s: %s (%s): sending it again",
			 x->execution_id, rc == CARMY_ESTORE ?
			 "the store could not record its result" :
			 "carmyd could not be reached to record its result",
			 carmy_errname(rc));
		rc = again(x, rc, status, a->body, a->len,
			   clock_mono_ns() +
				   (uint64_t)GW_RECORD_WAIT_MS * 1000000u,
			   &tries);
		if (rc == 0)
			log_info("execution %s: its result is recorded, at "
				 "try %u", x->execution_id, tries);
	}
	if (rc == 0)
		return;
	if (rc == CARMY_ERESULT_TOO_LARGE) {
		gw_answer_too_large(a, x->execution_id);
		return;
	}
	if (not_yet(rc)) {
		char msg[400];

		/* The result moves to x, its answer to what is true now. */
		log_warn("execution %s: its result is still not recorded after "
			 "%u tries (%s): answered EXECUTION_UNCERTAIN "
			 "(running), and sent again in the background",
			 x->execution_id, tries, carmy_errname(rc));
		x->owed = a->body;
		x->owed_len = a->len;
		x->owed_status = status;
		x->owed_rc = rc;
		a->body = NULL;
		a->len = 0;
		snprintf(msg, sizeof(msg), "The tool ran, but %s (%s). The "
			 "gateway goes on sending it: send this request again "
			 "later (Prefer: wait=N waits for it) to get the "
			 "result. Should the gateway stop first, the call "
			 "turns interrupted.", rc == CARMY_ESTORE ?
			 "carmyd's store could not record its result" :
			 "carmyd could not be reached to record its result",
			 carmy_errname(rc));
		gw_answer_error(a, "EXECUTION_UNCERTAIN", msg,
				x->execution_id, "running");
		return;
	}
	if (rc == CARMY_EDISCONNECTED)
		gw_handle_retire(&x->gw->carmyd, x->h);
	log_error("execution %s: its result could not be recorded: %s",
		  x->execution_id, carmy_errname(rc));
	gw_exec_unrecorded(x, carmy_errname(rc));
}

void gw_exec_unrecorded(struct gw_exec *x, const char *why)
{
	char msg[320];

	snprintf(msg, sizeof(msg), "The tool ran, but its result could not "
		 "be recorded (%s): its effect may or may not have happened. "
		 "Reconcile before you act on it%s", why,
		 x->h != NULL ? "; this request_id reports "
		 "EXECUTION_UNCERTAIN from now on." : ".");
	gw_answer_error(x->answer, "EXECUTION_UNCERTAIN", msg,
			x->execution_id, "interrupted");
}

void gw_exec_lost(struct gw_exec *x, const char *what)
{
	char msg[384];
	bool uncertain;
	int rc;

	if (x->h == NULL) {
		/* No request_id: nothing reserved, nothing to make uncertain. */
		snprintf(msg, sizeof(msg), "The gateway lost track of the tool "
			 "(%s): its effect may or may not have happened. "
			 "Nothing was reserved (no request_id).", what);
		gw_answer_error(x->answer, "INTERNAL", msg, NULL, NULL);
		return;
	}
	rc = carmy_abandon(x->h->c, &x->r);
	/* carmyd gone, or not back yet: the handle is given up, and its
	 * close (or carmyd's sweep of the owner, once back) makes the call
	 * uncertain. */
	if (rc == CARMY_EDISCONNECTED || rc == CARMY_EUNAVAILABLE)
		gw_handle_retire(&x->gw->carmyd, x->h);
	uncertain = rc == 0 || rc == CARMY_EDISCONNECTED ||
		    rc == CARMY_EUNAVAILABLE;

	if (uncertain)
		log_warn("execution %s: the gateway lost track of its tool "
			 "(%s): made uncertain, for an operator to resolve",
			 x->execution_id, what);
	else
		log_error("execution %s: the gateway lost track of its tool "
			  "(%s), and could not make it uncertain (%s): it "
			  "stays running until the gateway's connection to "
			  "carmyd closes", x->execution_id, what,
			  carmy_errname(rc));
	snprintf(msg, sizeof(msg), "The gateway lost track of the tool (%s): "
		 "its effect may or may not have happened. Reconcile before "
		 "you act on it; this request_id reports EXECUTION_UNCERTAIN "
		 "until an operator resolves it.", what);
	gw_answer_error(x->answer, "EXECUTION_UNCERTAIN", msg,
			x->execution_id, uncertain ? "interrupted" : "running");
}

void gw_exec_record_owed(struct gw_exec *x)
{
	unsigned tries = 0;
	int rc;

	rc = again(x, x->owed_rc, x->owed_status, x->owed, x->owed_len, 0,
		   &tries);
	if (rc == 0 || rc == CARMY_ERESULT_TOO_LARGE) {
		log_info("execution %s: its result is recorded, %u tries after "
			 "its call was answered", x->execution_id, tries);
		return;
	}
	if (rc == CARMY_EDISCONNECTED)
		gw_handle_retire(&x->gw->carmyd, x->h);
	log_error("execution %s: its result was never recorded (%s): %s",
		  x->execution_id, carmy_errname(rc),
		  rc == CARMY_EDISCONNECTED ? "its calls answer "
		  "EXECUTION_UNCERTAIN (interrupted) once carmyd has swept "
		  "this gateway's connection" :
		  not_yet(rc) ? "its calls answer EXECUTION_UNCERTAIN "
		  "(interrupted) once the gateway has stopped" :
		  "carmyd refused it; its calls answer EXECUTION_UNCERTAIN: "
		  "settle it with carmyctl resolve once the gateway stops");
}

/*
 * Give back x's reservation, whose tool provably did not run. carmyd away
 * (CARMY_EUNAVAILABLE: restarting) is asked again as a result is, for
 * GW_RECORD_WAIT_MS after the first answer, or until the gateway stops.
 * Returns carmy_release()'s last answer.
 */
static int give_back(struct gw_exec *x)
{
	unsigned ms = GW_RECORD_RETRY_MS, tries = 1;
	uint64_t deadline;
	int rc = carmy_release(x->h->c, &x->r);

	if (rc != CARMY_EUNAVAILABLE)
		return rc;
	log_warn("execution %s: its tool did not start, and carmyd could not "
		 "be reached to give its reservation back (DAEMON_UNAVAILABLE):"
		 " asking again", x->execution_id);
	deadline = clock_mono_ns() + (uint64_t)GW_RECORD_WAIT_MS * 1000000u;
	while (rc == CARMY_EUNAVAILABLE) {
		unsigned w = next_wait(&ms, deadline);

		if (w == 0 || gw_stop_sleep(x->gw, w))
			break;
		rc = carmy_release(x->h->c, &x->r);
		tries++;
	}
	if (rc == 0)
		log_info("execution %s: its reservation is given back, at try "
			 "%u", x->execution_id, tries);
	return rc;
}

void gw_exec_not_started(struct gw_exec *x, const char *why)
{
	char msg[512];
	int rc = x->h != NULL ? give_back(x) : 0;

	/* Gone with carmyd's owner id: carmyd made it uncertain. Still
	 * refused otherwise: it runs until the gateway's connection closes,
	 * and is uncertain then. */
	if (rc == CARMY_EDISCONNECTED)
		gw_handle_retire(&x->gw->carmyd, x->h);
	if (rc != 0) {
		snprintf(msg, sizeof(msg), "The tool could not be started "
			 "(%s), and its reservation could not be released "
			 "(%s).", why, carmy_errname(rc));
		gw_answer_error(x->answer, "INTERNAL", msg, x->execution_id,
				rc == CARMY_EDISCONNECTED ? "interrupted" :
							    "running");
		return;
	}
	snprintf(msg, sizeof(msg), "The tool could not be started (%s); "
		 "nothing ran.", why);
	gw_answer_error(x->answer, "TOOL_NOT_STARTED", msg, NULL, NULL);
}
