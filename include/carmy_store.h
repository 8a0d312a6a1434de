/*
 * carmy_store.h - the store interface: what carmyd asks of the place where
 * executions are recorded (reserve, complete, release, load them back).
 *
 * carmyd keeps every execution in its shared segment, where clients reserve
 * with a CAS and replays are served without a round trip. A store is where
 * those executions are also recorded so that they outlive the segment (a
 * reboot, a lost /dev/shm). carmyd ships two: "memory" (the segment is the
 * record, nothing survives a reboot) and "journal:DIR" (an append-only,
 * checksummed file with group commit). Others are loaded as plugins:
 *
 *   carmyd --store plugin:/path/to/store.so[:ARGS]
 *
 * The plugin exports one symbol, carmy_store_plugin, of type
 * struct carmy_store_ops, whose abi field is CARMY_STORE_ABI: carmyd
 * refuses a plugin built against another (ABI 3 gave struct
 * carmy_store_record the call's tool, arguments and result format).
 *
 * The sequence carmyd drives, and each duty:
 *
 *   open      once, at start, before anything else.
 *   load      once, right after open: hand carmyd every execution the store
 *             holds, so that a fresh segment can be rebuilt from it. An
 *             execution that was reserved and never completed or released
 *             is handed over as RUNNING; carmyd turns it UNCERTAIN (its
 *             process is gone), never runs it again.
 *   submit    from then on, for every reservation, completion and release,
 *             from any of carmyd's threads, concurrently. The store calls
 *             req->done(req, rc) exactly once, from any thread, and only
 *             when the record is durable (rc 0) or has failed (rc < 0). A
 *             client is told "reserved" or "recorded" only after done(0).
 *             Nothing blocks carmyd while a record is pending, so a store
 *             can write many submitted records with one flush (group
 *             commit): that is where its throughput comes from.
 *   close     once, at exit, after every submitted request is done.
 *
 * Ordering a store may rely on: for one execution (one exec id), carmyd
 * submits RESERVE, then at most one of COMPLETE or RELEASE, each only after
 * the previous one is done; an execution left without either (its process
 * died) may later get one RESOLVE, from an operator, and a completed (or
 * resolved) one may get a PURGE, the only way one is ever forgotten. An
 * identity may be reserved again (with a new exec id) only after its
 * earlier execution was released; if a store finds two executions of one
 * identity at load time, the later one stands.
 *
 * A RELEASE may come twice (a client whose carmyd died before answering
 * sends it again to the next one), or name an execution the store no longer
 * holds as running (released already, replaced by a later RESERVE of its
 * identity, or never recorded): the store records or ignores it, and
 * answers 0 either way. It must never undo a result.
 *
 * Failure: a store that cannot record (full disk, an I/O error) answers
 * rc < 0 (-errno) and keeps answering it until it can again; carmyd then
 * refuses new reservations with CARMY_ESTORE and keeps serving replays.
 * After an fsync error a store must not pretend that earlier records are
 * safe: it fails every later request.
 *
 * Threads: submit() and done() may run on any thread; open, load and close
 * run on carmyd's main thread with no submit in flight.
 *
 * Shared stores (ops->shared = 1). Several carmyds, on one host or many,
 * may record into one store (PostgreSQL, for one): each is an instance,
 * with its own segment, and the store is then the only place that knows
 * every identity. Its RESERVE is then an atomic reserve across instances:
 *
 *   - the identity is vacant in the store: record the execution, done(0);
 *   - the store holds an execution of it already (running on any
 *     instance, interrupted, or completed, whatever its fingerprint):
 *     record nothing, call req->taken(req, standing) with that execution
 *     (state RUNNING or COMPLETED; a completed one with its result), then
 *     done(req, 0). The pointers in standing are borrowed for the call.
 *   - the execution standing is req's own (the same exec id: a RESERVE
 *     written again after a lost connection): it is recorded, done(0).
 *
 * Both halves (look, insert) must be one atomic step against every other
 * instance: a unique constraint on the identity, not a read then a write.
 * carmyd, not the store, tells replay from conflict from uncertain: it
 * compares the fingerprints. It sends a RELEASE before it frees the entry
 * in its own segment (for every durable store), so a release followed by a
 * reserve on one instance never finds its own withdrawn record. load() of a shared store hands over
 * only the executions this instance made (those it alone completes,
 * releases or resolves); every other identity is asked at reserve time.
 * A PURGE forgets in the store; another instance that cached the result
 * replays it until it is purged there too.
 */
#ifndef CARMY_STORE_H
#define CARMY_STORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CARMY_STORE_ABI 3
#define CARMY_STORE_ID_MAX 256	/* bytes in each identity part */
#define CARMY_STORE_TOOL_MAX 120	/* bytes of a tool name kept */
#define CARMY_STORE_ARGS_MAX 256	/* bytes of a call's arguments kept */
/* result_format of a record that kept no call (written before stores
 * kept one): the format its client reads is not known, and a committed
 * RESOLVE's result is taken in either format. */
#define CARMY_STORE_FORMAT_UNKNOWN 255

enum carmy_store_op {
	CARMY_STORE_RESERVE = 1,	/* a new execution, RUNNING */
	CARMY_STORE_COMPLETE = 2,	/* its result */
	CARMY_STORE_RELEASE = 3,	/* withdrawn: the tool did not run */
	CARMY_STORE_RESOLVE = 4,	/* an operator settled an interrupted
					 * one: state COMPLETED (it happened,
					 * with this result) or 0 (it did not:
					 * the identity is free again) */
	CARMY_STORE_PURGE = 5,		/* a completed one is forgotten (an
					 * operator's carmyctl purge or
					 * forget, or carmyd's --retain):
					 * forget it */
};

enum carmy_store_state {
	CARMY_STORE_RUNNING = 1,	/* reserved, no result yet */
	CARMY_STORE_COMPLETED = 2,
};

/* One execution, as carmyd hands it to submit() and a store hands it back
 * from load(). Pointers are borrowed for the duration of the call (submit:
 * until done() is called). */
struct carmy_store_record {
	const uint8_t *part[3];		/* principal, session, request_id */
	uint16_t len[3];		/* each 1..CARMY_STORE_ID_MAX */
	uint8_t fingerprint[16];	/* canonical XXH3-128 of the call */
	uint8_t rawprint[16];		/* of its bytes as first sent */
	uint8_t exec[16];		/* the execution id */
	uint32_t pid;			/* of the reserving process */
	uint64_t started_ns;		/* CLOCK_REALTIME, to a clock tick */
	/* COMPLETE / COMPLETED only: */
	uint64_t finished_ns;
	int32_t status;			/* CARMY_STATUS_* */
	int32_t result_code;		/* 0 or CARMY_ERESULT_TOO_LARGE */
	const void *result;
	uint32_t result_len;
	/* RESOLVE, and load() of a resolved execution: who settled it (the
	 * peer's uid and pid) and when; resolved_ns 0 if nobody did. */
	uint64_t resolved_ns;
	uint32_t resolved_uid;
	uint32_t resolved_pid;
	/* load(), and RESOLVE: */
	int32_t state;			/* enum carmy_store_state, or 0 */
	/* RESERVE, and load(): what the call was, for an operator deciding
	 * about it once interrupted (carmyctl list, show). The first
	 * tool_kept bytes of its tool name (at most CARMY_STORE_TOOL_MAX, of
	 * tool_len in all; 65535 stands for that or more) and the first
	 * args_kept of its arguments as sent (at most CARMY_STORE_ARGS_MAX,
	 * of args_len), and the format its client records results in
	 * (CARMY_FORMAT_* of carmy.h), which carmyd holds a committed
	 * RESOLVE's result to. A store keeps them with the execution and
	 * hands them back; a store that cannot (a record written before it
	 * kept them) gives 0 lengths and CARMY_STORE_FORMAT_UNKNOWN. */
	const uint8_t *tool;
	uint32_t tool_kept;
	uint32_t tool_len;
	const uint8_t *args;
	uint32_t args_kept;
	uint32_t args_len;
	uint8_t result_format;
};

struct carmy_store_req;

/*
 * done - carmyd's callback: the store has finished with req.
 *
 * Parameters:
 *   req  the request submit() was given.
 *   rc   0 once the record is durable; -errno if it failed.
 * Returns:
 *   nothing.
 * Ownership:
 *   req goes back to carmyd: the store must not touch req or req->rec
 *   once it has called done().
 * Threads:
 *   the store calls it exactly once per request, from any thread.
 */
typedef void (*carmy_store_done_fn)(struct carmy_store_req *req, int rc);

/*
 * taken - carmyd's callback: a shared store's RESERVE found the identity
 * held (see "Shared stores").
 *
 * Parameters:
 *   req       the RESERVE.
 *   standing  the execution the store holds: state RUNNING or COMPLETED,
 *             a completed one with its result.
 * Returns:
 *   nothing.
 * Ownership:
 *   standing and its pointers are the store's, borrowed for the call:
 *   carmyd copies what it keeps.
 * Threads:
 *   called at most once per request, before its done(), from any thread.
 */
typedef void (*carmy_store_taken_fn)(struct carmy_store_req *req,
				     const struct carmy_store_record *standing);

/* A request in flight. carmyd owns it and keeps it alive until done(). For
 * RELEASE and PURGE only rec->exec is set; for RESOLVE rec->exec,
 * rec->state, the resolved_* fields and, when state is COMPLETED, the
 * result fields. */
struct carmy_store_req {
	enum carmy_store_op op;
	const struct carmy_store_record *rec;
	carmy_store_done_fn done;
	void *cookie;			/* carmyd's */
	struct carmy_store_req *next;	/* the store's, while it holds req */
	uint32_t flags;			/* CARMY_STORE_MORE, or 0 */
	/* RESERVE to a shared store only; NULL otherwise. */
	carmy_store_taken_fn taken;
};

/*
 * A hint in req->flags: carmyd has more requests in hand and submits them
 * right after this one. A store may write a lone request on the thread
 * that submits it, sparing a hand-off to its own thread; it must not with
 * this flag, or it would hold up the requests behind it for a whole write
 * and lose the chance to write them together. A store may ignore it.
 */
#define CARMY_STORE_MORE 1u

/*
 * The store's hint in req->flags, set just before it calls req->done():
 * on this thread, another done() of the same callback (req->done) without
 * this flag follows soon, as when one commit settles many requests. carmyd
 * may then hold the wake-up this answer owes until that one, and wake a
 * thread once for the lot. A store that cannot promise that one follows
 * clears it. A store may ignore it. A shared store's success answered
 * without it is told to its client within done(), on this thread (the
 * segment's write and, if the client sleeps, a futex wake-up); those with
 * it, by carmyd's loops.
 */
#define CARMY_STORE_ANSWERS_FOLLOW 2u

/*
 * each - carmyd's callback: one execution load() hands over.
 *
 * Parameters:
 *   arg  what carmyd passed to load().
 *   rec  the execution, as described at struct carmy_store_record.
 * Returns:
 *   0 to go on; non-zero stops the load, and load() must return it.
 * Ownership:
 *   rec and its pointers are the store's, borrowed for the call.
 * Threads:
 *   on the thread that runs load().
 */
typedef int (*carmy_store_each_fn)(void *arg,
				   const struct carmy_store_record *rec);

/*
 * What a store provides. Its four functions, in the same layout:
 *
 * open - start the store. Once, at carmyd's start, before anything else.
 *   Parameters: args, what followed the store's name on the command line
 *   (or ""); store, where to write the store's handle; err, errlen, a
 *   buffer for a sentence saying why it failed.
 *   Returns: 0, or -errno with a sentence in err.
 *   Ownership: args is borrowed for the call; *store is the store's, and
 *   carmyd hands it back to every later call and to close().
 *   Threads: carmyd's main thread.
 *
 * load - hand carmyd every execution the store holds (see the sequence
 *   above), one each() call per execution. Once, right after open.
 *   Parameters: store; each and arg, the callback and its argument.
 *   Returns: 0; each()'s non-zero return if it stopped the load; or
 *   -errno if the store could not be read.
 *   Ownership: records passed to each() are the store's, borrowed.
 *   Threads: carmyd's main thread, with no submit() in flight.
 *
 * submit - start recording req. Must not wait for the record to be
 *   durable; calls req->done() exactly once when it is, or has failed
 *   (and, for a shared store's RESERVE that finds the identity held,
 *   req->taken() first).
 *   Parameters: store; req, the request (struct carmy_store_req).
 *   Returns: nothing: the answer is done()'s rc.
 *   Ownership: req and req->rec are carmyd's, alive until done(); the
 *   store may link req through req->next meanwhile.
 *   Threads: any of carmyd's threads, concurrently.
 *
 * close - stop the store and free it. Once, at exit, after every
 *   submitted request is done.
 *   Parameters: store.
 *   Returns: nothing.
 *   Ownership: frees store and all it holds.
 *   Threads: carmyd's main thread, with no submit() in flight.
 */
struct carmy_store_ops {
	uint32_t abi;			/* CARMY_STORE_ABI */
	const char *name;		/* the store's name, for logs */
	int (*open)(const char *args, void **store, char *err, size_t errlen);
	int (*load)(void *store, carmy_store_each_fn each, void *arg);
	void (*submit)(void *store, struct carmy_store_req *req);
	void (*close)(void *store);
	/* Does a reservation need submit() at all? 0 for a store whose
	 * record is the segment itself ("memory"): clients then reserve and
	 * release without a round trip to carmyd. */
	int durable;
	/* Is the store shared by several carmyds (see "Shared stores")? A
	 * shared store is durable. */
	int shared;
};

/* A plugin exports this, with external linkage. */
extern const struct carmy_store_ops carmy_store_plugin;

#ifdef __cplusplus
}
#endif

#endif /* CARMY_STORE_H */
