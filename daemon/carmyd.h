/*
 * carmyd.h - what carmyd's modules share. Process-local: nothing here lives
 * in the segment.
 */
#ifndef CARMY_DAEMON_H
#define CARMY_DAEMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/un.h>

#include "carmy_store.h"
#include "common/clock.h"
#include "shm/shm.h"

#define CARMYD_DEFAULT_CAPACITY 10000
#define CARMYD_DEFAULT_MAX_RESULT (16u * 1024)
/* --grace: after a restart, the longest a client of the previous carmyd,
 * its process still running, is waited for to come back for its running
 * reservations (libcarmy connects again when it has a result to record).
 * Ten minutes: an upgrade's restart in the middle of a long tool. */
#define CARMYD_DEFAULT_GRACE_S 600
/* --retain: completed executions are forgotten this long after they
 * finished (retain.c). A day: an agent's retries come within its session,
 * minutes to hours apart; a day still covers a job run again the next
 * morning, and is what Stripe keeps idempotency keys for. */
#define CARMYD_DEFAULT_RETAIN_S 86400
/* --threads: event loops. The default is one per two online CPUs (rounded
 * up), up to this: the clients are on the same host, and a loop polls
 * after each event (--spin-us), so a loop per CPU leaves them none. */
#define CARMYD_DEFAULT_THREADS_MAX 8
#define CARMYD_THREADS_MAX 64
/* --spin-us: how long an event loop keeps polling after its last event
 * before it sleeps (see main.c's usage), and its upper bound. With the
 * journal the default is CARMYD_JOURNAL_SPIN_US: every answer of its
 * waits for a flush, far longer than a poll, and the CPU a polling loop
 * takes is the clients' (make bench-ab, the journal, --spin-us 0 against
 * 50: 1.18x and 1.30x the cycles with 4 clients, 1.07x and 0.96x with
 * 16, even with 1 and 64; docs/performance.md). */
#define CARMYD_DEFAULT_SPIN_US 50
#define CARMYD_JOURNAL_SPIN_US 0
/* A loop awaiting the journal's answer polls for it up to this many times
 * --spin-us after the request (none at the journal's default of 0): a
 * commit takes longer than a client takes to send its next request, and
 * the answer then goes out without the wake-up of a loop gone to sleep.
 * Not a shared store's (request.c: awaited()). */
#define AWAIT_SPIN 20
#define CARMYD_SPIN_US_MAX 10000
/* A connection that has not said HELLO this long after it was accepted is
 * closed: libcarmy and carmyctl say it right after connect(). */
#define CARMYD_HELLO_TIMEOUT_S 5
/* --max-clients defaults to the descriptor limit less what carmyd keeps
 * for itself: standard streams, the lock, the listening socket, the spare
 * and the shed connections' eventfd (conn.c), the signalfd and two
 * timers, the segment, three per event loop (epoll, two eventfds), and
 * this reserve for what comes and goes
 * (the store's files and connections, /proc reads, a connection being
 * refused, up to 16 shed ones their loops have yet to close). */
#define CARMYD_FDS_FIXED 11
#define CARMYD_FDS_PER_LOOP 3
#define CARMYD_FDS_RESERVE 32
#define CARMYD_MAX_CLIENTS_MAX 100000000

struct carmyd_config {
	char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char shm_name[64];
	uint32_t capacity;
	uint32_t max_result;
	uint32_t threads;	/* event loops; 0 until resolved */
	uint32_t spin_us;	/* --spin-us: poll this long before sleeping */
	bool shm_named;		/* --segment given: shm_name is the user's */
	bool capacity_set;	/* given on the command line */
	bool max_result_set;
	bool foreground;
	bool transient;		/* remove the segment on clean exit */
	bool use_group;		/* --group: share socket and segment */
	bool use_admin_group;	/* --admin-group: may resolve and purge */
	gid_t admin_gid;
	uint32_t max_clients;	/* --max-clients; 0 until resolved */
	uint32_t grace_ms;	/* --grace: previous clients may come back */
	uint64_t retain_ns;	/* --retain: 0 keeps completed ones for ever */
	gid_t gid;
	const char *log_file;
	const char *store;	/* --store: memory, journal:DIR, plugin:SO[:ARGS] */
	/* The listening socket a service manager handed over (LISTEN_FDS),
	 * bound to socket_path; -1: carmyd binds socket_path itself. */
	int listen_fd;
};

/* owners.c: the registry of live owners (one per connection), an RCU hash
 * table. Every event loop adds and removes its own connections' owners and
 * the sweeps read it; callers are RCU-registered threads. */

/* Create the registry. main() only, before the event loops start. Returns
 * 0 or -ENOMEM. */
int owners_init(void);
/* Empty the registry and free it, once the freed nodes' grace periods
 * are over (rcu_barrier()). main() only, once the event loops have
 * stopped. */
void owners_fini(void);
/* Register owner id as alive, held by conn (the server's connection):
 * a new id from store_new_owner(), or one store_resume() gives back.
 * Any RCU-registered thread. Returns 0, -ENOMEM, or -EEXIST if id is
 * registered already (held by another connection: never two). */
int owners_add(uint32_t id, void *conn);
/* Unregister id (its connection is gone): the next sweep finds it dead.
 * Its node is freed after a grace period. Any RCU-registered thread. */
void owners_del(uint32_t id);
/* Is id registered? Lock-free (rcu_read_lock()); any RCU-registered
 * thread. */
bool owners_alive(uint32_t id);
/* How many owners are registered, for the log and stats. Lock-free; any
 * RCU-registered thread. */
unsigned long owners_count(void);

/* store.c: the segment from carmyd's side, and the store behind it. Every
 * store_* function that looks at or writes the segment's entries takes
 * s->lock (each says so), so carmyd's own writes to the segment are made
 * one at a time whichever event loop asks. */
struct owed;			/* store.c */
struct held_owner;		/* store.c */

struct store {
	pthread_mutex_t lock;
	struct shm_view view;
	const struct carmy_store_ops *ops;	/* where executions are recorded */
	void *st;				/* its handle */
	void *plugin;				/* dlopen() handle, or NULL */
	bool durable;				/* ops->durable */
	bool shared;				/* ops->shared */
	uint32_t taken_cursor;	/* where store_taken() looks for a ticket */
	bool populating;			/* the segment's pages are */
	bool populate_fresh;			/* (a new one's: zeroed) */
	pthread_t populater;			/* ... mapped by this thread */
	int populate_stop;			/* ... until this is set (atomic) */
	int fd;
	uint32_t next_owner;	/* private copy; mirrored in the header */
	uint32_t owner_base;
	uint32_t epoch;
	uint64_t started_ns;	/* CLOCK_REALTIME when it began: entries
				 * claimed later reached no earlier carmyd */
	uint64_t store_id;	/* sh_store once loaded (store_identity()) */
	uint32_t ticks;
	struct shm_alive alive;	/* our hold on sh_alive */
	bool holding;		/* ... taken */
	uint32_t alive_fixes;	/* checks in a row that found sh_alive not ours */
	uint32_t bucket_fixes;	/* passes that found buckets BLOCKED by nobody */
	uint32_t scribbled;	/* ... how many, in all */
	bool scribble_said;	/* ... logged (scribbled_said()) */
	char shm_name[64];	/* the segment's name, for the log */
	bool unlinked;		/* ... said to be gone from /dev/shm */
	uint64_t last_reclaim_ns;
	uint32_t reclaim_freed;	/* by the last reclaim() */
	uint32_t reclaim_cursor;	/* where the ticks' reclaim goes on */
	uint32_t reclaim_left;	/* ... and how much of the ring is left */
	uint32_t slice;		/* the tick's next slice of the table */
	/* What this pass of the ticks over the table found so far
	 * (store_tick()): sweep_dead()'s counts, buckets BLOCKED by nobody,
	 * whether it met a tombstone. */
	struct shm_sweep_stats pass_swept;
	uint32_t pass_scribbled;
	bool pass_tomb;
	bool tomb_seen;		/* a pass met one: tick_reclaim() */
	uint64_t retain_ms;	/* sh_retain_ms: --retain as the header tells it */
	/* Owners of the previous carmyd whose client may still come back
	 * for them (hold_previous()), sorted by id, held_left of them not
	 * let go yet, until grace_until_ns (CLOCK_MONOTONIC) at most;
	 * the header tells operators held_left and grace_until_real_ns
	 * (held_tell()). */
	struct held_owner *held;
	size_t nheld, held_left;
	uint64_t grace_until_ns, grace_until_real_ns;
	bool loading;		/* store_open(): the store is being loaded */
	/* Entries an operator's RESOLVE is on its way to the store for: a
	 * second one waits its turn (answered NOT_INTERRUPTED meanwhile). */
	uint32_t resolving[16];
	unsigned nresolving;
	/* Releases a shared store failed, though they may have committed:
	 * their entries stay pending, and each is sent again every second
	 * until the store records one (store_owe_release()). */
	struct owed *owed;
	unsigned owed_sent;		/* ... of them with the store now */
	pthread_cond_t owed_back;	/* signalled as each comes back */
};
/* The directory a --store journal:DIR spec names; NULL for any other
 * store (and for no spec). */
static inline const char *store_journal_dir(const char *spec)
{
	return spec != NULL && strncmp(spec, "journal:", 8) == 0 ? spec + 8
								  : NULL;
}

/* spec (a --store's, or its ARGS) as the log shows it, into buf: a
 * password in it becomes ***. */
const char *store_spec_shown(const char *spec, char *buf, size_t size);

/* Open the store named by cfg->store and create, or validate and adopt,
 * the segment cfg->shm_name; load into it what the store holds, sweep the
 * previous carmyd's owners (holding those whose process still runs, for
 * cfg->grace_ms at most, to come back), and
 * take the segment's liveness word. main() only, before the event loops
 * start. Returns 0 or a negative code (logged); store_close() undoes
 * whatever was done. */
int store_open(struct store *s, const struct carmyd_config *cfg);
/* Let go of the segment's liveness word: carmyd is stopping (clients read
 * "no carmyd"). Takes s->lock; once the first loop has stopped. */
void store_let_go_alive(struct store *s);
/* Stop populating the segment, close the store, let go of the liveness word
 * (clients read "no carmyd" from then on) and unmap the segment; with
 * remove, unlink it too. main() only, once the event loops have stopped. */
void store_close(struct store *s, const struct carmyd_config *cfg,
		 bool remove);
/* Hand out the next owner id into *id, never one used before in this
 * epoch, and remember it in the header. Takes s->lock. Returns 0, or
 * -EOVERFLOW when the ids of this epoch are used up. */
int store_new_owner(struct store *s, uint32_t *id);
/* A client of the previous carmyd (pid, from SO_PEERCRED) asks for its
 * owner id back: granted if owner is held for that very process (it
 * claimed every ticket of owner since it started); owner is then
 * registered to conn (owners_add()) before s->lock is let go. Asked by
 * the pid it is held for and refused (that pid names another process
 * now), owner is held no more. Returns 0, or -EPERM when the id is not to
 * be given back. */
int store_resume(struct store *s, uint32_t owner, pid_t pid, void *conn);
/* Does pid (from SO_PEERCRED) name the process the client knows as its
 * own, that is, is the client in carmyd's PID namespace? Reads
 * /proc/PID/status; no lock. True too when there is no telling (a kernel
 * without NSpid, or the process gone). */
bool store_peer_pid_usable(pid_t pid);
/* Record in the segment the result of entry, held by owner as execution
 * exec: status, code and len bytes of data. A completion sent again after
 * a reconnect, whose first one was recorded, succeeds. Takes s->lock.
 * Returns 0 or a CARMY_E* code from shm_record_result()
 * (CARMY_ENOT_RESERVED: not owner's, not running, another execution). */
int store_complete(struct store *s, uint32_t entry, uint32_t owner,
		   const uint8_t *exec, int status, int code,
		   const void *data, size_t len);
/* Turn entry, held by owner as execution exec and running, uncertain
 * (interrupted), as if owner had died: its client lost track of what the
 * tool did. Nothing goes to a durable store, which holds it as running
 * and loads it uncertain, as a dead owner's. Takes s->lock. Returns 0 or
 * a CARMY_E* code from shm_abandon(). */
int store_abandon(struct store *s, uint32_t entry, uint32_t owner,
		  const uint8_t *exec);
/* Durable stores: a reservation or completion on its way to the store. The
 * record's identity points into ident. */
struct store_op {
	struct carmy_store_req req;
	struct carmy_store_record rec;
	void *conn;		/* the server's, for the reply */
	int type;		/* WIRE_RESERVE, COMPLETE, RELEASE, RESOLVE,
				 * WAIT */
	uint32_t entry;
	uint32_t bucket;	/* RESOLVE: where it was found ... */
	uint64_t word;		/* ... and as what */
	uint64_t deadline_ns;	/* WAIT: CLOCK_MONOTONIC */
	int rc;			/* what the store answered */
	/* A success the store's thread wrote to the segment (early) and
	 * told the client in its slot (told) as it answered (request.c);
	 * told_rc is what a COMPLETE's write returned. finish() does the
	 * rest. */
	bool early;
	bool told;
	int told_rc;
	struct store_op *next;	/* the server's, once done */
	struct store_op *wnext;	/* WAIT: the list of waiters */
	uint8_t ident[3 * CARMY_ID_MAX];
	uint8_t call[SHM_TOOL_KEEP + SHM_ARGS_KEEP];	/* RESERVE: what
				 * the record's tool and args point into */
	uint8_t *result;	/* malloc'd copy for COMPLETE */
	/* RESERVE to a shared store that found the identity taken: the
	 * execution standing there (its result is malloc'd; no identity:
	 * it is ours), or taken_rc if it could not be copied. */
	bool taken;
	int taken_rc;
	/* RELEASE to a shared store of an execution the segment no longer
	 * publishes (given back meanwhile: a restart, or a release the
	 * store recorded late): the store alone forgets it. */
	bool gone;
	struct carmy_store_record standing;
	uint8_t standing_call[SHM_TOOL_KEEP + SHM_ARGS_KEEP];
};
/* A shared store failed op, a RESERVE, or its client went away before
 * the answer: see store.c. Take s->lock. */
void store_reserve_failed(struct store *s, const struct store_op *op,
			  uint32_t owner);
/* A shared store failed op, a RELEASE (or a RESERVE claimed before this
 * carmyd began), though it may have committed: its entry stays pending,
 * and carmyd sends the release again every second until the store records
 * it, then gives the entry back. Takes s->lock. */
void store_owe_release(struct store *s, const struct store_op *op);
/* Check that owner holds op->entry running as exec (for a RELEASE to a
 * store that is not shared: that the table no longer publishes it), and
 * copy into op->rec what the store records (for a RESERVE, the whole
 * entry and its call). A RELEASE to a shared store marks the entry
 * pending until the store answers, or, if the segment no longer publishes
 * exec at all, sets op->gone. Takes s->lock. Returns 0,
 * CARMY_ENOT_RESERVED, or CARMY_ECORRUPT for an identity the segment holds
 * garbled. */
int store_prepare(struct store *s, struct store_op *op, uint32_t owner,
		  const uint8_t exec[SHM_EXEC_LEN]);
/* An operator's RESOLVE: find k's entry, UNCERTAIN as execution exec with
 * fingerprint fp; note where in op, copy into op->rec what the store
 * records (and the format its client reads results in, into
 * op->rec.result_format), and hold the entry against a second RESOLVE
 * until store_resolve_done(). Takes s->lock. Returns 0, CARMY_ECONFLICT
 * (another fingerprint), CARMY_ENOT_INTERRUPTED (absent, running,
 * completed, another execution, or being resolved) or CARMY_ECAPACITY (too
 * many resolutions in flight). */
int store_find_uncertain(struct store *s, struct store_op *op,
			 const struct shm_key *k, const uint8_t fp[SHM_FP_LEN],
			 const uint8_t exec[SHM_EXEC_LEN]);
/* Apply to the segment a RESOLVE found by store_find_uncertain() (and
 * recorded by a durable store). Takes s->lock. Returns 0 or a CARMY_E*
 * code from shm_resolve() (logged). */
int store_resolve(struct store *s, const struct store_op *op);
/* Is exactly this result (status, code, len bytes of data) recorded for
 * entry as execution exec? For a completion sent again after a reconnect.
 * Takes s->lock. */
bool store_completed_as(struct store *s, uint32_t entry, const uint8_t *exec,
			int status, int code, const void *data, size_t len);
/* The RESOLVE of entry is over (applied or failed): another may come.
 * Takes s->lock. */
void store_resolve_done(struct store *s, uint32_t entry);
/* Is entry still published RUNNING as execution exec? Takes s->lock; false
 * for an entry out of range. */
bool store_running(struct store *s, uint32_t entry,
		   const uint8_t exec[SHM_EXEC_LEN]);
/* WAIT: is k's entry running as execution exec? Takes s->lock. Returns 0
 * with its index in *entry, CARMY_ENOT_RESERVED if not, or -EREMOTE when a
 * shared store may run it on another instance, out of sight. */
int store_find_running(struct store *s, const struct shm_key *k,
		       const uint8_t exec[SHM_EXEC_LEN], uint32_t *entry);
/* A shared store answered op, owner's RESERVE (pid its process), with the
 * execution that holds the identity already (op->standing). The client's
 * entry goes back; a completed standing execution takes its place in the
 * segment. Takes s->lock. Returns the code for the client: CARMY_REPLAY
 * (look again), CARMY_EUNCERTAIN or CARMY_ECONFLICT with the standing
 * execution's id in exec and its state in *state, or another code for
 * the client (CARMY_ERESULT_TOO_LARGE, CARMY_ECORRUPT, CARMY_ECAPACITY,
 * -ENOMEM, ...). */
int store_taken(struct store *s, struct store_op *op, uint32_t owner,
		pid_t pid, uint8_t exec[SHM_EXEC_LEN], uint32_t *state);
/* The store has recorded op, owner's RELEASE sent before the entry was
 * given back (or, a store of carmyd's own, failed to): give the entry back
 * in the segment. Takes s->lock. Returns 0 or a CARMY_E* code from
 * shm_release_as(). */
int store_released(struct store *s, const struct store_op *op,
		   uint32_t owner);
/* A durable store has recorded op, a RESERVE: callers that found its entry
 * pending may now name its execution. Lock-free (the segment's own
 * atomics): any thread. */
void store_settle(struct store *s, const struct store_op *op);
/* Hand op (prepared by store_prepare() or store_find_uncertain()) to the
 * store, which answers through op->req.done on a thread of its own.
 * more: the caller submits other requests right after (CARMY_STORE_MORE).
 * No lock: the store's submit() is safe from any thread. */
void store_submit(struct store *s, struct store_op *op, bool more);
/* Settle every ticket held by an owner that is not connected (running
 * entries turn uncertain), logging what was done under why. Takes s->lock;
 * any RCU-registered thread (it asks the owner registry). */
void store_sweep_dead(struct store *s, const char *why);
/* Free what tombstones can be freed, at most once a millisecond. Takes
 * s->lock. Returns how many were freed. */
uint32_t store_reclaim(struct store *s);
/* The first loop's 100 ms tick: let go of held owners whose process
 * exited (each second) or whose --grace is over,
 * reclaim tombstones clients have made, and every second check the
 * segment header, sweep orphaned tickets and reclaim. Takes s->lock. */
void store_tick(struct store *s);

/* forget.c: how completed executions leave the table (purge, forget,
 * retention). Each is recorded by a durable store first, and the calling
 * thread waits for it; each takes s->lock a chunk of the table at a time,
 * never while it waits. */

/* What store_forget_older() did. */
struct store_forgot {
	size_t forgotten;
	size_t refused;		/* the store failed to record them: kept */
	bool more;		/* the budget ran out before the table did */
};
/* Forget the COMPLETED entries that finished before before_ns
 * (CLOCK_REALTIME), at most budget of them. Returns 0 with *out filled
 * in, or -ENOMEM. */
int store_forget_older(struct store *s, uint64_t before_ns, uint32_t budget,
		       struct store_forgot *out);
/* An operator's purge (uid and pid, for the log): forget every COMPLETED
 * entry that finished more than older_than_ms ago. Returns how many were
 * forgotten, or -ENOMEM. */
int store_purge(struct store *s, uint64_t older_than_ms, uid_t uid, pid_t pid);
/* An operator's forget (uid and pid, for the log) of execution exec,
 * which entry holds. Returns 0, -ENOENT (entry does not hold exec),
 * -EBUSY (running or uncertain: not completed) or CARMY_ESTORE. */
int store_forget(struct store *s, uint32_t entry,
		 const uint8_t exec[SHM_EXEC_LEN], uid_t uid, pid_t pid);
/* Tickets in use (entries published or being reserved), and the calls
 * clients have counted as refused for capacity. Atomic loads, no lock:
 * any thread. */
void store_fill(struct store *s, uint32_t *used, uint64_t *refused);

/* retain.c: carmyd's watch over the table's room, on a thread of its own:
 * retention (--retain) and the capacity warnings. */
struct retain {
	struct store *s;
	uint64_t age_ns;	/* --retain; 0: never */
	uint64_t period_ns;	/* between retention passes */
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;	/* guards stop */
	pthread_cond_t cond;	/* signalled when stop is set */
	bool stop;
	/* The thread's own. */
	int level;		/* fill warned of: 0 none, 1 past 80%, 2 past 95% */
	uint64_t refused;	/* refusals counted at the last look */
	uint64_t refused_ns;	/* CLOCK_MONOTONIC of the last seen, 0 none */
	struct clock_held clock;	/* retention's wall clock */
};
/* Start watching s with cfg's --retain. main() only, once the store is
 * open. Returns 0 or -errno (logged). */
int retain_start(struct retain *r, struct store *s,
		 const struct carmyd_config *cfg);
/* Stop the thread and wait for it (a pass in progress finishes its
 * batch). main() only, before the store is closed. */
void retain_stop(struct retain *r);

/* server.c: carmyd's event loops (with conn.c and request.c, which share
 * daemon/server.h). */

/* Serve clients on the listening socket lfd with cfg->threads event loops
 * until SIGTERM or SIGINT: the first loop runs on the calling thread (main(),
 * RCU-registered, with those signals blocked), the others on threads of
 * their own. Returns once every loop has stopped and the store has
 * answered every request handed to it: 0 after a clean stop, -1 if the
 * loops could not be set up or one failed (logged). */
int server_run(struct store *s, const struct carmyd_config *cfg, int lfd);
/* Tell the service manager ($NOTIFY_SOCKET, if set) prefix (such as
 * "READY=1\n", or "") and a STATUS= line with the table's fill and the
 * clients connected. Never blocks; any thread. */
void server_notify_status(struct store *s, const char *prefix);

#endif
