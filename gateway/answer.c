/*
 * answer.c - every body carmy-gateway sends, and its status code.
 *
 * An execution's answer is {"execution_id","status","data"} (completed) or
 * {"execution_id","status","error"} (failed, timed_out, cancelled). Every
 * other error is {"error":{"code","message","category","recoverable",
 * "retryable"}}, followed by "execution_id" and "state" when an execution
 * exists. Bodies are compact JSON and end with a newline. What carmyd
 * records for an execution is its answer's body, byte for byte; the status
 * code comes back from the recorded CARMY_STATUS_* (gw_status_http).
 */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "common/execid.h"
#include "gateway/gateway.h"
#include "tools/json.h"

struct kind {
	const char *code;
	unsigned http;
	const char *category;
	bool recoverable;	/* the agent can do something about it */
	bool retryable;		/* the same request may succeed later */
};

static const struct kind kinds[] = {
	{ "INVALID_REQUEST", 400, "validation", false, false },
	{ "INVALID_ID", 400, "validation", false, false },
	{ "PAYLOAD_TOO_LARGE", 413, "validation", false, false },
	{ "HEADERS_TOO_LARGE", 431, "validation", false, false },
	{ "UNAUTHENTICATED", 401, "auth", false, false },
	{ "TOOL_NOT_FOUND", 404, "validation", false, false },
	{ "NOT_FOUND", 404, "validation", false, false },
	{ "METHOD_NOT_ALLOWED", 405, "validation", false, false },
	{ "IDEMPOTENCY_CONFLICT", 409, "idempotency", false, false },
	/* Running: retry later and get its replay. Interrupted: reconcile. */
	{ "EXECUTION_UNCERTAIN", 409, "idempotency", true, false },
	/* The store is full, and stays so until an operator purges it or
	 * its retention frees entries: no retry succeeds soon. */
	{ "IDEMPOTENCY_CAPACITY", 503, "capacity", true, false },
	{ "DAEMON_UNAVAILABLE", 503, "unavailable", true, true },
	/* Every --max-running slot taken; nothing was reserved. */
	{ "OVERLOADED", 503, "capacity", true, true },
	{ "TOOL_FAILED", 500, "tool", false, false },
	{ "TOOL_OUTPUT_INVALID", 500, "tool", false, false },
	{ "RESULT_TOO_LARGE", 500, "tool", false, false },
	{ "TOOL_TIMEOUT", 504, "timeout", true, false },
	{ "CANCELLED", 408, "cancelled", true, false },
	/* The tool provably did not run and nothing is recorded. */
	{ "TOOL_NOT_STARTED", 500, "internal", true, true },
	{ "INTERNAL", 500, "internal", false, false },
};

static const struct kind *kind_of(const char *code)
{
	for (size_t i = 0; i < sizeof(kinds) / sizeof(*kinds); i++)
		if (strcmp(kinds[i].code, code) == 0)
			return &kinds[i];
	return &kinds[sizeof(kinds) / sizeof(*kinds) - 1];
}

/* A JSON string of s; one that is not UTF-8 is replaced, not dropped. */
static json_t *str(const char *s)
{
	json_t *v = json_string(s);

	return v != NULL ? v : json_string("(not UTF-8)");
}

static json_t *error_object(const struct kind *k, const char *code,
			    const char *message, bool retryable)
{
	json_t *e = json_object();

	if (e == NULL)
		return NULL;
	json_object_set_new(e, "code", str(code));
	json_object_set_new(e, "message", str(message));
	json_object_set_new(e, "category", str(k->category));
	json_object_set_new(e, "recoverable", json_boolean(k->recoverable));
	json_object_set_new(e, "retryable", json_boolean(retryable));
	return e;
}

char *gw_json_line(const json_t *o, size_t *len)
{
	char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
	size_t n;
	char *b;

	if (s == NULL)
		return NULL;
	n = strlen(s);
	b = realloc(s, n + 2);
	if (b == NULL) {
		free(s);
		return NULL;
	}
	b[n] = '\n';
	b[n + 1] = '\0';
	*len = n + 1;
	return b;
}

/* o as the answer's body; takes o. */
static int finish(struct gw_answer *a, unsigned status, json_t *o)
{
	free(a->body);
	a->status = status;
	a->len = 0;
	a->body = gw_json_line(o, &a->len);
	json_decref(o);
	return a->body != NULL ? 0 : -ENOMEM;
}

void gw_answer_json(struct gw_answer *a, unsigned status, json_t *o)
{
	a->retry_after = false;
	if (finish(a, status, o) != 0)
		a->status = 500;
}

void gw_answer_error(struct gw_answer *a, const char *code,
		     const char *message, const char *exec_id,
		     const char *state)
{
	const struct kind *k = kind_of(code);
	bool retryable = k->retryable;
	json_t *o = json_object();

	if (strcmp(code, "EXECUTION_UNCERTAIN") == 0 && state != NULL)
		retryable = strcmp(state, "running") == 0;
	if (o != NULL) {
		json_object_set_new(o, "error",
				    error_object(k, code, message, retryable));
		if (exec_id != NULL)
			json_object_set_new(o, "execution_id", str(exec_id));
		if (exec_id != NULL && state != NULL)
			json_object_set_new(o, "state", str(state));
	}
	/* Retry-After only where a retry soon may succeed. */
	a->retry_after = k->http == 503 && k->retryable;
	if (finish(a, k->http, o) != 0)
		a->status = 500;	/* an empty body says enough */
}

unsigned gw_status_http(int status)
{
	switch (status) {
	case CARMY_STATUS_COMPLETED:
		return 200;
	case CARMY_STATUS_TIMED_OUT:
		return 504;
	case CARMY_STATUS_CANCELLED:
		return 408;
	default:
		return 500;
	}
}

int gw_answer_execution(struct gw_answer *a, const char *exec_id,
			int status, json_t *data, const char *code,
			const char *message)
{
	json_t *o = json_object();

	if (o != NULL) {
		json_object_set_new(o, "execution_id", str(exec_id));
		json_object_set_new(o, "status",
				    str(carmy_status_name(status)));
		if (status == CARMY_STATUS_COMPLETED) {
			json_object_set(o, "data",
					data != NULL ? data : json_null());
		} else {
			const struct kind *k = kind_of(code);

			json_object_set_new(o, "error",
					    error_object(k, code, message,
							 k->retryable));
		}
	}
	a->retry_after = false;
	return finish(a, gw_status_http(status), o);
}

int gw_answer_output(struct gw_answer *a, const char *exec_id,
		     const char *buf, size_t len, const char *whose,
		     int *status)
{
	json_error_t je;
	char msg[512];
	json_t *data;
	int rc;

	data = json_loadb(buf, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
			  &je);
	if (data == NULL) {
		/* The tool ran to its end, and its effect may have happened:
		 * said, lest the agent run it again under a new request_id
		 * (valid JSON the gateway cannot carry, an integer beyond 64
		 * bits or a key given twice, ends here too). */
		*status = CARMY_STATUS_FAILED;
		snprintf(msg, sizeof(msg), "%s is not one JSON value the "
			 "gateway can carry (%s), so it is lost; the tool ran "
			 "and its effect may have happened. Do not send this "
			 "call again under a new request_id: look for its "
			 "effect instead.", whose, je.text);
		return gw_answer_execution(a, exec_id, *status, NULL,
					   "TOOL_OUTPUT_INVALID", msg);
	}
	*status = CARMY_STATUS_COMPLETED;
	rc = gw_answer_execution(a, exec_id, *status, data, NULL, NULL);
	json_decref(data);
	return rc;
}

/* What carmyd keeps of a result too large to record is its status
 * (failed) and code, so its answer is rebuilt from those alone, the same
 * on the first answer and every replay. The tool ran to its end: the
 * message says so, lest the agent run it again under a new request_id. */
void gw_answer_too_large(struct gw_answer *a, const char *exec_id)
{
	if (gw_answer_execution(a, exec_id, CARMY_STATUS_FAILED, NULL,
				"RESULT_TOO_LARGE",
				"The tool ran and its effect happened, but its "
				"answer is larger than carmyd records (its "
				"--max-result), so the answer is lost. Do not "
				"send this call again under a new request_id: "
				"that would run the tool again. Look for its "
				"effect instead.") != 0)
		a->status = 500;
}

/* Does the recorded result read as an answer of ours for this execution? */
static bool ours(const struct carmy_reservation *r)
{
	static const char head[] = "{\"execution_id\":\"";
	size_t h = sizeof(head) - 1;

	return r->result_len > h + CARMY_EXECUTION_ID_LEN &&
	       memcmp(r->result, head, h) == 0 &&
	       memcmp((char *)r->result + h, r->execution_id,
		      CARMY_EXECUTION_ID_LEN) == 0 &&
	       ((char *)r->result)[h + CARMY_EXECUTION_ID_LEN] == '"';
}

/* len bytes as a JSON string: valid UTF-8 as it is, every other byte as
 * U+FFFD (as tools/json.c prints them); NULL when out of memory. */
static json_t *bytes_string(const char *buf, size_t len)
{
	const unsigned char *p = (const unsigned char *)buf;
	size_t o = 0;
	json_t *v;
	char *s;

	if (len > (SIZE_MAX - 1) / 3)
		return NULL;
	s = malloc(3 * len + 1);
	if (s == NULL)
		return NULL;
	for (size_t i = 0; i < len;) {
		size_t n = p[i] < 0x80 ? 1 : json_utf8_len(p + i, len - i);

		if (n == 0) {
			memcpy(s + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		} else {
			memcpy(s + o, p + i, n);
			o += n;
			i += n;
		}
	}
	v = json_stringn(s, o);
	free(s);
	return v;
}

void gw_answer_replay(struct gw_answer *a, struct carmy_reservation *r)
{
	json_t *data;

	a->replayed = true;
	a->retry_after = false;
	if (r->result_code == CARMY_ERESULT_TOO_LARGE) {
		gw_answer_too_large(a, r->execution_id);
		return;
	}
	if (ours(r)) {
		free(a->body);
		a->status = gw_status_http(r->status);
		a->body = r->result;	/* malloc'd by libcarmy: ours now */
		a->len = r->result_len;
		r->result = NULL;
		r->result_len = 0;
		return;
	}
	/* Recorded by someone else (carmyctl resolve, say). The call
	 * completed whatever its result is: a JSON result becomes the data,
	 * any other the data as a JSON string of its bytes. A call that did
	 * not complete says what it was. Built from the record alone, so
	 * every replay is the same. */
	data = json_loadb(r->result, r->result_len,
			  JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
	if (r->status == CARMY_STATUS_COMPLETED) {
		if (data == NULL)
			data = bytes_string(r->result, r->result_len);
		if (data == NULL) {
			gw_answer_free(a);	/* 500, an empty body */
			a->status = 500;
		} else if (gw_answer_execution(a, r->execution_id, r->status,
					       data, NULL, NULL) != 0) {
			a->status = 500;
		}
	} else {
		/* carmyd records no other status (INVALID_STATUS). */
		static const struct {
			int status;
			const char *code;
		} codes[] = {
			{ CARMY_STATUS_FAILED, "TOOL_FAILED" },
			{ CARMY_STATUS_TIMED_OUT, "TOOL_TIMEOUT" },
			{ CARMY_STATUS_CANCELLED, "CANCELLED" },
		};
		int status = CARMY_STATUS_FAILED;
		const char *code = "TOOL_FAILED";

		for (size_t i = 0; i < sizeof(codes) / sizeof(*codes); i++) {
			if (codes[i].status == r->status) {
				status = r->status;
				code = codes[i].code;
			}
		}
		if (gw_answer_execution(a, r->execution_id, status, NULL, code,
					"The execution's result was recorded "
					"by another client than carmy-gateway, "
					"in a form it cannot give back.") != 0)
			a->status = 500;
	}
	json_decref(data);
}

void gw_answer_code(struct gw_answer *a, int code,
		    const struct carmy_reservation *r)
{
	const char *state = r != NULL ? carmy_state_name(r->state) : NULL;
	const char *id = r != NULL && r->execution_id[0] != '\0' ?
				 r->execution_id : NULL;

	switch (code) {
	case CARMY_ECONFLICT:
		gw_answer_error(a, "IDEMPOTENCY_CONFLICT",
				"This request_id was used for another call "
				"(another tool, arguments or fingerprinted "
				"headers).", id, state);
		break;
	case CARMY_EUNCERTAIN:
		gw_answer_error(a, "EXECUTION_UNCERTAIN",
				r != NULL && r->state == CARMY_STATE_RUNNING ?
				"This call is still running: retry later to "
				"get its result." :
				"This call was interrupted while it ran: its "
				"effect may or may not have happened. "
				"Reconcile before you act on it.", id, state);
		break;
	case CARMY_ECAPACITY:
		gw_answer_error(a, "IDEMPOTENCY_CAPACITY",
				carmy_strerror(code), NULL, NULL);
		break;
	case CARMY_EUNAVAILABLE:
	case CARMY_ETOO_MANY_CLIENTS:
	case CARMY_EDISCONNECTED:
	case CARMY_EUNTRUSTED:
		gw_answer_error(a, "DAEMON_UNAVAILABLE",
				"carmyd cannot be reached; nothing ran.",
				NULL, NULL);
		break;
	case CARMY_EINVALID_ID:
		gw_answer_error(a, "INVALID_ID", carmy_strerror(code), NULL,
				NULL);
		break;
	case CARMY_EINVALID_ARGS:
		gw_answer_error(a, "INVALID_REQUEST",
				"The arguments cannot be fingerprinted (too "
				"deeply nested?).", NULL, NULL);
		break;
	default:
		gw_answer_error(a, "INTERNAL", carmy_strerror(code), NULL,
				NULL);
		break;
	}
}

void gw_answer_free(struct gw_answer *a)
{
	free(a->body);
	a->body = NULL;
	a->len = 0;
}

int gw_append(char **buf, size_t *len, size_t *cap, const void *p, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t c = *cap == 0 ? 256 : *cap;
		char *b;

		while (c < *len + n + 1)
			c *= 2;
		b = realloc(*buf, c);
		if (b == NULL)
			return -1;
		*buf = b;
		*cap = c;
	}
	memcpy(*buf + *len, p, n);
	*len += n;
	(*buf)[*len] = '\0';
	return 0;
}

int gw_random_execution_id(char out[CARMY_EXECUTION_ID_LEN + 1])
{
	uint8_t id[EXECID_LEN];
	size_t got = 0;

	while (got < sizeof(id)) {
		ssize_t n = getrandom(id + got, sizeof(id) - got, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		got += (size_t)n;
	}
	execid_format(out, id);
	return 0;
}
