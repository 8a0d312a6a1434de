/*
 * execute.c - POST /agent/execute.
 *
 * The body {"tool", "arguments", "request_id"} is read with jansson and
 * checked whole before anything is reserved: a request refused here
 * reserves nothing. The identity is (principal, session, request_id): the
 * principal from authentication (http.c), never from the body; the
 * session from Carmy-Session ("default"); the request_id from the body or
 * the Idempotency-Key header. The fingerprint is the tool name, the
 * arguments converted to msgpack (libcarmy canonicalises maps, so key
 * order and whitespace do not matter, and pack() writes each number in
 * one form, so 1, 1.0 and 1e0 are one) and, as metadata, the values of
 * the headers the tool lists in fingerprint_headers. A header value is
 * taken without its leading and trailing blanks (RFC 9110 5.5), so "sp"
 * and "sp " are one session.
 *
 * carmy_try_begin() runs here, on libmicrohttpd's polling thread: it
 * answers what shared memory answers (a replay, a conflict, an uncertain
 * call, and with the memory store a new reservation) and never waits for
 * carmyd. A call that needs carmyd's answer (a durable store records each
 * reservation; a handle whose carmyd restarted connects again; the first
 * connect) begins on a thread of its own with carmy_begin(), while its
 * connection is suspended, so a carmyd that is slow or never answers holds
 * that thread only. A reserved call's tool runs on such a thread too
 * (exec_thread), so that a slow tool never holds up the serving of other
 * requests. So does the wait of a call sent with "Prefer: wait=N"
 * (RFC 7240) whose identity is running: carmy_wait() then answers its
 * replay as soon as it completes.
 *
 * Each of those threads holds one of --max-running slots, taken on the
 * polling thread before anything can be reserved for the call: a call
 * that finds every slot taken is answered 503 OVERLOADED with nothing
 * reserved (its retry is a new call), and a call that was reserved always
 * has its thread. With a memory store carmy_try_begin() may reserve, so
 * the slot is taken before it (and given back when the begin answers in
 * place: a replay, a conflict); a full gateway then refuses replays too.
 * With a durable store carmy_try_begin() never reserves (it answers
 * -EAGAIN where a record is needed), so the slot is taken only once the
 * begin has answered that it needs a thread, and replays are served
 * whatever the load. (carmy_durable() is read before the begin: if carmyd
 * came back meanwhile with a memory store and the begin reserved, that
 * call takes a slot over the limit, rather than leave its identity
 * reserved and never run.) Unauthenticated and invalid requests are
 * answered before any slot is looked at.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <msgpack.h>

#include "common/clock.h"
#include "common/log.h"
#include "gateway/gateway.h"

void gw_call_free(struct gw_call *c)
{
	json_decref(c->args);
	c->args = NULL;
	free(c->args_json);
	free(c->args_mp);
	free(c->meta_mp);
	c->args_json = c->args_mp = c->meta_mp = NULL;
}

/* ------------------------------------------------------------ msgpack */

static int pack_str(msgpack_packer *pk, const char *s, size_t len)
{
	return msgpack_pack_str(pk, len) != 0 ||
	       msgpack_pack_str_body(pk, s, len) != 0 ? -ENOMEM : 0;
}

/*
 * A JSON real, in the one form its value has in a fingerprint: a whole
 * number within int64's range is packed as that integer (1.0, 1e0 and
 * -0.0 as 1, 1 and 0, as the literals 1 and 0 are), any other as a
 * double. 2^63 is the first double past INT64_MAX; -2^63 is INT64_MIN.
 * jansson reads no NaN or infinity.
 */
static int pack_real(msgpack_packer *pk, double d)
{
	if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 &&
	    d == (double)(int64_t)d)
		return msgpack_pack_int64(pk, (int64_t)d);
	return msgpack_pack_double(pk, d);
}

/* v as msgpack; -E2BIG if it nests deeper than GW_ARGS_DEPTH_MAX. */
static int pack(msgpack_packer *pk, json_t *v, int depth)
{
	const char *key;
	json_t *e;
	size_t i;
	int rc = 0;

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		if (depth >= GW_ARGS_DEPTH_MAX)
			return -E2BIG;
		if (msgpack_pack_map(pk, json_object_size(v)) != 0)
			return -ENOMEM;
		json_object_foreach(v, key, e) {
			rc = pack_str(pk, key, strlen(key));
			if (rc == 0)
				rc = pack(pk, e, depth + 1);
			if (rc != 0)
				return rc;
		}
		return 0;
	case JSON_ARRAY:
		if (depth >= GW_ARGS_DEPTH_MAX)
			return -E2BIG;
		if (msgpack_pack_array(pk, json_array_size(v)) != 0)
			return -ENOMEM;
		json_array_foreach(v, i, e) {
			rc = pack(pk, e, depth + 1);
			if (rc != 0)
				return rc;
		}
		return 0;
	case JSON_STRING:
		return pack_str(pk, json_string_value(v),
				json_string_length(v));
	case JSON_INTEGER:
		rc = msgpack_pack_int64(pk, json_integer_value(v));
		break;
	case JSON_REAL:
		rc = pack_real(pk, json_real_value(v));
		break;
	case JSON_TRUE:
		rc = msgpack_pack_true(pk);
		break;
	case JSON_FALSE:
		rc = msgpack_pack_false(pk);
		break;
	case JSON_NULL:
		rc = msgpack_pack_nil(pk);
		break;
	}
	return rc != 0 ? -ENOMEM : 0;
}

/* Where msgpack is written: a buffer grown by gw_append() (msgpack's own
 * sbuffer takes 8 KiB at once, out of malloc's per-thread cache). */
struct out {
	char *buf;
	size_t len, cap;
};

static int out_write(void *data, const char *p, size_t n)
{
	struct out *o = data;

	return gw_append(&o->buf, &o->len, &o->cap, p, n);
}

static int pack_args(json_t *args, struct gw_call *c)
{
	struct out o = { NULL, 0, 0 };
	msgpack_packer pk;
	int rc;

	msgpack_packer_init(&pk, &o, out_write);
	rc = pack(&pk, args, 0);
	if (rc == 0) {
		c->args_mp = o.buf;
		c->args_mp_len = o.len;
	} else {
		free(o.buf);
	}
	return rc;
}

/*
 * The tool's fingerprint headers, a map of name to value (nil: absent).
 * -EEXIST, with *twice the header's name, if the request gives one of
 * them more than once: which value would count is anyone's guess, and
 * the first alone would make "a" then "b" replay a call made with "a".
 */
static int pack_meta(const struct gw_request *rq, struct gw_call *c,
		     const char **twice)
{
	const struct gw_tool *t = c->tool;
	struct out o = { NULL, 0, 0 };
	msgpack_packer pk;
	int rc = 0;

	if (t->n_fp_headers == 0)
		return 0;
	msgpack_packer_init(&pk, &o, out_write);
	if (msgpack_pack_map(&pk, t->n_fp_headers) != 0)
		rc = -ENOMEM;
	for (size_t i = 0; rc == 0 && i < t->n_fp_headers; i++) {
		unsigned n = 0;
		const char *v = rq->header(rq->hcls, t->fp_headers[i], &n);

		if (n > 1) {
			*twice = t->fp_headers[i];
			rc = -EEXIST;
			break;
		}
		rc = pack_str(&pk, t->fp_headers[i], strlen(t->fp_headers[i]));
		if (rc == 0 && v == NULL && msgpack_pack_nil(&pk) != 0) {
			rc = -ENOMEM;
		} else if (rc == 0 && v != NULL) {
			size_t len;

			v = gw_field_trim(v, &len);
			rc = pack_str(&pk, v, len);
		}
	}
	if (rc == 0) {
		c->meta_mp = o.buf;
		c->meta_mp_len = o.len;
	} else {
		free(o.buf);
	}
	return rc;
}

/* ------------------------------------------------------------ checks */

/* An identity part into dst: 1..CARMY_ID_MAX bytes. */
static bool id_set(char *dst, size_t *dst_len, const char *s, size_t len)
{
	if (len == 0 || len > CARMY_ID_MAX)
		return false;
	memcpy(dst, s, len);
	dst[len] = '\0';
	*dst_len = len;
	return true;
}

const char *gw_field_trim(const char *v, size_t *len)
{
	size_t n = strlen(v);

	while (n > 0 && (*v == ' ' || *v == '\t')) {
		v++;
		n--;
	}
	while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
		n--;
	*len = n;
	return v;
}

/*
 * The Idempotency-Key header's value (trimmed, n bytes): the IETF draft
 * makes it a structured-field string ("\"abc\""); a bare value is taken
 * as it is. NULL if the quoted form holds an escape (not supported).
 */
static const char *unquote(const char *v, size_t n, size_t *len)
{
	if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
		if (memchr(v + 1, '"', n - 2) != NULL ||
		    memchr(v + 1, '\\', n - 2) != NULL)
			return NULL;
		*len = n - 2;
		return v + 1;
	}
	*len = n;
	return v;
}

/* The identity: 0, or -1 with *a filled. */
static int identity(const struct gw_request *rq, json_t *rid,
		    struct gw_call *c, struct gw_answer *a)
{
	const char *session = rq->session;
	const char *key = rq->key;
	const char *body_rid = json_string_value(rid);
	size_t slen, klen = 0;

	if (!id_set(c->principal, &c->principal_len, rq->principal,
		    strlen(rq->principal))) {
		gw_answer_error(a, "INVALID_ID", "The principal is empty or "
				"longer than 256 bytes.", NULL, NULL);
		return -1;
	}
	if (session == NULL)
		session = "default";
	session = gw_field_trim(session, &slen);
	if (!id_set(c->session, &c->session_len, session, slen)) {
		gw_answer_error(a, "INVALID_ID", "The Carmy-Session header "
				"must be 1 to 256 bytes.", NULL, NULL);
		return -1;
	}
	if (key != NULL) {
		key = gw_field_trim(key, &klen);
		key = unquote(key, klen, &klen);
	}
	if (rq->key != NULL && key == NULL) {
		gw_answer_error(a, "INVALID_ID", "The Idempotency-Key header "
				"is a quoted string with an escape in it.",
				NULL, NULL);
		return -1;
	}
	if (body_rid != NULL && key != NULL &&
	    (json_string_length(rid) != klen ||
	     memcmp(body_rid, key, klen) != 0)) {
		gw_answer_error(a, "INVALID_REQUEST", "The request_id and the "
				"Idempotency-Key header differ.", NULL, NULL);
		return -1;
	}
	if (body_rid == NULL && key == NULL)
		return 0;
	/* The body's is taken as it is (JSON says exactly what it is), but
	 * blanks alone are empty, as in the header. */
	if (body_rid != NULL && json_string_length(rid) > 0 &&
	    strspn(body_rid, " \t") == json_string_length(rid)) {
		gw_answer_error(a, "INVALID_ID", "The request_id is blanks "
				"alone, which is empty.", NULL, NULL);
		return -1;
	}
	if (body_rid != NULL ?
	    !id_set(c->request_id, &c->request_id_len, body_rid,
		    json_string_length(rid)) :
	    !id_set(c->request_id, &c->request_id_len, key, klen)) {
		gw_answer_error(a, "INVALID_ID", "The request_id must be 1 to "
				"256 bytes.", NULL, NULL);
		return -1;
	}
	return 0;
}

/* The body's one object and its fields: 0, or -1 with *a filled. */
static int fields(json_t *root, json_t **tool, json_t **args, json_t **rid,
		  struct gw_answer *a)
{
	const char *key;
	char msg[160];
	json_t *v;

	if (!json_is_object(root)) {
		gw_answer_error(a, "INVALID_REQUEST", "The body must be one "
				"JSON object.", NULL, NULL);
		return -1;
	}
	json_object_foreach(root, key, v) {
		if (strcmp(key, "tool") != 0 && strcmp(key, "arguments") != 0 &&
		    strcmp(key, "request_id") != 0) {
			snprintf(msg, sizeof(msg), "Unknown field \"%.64s\": "
				 "the body has tool, arguments and "
				 "request_id.", key);
			gw_answer_error(a, "INVALID_REQUEST", msg, NULL, NULL);
			return -1;
		}
	}
	*tool = json_object_get(root, "tool");
	*args = json_object_get(root, "arguments");
	*rid = json_object_get(root, "request_id");
	if (!json_is_string(*tool)) {
		gw_answer_error(a, "INVALID_REQUEST", "\"tool\" must be a "
				"string.", NULL, NULL);
		return -1;
	}
	if (*args != NULL && !json_is_object(*args)) {
		gw_answer_error(a, "INVALID_REQUEST", "\"arguments\" must be "
				"an object.", NULL, NULL);
		return -1;
	}
	if (*rid != NULL && !json_is_string(*rid)) {
		gw_answer_error(a, "INVALID_REQUEST", "\"request_id\" must be "
				"a string.", NULL, NULL);
		return -1;
	}
	return 0;
}

/* The call of a request, checked: 0, or -1 with *a filled. */
static int build(const struct gw_request *rq, struct gw_call *c,
		 struct gw_answer *a)
{
	json_t *root, *tool, *args, *rid, *empty = NULL;
	const char *twice = NULL;
	json_error_t je;
	char msg[512];
	int rc = -1;

	/* Strict: one value and nothing after it, UTF-8 only, no \u0000,
	 * no key twice (which of two would count is anyone's guess). */
	root = json_loadb(rq->body, rq->len, JSON_REJECT_DUPLICATES, &je);
	if (root == NULL) {
		snprintf(msg, sizeof(msg), "The body is not one JSON object: "
			 "%s (line %d, column %d).", je.text, je.line,
			 je.column);
		gw_answer_error(a, "INVALID_REQUEST", msg, NULL, NULL);
		return -1;
	}
	if (fields(root, &tool, &args, &rid, a) != 0 ||
	    identity(rq, rid, c, a) != 0)
		goto out;
	c->tool = gw_tool_find(&rq->gw->tools, json_string_value(tool),
			       json_string_length(tool));
	if (c->tool == NULL) {
		snprintf(msg, sizeof(msg), "There is no tool \"%.128s\" "
			 "(GET /agent/tools lists them).",
			 json_string_value(tool));
		gw_answer_error(a, "TOOL_NOT_FOUND", msg, NULL, NULL);
		goto out;
	}
	if (args == NULL)
		args = empty = json_object();
	switch (args != NULL ? pack_args(args, c) : -ENOMEM) {
	case 0:
		break;
	case -E2BIG:
		snprintf(msg, sizeof(msg), "\"arguments\" nest deeper than "
			 "%d levels.", GW_ARGS_DEPTH_MAX);
		gw_answer_error(a, "INVALID_REQUEST", msg, NULL, NULL);
		goto out;
	default:
		gw_answer_error(a, "INTERNAL", "Out of memory.", NULL, NULL);
		goto out;
	}
	/* Kept for the tool's standard input (or its upstream's body),
	 * written out only if it runs (args_json()). */
	c->args = json_incref(args);
	switch (pack_meta(rq, c, &twice)) {
	case 0:
		break;
	case -EEXIST:
		snprintf(msg, sizeof(msg), "A header that names the call (%s, "
			 "a fingerprint header of tool %s) is given twice.",
			 twice, c->tool->name);
		gw_answer_error(a, "INVALID_REQUEST", msg, NULL, NULL);
		goto out;
	default:
		gw_answer_error(a, "INTERNAL", "Out of memory.", NULL, NULL);
		goto out;
	}
	rc = 0;
out:
	json_decref(empty);
	json_decref(root);
	if (rc != 0)
		gw_call_free(c);
	return rc;
}

/* Every slot is taken: nothing was reserved for this call. */
static void overloaded(struct gateway *gw, struct gw_answer *a)
{
	uint64_t n = __atomic_add_fetch(&gw->stats.overloaded, 1,
					__ATOMIC_RELAXED);

	/* Logged at the 1st, 2nd, 4th, 8th... refusal: a flood of them
	 * does not flood the log. */
	if ((n & (n - 1)) == 0)
		log_warn("all %u --max-running slots are taken: 503 "
			 "OVERLOADED (%llu refused so far)", gw->max_running,
			 (unsigned long long)n);
	gw_answer_error(a, "OVERLOADED", "The gateway runs as many calls as "
			"its --max-running allows; nothing was reserved for "
			"this one: send it again after Retry-After.", NULL,
			NULL);
}

static void exec_free(struct gw_exec *x)
{
	gw_handle_put(&x->gw->carmyd, x->h);
	gw_handle_put(&x->gw->carmyd, x->waiter);
	carmy_reservation_clear(&x->r);
	gw_call_free(&x->call);
	free(x->owed);
	free(x);
}

static struct carmy_call call_of(const struct gw_call *c)
{
	return (struct carmy_call){
		.principal = c->principal, .principal_len = c->principal_len,
		.session = c->session, .session_len = c->session_len,
		.request_id = c->request_id,
		.request_id_len = c->request_id_len,
		.tool = c->tool->name, .tool_len = strlen(c->tool->name),
		.args = c->args_mp, .args_len = c->args_mp_len,
		.meta = c->meta_mp, .meta_len = c->meta_mp_len,
	};
}

/* Prefer: wait: wait for the running execution, then answer for what it
 * became. Returns true when the identity came free and the tool is ours
 * to run. */
static bool wait_running(struct gw_exec *x)
{
	struct carmy_call cc = call_of(&x->call);
	int rc;

	log_info("waiting up to %d ms for execution %s (Prefer: wait)",
		 x->wait_ms, x->r.execution_id);
	rc = carmy_wait(x->waiter->c, &cc, &x->r, x->wait_ms);
	if (rc == CARMY_RESERVED) {
		x->h = x->waiter;
		x->waiter = NULL;
		memcpy(x->execution_id, x->r.execution_id,
		       sizeof(x->execution_id));
		return true;
	}
	if (rc == CARMY_REPLAY)
		gw_answer_replay(x->answer, &x->r);
	else
		gw_answer_code(x->answer, rc, &x->r);
	if (rc == CARMY_EDISCONNECTED)
		gw_handle_retire(&x->gw->carmyd, x->waiter);
	return false;
}

/* The arguments as one line of JSON, for the tool: 0, or -ENOMEM. */
static int args_json(struct gw_call *c)
{
	if (c->args_json == NULL)
		c->args_json = gw_json_line(c->args, &c->args_json_len);
	return c->args_json != NULL ? 0 : -ENOMEM;
}

/* Whether a begin's answer rc leaves a thread something to do: run the
 * tool (reserved), or wait for the running execution (Prefer: wait). */
static bool to_run(int rc, const struct carmy_reservation *r, int wait_ms)
{
	return rc == CARMY_RESERVED ||
	       (rc == CARMY_EUNCERTAIN && r->state == CARMY_STATE_RUNNING &&
		wait_ms > 0);
}

/* x's thread is to run (to_run()), holding h. */
static void hold(struct gw_exec *x, struct gw_handle *h, int rc)
{
	if (rc == CARMY_RESERVED) {
		x->h = h;
		memcpy(x->execution_id, x->r.execution_id,
		       sizeof(x->execution_id));
	} else {
		x->waiter = h;
	}
}

/* Answer a begin that leaves nothing to run (a replay, a conflict, an
 * error), and let h go. */
static void answer_begun(struct gateway *gw, struct gw_answer *a,
			 struct gw_handle *h, int rc,
			 struct carmy_reservation *r)
{
	if (rc == CARMY_REPLAY)
		gw_answer_replay(a, r);
	else
		gw_answer_code(a, rc, r);
	if (rc == CARMY_EDISCONNECTED)
		gw_handle_retire(&gw->carmyd, h);
	gw_handle_put(&gw->carmyd, h);
}

/* The begin that waits for carmyd (connecting, a durable store's
 * record), on x's thread: true when x is to run (to_run()), else false
 * with x->answer filled. */
static bool begin_waiting(struct gw_exec *x)
{
	struct carmy_call cc = call_of(&x->call);
	struct gw_handle *h;
	int rc;

	h = gw_handle_get(&x->gw->carmyd, true, &rc);
	if (h == NULL) {
		gw_answer_code(x->answer, rc, NULL);
		return false;
	}
	rc = carmy_begin(h->c, &cc, &x->r);
	if (!to_run(rc, &x->r, x->wait_ms)) {
		answer_begun(x->gw, x->answer, h, rc, &x->r);
		return false;
	}
	hold(x, h, rc);
	return true;
}

static void *exec_thread(void *p)
{
	struct gw_exec *x = p;
	struct gateway *gw = x->gw;
	void (*done)(void *) = x->done;
	void *arg = x->arg;
	bool run = true;

	if (x->begin_here)
		run = begin_waiting(x);
	if (run && x->waiter != NULL)
		run = wait_running(x);	/* else answered: replayed, or
					 * still not ours */
	if (run && args_json(&x->call) != 0) {
		gw_exec_not_started(x, "out of memory");
		run = false;
	}
	if (run && x->call.tool->url != NULL)
		gw_url_run(x);
	else if (run)
		gw_command_run(x);
	if (x->owed == NULL) {
		exec_free(x);
		/* Free before the answer goes: its client's next call finds
		 * it. */
		gw_slot_put(gw);
		done(arg);
	} else {
		/* Its result is not recorded yet: the call is answered so,
		 * and this thread, with the call's slot and handle, goes
		 * on recording it. */
		x->answer = NULL;	/* the request's, gone once answered */
		done(arg);
		gw_exec_record_owed(x);
		exec_free(x);
		gw_slot_put(gw);
	}
	gw_running_add(gw, -1, true);
	return NULL;
}

void gw_exec_start(struct gw_exec *x)
{
	struct gateway *gw = x->gw;
	void (*done)(void *) = x->done;
	void *arg = x->arg;
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	gw_running_add(gw, 1, true);
	rc = pthread_attr_init(&attr);
	if (rc == 0) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		rc = pthread_create(&t, &attr, exec_thread, x);
		pthread_attr_destroy(&attr);
	}
	if (rc == 0)
		return;
	log_error("cannot start a thread for tool %s: %s", x->call.tool->name,
		  strerror(rc));
	/* Nothing ran: give the identity back. */
	if (x->h != NULL && carmy_release(x->h->c, &x->r) != 0)
		gw_answer_error(x->answer, "INTERNAL", "The tool could not be "
				"started, and its reservation could not be "
				"released.", x->execution_id, "running");
	else
		gw_answer_error(x->answer, "TOOL_NOT_STARTED", "The gateway "
				"could not start the tool; nothing ran.", NULL,
				NULL);
	exec_free(x);
	gw_slot_put(gw);
	done(arg);
	gw_running_add(gw, -1, true);
}

/*
 * The "wait" preference of a Prefer header (RFC 7240), in ms: 0 without
 * one. Preferences are separated by commas, their parameters by
 * semicolons; one that cannot be read is ignored, as the RFC allows.
 */
static int prefer_wait_ms(const char *v)
{
	while (v != NULL && *v != '\0') {
		unsigned long s = 0;
		size_t digits = 0;

		v += strspn(v, " \t,");
		if (strncasecmp(v, "wait", 4) == 0) {
			const char *p = v + 4 + strspn(v + 4, " \t");

			if (*p == '=') {
				p += 1 + strspn(p + 1, " \t\"");
				for (; *p >= '0' && *p <= '9' && digits < 9;
				     p++, digits++)
					s = s * 10 + (unsigned long)(*p - '0');
				p += strspn(p, " \t\"");
				if (digits > 0 && (*p == '\0' || *p == ',' ||
						   *p == ';'))
					return (int)(s > GW_WAIT_MAX_S ?
						     GW_WAIT_MAX_S : s) * 1000;
			}
		}
		v = strchr(v, ',');
	}
	return 0;
}

/* x, or NULL with *a filled (out of memory). */
static struct gw_exec *exec_new(const struct gw_request *rq,
				struct gw_call *c, struct gw_answer *a,
				void (*done)(void *), void *arg)
{
	struct gw_exec *x = calloc(1, sizeof(*x));

	if (x == NULL) {
		gw_call_free(c);
		gw_answer_error(a, "INTERNAL", "Out of memory.", NULL, NULL);
		return NULL;
	}
	x->gw = rq->gw;
	x->call = *c;
	x->answer = a;
	x->done = done;
	x->arg = arg;
	return x;
}

/* A call without a request_id: run on a thread (1, *xp), without a
 * reservation; or 0 with *a filled. */
static int unreserved(const struct gw_request *rq, struct gw_call *c,
		      struct gw_answer *a, void (*done)(void *), void *arg,
		      struct gw_exec **xp)
{
	struct gw_exec *x;
	char who[96];

	if (!gw_slot_take(rq->gw, false)) {
		gw_call_free(c);
		overloaded(rq->gw, a);
		return 0;
	}
	log_info("tool %s for %s: no request_id, so it runs without a "
		 "reservation (a retry runs it again)", c->tool->name,
		 log_bytes(who, sizeof(who), c->principal, c->principal_len));
	x = exec_new(rq, c, a, done, arg);
	if (x != NULL && gw_random_execution_id(x->execution_id) != 0) {
		exec_free(x);
		x = NULL;
		gw_answer_error(a, "INTERNAL", "No random bytes for an "
				"execution id.", NULL, NULL);
	}
	if (x == NULL) {
		gw_slot_put(rq->gw);
		return 0;
	}
	*xp = x;
	return 1;
}

int gw_execute(const struct gw_request *rq, struct gw_answer *a,
	       void (*done)(void *arg), void *arg, struct gw_exec **xp)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct gateway *gw = rq->gw;
	struct gw_call c = { 0 };
	struct carmy_call cc;
	struct gw_handle *h;
	struct gw_exec *x;
	int rc, wait_ms;
	bool slot;

	*xp = NULL;
	if (rq->principal == NULL) {
		gw_answer_error(a, "UNAUTHENTICATED", "Send Authorization: "
				"Bearer TOKEN with a token of the gateway's "
				"--tokens file.", NULL, NULL);
		return 0;
	}
	if (build(rq, &c, a) != 0)
		return 0;
	if (c.request_id_len == 0)
		return unreserved(rq, &c, a, done, arg, xp);
	/* Only what shared memory answers is answered here, on the polling
	 * thread, and with no allocation beyond the answer's: a call that
	 * must wait for carmyd begins on a thread of its own. */
	h = gw_handle_get(&gw->carmyd, false, &rc);
	if (h == NULL && rc != -EAGAIN) {
		gw_call_free(&c);
		gw_answer_code(a, rc, NULL);
		return 0;
	}
	/* A begin that may reserve takes its slot first (see above). */
	slot = h == NULL || carmy_durable(h->c) != 1;
	if (slot && !gw_slot_take(gw, false)) {
		gw_handle_put(&gw->carmyd, h);
		gw_call_free(&c);
		overloaded(gw, a);
		return 0;
	}
	wait_ms = prefer_wait_ms(rq->prefer);
	cc = call_of(&c);
	rc = h != NULL ? carmy_try_begin(h->c, &cc, &r) : -EAGAIN;
	if (rc != -EAGAIN && !to_run(rc, &r, wait_ms)) {
		answer_begun(gw, a, h, rc, &r);
		carmy_reservation_clear(&r);
		gw_call_free(&c);
		if (slot)
			gw_slot_put(gw);
		return 0;
	}
	if (!slot && !gw_slot_take(gw, rc == CARMY_RESERVED)) {
		/* Nothing was reserved (a durable store's try never does). */
		gw_handle_put(&gw->carmyd, h);
		carmy_reservation_clear(&r);
		gw_call_free(&c);
		overloaded(gw, a);
		return 0;
	}
	x = exec_new(rq, &c, a, done, arg);
	if (x == NULL) {
		/* Out of memory: what was reserved is given back. */
		if (rc == CARMY_RESERVED && carmy_release(h->c, &r) != 0)
			log_error("a reservation could not be released: it "
				  "turns uncertain when the gateway stops");
		carmy_reservation_clear(&r);
		gw_handle_put(&gw->carmyd, h);
		gw_slot_put(gw);
		return 0;
	}
	x->r = r;
	x->wait_ms = wait_ms;
	if (rc == -EAGAIN) {
		char id[96];

		log_debug("request_id %s: its begin waits for carmyd, on a "
			  "thread of its own", log_bytes(id, sizeof(id),
			  x->call.request_id, x->call.request_id_len));
		gw_handle_put(&gw->carmyd, h);
		x->begin_here = true;
	} else {
		hold(x, h, rc);
	}
	*xp = x;
	return 1;
}
