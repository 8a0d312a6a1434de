/*
 * carmyd.h - what carmyd's modules share. Process-local: nothing here lives
 * in the segment.
 */
#ifndef CARMY_DAEMON_H
#define CARMY_DAEMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

#include "carmy_store.h"
#include "shm/shm.h"

#define CARMYD_DEFAULT_CAPACITY 10000
#define CARMYD_DEFAULT_MAX_RESULT (16u * 1024)
/* --grace: seconds the clients of a restarted carmyd's predecessor have to
 * come back for their running reservations (libcarmy reconnects by itself,
 * trying for CARMY_RECONNECT_MS). */
#define CARMYD_DEFAULT_GRACE_S 10
/* --threads: event loops. The default is one per online CPU, up to this. */
#define CARMYD_DEFAULT_THREADS_MAX 8
#define CARMYD_THREADS_MAX 64
/* --spin-us: how long an event loop keeps polling after its last event
 * before it sleeps (see main.c's usage), and its upper bound. */
#define CARMYD_DEFAULT_SPIN_US 50
#define CARMYD_SPIN_US_MAX 10000
/* A connection that has not said HELLO this long after it was accepted is
 * closed: libcarmy and carmyctl say it right after connect(). */
#define CARMYD_HELLO_TIMEOUT_S 5
/* --max-clients defaults to the descriptor limit less what carmyd keeps
 * for itself: standard streams, the lock, the listening socket, the spare
 * and the shed connections' eventfd (server.c), the signalfd and two
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
	bool capacity_set;	/* given on the command line */
	bool max_result_set;
	bool foreground;
	bool transient;		/* remove the segment on clean exit */
	bool use_group;		/* --group: share socket and segment */
	bool use_admin_group;	/* --admin-group: may resolve and purge */
	gid_t admin_gid;
	uint32_t max_clients;	/* --max-clients; 0 until resolved */
	uint32_t grace_ms;	/* --grace: previous clients may come back */
	gid_t gid;
	const char *log_file;
	const char *store;	/* --store: memory, journal:DIR, plugin:SO[:ARGS] */
};

/* owners.c: the registry of live owners (one per connection), an RCU hash
 * table. Every event loop adds and removes its own connections' owners and
 * the sweeps read it; callers are RCU-registered threads. */
int owners_init(void);
void owners_fini(void);
int owners_add(uint32_t id, void *conn);
void owners_del(uint32_t id);
bool owners_alive(uint32_t id);
unsigned long owners_count(void);

/* store.c: the segment from carmyd's side. Every store_* function but
 * open and close takes s->lock, so carmyd's own writes to the segment are
 * made one at a time whichever event loop asks. */
struct store {
	pthread_mutex_t lock;
	struct shm_view view;
	const struct carmy_store_ops *ops;	/* where executions are recorded */
	void *st;				/* its handle */
	void *plugin;				/* dlopen() handle, or NULL */
	bool durable;				/* ops->durable */
	bool shared;				/* ops->shared */
	uint32_t taken_cursor;	/* where store_taken() looks for a ticket */
	bool populating;			/* a new segment's pages are */
	pthread_t populater;			/* ... zeroed by this thread */
	int populate_stop;			/* ... until this is set (atomic) */
	int fd;
	uint32_t next_owner;	/* private copy; mirrored in the header */
	uint32_t owner_base;
	uint32_t epoch;
	uint64_t store_id;	/* sh_store once loaded (store_identity()) */
	uint32_t ticks;
	struct shm_alive alive;	/* our hold on sh_alive */
	bool holding;		/* ... taken */
	uint32_t alive_fixes;	/* checks in a row that found sh_alive not ours */
	uint32_t bucket_fixes;	/* ... that found buckets BLOCKED by nobody */
	uint64_t last_reclaim_ns;
	uint64_t grace_until_ns;	/* CLOCK_MONOTONIC; 0: no grace */
	/* Entries an operator's RESOLVE is on its way to the store for: a
	 * second one waits its turn (answered NOT_INTERRUPTED meanwhile). */
	uint32_t resolving[16];
	unsigned nresolving;
};
int store_open(struct store *s, const struct carmyd_config *cfg);
void store_close(struct store *s, const struct carmyd_config *cfg,
		 bool remove);
int store_new_owner(struct store *s, uint32_t *id);
int store_resume(struct store *s, uint32_t owner, pid_t pid, void *conn);
bool store_peer_pid_usable(pid_t pid);
int store_complete(struct store *s, uint32_t entry, uint32_t owner,
		   const uint8_t *exec, int status, int code,
		   const void *data, size_t len);
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
	struct store_op *next;	/* the server's, once done */
	struct store_op *wnext;	/* WAIT: the list of waiters */
	uint8_t ident[3 * CARMY_ID_MAX];
	uint8_t *result;	/* malloc'd copy for COMPLETE */
	/* RESERVE to a shared store that found the identity taken: the
	 * execution standing there (its result is malloc'd; no identity:
	 * it is ours), or taken_rc if it could not be copied. */
	bool taken;
	int taken_rc;
	struct carmy_store_record standing;
};
int store_prepare(struct store *s, struct store_op *op, uint32_t owner,
		  const uint8_t exec[SHM_EXEC_LEN]);
int store_find_uncertain(struct store *s, struct store_op *op,
			 const struct shm_key *k, const uint8_t fp[SHM_FP_LEN],
			 const uint8_t exec[SHM_EXEC_LEN]);
int store_resolve(struct store *s, const struct store_op *op);
bool store_completed_as(struct store *s, uint32_t entry, const uint8_t *exec,
			int status, int code, const void *data, size_t len);
void store_resolve_done(struct store *s, uint32_t entry);
bool store_running(struct store *s, uint32_t entry,
		   const uint8_t exec[SHM_EXEC_LEN]);
int store_find_running(struct store *s, const struct shm_key *k,
		       const uint8_t exec[SHM_EXEC_LEN], uint32_t *entry);
int store_taken(struct store *s, struct store_op *op, uint32_t owner,
		pid_t pid, uint8_t exec[SHM_EXEC_LEN], uint32_t *state);
int store_release_shared(struct store *s, const struct store_op *op,
			 uint32_t owner);
void store_settle(struct store *s, const struct store_op *op);
/* more: the caller submits other requests right after (CARMY_STORE_MORE). */
void store_submit(struct store *s, struct store_op *op, bool more);
int store_purge(struct store *s, uint64_t older_than_ms, uid_t uid, pid_t pid);
void store_sweep_dead(struct store *s, const char *why);
uint32_t store_reclaim(struct store *s);
void store_tick(struct store *s);

/* server.c */
int server_run(struct store *s, const struct carmyd_config *cfg, int lfd);

#endif
