/*
 * errors.c - every code's stable name and sentence, and the status names.
 * The names are part of the interface: scripts match on them. Carmy's own
 * codes have UPPER_SNAKE names; -errno values pass through with their errno
 * names (ENOMEM, ENOENT...) and the C library's sentence.
 */
#include <errno.h>
#include <string.h>

#include "carmy.h"

#define EXPORT __attribute__((visibility("default")))

struct code_text {
	int code;
	const char *name;
	const char *text;
};

static const struct code_text texts[] = {
	{ CARMY_OK, "OK", "Success." },
	{ CARMY_REPLAY, "REPLAY", "The call finished before; its recorded result was replayed." },
	{ CARMY_EINVALID_ID, "INVALID_ID",
	  "Each of principal, session and request_id must be 1 to 256 bytes; nothing was reserved." },
	{ CARMY_ECONFLICT, "IDEMPOTENCY_CONFLICT",
	  "This identity was already used for a different call (another tool, arguments or metadata)." },
	{ CARMY_EUNCERTAIN, "EXECUTION_UNCERTAIN",
	  "This identity is still running or was interrupted; reconcile instead of retrying blindly." },
	{ CARMY_ECAPACITY, "IDEMPOTENCY_CAPACITY",
	  "The idempotency store is full; the call was refused without running. Raise carmyd's --capacity, set a shorter --retain, or run carmyctl purge --older-than AGE." },
	{ CARMY_EUNAVAILABLE, "DAEMON_UNAVAILABLE",
	  "carmyd cannot be reached. A call being begun was not reserved and must not run; a reservation being completed, released or abandoned stays live, to try again." },
	{ CARMY_ERESULT_TOO_LARGE, "RESULT_TOO_LARGE",
	  "The result exceeded carmyd's --max-result and was recorded as failed." },
	{ CARMY_EINVALID_ARGS, "INVALID_ARGUMENTS",
	  "The arguments or metadata are not one valid msgpack object (or a map in them has the same key twice)." },
	{ CARMY_ENOT_OWNER, "NOT_OWNER",
	  "This reservation belongs to another connection." },
	{ CARMY_ENOT_RESERVED, "NOT_RESERVED",
	  "There is no running reservation to complete or release." },
	{ CARMY_EPROTOCOL, "PROTOCOL_ERROR",
	  "A malformed, oversized or unexpected message was received." },
	{ CARMY_ELAYOUT, "SEGMENT_LAYOUT_MISMATCH",
	  "carmyd's shared segment has another layout (a different build of Carmy)." },
	{ CARMY_ECORRUPT, "SEGMENT_CORRUPT",
	  "The shared segment failed its sanity check." },
	{ CARMY_EDISCONNECTED, "DISCONNECTED",
	  "The connection to carmyd was lost; reservations held on it are now uncertain." },
	{ CARMY_EINVALID_STATUS, "INVALID_STATUS",
	  "The status must be completed, failed, timed_out or cancelled." },
	{ CARMY_ESTORE, "STORE_FAILED",
	  "carmyd's durable store could not record this; nothing was reserved or recorded." },
	{ CARMY_ENOT_INTERRUPTED, "NOT_INTERRUPTED",
	  "Only an interrupted execution can be resolved: this one is running, completed, absent or another execution." },
	{ CARMY_EUNTRUSTED, "DAEMON_UNTRUSTED",
	  "The carmyd found, its socket's directory or its segment belongs to a user this process does not trust, or others can write them; nothing was reserved and the tool must not run." },
	{ CARMY_ETOO_MANY_CLIENTS, "TOO_MANY_CLIENTS",
	  "carmyd serves as many connections as its --max-clients (or its descriptor limit) allows; nothing was reserved: try again later." },
	{ CARMY_ENOT_PERMITTED, "NOT_PERMITTED",
	  "Only carmyd's own user, root or a member of its --admin-group may resolve, release, purge or forget entries; nothing was changed." },
	{ CARMY_EFORKED, "FORKED",
	  "This handle was connected by another process, whose forked child this is; nothing was reserved, sent or changed: connect a handle of this process's own." },
	{ CARMY_EINVALID_RESULT, "INVALID_RESULT",
	  "The result is not in the format the execution's client reads (see carmyctl show); nothing was changed." },
};

static const struct code_text *find(int code)
{
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		if (texts[i].code == code)
			return &texts[i];
	return NULL;
}

EXPORT const char *carmy_errname(int code)
{
	const struct code_text *t = find(code);

	if (t != NULL)
		return t->name;
	/* -errno values keep their own names: "ENOENT", "ECONNRESET"... */
	if (code < 0 && code > -4096) {
		const char *name = strerrorname_np(-code);

		return name != NULL ? name : "SYSTEM_ERROR";
	}
	return "UNKNOWN_ERROR";
}

EXPORT const char *carmy_strerror(int code)
{
	const struct code_text *t = find(code);

	if (t != NULL)
		return t->text;
	if (code < 0 && code > -4096)
		return strerror(-code);	/* static strings in glibc for valid errno */
	return "Unknown error code.";
}

EXPORT const char *carmy_status_name(int status)
{
	switch (status) {
	case CARMY_STATUS_COMPLETED: return "completed";
	case CARMY_STATUS_FAILED: return "failed";
	case CARMY_STATUS_TIMED_OUT: return "timed_out";
	case CARMY_STATUS_CANCELLED: return "cancelled";
	default: return "unknown";
	}
}

EXPORT const char *carmy_state_name(int state)
{
	switch (state) {
	case CARMY_STATE_RUNNING: return "running";
	case CARMY_STATE_COMPLETED: return "completed";
	case CARMY_STATE_INTERRUPTED: return "interrupted";
	default: return "none";
	}
}
