/*
 * record.c - the end of an execution whose tool ran, or provably did not:
 * its answer recorded in carmyd as the execution's result (the bytes every
 * replay sends), or its reservation given back.
 */
#include <stdio.h>

#include "common/log.h"
#include "gateway/gateway.h"

void gw_exec_record(struct gw_exec *x, int status)
{
	struct gw_answer *a = x->answer;
	carmy_t *c;
	char msg[256];
	int rc;

	if (x->h == NULL)
		return;
	c = x->h->c;
	if (a->len > carmy_max_result(c)) {
		status = CARMY_STATUS_FAILED;
		gw_answer_too_large(a, x->execution_id);
	}
	rc = carmy_complete(c, &x->r, status, a->body, a->len);
	if (rc == 0)
		return;
	if (rc == CARMY_ERESULT_TOO_LARGE) {
		gw_answer_too_large(a, x->execution_id);
		return;
	}
	if (rc == CARMY_EDISCONNECTED)
		gw_handle_retire(&x->gw->carmyd, x->h);
	log_error("execution %s: its result could not be recorded: %s",
		  x->execution_id, carmy_errname(rc));
	snprintf(msg, sizeof(msg), "The tool ran, but its result could not "
		 "be recorded (%s): this request_id now reports "
		 "EXECUTION_UNCERTAIN.", carmy_errname(rc));
	gw_answer_error(a, "INTERNAL", msg, x->execution_id, "interrupted");
}

void gw_exec_not_started(struct gw_exec *x, const char *why)
{
	char msg[512];
	int rc = x->h != NULL ? carmy_release(x->h->c, &x->r) : 0;

	if (rc != 0) {
		snprintf(msg, sizeof(msg), "The tool could not be started "
			 "(%s), and its reservation could not be released "
			 "(%s).", why, carmy_errname(rc));
		gw_answer_error(x->answer, "INTERNAL", msg, x->execution_id,
				"running");
		return;
	}
	snprintf(msg, sizeof(msg), "The tool could not be started (%s); "
		 "nothing ran.", why);
	gw_answer_error(x->answer, "TOOL_NOT_STARTED", msg, NULL, NULL);
}
