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

/*
 * The version of this header. configure.ac's AC_INIT carries the same
 * number (configure stops if they differ); carmy_version() gives the
 * library's, which may be newer than the header a program was built with.
 * The shared library's soname (libcarmy.so.N) changes only when its ABI
 * breaks, not with this number: see libclient/local.mk.
 */
#define CARMY_VERSION_MAJOR 0
#define CARMY_VERSION_MINOR 9
#define CARMY_VERSION_PATCH 0
#define CARMY_VERSION_STRING "0.9.0"

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
	CARMY_EFORKED = -1019,         /* FORKED */
	CARMY_EINVALID_RESULT = -1020, /* INVALID_RESULT */
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

/*
 * The format a handle's results are recorded in (carmy_set_result_format()),
 * kept with each entry so that an operator's resolve gives a result its
 * client can read: carmyd refuses one it could not (CARMY_EINVALID_RESULT).
 */
enum carmy_result_format {
	CARMY_FORMAT_BYTES = 0,		/* opaque bytes: any result */
	CARMY_FORMAT_EXIT_OUTPUT = 1,	/* carmy-run's: a process's exit code
					 * (0..255) as 4 bytes, big-endian,
					 * then its standard output */
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
	/* For the library: where a live reservation is, and whose. Do not
	 * read or write them; CARMY_RESERVATION_INIT and
	 * carmy_reservation_clear() zero them. */
	uint64_t reserved[2];
};

/* Zero, in C and in C++ alike, without a warning in either. */
#ifdef __cplusplus
#define CARMY_RESERVATION_INIT {}
#else
#define CARMY_RESERVATION_INIT { .execution_id = { 0 } }
#endif

/*
 * When carmyd restarts (or drops the connection), a handle connects again
 * by itself and asks for its owner id back, so that reservations it holds
 * stay its own: a restarted carmyd holds it for this process while the
 * process runs, for its --grace at most (default 600 s), and gives it back
 * to this process only. carmy_complete(), carmy_release() and
 * carmy_abandon() keep trying to reach carmyd for this long, in ms
 * ($CARMY_RECONNECT_MS overrides it at connect), then answer
 * CARMY_EUNAVAILABLE with the reservation still live (ask again);
 * carmy_begin() tries once, and fails closed with CARMY_EUNAVAILABLE if no
 * carmyd answers. If the id is not given back, the handle carries on under
 * a new one and what it held reports CARMY_EDISCONNECTED (its entries are
 * uncertain).
 */
#define CARMY_RECONNECT_MS 10000

/*
 * With the memory store, a request to carmyd (a completion, a release)
 * waits for its answer by polling for up to this many microseconds (a
 * completion's in its ack word in the segment, a release's on the
 * socket) before it sleeps: the reply is usually a few microseconds
 * away, and a sleeping thread's wake-up costs tens of microseconds where an
 * idle CPU halts (virtual machines especially). A durable store's answer
 * waits for a flush, so then it sleeps at once (CARMY_ACK_CHECK_MS).
 * $CARMY_SPIN_US overrides it at connect, 0..10000; 0 never polls.
 * carmyd's --spin-us is the same on its side.
 */
#define CARMY_SPIN_US 50

/*
 * A completion that succeeds (and with a durable store, a reservation) is
 * told in the segment, in a word of the handle's connection where the
 * calling thread sleeps (a futex) after any CARMY_SPIN_US, not on the
 * socket. A carmyd that died cannot say so there: the waiting
 * thread looks at the socket every this many ms, and when it is closed the
 * call goes on as when carmyd goes away during any request (complete
 * reconnects and sends it again; see carmy_begin and carmy_complete).
 * $CARMY_ACK_CHECK_MS overrides it at connect (0..3600000; 0 counts as 1).
 */
#define CARMY_ACK_CHECK_MS 100

/*
 * Every function below is documented in the same five parts:
 *   what it does;
 *   Parameters: each one, and whether it may be NULL;
 *   Returns:    the value on success and every code it can fail with
 *               ("-errno" stands for a system call's error passed through);
 *   Ownership:  who frees what, and how long returned pointers live;
 *   Threads:    what may run at the same time.
 * A call that fails reserves, records and frees nothing unless its
 * description says otherwise.
 *
 * A handle belongs to the process that connected it. In a child of fork()
 * its copy answers every call with CARMY_EFORKED before it reads or
 * writes anything (the segment, the socket): a reservation made through
 * it would be the parent's, left running when the child dies. The child
 * connects a handle of its own (see carmy_connect()).
 */

/*
 * carmy_version - the version of the libcarmy that is running.
 *
 * The library's own version, which may be newer than the CARMY_VERSION_*
 * macros an application was compiled with (a shared library upgraded
 * under it).
 *
 * Parameters:
 *   major, minor, patch  where to write CARMY_VERSION_MAJOR, _MINOR and
 *                        _PATCH as the library was built; each may be NULL.
 * Returns:
 *   CARMY_VERSION_STRING as the library was built ("0.9.0"). Never NULL.
 * Ownership:
 *   the string is static storage: never free it.
 * Threads:
 *   safe from any thread at any time.
 */
const char *carmy_version(int *major, int *minor, int *patch);

/*
 * carmy_connect - connect to carmyd and map its shared segment.
 *
 * Before anything is sent, the socket's directory must be a real directory
 * (not a symbolic link) owned by this process's effective uid, root or a
 * user in $CARMY_TRUSTED_USERS, that neither its group nor others can
 * write (and the directories above it owned by those uids, sticky if
 * others can write them, as /tmp is); the process listening on the socket
 * (SO_PEERCRED) must run as one of those uids; and the segment it names
 * must be a regular file owned by that same uid that others cannot write
 * (its group only with carmyd --group, for a group this process is in).
 * $CARMY_TRUSTED_USERS lists user names or uids, separated by commas or
 * spaces, for a carmyd run as another user (carmyd --group); a set-uid
 * program ignores it. The same checks are made whenever the handle
 * connects again. docs/trust.md says what each check defends against.
 *
 * A relative socket_path is made absolute here, from the working directory
 * (symbolic links are not resolved), so that the handle connects again to
 * the same path after the application changes directory. The settings
 * $CARMY_RECONNECT_MS, $CARMY_SPIN_US and $CARMY_ACK_CHECK_MS are read
 * here, once (see the macros of those names).
 *
 * Parameters:
 *   out          where the new handle is written. Set to NULL first, so
 *                it is NULL on every failure.
 *   socket_path  carmyd's socket; NULL for carmy_default_socket()'s path.
 * Returns:
 *   0                        *out is the new handle.
 *   -EINVAL                  out is NULL.
 *   CARMY_EUNAVAILABLE       no carmyd listens there (no socket, refused,
 *                            not permitted), or it did not answer within
 *                            10 s.
 *   CARMY_ETOO_MANY_CLIENTS  carmyd serves as many connections as its
 *                            --max-clients allows: try again later.
 *   CARMY_EUNTRUSTED         the checks above failed; carmy_trust_detail()
 *                            says which.
 *   CARMY_ELAYOUT            carmyd's segment, or its HELLO, is of another
 *                            layout (another build of Carmy).
 *   CARMY_ECORRUPT           the segment failed its sanity check.
 *   CARMY_EPROTOCOL          carmyd's answer was malformed or does not
 *                            match its segment.
 *   CARMY_EDISCONNECTED      carmyd closed the connection before it
 *                            answered.
 *   -ENAMETOOLONG            the (absolute) path does not fit a socket
 *                            address.
 *   -EPERM                   carmyd refused a client in another PID
 *                            namespace.
 *   -ENOMEM, other -errno    from pthread_atfork() (the first connect of
 *                            the process; a later one tries again),
 *                            getcwd(), getrandom(),
 *                            socket(), connect(), poll(), shm_open(),
 *                            mmap()...
 * Ownership:
 *   the handle is the caller's, freed by carmy_close(). socket_path is not
 *   kept.
 * Threads:
 *   safe: each call makes a handle of its own (it only writes this
 *   thread's carmy_trust_detail()). The handle belongs to this process.
 *   A child of fork() gets a copy that answers every call with
 *   CARMY_EFORKED, sending and writing nothing; the child's copy of its
 *   socket is closed by the fork itself (so that the parent's connection
 *   ends when the parent does, not when its last child does) -- except a
 *   connection another thread of the parent is opening at the moment of
 *   the fork (carmy_connect(), a reconnect inside a call) and a
 *   carmy_wait()'s own temporary one, whose copies the child keeps open
 *   until it exits or execs (they are close-on-exec) -- and
 *   carmy_close() frees the rest of it. The child calls carmy_connect()
 *   for a handle of its own, which works as in any process. The fork is
 *   noticed through pthread_atfork(), set up at the process's first
 *   carmy_connect(), without a system call per call; a child made without
 *   fork()'s handlers (a raw clone(), _Fork()) is not told apart, and must
 *   not use its parent's handles.
 */
int carmy_connect(carmy_t **out, const char *socket_path);

/*
 * carmy_set_result_format - say which format this handle's results are in.
 *
 * Every reservation made on c from now on records format with its entry
 * (carmyctl list and show print it), and carmyd accepts a committed
 * carmy_resolve() of such an entry only with a result in that format: an
 * operator cannot record a result that every retry of the call would fail
 * to read. Reservations made before keep the format they were made with.
 * A new handle's format is CARMY_FORMAT_BYTES.
 *
 * Parameters:
 *   c       the handle.
 *   format  CARMY_FORMAT_BYTES or CARMY_FORMAT_EXIT_OUTPUT.
 * Returns:
 *   0              set.
 *   -EINVAL        c is NULL, or format is not one of the two; nothing
 *                  changed.
 *   CARMY_EFORKED  c was connected by another process, whose forked child
 *                  this is: nothing changed.
 * Ownership:
 *   nothing.
 * Threads:
 *   safe: a carmy_begin() running on another thread at the same time
 *   records either the old format or the new one. Only in the process
 *   that connected c (CARMY_EFORKED in a forked child).
 */
int carmy_set_result_format(carmy_t *c, int format);

/*
 * carmy_close - close the connection and unmap the segment.
 *
 * Entries this handle reserved and did not complete or release become
 * uncertain (interrupted): carmyd treats a closed connection as a dead
 * owner.
 *
 * In a child of fork() given c by its parent, it frees the child's copy
 * only (memory, mapping; the socket's copy was closed at the fork): it
 * sends nothing and shuts nothing down, and the parent's connection and
 * reservations are as they were.
 *
 * Parameters:
 *   c  the handle; NULL is ignored.
 * Returns:
 *   nothing.
 * Ownership:
 *   frees c. Reservations made on it still own their result copies: free
 *   them with carmy_reservation_clear().
 * Threads:
 *   must not run while any other call uses c, and c must not be used
 *   after it. In a forked child, calls of the parent's threads do not
 *   count: they are not in the child.
 */
void carmy_close(carmy_t *c);

/*
 * carmy_begin - reserve call's identity, or say what to do instead.
 *
 * Reserve and replay work directly in shared memory, without a system
 * call (but for two madvise() calls every 256 reservations, mapping the
 * entries ahead). If carmyd restarted, the handle first connects again,
 * once (see CARMY_RECONNECT_MS); with no carmyd it fails closed.
 *
 * With a durable store (--store journal:DIR, PostgreSQL) a reservation is
 * answered once carmyd has recorded it, and a call that finds the identity
 * reserved but not yet recorded waits for that (up to 5 s) before it
 * answers, so that the execution id it names is one that stands. With a
 * store shared by several carmyds, a reservation whose answer was lost
 * (carmyd restarted) is asked again of the carmyd that comes back, for up
 * to CARMY_RECONNECT_MS, rather than given up: the store may hold it.
 *
 * Parameters:
 *   c     the handle.
 *   call  the call; read during this call only.
 *   r     the reservation to fill; initialised (CARMY_RESERVATION_INIT or
 *         zeroed). Whatever it held is cleared first.
 * Returns:
 *   CARMY_RESERVED           r->execution_id is new, r->state RUNNING: run
 *                            the tool, then carmy_complete() or
 *                            carmy_release() with r.
 *   CARMY_REPLAY             finished before: r holds the recorded status,
 *                            result_code, result and execution_id. The
 *                            tool must not run.
 *   CARMY_ECONFLICT          the identity was used with another
 *                            fingerprint: r->execution_id and r->state
 *                            describe that entry.
 *   CARMY_EUNCERTAIN         the identity is running (r->state RUNNING) or
 *                            was interrupted (INTERRUPTED), with
 *                            r->execution_id: do not run the tool.
 *   CARMY_ECAPACITY          the table is full.
 *   CARMY_EINVALID_ID        an identity part is NULL, empty or longer
 *                            than CARMY_ID_MAX.
 *   CARMY_EINVALID_ARGS      args or meta is not one msgpack object (or a
 *                            pointer and its length disagree).
 *   CARMY_EUNAVAILABLE       no carmyd answers or holds the segment, it
 *                            held the identity's bucket too long, or a
 *                            shared store's answer kept being overtaken
 *                            by other calls.
 *   CARMY_EDISCONNECTED      carmyd declared this handle gone, or runs on
 *                            another segment now (the handle is done).
 *   CARMY_ESTORE             the durable store could not record the
 *                            reservation.
 *   CARMY_EUNTRUSTED, CARMY_ETOO_MANY_CLIENTS, CARMY_ELAYOUT,
 *   CARMY_EPROTOCOL          from connecting again (see carmy_connect()).
 *   CARMY_EFORKED            c was connected by another process, whose
 *                            forked child this is: nothing was looked up,
 *                            reserved or sent, and r is as it was.
 *   -EINVAL                  c, call or r is NULL.
 *   -ENOMEM, other -errno    a replay's copy, a large call's fingerprint,
 *                            or connecting again.
 * Ownership:
 *   for CARMY_REPLAY, r->result is a malloc'd copy owned by r until
 *   carmy_reservation_clear() or r's next carmy_begin()/carmy_wait().
 *   Nothing of call is kept.
 * Threads:
 *   safe: several threads may call carmy_begin() on one handle at once,
 *   each with a reservation of its own. One r must not be used by two
 *   calls at once. Only in the process that connected c (CARMY_EFORKED
 *   in a forked child).
 */
int carmy_begin(carmy_t *c, const struct carmy_call *call,
		struct carmy_reservation *r);

/*
 * carmy_try_begin - carmy_begin(), but only what shared memory answers.
 *
 * For a caller that must not wait for carmyd (an event loop, an HTTP
 * server's polling thread): it answers whatever carmy_begin() answers
 * from the segment alone (replays, conflicts, uncertain calls, and with
 * the memory store new reservations), and -EAGAIN where carmy_begin()
 * would wait for carmyd: to connect again after a restart, for a durable
 * store to record a new reservation (or one it has not yet recorded), for
 * carmyd to reclaim the index, or to finish a move of entries that lasts
 * longer than tens of microseconds (carmy_begin() waits up to 2 s).
 * Then nothing was reserved: call carmy_begin() where waiting is fine, for
 * the answer.
 *
 * Parameters:
 *   c, call, r  as for carmy_begin().
 * Returns:
 *   what carmy_begin() returns, or -EAGAIN: the answer needs carmyd's,
 *   nothing was reserved or sent, and r is cleared.
 * Ownership:
 *   as carmy_begin().
 * Threads:
 *   as carmy_begin(): several threads at once, with carmy_begin() too.
 *   It takes no lock and makes no system call but for the madvise() of
 *   carmy_begin() and, if carmyd stopped, a look at the segment's file.
 */
int carmy_try_begin(carmy_t *c, const struct carmy_call *call,
		    struct carmy_reservation *r);

/*
 * carmy_complete - record the result of a reserved call.
 *
 * Returns when carmyd has recorded it. A completion interrupted by a
 * carmyd restart is sent again once the handle has connected again and
 * been given its owner id back (see CARMY_RECONNECT_MS); carmyd records it
 * once.
 *
 * Parameters:
 *   c       the handle r was reserved on.
 *   r       a reservation carmy_begin() or carmy_wait() answered
 *           CARMY_RESERVED.
 *   status  CARMY_STATUS_COMPLETED, _FAILED, _TIMED_OUT or _CANCELLED.
 *   result  the bytes to replay, len of them; NULL only with len 0.
 * Returns:
 *   0                        recorded; r is no longer a live reservation.
 *   CARMY_ERESULT_TOO_LARGE  len exceeds carmyd's --max-result: the call
 *                            is recorded as failed with this code (not
 *                            dropped), and r is no longer live.
 *   CARMY_EINVALID_STATUS    status is not one of the four.
 *   CARMY_ENOT_RESERVED      r is not a live reservation of this handle
 *                            (completed or released already, or never
 *                            reserved).
 *   CARMY_ENOT_OWNER         carmyd found the entry held by another
 *                            connection.
 *   CARMY_EDISCONNECTED      carmyd went away and did not give this handle
 *                            its reservations back: the entry is
 *                            uncertain, and r is no longer live.
 *   CARMY_EUNAVAILABLE       the handle could not get back to carmyd
 *                            within the reconnect time
 *                            (CARMY_RECONNECT_MS; carmyd restarting):
 *                            r stays live, and completing it again with
 *                            the same result answers 0 once carmyd is
 *                            back and has recorded it (closing the
 *                            handle makes it uncertain).
 *   CARMY_ESTORE             the durable store could not record it, or
 *                            could not tell in time whether it did (a
 *                            shared store whose database went away as it
 *                            committed, which it keeps sending): r stays
 *                            live, and completing it again with the same
 *                            result answers 0 once it is recorded.
 *   CARMY_ECORRUPT           carmyd found the entry scribbled on.
 *   CARMY_EPROTOCOL          carmyd's answer was malformed.
 *   CARMY_EFORKED            c was connected by another process, whose
 *                            forked child this is: nothing was sent, and
 *                            the reservation, the parent's, is untouched.
 *   -EINVAL                  c or r is NULL, or result is NULL with len > 0.
 *   -ENOMEM                  the message could not be built.
 * Ownership:
 *   result is copied; nothing of it is kept. r keeps nothing to free (but
 *   carmy_reservation_clear() is harmless).
 * Threads:
 *   safe: requests on one handle are serialised (one in flight at a time).
 *   But one reservation belongs to one call: completing r on one thread
 *   while another completes or releases the same r is not supported, and
 *   what is recorded then is not defined. Only in the process that
 *   connected c (CARMY_EFORKED in a forked child).
 */
int carmy_complete(carmy_t *c, struct carmy_reservation *r, int status,
		   const void *result, size_t len);

/*
 * carmy_release - give back a reservation whose tool provably did not run.
 *
 * The identity is freed and the next call with it runs. Works in shared
 * memory, then tells carmyd in one round trip, which hands the identity to
 * callers waiting for it (carmy_wait()) at once; with --store journal:DIR
 * that round trip also records it. Like carmy_complete(), it waits for
 * carmyd's answer however long that takes. With a store shared by several
 * carmyds (PostgreSQL), the store hears of it first and carmyd frees the
 * entry after. Do not run the tool after asking for its release, whatever
 * the answer: release again, or leave it (it turns uncertain here when the
 * handle closes).
 *
 * Parameters:
 *   c  the handle r was reserved on.
 *   r  a reservation carmy_begin() or carmy_wait() answered CARMY_RESERVED.
 * Returns:
 *   0                    released; r is no longer a live reservation.
 *   CARMY_ENOT_RESERVED  r is not a live reservation of this handle.
 *   CARMY_EDISCONNECTED  carmyd declared this handle dead and did not give
 *                        its reservations back: the entry is uncertain.
 *   CARMY_EUNAVAILABLE   the handle could not get back to carmyd within
 *                        CARMY_RECONNECT_MS: r stays live, the entry still
 *                        r's here (with a shared store, the store may or
 *                        may not have heard of the release): release it
 *                        again.
 *   CARMY_ESTORE         with a durable store: the identity was freed on
 *                        this host but the store could not record it
 *                        (carmyd did not come back within
 *                        CARMY_RECONNECT_MS, its store failed, or, rarely,
 *                        another call took the freed entry before carmyd
 *                        could check it was this one's); after a
 *                        reboot the execution is then uncertain, never run
 *                        twice. With a shared store, the store may or
 *                        may not have forgotten it (other carmyds may
 *                        then run it): carmyd sends the release again
 *                        until the store records it, then frees the
 *                        entry (a release called again meanwhile goes
 *                        through too; one called after answers
 *                        CARMY_ENOT_RESERVED).
 *   CARMY_EPROTOCOL      with a shared store: carmyd's answer was
 *                        malformed; the entry is still r's here.
 *   CARMY_EFORKED        c was connected by another process, whose forked
 *                        child this is: nothing was freed or sent, and the
 *                        reservation, the parent's, is untouched.
 *   -EINVAL              c or r is NULL.
 *   -ENOMEM              with a shared store: the message could not be
 *                        built; nothing changed.
 * Ownership:
 *   r keeps nothing to free (but carmy_reservation_clear() is harmless).
 * Threads:
 *   safe, as carmy_complete(), with the same rule: one r, one call at a
 *   time; and only in the process that connected c.
 */
int carmy_release(carmy_t *c, struct carmy_reservation *r);

/*
 * carmy_abandon - give up a reserved call whose outcome is not known.
 *
 * For a caller that lost track of the tool it started (the process that
 * ran it vanished, an upstream that took the request closed without an
 * answer): its effect may or may not have happened, so it must neither be
 * completed (a made-up result) nor released (the tool could run twice).
 * The execution becomes uncertain now, as if this process had died:
 * begin() answers CARMY_EUNCERTAIN (CARMY_STATE_INTERRUPTED) for its
 * identity, waiters are told, and an operator settles it with
 * carmy_resolve() (carmyctl resolve). With a durable store nothing more is
 * recorded: the store holds it as running, which a restart loads as
 * interrupted.
 *
 * Parameters:
 *   c  the handle r was reserved on.
 *   r  a reservation carmy_begin() or carmy_wait() answered CARMY_RESERVED.
 * Returns:
 *   0                    uncertain; r is no longer a live reservation.
 *   CARMY_ENOT_RESERVED  r is not a live reservation of this handle.
 *   CARMY_ENOT_OWNER     carmyd found the entry held by another connection.
 *   CARMY_EDISCONNECTED  carmyd went away and gave this handle a new
 *                        owner id: the entry is uncertain, as every one of
 *                        the old owner's (r is no longer live).
 *   CARMY_EUNAVAILABLE   carmyd is not back within CARMY_RECONNECT_MS: r
 *                        stays live (abandon it again, or close the
 *                        handle: either makes it uncertain).
 *   CARMY_EFORKED        as carmy_complete().
 *   -ENOTSUP             the carmyd serving c predates this call: nothing
 *                        was done (closing the handle makes every call it
 *                        still runs uncertain).
 *   -EINVAL              c or r is NULL.
 * Threads:
 *   safe, as carmy_complete(), with the same rule: one r, one call at a
 *   time; and only in the process that connected c.
 */
int carmy_abandon(carmy_t *c, struct carmy_reservation *r);

/*
 * carmy_wait - carmy_begin(), waiting out an execution that is running.
 *
 * Where carmy_begin() would answer CARMY_EUNCERTAIN for a RUNNING
 * execution, wait up to timeout_ms for that execution to stop running,
 * then answer for what it became: CARMY_REPLAY the moment it completes
 * (carmyd tells the waiter; no polling), CARMY_EUNCERTAIN (INTERRUPTED) if
 * its owner died, CARMY_RESERVED if it was released (the tool provably did
 * not run, so this caller runs it). Each wait uses a connection of its
 * own, so other threads on the handle are not held up. With a store
 * shared by several carmyds, only executions running through this carmyd
 * can be waited for: one running on another instance is answered at once,
 * as carmy_begin() would.
 *
 * Parameters:
 *   c           the handle.
 *   call        the call, as for carmy_begin().
 *   r           as for carmy_begin().
 *   timeout_ms  how long to wait at most; 0 or less: do not wait.
 * Returns:
 *   what carmy_begin() returns, after the wait. On timeout, or when no
 *   carmyd can be asked to wait, the CARMY_EUNCERTAIN (RUNNING) begin gave.
 *   Also:
 *   -EINVAL              c, call or r is NULL.
 *   CARMY_EUNTRUSTED     the carmyd found for the wait's connection is not
 *                        one to trust (carmy_trust_detail() says why).
 *   CARMY_EDISCONNECTED  carmyd runs on another segment now (the handle is
 *                        done).
 *   CARMY_EPROTOCOL      the execution id found was malformed.
 *   CARMY_EFORKED        as carmy_begin().
 *   -errno               from looking at the segment's file.
 * Ownership:
 *   as carmy_begin().
 * Threads:
 *   safe, as carmy_begin(), and only in the process that connected c.
 */
int carmy_wait(carmy_t *c, const struct carmy_call *call,
	       struct carmy_reservation *r, int timeout_ms);

/*
 * carmy_resolve - settle an interrupted execution.
 *
 * For an execution carmy_begin() reported CARMY_EUNCERTAIN with state
 * INTERRUPTED, once it is known whether its effect happened. Committed:
 * it happened; status/result/len are recorded as its result and replayed
 * from now on. Not committed: the identity is freed and the next call with
 * it runs. carmyd records who resolved it (uid, pid) and when. Only
 * carmyd's own user, root, or a member of carmyd's --admin-group may
 * resolve. A committed result must be in the format the execution's
 * client records its results in (carmy_set_result_format(); carmyctl show
 * prints it): for CARMY_FORMAT_EXIT_OUTPUT, an exit code of 0..255 as 4
 * bytes, big-endian, then the output. An execution restored from a store
 * record that kept no call (one of an earlier release) has no known
 * format, and takes a result in either.
 *
 * Parameters:
 *   c             the handle.
 *   call          the same call (same identity and fingerprint).
 *   execution_id  the execution reported, as carmy_begin() wrote it.
 *   committed     non-zero: the effect happened; 0: it did not.
 *   status        CARMY_STATUS_*, when committed (ignored otherwise).
 *   result, len   the bytes to replay, when committed (ignored
 *                 otherwise); result NULL only with len 0.
 * Returns:
 *   0                        resolved.
 *   CARMY_ENOT_PERMITTED     the caller may not resolve; nothing changed.
 *   CARMY_ECONFLICT          the fingerprint differs.
 *   CARMY_ENOT_INTERRUPTED   the execution is running, completed, absent
 *                            or not that one.
 *   CARMY_EINVALID_STATUS    committed with a status not CARMY_STATUS_*.
 *   CARMY_ERESULT_TOO_LARGE  len exceeds carmyd's --max-result (nothing is
 *                            recorded).
 *   CARMY_EINVALID_RESULT    committed with a result not in the format of
 *                            the execution's client; nothing changed (it
 *                            is still interrupted).
 *   CARMY_EINVALID_ID, CARMY_EINVALID_ARGS
 *                            as carmy_begin().
 *   CARMY_ECAPACITY          carmyd has too many resolutions in flight.
 *   CARMY_ESTORE             the durable store could not record it.
 *   CARMY_EDISCONNECTED, CARMY_EUNAVAILABLE, CARMY_EUNTRUSTED,
 *   CARMY_EPROTOCOL          carmyd went away, or connecting again failed.
 *   CARMY_EFORKED            c was connected by another process, whose
 *                            forked child this is: nothing was sent.
 *   -EINVAL                  c, call or execution_id is NULL,
 *                            execution_id is not "exec_" and 32 lowercase
 *                            hex digits, or result is NULL with len > 0.
 *   -ENOMEM, other -errno    from fingerprinting or connecting again.
 * Ownership:
 *   nothing of the arguments is kept.
 * Threads:
 *   safe: requests on one handle are serialised. Only in the process that
 *   connected c (CARMY_EFORKED in a forked child).
 */
int carmy_resolve(carmy_t *c, const struct carmy_call *call,
		  const char *execution_id, int committed, int status,
		  const void *result, size_t len);

/*
 * carmy_reservation_clear - free what a reservation owns and zero it.
 *
 * A live reservation (CARMY_RESERVED) cleared is not given back: it turns
 * uncertain when its handle closes. Complete or release it first.
 *
 * Parameters:
 *   r  the reservation; NULL is ignored.
 * Returns:
 *   nothing.
 * Ownership:
 *   frees r->result; r itself is the caller's.
 * Threads:
 *   touches r only: must not run while another call uses r.
 */
void carmy_reservation_clear(struct carmy_reservation *r);

/*
 * carmy_max_result - the --max-result of the carmyd c is connected to.
 *
 * Parameters:
 *   c  the handle; must not be NULL.
 * Returns:
 *   the largest result, in bytes, carmy_complete() records as it is.
 * Ownership:
 *   nothing.
 * Threads:
 *   safe: set at connect and never changed (a carmyd with another
 *   --max-result is not one the handle connects again to).
 */
size_t carmy_max_result(const carmy_t *c);

/*
 * carmy_durable - whether the carmyd c is connected to has a durable store.
 *
 * With one (a journal, PostgreSQL), carmy_begin() of a new call waits for
 * carmyd to record the reservation before it answers, and a begin that
 * finds a reservation the store has not yet taken waits for it: both wait
 * on carmyd. With carmyd's memory store a begin reads and writes the
 * shared table only (it talks to carmyd only to connect again, or when
 * released entries' tombstones fill the index). A replay never waits on
 * carmyd. carmy_complete(), carmy_release() and carmy_resolve() wait for
 * carmyd's answer with either store. For callers that must not block an
 * event loop: a begin may run in place while this is 0.
 *
 * Parameters:
 *   c  the handle; must not be NULL.
 * Returns:
 *   1 if the store is durable, 0 if not, as the carmyd last connected to
 *   said (a restarted carmyd may have another store: its answer counts
 *   once the handle has connected again).
 * Ownership:
 *   nothing.
 * Threads:
 *   safe.
 */
int carmy_durable(const carmy_t *c);

/*
 * carmy_default_socket - the socket path carmy_connect(c, NULL) uses.
 *
 * $CARMY_SOCKET if set and not empty. Else the user's own carmyd's
 * socket if one is there: $XDG_RUNTIME_DIR/carmy/carmyd.sock if
 * $XDG_RUNTIME_DIR is an absolute path, else /tmp/carmy-$UID/carmyd.sock
 * (the real uid). Else the system-wide carmyd's, /run/carmy/carmyd.sock,
 * if a socket is there (carmyd.service). Else the user's own path again.
 * Whether a socket is there is looked at (lstat) at each call.
 *
 * Parameters:
 *   buf, size  where to write it, NUL-terminated.
 * Returns:
 *   its length (without the NUL), or -ENAMETOOLONG if it does not fit
 *   (buf then holds as much of it as fits, if size > 0).
 * Ownership:
 *   buf is the caller's.
 * Threads:
 *   safe, but for getenv(): not while another thread changes the
 *   environment (setenv(), putenv()).
 */
int carmy_default_socket(char *buf, size_t size);

/*
 * carmy_errname - the stable UPPER_SNAKE name of any code.
 *
 * Carmy's own codes have their names ("IDEMPOTENCY_CONFLICT"), -errno
 * values their errno names ("ENOMEM"), outcomes theirs ("OK", "REPLAY").
 *
 * Parameters:
 *   code  any int.
 * Returns:
 *   the name; "SYSTEM_ERROR" for a value in -4095..-1 with no errno name,
 *   "UNKNOWN_ERROR" for anything else. Never NULL.
 * Ownership:
 *   static storage: never free it.
 * Threads:
 *   safe.
 */
const char *carmy_errname(int code);

/*
 * carmy_strerror - one sentence describing any code.
 *
 * Parameters:
 *   code  any int.
 * Returns:
 *   Carmy's own sentence for its codes and outcomes; for a value in
 *   -4095..-1, the C library's strerror(); "Unknown error code."
 *   otherwise. Never NULL.
 * Ownership:
 *   never free it. Carmy's sentences, and the C library's for known errno
 *   values, are static storage; for an errno value the C library does not
 *   know, glibc formats the text into a buffer of the calling thread's,
 *   which its next strerror() overwrites.
 * Threads:
 *   safe (glibc's strerror() is).
 */
const char *carmy_strerror(int code);

/*
 * carmy_trust_detail - why this thread's last call failed with
 * CARMY_EUNTRUSTED.
 *
 * Which path, uid or mode was wrong, as one sentence ("the carmyd on PATH
 * runs as uid 1001 ..."), for a carmy_connect() or a call that connected
 * again. Only the last failure is kept: "" if there was none, and again
 * once a later connection of this thread (a connect, a reconnect, a
 * carmy_wait()'s own) passed the checks.
 *
 * Parameters:
 *   none.
 * Returns:
 *   the sentence, or "". Never NULL.
 * Ownership:
 *   the calling thread's own storage: never free it; it is rewritten by
 *   the thread's next connection and lives as long as the thread.
 * Threads:
 *   safe: each thread has its own.
 */
const char *carmy_trust_detail(void);

/*
 * carmy_status_name, carmy_state_name - lowercase names of statuses and
 * states.
 *
 * Parameters:
 *   status  a CARMY_STATUS_* value; state a CARMY_STATE_* value.
 * Returns:
 *   carmy_status_name(): "completed", "failed", "timed_out", "cancelled",
 *   or "unknown" for any other value. carmy_state_name(): "running",
 *   "completed", "interrupted", or "none" for CARMY_STATE_NONE and any
 *   other value. Never NULL.
 * Ownership:
 *   static storage: never free it.
 * Threads:
 *   safe.
 */
const char *carmy_status_name(int status);
const char *carmy_state_name(int state);

#ifdef __cplusplus
}
#endif

#endif /* CARMY_H */
