/*
 * carmy.h - the public interface of libcarmy, Carmy's client library.
 *
 * Carmy makes retried tool calls safe. A call carries an identity
 * (principal, session, request_id). Before the tool runs, carmy_begin()
 * atomically reserves that identity in carmyd's shared-memory table, or says
 * what to do instead:
 *
 *   new identity                          CARMY_RESERVED: run the tool, then
 *                                         carmy_complete() (or carmy_release())
 *   same identity and fingerprint, done   CARMY_REPLAY: the recorded result,
 *                                         the tool must not run again
 *   same identity, other fingerprint      CARMY_ECONFLICT
 *   same identity, running / interrupted  CARMY_EUNCERTAIN
 *   table full                            CARMY_ECAPACITY
 *
 * Conventions: every function returns an int, 0 (or a non-negative outcome)
 * on success and a negative code on failure. Codes are -errno values or the
 * CARMY_E* values below; carmy_errname() and carmy_strerror() turn any code
 * into a stable UPPER_SNAKE name and a sentence.
 */
#ifndef CARMY_H
#define CARMY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Limits of the identity: each part is 1..CARMY_ID_MAX bytes. */
#define CARMY_ID_MAX 256
/* "exec_" followed by 32 lowercase hex digits. */
#define CARMY_EXECUTION_ID_LEN 37

/* Carmy's own codes. They sit in a reserved range below -1000 so that they
 * never collide with -errno values, which pass through unchanged. */
enum carmy_code {
	CARMY_OK = 0,
	CARMY_EINVALID_ID = -1000,     /* INVALID_ID */
	CARMY_ECONFLICT = -1001,       /* IDEMPOTENCY_CONFLICT */
	CARMY_EUNCERTAIN = -1002,      /* EXECUTION_UNCERTAIN */
	CARMY_ECAPACITY = -1003,       /* IDEMPOTENCY_CAPACITY */
	CARMY_EUNAVAILABLE = -1004,    /* DAEMON_UNAVAILABLE */
	CARMY_ERESULT_TOO_LARGE = -1005, /* RESULT_TOO_LARGE */
	CARMY_EINVALID_ARGS = -1006,   /* INVALID_ARGUMENTS */
	CARMY_ENOT_OWNER = -1007,      /* NOT_OWNER */
	CARMY_ENOT_RESERVED = -1008,   /* NOT_RESERVED */
	CARMY_EPROTOCOL = -1009,       /* PROTOCOL_ERROR */
	CARMY_ELAYOUT = -1010,         /* SEGMENT_LAYOUT_MISMATCH */
	CARMY_ECORRUPT = -1011,        /* SEGMENT_CORRUPT */
	CARMY_EDISCONNECTED = -1012,   /* DISCONNECTED */
	CARMY_EINVALID_STATUS = -1013, /* INVALID_STATUS */
	CARMY_ESTORE = -1014,          /* STORE_FAILED */
	CARMY_ENOT_INTERRUPTED = -1015, /* NOT_INTERRUPTED */
	CARMY_EUNTRUSTED = -1016,      /* DAEMON_UNTRUSTED */
	CARMY_ETOO_MANY_CLIENTS = -1017, /* TOO_MANY_CLIENTS */
	CARMY_ENOT_PERMITTED = -1018,  /* NOT_PERMITTED */
};

/* Outcomes of carmy_begin() that are not errors. */
enum carmy_outcome {
	CARMY_RESERVED = 0,	/* the identity is yours: run the tool */
	CARMY_REPLAY = 1,	/* finished before: use the recorded result */
};

/* The recorded status of a finished call. */
enum carmy_status {
	CARMY_STATUS_COMPLETED = 1,
	CARMY_STATUS_FAILED = 2,
	CARMY_STATUS_TIMED_OUT = 3,
	CARMY_STATUS_CANCELLED = 4,
};

/* Where an existing entry stands, reported with CARMY_ECONFLICT and
 * CARMY_EUNCERTAIN so that an agent can reconcile. */
enum carmy_state {
	CARMY_STATE_NONE = 0,
	CARMY_STATE_RUNNING = 1,	/* its owner is still running the tool */
	CARMY_STATE_COMPLETED = 2,	/* a result is recorded */
	CARMY_STATE_INTERRUPTED = 3,	/* its owner died or disconnected */
};

/* A connection to carmyd. Opaque. */
typedef struct carmy carmy_t;

/* One tool call. The identity parts are opaque bytes (1..CARMY_ID_MAX each).
 * args and meta are each one msgpack object, or NULL with length 0; maps in
 * them are fingerprinted in canonical form (key order and integer width do
 * not matter). tool is opaque bytes and may be empty. Nothing here is
 * retained after the call that takes it returns. */
struct carmy_call {
	const void *principal;
	size_t principal_len;
	const void *session;
	size_t session_len;
	const void *request_id;
	size_t request_id_len;
	const void *tool;
	size_t tool_len;
	const void *args;
	size_t args_len;
	const void *meta;
	size_t meta_len;
};

/* What carmy_begin() found. Initialise with CARMY_RESERVATION_INIT (or
 * zero it) before first use; release with carmy_reservation_clear(). */
struct carmy_reservation {
	/* Set for CARMY_RESERVED, CARMY_REPLAY, CARMY_ECONFLICT and
	 * CARMY_EUNCERTAIN: the execution this identity belongs to. */
	char execution_id[CARMY_EXECUTION_ID_LEN + 1];
	/* CARMY_STATE_* of the existing entry (CONFLICT, UNCERTAIN, REPLAY). */
	int state;
	/* For CARMY_REPLAY: the recorded status, the code it was recorded
	 * with (0, or CARMY_ERESULT_TOO_LARGE) and a malloc'd copy of the
	 * result bytes, NUL-terminated for convenience (not counted in
	 * result_len). Owned by the reservation until
	 * carmy_reservation_clear(). */
	int status;
	int result_code;
	void *result;
	size_t result_len;
	/* Private to libcarmy: where the reservation lives. */
	uint32_t priv_entry;
	uint64_t priv_owner;
};

#define CARMY_RESERVATION_INIT { .execution_id = { 0 } }

/*
 * When carmyd restarts (or drops the connection), a handle connects again
 * by itself and asks for its owner id back, so that reservations it holds
 * stay its own: carmyd gives it back during its --grace period (default
 * 10 s), to the same process only. carmy_complete() and carmy_release()
 * keep trying to reach carmyd for this long, in ms ($CARMY_RECONNECT_MS
 * overrides it at connect); carmy_begin() tries once, and fails closed with
 * CARMY_EUNAVAILABLE if no carmyd answers. If the id is not given back, the
 * handle carries on under a new one and what it held reports
 * CARMY_EDISCONNECTED (its entries are uncertain).
 */
#define CARMY_RECONNECT_MS 10000

/*
 * With the memory store, a request to carmyd (a completion, a release)
 * waits for its reply by polling the socket for up to this many
 * microseconds before it sleeps: the reply is usually a few microseconds
 * away, and a sleeping thread's wake-up costs tens of microseconds where an
 * idle CPU halts (virtual machines especially). A durable store's answer
 * waits for a flush, so then it sleeps at once (CARMY_ACK_CHECK_MS).
 * $CARMY_SPIN_US overrides it at connect, 0..10000; 0 never polls.
 * carmyd's --spin-us is the same on its side.
 */
#define CARMY_SPIN_US 50

/*
 * With a durable store, a reservation or completion that succeeds is told
 * in the segment, in a word of the handle's connection where the calling
 * thread sleeps (a futex),
 * not on the socket. A carmyd that died cannot say so there: the waiting
 * thread looks at the socket every this many ms, and when it is closed the
 * call goes on as when carmyd goes away during any request (complete
 * reconnects and sends it again; see carmy_begin and carmy_complete).
 * $CARMY_ACK_CHECK_MS overrides it at connect (0..3600000; 0 counts as 1).
 */
#define CARMY_ACK_CHECK_MS 100

/*
 * Connect to carmyd on socket_path (NULL: $CARMY_SOCKET, else the default
 * path, see carmy_default_socket()) and map its shared segment.
 * On success *out is a new handle, freed by carmy_close().
 * Returns 0, CARMY_EUNAVAILABLE if carmyd cannot be reached,
 * CARMY_ETOO_MANY_CLIENTS if it serves as many connections as it may (its
 * --max-clients; try again later), CARMY_ELAYOUT if
 * carmyd's segment was built with another layout, CARMY_ECORRUPT or
 * CARMY_EPROTOCOL if what carmyd offers is not sane, CARMY_EUNTRUSTED if
 * the carmyd found is not one to trust (see carmy_trust_detail()), or
 * -errno.
 *
 * Before anything is sent, the socket's directory must be a real directory
 * (not a symbolic link) owned by this process's effective uid, root or a
 * user in $CARMY_TRUSTED_USERS, that neither its group nor others can
 * write (and the directories above it owned by those uids, sticky if
 * others can write them, as /tmp is); the process listening on the socket (SO_PEERCRED) must run as one
 * of those uids; and the segment it names must be a regular file owned by
 * that same uid that others cannot write (its group only with carmyd
 * --group, for a group this process is in). $CARMY_TRUSTED_USERS lists
 * user names or uids, separated by commas or spaces, for a carmyd run as
 * another user (carmyd --group); a set-uid program ignores it. The same
 * checks are made whenever a handle connects again. docs/trust.md.
 * A relative socket_path is made absolute here, from the working directory
 * (symbolic links are not resolved): the handle connects again to the same
 * path after the application changes directory; -ENAMETOOLONG if the
 * absolute path does not fit a socket address.
 * Thread-safe (it touches no shared state). A handle belongs to the process
 * that connected it: after fork() the child must connect anew.
 */
int carmy_connect(carmy_t **out, const char *socket_path);

/*
 * Close the connection and unmap the segment. Entries this handle reserved
 * and did not complete or release become uncertain (interrupted): carmyd
 * treats a closed connection as a dead owner. NULL is ignored. Must not race
 * with other calls on the same handle.
 */
void carmy_close(carmy_t *c);

/*
 * Reserve call's identity, or report what to do instead.
 * Returns:
 *   CARMY_RESERVED     r->execution_id is new; run the tool, then call
 *                      carmy_complete() or carmy_release() with r.
 *   CARMY_REPLAY       r holds the recorded status, result and execution_id.
 *   CARMY_ECONFLICT    the identity was used with another fingerprint;
 *                      r->execution_id and r->state describe that entry.
 *   CARMY_EUNCERTAIN   the identity is running (r->state RUNNING) or was
 *                      interrupted (INTERRUPTED); do not run the tool.
 *   CARMY_ECAPACITY    the table is full; nothing was reserved.
 *   CARMY_EINVALID_ID, CARMY_EINVALID_ARGS, CARMY_EDISCONNECTED, -ENOMEM, ...
 * Reserve and replay work directly in shared memory, without a system call
 * (but for one madvise() every 256 reservations, mapping the entries ahead;
 * a replay's result copy is the one malloc). r's previous result, if any,
 * is freed first. Thread-safe: several threads may call carmy_begin() on one
 * handle at once.
 *
 * With a durable store (--store journal:DIR, PostgreSQL) a reservation is
 * answered once carmyd has recorded it, and a call that finds the identity
 * reserved but not yet recorded waits for that (up to 5 s) before it
 * answers, so that the execution id it names is one that stands. With a
 * store shared by several carmyds, a reservation whose answer was lost
 * (carmyd restarted) is asked again of the carmyd that comes back, for up
 * to CARMY_RECONNECT_MS, rather than given up: the store may hold it.
 */
int carmy_begin(carmy_t *c, const struct carmy_call *call,
		struct carmy_reservation *r);

/*
 * Record the result of a reserved call: status is a CARMY_STATUS_* value,
 * result/len the bytes to replay (copied; NULL with len 0 is fine). Returns
 * when carmyd has recorded it.
 * Returns 0; CARMY_ERESULT_TOO_LARGE if len exceeds carmyd's --max-result
 * (the call is then recorded as failed with that code, not dropped);
 * CARMY_EINVALID_STATUS; CARMY_ENOT_RESERVED if r is not a live reservation
 * of this handle; CARMY_EDISCONNECTED if carmyd went away and did not give
 * this handle its reservations back (the entry is then uncertain); or
 * -errno. A completion interrupted by a carmyd restart is sent again once
 * reconnected (see CARMY_RECONNECT_MS); carmyd records it once. Thread-safe
 * (socket use is serialised per handle), but one reservation is one call's:
 * completing r on one thread while another completes or releases the same
 * r is not supported, and what is recorded then is not defined.
 */
int carmy_complete(carmy_t *c, struct carmy_reservation *r, int status,
		   const void *result, size_t len);

/*
 * Give back a reservation whose tool provably did not run: the identity is
 * freed and the next call with it runs. Works in shared memory, then tells
 * carmyd in one round trip, which hands the identity to callers waiting
 * for it (carmy_wait) at once; with --store journal:DIR that round trip
 * also records it. Like carmy_complete(), it waits for carmyd's answer
 * however long that takes. Returns 0,
 * CARMY_ENOT_RESERVED, or CARMY_EDISCONNECTED if carmyd declared this handle
 * dead and did not give its reservations back (the entry is then
 * uncertain). With a durable store, CARMY_ESTORE means the identity was
 * freed on this host but the store could not record it (carmyd did not come
 * back within CARMY_RECONNECT_MS, or its store failed): after a reboot the
 * execution is then uncertain, never run twice. With a store shared by
 * several carmyds (PostgreSQL), the store hears of it first and carmyd frees
 * the entry after: on CARMY_ESTORE or CARMY_EDISCONNECTED the entry is
 * still r's here, while the store may or may not have forgotten it (its
 * answer can be lost, and other carmyds may then run the call). Do not run
 * the tool after asking for its release, whatever the answer: release
 * again, or leave it (it turns uncertain here when the handle closes).
 * Thread-safe.
 */
int carmy_release(carmy_t *c, struct carmy_reservation *r);

/*
 * Like carmy_begin(), but where it would answer CARMY_EUNCERTAIN for a
 * RUNNING execution, wait up to timeout_ms for that execution to stop
 * running, then answer for what it became: CARMY_REPLAY the moment it
 * completes (carmyd tells the waiter; no polling), CARMY_EUNCERTAIN
 * (INTERRUPTED) if its owner died, CARMY_RESERVED if it was released (the
 * tool provably did not run, so this caller runs it). On timeout, the
 * CARMY_EUNCERTAIN (RUNNING) begin would have given. Each wait uses a
 * connection of its own, so other threads on the handle are not held up.
 * With a store shared by several carmyds, only executions running through
 * this carmyd can be waited for: one running on another instance is
 * answered at once, as carmy_begin() would. Thread-safe.
 */
int carmy_wait(carmy_t *c, const struct carmy_call *call,
	       struct carmy_reservation *r, int timeout_ms);

/*
 * Settle an interrupted execution (CARMY_EUNCERTAIN, state INTERRUPTED),
 * after finding out whether its effect happened. call must be the same call
 * (same identity and fingerprint) and execution_id the one reported.
 * committed: it happened; status/result/len are recorded as its result and
 * replayed from now on. Not committed: the identity is freed and the next
 * call with it runs. carmyd records who resolved it (uid, pid) and when.
 * Only carmyd's own user, root, or a member of carmyd's --admin-group may
 * resolve: anyone else gets CARMY_ENOT_PERMITTED, and nothing changes.
 * Returns 0; CARMY_ECONFLICT if the fingerprint differs;
 * CARMY_ENOT_INTERRUPTED if the execution is running, completed, absent or
 * not that one; CARMY_EINVALID_STATUS; CARMY_ERESULT_TOO_LARGE (nothing is
 * recorded); CARMY_EINVALID_ID, CARMY_EINVALID_ARGS; or as carmy_complete().
 * Thread-safe.
 */
int carmy_resolve(carmy_t *c, const struct carmy_call *call,
		  const char *execution_id, int committed, int status,
		  const void *result, size_t len);

/* Free what a reservation owns and reset it. NULL is ignored. */
void carmy_reservation_clear(struct carmy_reservation *r);

/* The --max-result of the carmyd this handle is connected to. */
size_t carmy_max_result(const carmy_t *c);

/*
 * Write the default socket path into buf: $CARMY_SOCKET if set, else
 * $XDG_RUNTIME_DIR/carmy/carmyd.sock, else /tmp/carmy-$UID/carmyd.sock.
 * Returns the length, or -ENAMETOOLONG if it does not fit.
 */
int carmy_default_socket(char *buf, size_t size);

/* Stable UPPER_SNAKE name of any code: Carmy's own ("IDEMPOTENCY_CONFLICT"),
 * or for -errno values the errno name ("ENOMEM"). Outcomes have names too
 * ("OK", "REPLAY"). Never NULL; static storage. */
const char *carmy_errname(int code);

/* One sentence describing any code. Never NULL; static storage. */
const char *carmy_strerror(int code);

/*
 * What was wrong, when a call of this thread last failed with
 * CARMY_EUNTRUSTED (carmy_connect(), or a call that connected again):
 * which path, uid or mode, as one sentence ("the carmyd on PATH runs as
 * uid 1001 ..."). "" if none has, and again once a later connection of
 * this thread (a connect, a reconnect, carmy_wait's) passed the checks:
 * only the last failure is kept. Never NULL; the thread's own storage,
 * rewritten by its next connect.
 */
const char *carmy_trust_detail(void);

/* Lowercase name of a CARMY_STATUS_* ("completed", "timed_out"...) or of a
 * CARMY_STATE_* ("running", "interrupted"...); "unknown" otherwise. */
const char *carmy_status_name(int status);
const char *carmy_state_name(int state);

#ifdef __cplusplus
}
#endif

#endif /* CARMY_H */
