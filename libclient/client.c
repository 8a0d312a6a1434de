/*
 * client.c - libcarmy: the connection to carmyd and the call lifecycle.
 *
 * begin, replay and release run entirely in the shared segment (shm/); only
 * connect and complete talk to carmyd, which is the one writer of recorded
 * results and the judge of which connections are alive. With a durable
 * store (carmyd --store journal:DIR) a reservation and a release are also
 * confirmed by carmyd once its store has recorded them: begin() answers
 * "reserved" only then, so a tool never runs on a reservation that a power
 * loss could forget.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <urcu/uatomic.h>
#include <xxhash.h>

#include "carmy.h"
#include "common/clock.h"
#include "common/execid.h"
#include "common/io.h"
#include "common/sockpath.h"
#include "libclient/canon.h"
#include "libclient/reservation.h"
#include "libclient/trust.h"
#include "libclient/wire.h"
#include "shm/atomic.h"
#include "shm/shm.h"

#define EXPORT __attribute__((visibility("default")))

_Static_assert(EXECID_LEN == SHM_EXEC_LEN, "common/execid.h is the segment's exec id");

/* How long connect waits for carmyd's HELLO reply. */
#define HELLO_TIMEOUT_MS 10000
#define REPLY_MAX 256
/* Looks a begin takes at an identity a shared store holds (see begin). */
#define TAKEN_ROUNDS 4
#define LOOK_AGAIN 1000		/* confirm_reserve(): not a carmy code */
#define GONE_MEANWHILE 1001	/* running_exec(): released meanwhile */
/* How long a begin waits for a durable store's answer to a reservation it
 * found running, before it answers with that one anyway (see begin). */
#define PENDING_WAIT_MS 5000

struct carmy {
	int fd;
	uint32_t owner;			/* atomic: a reconnect may change it */
	uint32_t lost_owner;		/* the one before, if not given back */
	uint32_t pid;
	uint32_t max_result;
	uint32_t epoch;			/* carmyd's start count (atomic) */
	bool durable;			/* confirm reservations with carmyd */
	bool shared;			/* ... whose store other carmyds share */
	bool release_first;		/* ... which a RELEASE reaches before
					 * the entry is given back */
	bool abandon;			/* carmyd takes ABANDON (relaxed) */
	int dead;			/* carmyd declared us gone */
	int reconnect_ms;		/* how long complete/release try */
	uint64_t spin_ns;		/* poll for a reply this long first */
	int ack_check_ms;		/* see CARMY_ACK_CHECK_MS */
	uint32_t ack_slot;		/* our word for RESERVE and COMPLETE
					 * answers, or SHM_ACK_SLOTS and up:
					 * none */
	uint32_t ack_last;		/* what we last saw in it (under io) */
	uint32_t ack_gen;		/* its generation: its mark >> 2 */
	uint32_t bell;			/* our carmyd loop's, or SHM_BELLS and
					 * up: requests are sent, not posted */
	pthread_mutex_t io;		/* one request in flight per handle,
					 * and reconnects */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char shm_name[WIRE_SHM_NAME_MAX];
	struct trust trust;		/* who may run carmyd, at connect */
	uid_t peer;			/* who does: the segment's owner */
	struct shm_view view;
	dev_t seg_dev;			/* the segment mapped: its file, and */
	ino_t seg_ino;
	uint64_t seg_seed;		/* its header's seed and birth, which */
	uint64_t seg_created;		/* a new one at that name differs in */
	int orphaned;			/* the name holds another segment now:
					 * this handle is done (atomic) */
	uint64_t exec_seed;		/* execution ids: keyed hash of a */
	uint8_t exec_key[16];		/* random key, see new_exec_id() */
	uint32_t ticket_cursor;		/* where our next ticket search starts */
	uint32_t ticket_crowd;		/* shm_claim.crowd */
	uint64_t prefault;		/* entries mapped ahead: lo << 32 | hi,
					 * see prefault_ahead() (atomic) */
	struct shm_stats *stats;	/* our stripe of the answer counts */
	uint8_t fp_early;		/* 0..FP_EARLY_MAX, see carmy_begin()
					 * (relaxed atomic) */
	uint64_t fork_gen;		/* fork_gen when connected */
	carmy_t *next, **pprev;		/* in handles, under handles_lock;
					 * pprev NULL while not */
	uint8_t format;			/* CARMY_FORMAT_* of our results
					 * (relaxed atomic) */
};

/*
 * Whether begin() computes the canonical fingerprint before it looks in
 * the table: a two-bit saturating count of this handle's recent begins,
 * up for each that needed the fingerprint (a new identity, or bytes other
 * than the entry's), down for each answered from the raw print alone (a
 * retry of the same bytes). At FP_EARLY_AT or more it is computed early.
 */
#define FP_EARLY_MAX 3
#define FP_EARLY_AT 2

static bool alive(carmy_t *c);
static int owned(carmy_t *c, struct carmy_reservation *r, uint32_t *b,
		 uint64_t *w);
static int hello(int fd, uint32_t owner, uint32_t epoch, int timeout_ms,
		 struct wire_msg *m);
static int reconnect(carmy_t *c, int wait_ms);
static int request(carmy_t *c, int type, msgpack_sbuffer *sb,
		   int timeout_ms);
static int exchange(carmy_t *c, int type, msgpack_sbuffer *sb,
		    int timeout_ms, const uint8_t *exec,
		    const struct shm_post *post, struct wire_msg *reply);
static void take_flags(carmy_t *c, uint32_t flags);
static void take_slot(carmy_t *c, const struct wire_msg *m);
static int await_ack(carmy_t *c, const uint8_t *exec,
		     const msgpack_sbuffer *sb, bool *posted, uint64_t spin_ns);
static bool wait_readable(int fd, int timeout_ms);
static int request_msg(carmy_t *c, int type, msgpack_sbuffer *sb,
		       int timeout_ms, struct wire_msg *reply);
static int confirm_reserve(carmy_t *c, const struct shm_found *f,
			   uint32_t owner, struct carmy_reservation *r);
static int confirm(carmy_t *c, int type, uint32_t entry,
		   const uint8_t exec[SHM_EXEC_LEN], struct wire_msg *reply);
static int absolute(const char *path, char *out, size_t size);
static int dial(const char *path, int *fdp);
static int dial_trusted(carmy_t *c, int *fdp, uid_t *peer);
static int vet_segment(const struct stat *st, void *arg);
static int same_segment(carmy_t *c);
static int recv_msg(int fd, int timeout_ms, uint64_t spin_ns,
		    struct wire_msg *m, uint8_t *buf, size_t cap);
static uint64_t new_exec_id(void *arg, uint8_t out[SHM_EXEC_LEN]);
static inline void count(uint64_t *counter);
static void prefault_ahead(carmy_t *c);
static void prefault_index(carmy_t *c);
static uint64_t mono_ms(void);
static int send_msg(int fd, const void *buf, size_t len);
static int env_int(const char *name, int dflt, int max);

/* ------------------------------------------------------------ fork */

/*
 * A handle belongs to the process that connected it. A child of fork()
 * gets a copy, with the parent's owner id, connection and mapping: a call
 * reserved through it would be the parent's, and would stay running after
 * the child died, for as long as the parent lives. So the copy refuses
 * every call (CARMY_EFORKED) before it reads or writes anything, and says
 * so without a system call (getpid() is one, on a path of a fraction of
 * a microsecond): each fork() bumps fork_gen in the child
 * (pthread_atfork()), a handle keeps the fork_gen it was connected under,
 * and each call compares the two first.
 *
 * The child's copies of the handles' sockets are closed at the fork, too:
 * held open by a child, the parent's connection would outlive the parent,
 * and carmyd would not see it die (and turn its running calls uncertain)
 * before the child did. The connected handles are listed for that, and a
 * listed handle's fd changes only under handles_lock, which fork() holds
 * throughout: the child finds the list and the fds as they were. Not
 * listed, and so kept by a child forked meanwhile: a connection another
 * thread is still opening (carmy_connect(), a reconnect) and a
 * carmy_wait()'s own, which holds no reservation. A child made without
 * fork()'s handlers (a raw clone(), _Fork()) is not told apart.
 */
static uint64_t fork_gen;		/* forks from the first process to this
					 * one (relaxed atomic) */
static pthread_mutex_t fork_watch_lock = PTHREAD_MUTEX_INITIALIZER;
static bool fork_watched;		/* pthread_atfork() done (under the
					 * lock; acquire/release atomic) */
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static carmy_t *handles;		/* the connected ones, under the lock */

static void fork_prepare(void)
{
	pthread_mutex_lock(&handles_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&handles_lock);
}

/* In the child, whose one thread this is. */
static void fork_child(void)
{
	__atomic_store_n(&fork_gen,
			 __atomic_load_n(&fork_gen, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELAXED);
	for (carmy_t *h = handles; h != NULL; h = h->next) {
		if (h->fd >= 0)
			close(h->fd);
		h->fd = -1;
	}
	pthread_mutex_unlock(&handles_lock);
}

/* Set fork()'s handlers up, once in the process's life: 0, or -errno of
 * pthread_atfork(), which the next connect tries again. */
static int fork_watch(void)
{
	int rc = 0;

	if (__atomic_load_n(&fork_watched, __ATOMIC_ACQUIRE))
		return 0;
	pthread_mutex_lock(&fork_watch_lock);
	if (!fork_watched) {
		rc = -pthread_atfork(fork_prepare, fork_parent, fork_child);
		if (rc == 0)
			__atomic_store_n(&fork_watched, true, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&fork_watch_lock);
	return rc;
}

/* Was c connected by another process, of which this is a forked child? */
static inline bool forked(const carmy_t *c)
{
	return __atomic_load_n(&fork_gen, __ATOMIC_RELAXED) != c->fork_gen;
}

/* List c, connected: from now on a fork closes the child's copy of c->fd. */
static void handle_list(carmy_t *c)
{
	pthread_mutex_lock(&handles_lock);
	c->next = handles;
	if (handles != NULL)
		handles->pprev = &c->next;
	handles = c;
	c->pprev = &handles;
	pthread_mutex_unlock(&handles_lock);
}

/* Unlist c (if it was) and close its socket, in one step for fork(). */
static void handle_unlist(carmy_t *c)
{
	pthread_mutex_lock(&handles_lock);
	if (c->pprev != NULL) {
		*c->pprev = c->next;
		if (c->next != NULL)
			c->next->pprev = c->pprev;
		c->pprev = NULL;
	}
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	pthread_mutex_unlock(&handles_lock);
}

/* c's connection is fd from now on (a reconnect): the old one is closed. */
static void handle_set_fd(carmy_t *c, int fd)
{
	pthread_mutex_lock(&handles_lock);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = fd;
	pthread_mutex_unlock(&handles_lock);
}

/* ------------------------------------------------------------ connect */

/* Why this thread's last CARMY_EUNTRUSTED was (carmy_trust_detail()). */
static __thread char trust_why[TRUST_WHY_MAX];

EXPORT int carmy_default_socket(char *buf, size_t size)
{
	return sockpath_client(buf, size, SOCKPATH_SYSTEM);
}

EXPORT int carmy_connect(carmy_t **out, const char *socket_path)
{
	char dflt[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char path[sizeof(dflt)];
	struct wire_msg m;
	carmy_t *c;
	int rc;

	if (out == NULL)
		return -EINVAL;
	*out = NULL;
	rc = fork_watch();
	if (rc != 0)
		return rc;
	if (socket_path == NULL) {
		rc = carmy_default_socket(dflt, sizeof(dflt));
		if (rc < 0)
			return rc;
		socket_path = dflt;
	}
	rc = absolute(socket_path, path, sizeof(path));
	if (rc != 0)
		return rc;
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return -ENOMEM;
	c->fd = -1;
	c->fork_gen = __atomic_load_n(&fork_gen, __ATOMIC_RELAXED);
	strcpy(c->path, path);
	c->reconnect_ms = env_int("CARMY_RECONNECT_MS", CARMY_RECONNECT_MS,
				  3600 * 1000);
	c->spin_ns = 1000ull * (uint64_t)env_int("CARMY_SPIN_US",
						 CARMY_SPIN_US, 10000);
	c->ack_check_ms = env_int("CARMY_ACK_CHECK_MS", CARMY_ACK_CHECK_MS,
				  3600 * 1000);
	if (c->ack_check_ms == 0)
		c->ack_check_ms = 1;
	pthread_mutex_init(&c->io, NULL);
	if (getrandom(c->exec_key, sizeof(c->exec_key), 0) !=
		    (ssize_t)sizeof(c->exec_key) ||
	    getrandom(&c->exec_seed, sizeof(c->exec_seed), 0) !=
		    (ssize_t)sizeof(c->exec_seed)) {
		rc = -errno;
		goto fail;
	}

	rc = trust_init(&c->trust, trust_why, sizeof(trust_why));
	if (rc != 0)
		goto fail;
	rc = dial_trusted(c, &c->fd, &c->peer);
	if (rc != 0)
		goto fail;
	rc = hello(c->fd, 0, 0, HELLO_TIMEOUT_MS, &m);
	if (rc != 0)
		goto fail;
	strcpy(c->shm_name, m.u.hello_ok.shm_name);
	rc = shm_map_vetted(c->shm_name, true, vet_segment, c, &c->view);
	if (rc != 0)
		goto fail;
	c->seg_seed = shm_header(&c->view)->sh_seed;
	c->seg_created = shm_header(&c->view)->sh_created_ns;
	if (c->view.geo.max_result != m.u.hello_ok.max_result) {
		rc = CARMY_EPROTOCOL;
		goto fail;
	}
	c->owner = m.u.hello_ok.owner;
	c->max_result = m.u.hello_ok.max_result;
	c->epoch = m.u.hello_ok.epoch;
	take_flags(c, m.u.hello_ok.flags);
	take_slot(c, &m);
	prefault_index(c);
	/* Owners start their ticket searches far apart. */
	c->ticket_cursor = (uint32_t)((uint64_t)c->owner * 2654435761u %
				      c->view.geo.capacity);
	c->pid = (uint32_t)getpid();
	/* Every other stripe: CPUs fetch lines in pairs (the adjacent-line
	 * prefetcher), so handles counting in neighbouring stripes would
	 * still pull each other's line away. */
	c->stats = &c->view.stats[(c->owner * 2) % SHM_STATS_STRIPES];
	/* A handle's first calls are most likely new. */
	c->fp_early = FP_EARLY_AT;
	handle_list(c);
	*out = c;
	return 0;
fail:
	carmy_close(c);
	return rc;
}

EXPORT const char *carmy_trust_detail(void)
{
	return trust_why;
}

/*
 * A handle closed after it lost carmyd (carmyd restarted, or is down, or
 * died and is not back and the handle gave up on it; or its segment was
 * replaced): a carmyd that comes back keeps this handle's running calls
 * running while this process runs (--grace at most), for it to come back
 * with their results. It will not now: they are given up here in the
 * segment, as carmy_abandon() has carmyd do (shm_abandon()), uncertain
 * from now on. (A carmyd still serving the connection makes the same
 * change when it sees it close; one CAS wins.) A handle carmyd still hears
 * from needs none of it.
 */
static void abandon_left(carmy_t *c)
{
	const struct shm_view *v = &c->view;
	uint32_t owner = uatomic_read(&c->owner);
	bool served;

	if (v->base == NULL || c->pid == 0)
		return;
	/* Liveness first: a carmyd that restarted took the word after it
	 * wrote its epoch, so an epoch read after it is that carmyd's. */
	served = shm_daemon_alive(shm_header(v)) &&
		 uatomic_read(&shm_header(v)->sh_epoch) ==
			 uatomic_read(&c->epoch) &&
		 !uatomic_read(&c->dead) && !uatomic_read(&c->orphaned);
	if (served)
		return;
	for (uint32_t e = 0; e < v->geo.capacity; e++) {
		uint64_t t = uatomic_read(&v->tickets[e]);
		uint8_t exec[SHM_EXEC_LEN];

		if (SHM_T_WHAT(t) != owner || SHM_T_PID(t) != c->pid)
			continue;
		/* Ours while running: nobody else writes it. */
		memcpy(exec, shm_entry_at(v, e)->en_exec, sizeof(exec));
		(void)shm_abandon(v, e, owner, exec);
	}
}

/*
 * Nothing is sent, and the socket is closed, not shut down: in a forked
 * child (whose copy of the socket was closed at the fork already) this
 * frees the child's copy of the handle and leaves the parent's connection
 * as it was. The copy's io lock may have been held by a thread the child
 * does not have: it is left as it is.
 */
EXPORT void carmy_close(carmy_t *c)
{
	if (c == NULL)
		return;
	if (!forked(c))
		abandon_left(c);
	handle_unlist(c);
	shm_unmap(&c->view);
	if (!forked(c))
		pthread_mutex_destroy(&c->io);
	free(c);
}

EXPORT int carmy_set_result_format(carmy_t *c, int format)
{
	if (c == NULL)
		return -EINVAL;
	if (forked(c))
		return CARMY_EFORKED;
	if (format != CARMY_FORMAT_BYTES && format != CARMY_FORMAT_EXIT_OUTPUT)
		return -EINVAL;
	__atomic_store_n(&c->format, (uint8_t)format, __ATOMIC_RELAXED);
	return 0;
}

EXPORT size_t carmy_max_result(const carmy_t *c)
{
	return c->max_result;
}

EXPORT int carmy_durable(const carmy_t *c)
{
	return __atomic_load_n(&c->durable, __ATOMIC_RELAXED) ? 1 : 0;
}

/* ------------------------------------------------------------ calls */

/* One begin's outcome for the fp_early count: did it need the canonical
 * fingerprint? Relaxed: threads sharing a handle may lose a step. */
static void fp_early_note(carmy_t *c, bool needed)
{
	uint8_t v = __atomic_load_n(&c->fp_early, __ATOMIC_RELAXED), nv;

	nv = needed ? (v < FP_EARLY_MAX ? v + 1 : v) : (v > 0 ? v - 1 : 0);
	if (nv != v)
		__atomic_store_n(&c->fp_early, nv, __ATOMIC_RELAXED);
}

EXPORT void carmy_reservation_clear(struct carmy_reservation *r)
{
	if (r == NULL)
		return;
	free(r->result);
	memset(r, 0, sizeof(*r));
}

/*
 * carmy_begin(), and carmy_try_begin() when try is set: then nothing waits
 * for carmyd. Whatever needs its answer (connecting again, a durable
 * store's record of a reservation, a reservation it has not yet recorded,
 * a reclaim) ends the call with -EAGAIN instead, before anything is
 * reserved. With a durable store no canonical fingerprint is given to
 * shm_reserve(), which claims nothing without one: a new identity (or
 * other bytes than the recorded call's) then answers SHM_OUT_NEED_FP.
 */
static int begin(carmy_t *c, const struct carmy_call *call,
		 struct carmy_reservation *r, bool try)
{
	uint8_t fp[SHM_FP_LEN], raw[SHM_FP_LEN];
	struct shm_summary summary;
	struct shm_claim claim;
	struct shm_found f;
	struct shm_result res;
	struct shm_key key;
	bool early, durable, asked = false;
	uint64_t pending_until = 0;
	int rc;

	if (c == NULL || call == NULL || r == NULL)
		return -EINVAL;
	if (forked(c))
		return CARMY_EFORKED;
	carmy_reservation_clear(r);
	/* carmyd restarted, or dropped us: one attempt to get back (a new
	 * call fails closed at once if no carmyd answers). */
	if (!alive(c)) {
		if (try)
			return -EAGAIN;
		rc = reconnect(c, 0);
		if (rc != 0)
			return rc;
	}
	/* Read once: a reconnect on another thread may change it, and one
	 * begin must not take two roads (a try that blocks). */
	durable = __atomic_load_n(&c->durable, __ATOMIC_RELAXED);
	rc = shm_key_init(&key, c->view.seed, call->principal,
			  call->principal_len, call->session, call->session_len,
			  call->request_id, call->request_id_len);
	if (rc != 0)
		return rc;
	shm_prefetch_home(&c->view, &key);
	/* The raw print is enough for a retry of the very same bytes; the
	 * canonical fingerprint is computed only when shm_reserve() asks. */
	rc = canon_rawprint(call, raw);
	if (rc != 0)
		return rc;
	claim.owner = uatomic_read(&c->owner);
	claim.pid = c->pid;
	claim.fp = NULL;
	claim.rawfp = raw;
	/*
	 * A new call needs the canonical fingerprint too. Computed here, it
	 * overlaps the home bucket's cache miss instead of following it: a
	 * reserve takes 0.26 us rather than 0.37 (README, Performance). A
	 * retry of the same bytes does not need it and would only pay for
	 * it (0.12 us rather than 0.08), so it is computed here only while
	 * this handle's recent begins have been new calls (fp_early). If it
	 * fails (bad arguments, no memory), the table is asked as if it had
	 * not been tried, so the answer is the one the late path gives.
	 * The entry such a call claims is asked for first, so that its
	 * lines arrive meanwhile too (a reserve 0.38 us rather than 0.49
	 * on a machine where the CAS floor was 0.16, docs/performance.md).
	 */
	early = !(try && durable) &&
		__atomic_load_n(&c->fp_early, __ATOMIC_RELAXED) >= FP_EARLY_AT;
	if (early) {
		shm_prefetch_claim(&c->view, &c->ticket_cursor);
		if (canon_fingerprint(call, fp) == 0)
			claim.fp = fp;
	}
	claim.make_exec = new_exec_id;
	claim.arg = c;
	claim.cursor = &c->ticket_cursor;
	claim.crowd = &c->ticket_crowd;
	claim.pending = durable;
	claim.hasty = try;
	/* What the call is, for an operator who has to decide about it
	 * (carmyctl list, show): its entry keeps the first bytes. */
	summary.tool = call->tool;
	summary.tool_kept = summary.tool_len = call->tool_len;
	summary.args = call->args;
	summary.args_kept = summary.args_len = call->args_len;
	summary.format = __atomic_load_n(&c->format, __ATOMIC_RELAXED);
	claim.call = &summary;

	for (unsigned taken = 0, reclaimed = 0;;) {
		switch (shm_reserve(&c->view, &key, &claim, &f)) {
		case SHM_OUT_RESERVED:
			if (durable) {
				rc = confirm_reserve(c, &f, claim.owner, r);
				if (rc == LOOK_AGAIN) {
					/* (Again and again only if purges or
					 * other calls keep getting there
					 * first: not forever.) */
					if (++taken < TAKEN_ROUNDS)
						continue;
					return CARMY_EUNAVAILABLE;
				}
				if (rc != 0)
					return rc;
			}
			execid_format(r->execution_id, f.exec);
			r->state = CARMY_STATE_RUNNING;
			resv_set(r, f.entry, claim.owner);
			count(&c->stats->st_reserves);
			fp_early_note(c, true);
			prefault_ahead(c);
			return CARMY_RESERVED;
		case SHM_OUT_FULL:
			count(&c->stats->st_capacity);
			return CARMY_ECAPACITY;
		case SHM_OUT_NOFREE:
			/* Tickets are left but released entries' tombstones
			 * fill the index: have carmyd reclaim them, once. */
			if (reclaimed) {
				count(&c->stats->st_capacity);
				return CARMY_ECAPACITY;
			}
			if (try)
				return -EAGAIN;
			reclaimed = 1;
			rc = request(c, WIRE_RECLAIM, NULL, -1);
			if (rc != 0)
				return rc;
			continue;
		case SHM_OUT_BUSY:
			/* A try that would wait for carmyd's move goes to
			 * carmy_begin(), which waits longer. */
			return try ? -EAGAIN : CARMY_EUNAVAILABLE;
		case SHM_OUT_NODAEMON:
			/* Stopped, or gone for good: a carmyd that comes back
			 * on a new segment never says so in this one. */
			rc = same_segment(c);
			return rc != 0 ? rc : CARMY_EUNAVAILABLE;
		case SHM_OUT_DEAD:
			uatomic_set(&c->dead, 1);
			return CARMY_EDISCONNECTED;
		case SHM_OUT_NEED_FP:
			if (try && durable)
				return -EAGAIN;
			rc = canon_fingerprint(call, fp);
			if (rc != 0)
				return rc;
			claim.fp = fp;
			asked = true;
			continue;
		case SHM_OUT_FOUND:
			/* Running, but the store had not yet said whether
			 * that reservation stands when we saw it: wait for
			 * it (a while), then look again rather than name an
			 * execution that a shared store may yet refuse; nor
			 * answer with f, as the entry may since hold another
			 * state (a result the store's answer brought). A
			 * reservation the store had answered is named at
			 * once, without carmyd. */
			if (f.state == SHM_RUNNING && durable && f.pending) {
				uint64_t now;

				if (try)
					return -EAGAIN;
				now = mono_ms();
				if (pending_until == 0)
					pending_until = now + PENDING_WAIT_MS;
				if (now < pending_until) {
					(void)shm_wait_pending(&c->view,
						f.entry, f.exec,
						(int)(pending_until - now));
					continue;
				}
			}
			/* Found from the raw print alone, unless asked: with
			 * an early fingerprint this cannot tell, and counts a
			 * conflict's other bytes as a retry's same ones. */
			fp_early_note(c, asked);
			break;
		}
		r->state = f.state == SHM_RUNNING   ? CARMY_STATE_RUNNING :
			   f.state == SHM_COMPLETED ? CARMY_STATE_COMPLETED :
						      CARMY_STATE_INTERRUPTED;
		if (!f.same_fp || f.state != SHM_COMPLETED) {
			execid_format(r->execution_id, f.exec);
			count(f.same_fp ? &c->stats->st_uncertain :
					  &c->stats->st_conflicts);
			return f.same_fp ? CARMY_EUNCERTAIN : CARMY_ECONFLICT;
		}
		rc = shm_read_result(&c->view, f.entry, f.bucket, f.word,
				     &res);
		if (rc == -EAGAIN)
			continue;	/* changed while copied: look again */
		if (rc != 0)
			return rc;
		execid_format(r->execution_id, res.exec);
		r->status = res.status;
		r->result_code = res.result_code;
		r->result = res.data;
		r->result_len = res.len;
		count(&c->stats->st_replays);
		return CARMY_REPLAY;
	}
}

EXPORT int carmy_begin(carmy_t *c, const struct carmy_call *call,
		       struct carmy_reservation *r)
{
	return begin(c, call, r, false);
}

EXPORT int carmy_try_begin(carmy_t *c, const struct carmy_call *call,
			   struct carmy_reservation *r)
{
	return begin(c, call, r, true);
}

/*
 * A reservation f just made in the segment, for a durable store: have
 * carmyd record it. Returns 0 once it stands; LOOK_AGAIN when a shared
 * store held the identity completed already (carmyd gave f back and put
 * that execution in its place), or when f was given back before carmyd
 * looked at it (CARMY_ENOT_RESERVED); or the answer, r filled, when it
 * holds it running elsewhere (CARMY_EUNCERTAIN, CARMY_ECONFLICT: carmyd gave f
 * back); or an error: not recorded, so not reserved, and the tool must not
 * run; f is given back unless it was sent again (below).
 *
 * With a shared store, a lost answer is not taken for a refusal: the store
 * may have recorded it, and every instance would then find it held by a
 * call that never ran. The same RESERVE is sent again once reconnected
 * (the store knows its own execution id); an owner id not given back
 * leaves f to be swept uncertain here, as the store may have it.
 */
static int confirm_reserve(carmy_t *c, const struct shm_found *f,
			   uint32_t owner, struct carmy_reservation *r)
{
	bool resent = false;
	struct wire_msg m;
	int rc;

	memset(&m, 0, sizeof(m));
	rc = confirm(c, WIRE_RESERVE, f->entry, f->exec, &m);
	if (rc == CARMY_EDISCONNECTED && c->shared) {
		if (reconnect(c, c->reconnect_ms) != 0 ||
		    uatomic_read(&c->owner) != owner)
			return CARMY_EDISCONNECTED;
		memset(&m, 0, sizeof(m));
		rc = confirm(c, WIRE_RESERVE, f->entry, f->exec, &m);
		if (rc == CARMY_EDISCONNECTED)
			return rc;
		resent = true;
	}
	if (rc == CARMY_REPLAY && c->shared)
		return LOOK_AGAIN;
	if ((rc == CARMY_EUNCERTAIN || rc == CARMY_ECONFLICT) &&
	    m.u.reply.taken) {
		r->state = (int)m.u.reply.state;
		execid_format(r->execution_id, m.u.reply.exec);
		count(rc == CARMY_EUNCERTAIN ? &c->stats->st_uncertain :
					       &c->stats->st_conflicts);
		return rc;
	}
	if (rc > 0)
		rc = CARMY_EPROTOCOL;
	/* Not ours any more: carmyd gave f back before it looked at it (a
	 * carmyd that restarted found that its store never recorded f, and
	 * this is f sent again). Nothing ran: look again. */
	if (rc == CARMY_ENOT_RESERVED && c->shared &&
	    shm_state_as(&c->view, f->entry, f->exec) != SHM_RUNNING)
		return LOOK_AGAIN;
	/* Sent again and refused (the store failed, timed out): the first
	 * one may still stand in the store. f is kept, running and
	 * pending, for carmyd to give back once it has released it in the
	 * store (store_owe_release()); given back now, the store's record
	 * of it could hold the identity everywhere with nothing here to
	 * settle it. */
	if (rc != 0 && resent)
		return rc;
	if (rc != 0) {
		/* Give f back if it is still ours, this execution's: carmyd
		 * may have given it back before the answer was lost, and
		 * another call of ours taken it since. Callers waiting to
		 * learn whether it stands look again. */
		shm_withdraw_pending(&c->view, f->entry, f->exec);
		shm_release_as(&c->view, f->entry, owner, f->exec);
	}
	return rc;
}

/* A COMPLETE, always sent: its success is told in our slot if the store
 * is durable. */
static int complete_msg(carmy_t *c, const uint8_t exec[SHM_EXEC_LEN],
			msgpack_sbuffer *sb)
{
	struct wire_msg m;

	return exchange(c, WIRE_COMPLETE, sb, -1, exec, NULL, &m);
}

/*
 * Did carmyd do what r's handle asked before it went away, its answer
 * lost? A carmyd that came back without giving us our owner id back
 * cannot tell us (it holds an owner for its running entries only, and r's
 * may have been the last), but the segment can: r's entry completed as
 * r's execution with this very result, or, after a release, no longer r's
 * execution's at all (carmyd frees a released entry once it is recorded;
 * nothing else frees a running one). Only once the id was lost: with it,
 * carmyd answers a request sent again.
 */
static bool completed_meanwhile(carmy_t *c, const struct carmy_reservation *r,
				int status, int code, const void *data,
				size_t len)
{
	uint8_t exec[SHM_EXEC_LEN];
	bool same = false;

	return resv_owner(r) == uatomic_read(&c->lost_owner) &&
	       execid_parse(r->execution_id, exec) == 0 &&
	       shm_look_as(&c->view, resv_entry(r), exec, status, code, data,
			   len, &same) == SHM_COMPLETED && same;
}

static bool released_meanwhile(carmy_t *c, const struct carmy_reservation *r,
			       const uint8_t exec[SHM_EXEC_LEN])
{
	return resv_owner(r) == uatomic_read(&c->lost_owner) &&
	       shm_look_as(&c->view, resv_entry(r), exec, 0, 0, NULL, 0,
			   NULL) == SHM_FREE;
}

/*
 * rc, what a reconnect() for r's sake failed with (or CARMY_EDISCONNECTED:
 * a request sent again once back broke too), as the request's answer.
 * While the handle holds r's owner id, carmyd has not said r is gone: one
 * that answered nothing (not there yet, starting, stopping) or was full
 * may yet come back, and holds a live client's calls for it (its
 * --grace): r stays live, and the caller is told CARMY_EUNAVAILABLE, to
 * ask again. With the id lost, the segment another's (orphaned), or an
 * answer no retry will change (another layout, not to be trusted...), r is
 * gone: CARMY_EDISCONNECTED.
 */
static int away(carmy_t *c, const struct carmy_reservation *r, int rc)
{
	bool may_come_back = rc == CARMY_EUNAVAILABLE ||
			     rc == CARMY_ETOO_MANY_CLIENTS ||
			     rc == CARMY_EDISCONNECTED;

	if (may_come_back && !uatomic_read(&c->orphaned) &&
	    uatomic_read(&c->owner) == resv_owner(r) &&
	    uatomic_read(&c->lost_owner) != resv_owner(r))
		return CARMY_EUNAVAILABLE;
	return CARMY_EDISCONNECTED;
}

/*
 * A request about r found its connection broken (carmyd restarting?): get
 * back to carmyd. 0 when back with r's owner id, for the request to be
 * sent again (if the first got through, carmyd says so); else what to
 * answer, as away() tells it.
 */
static int back_for(carmy_t *c, const struct carmy_reservation *r)
{
	int rc = reconnect(c, c->reconnect_ms);

	if (rc != 0)
		return away(c, r, rc);
	return uatomic_read(&c->owner) == resv_owner(r) ? 0 :
							  CARMY_EDISCONNECTED;
}

/* confirm() of a request about r (RELEASE, ABANDON), sent again once back
 * with r's owner id if its connection broke (back_for(); carmyd answers 0
 * if the first got through). */
static int confirm_again(carmy_t *c, const struct carmy_reservation *r,
			 int type, const uint8_t exec[SHM_EXEC_LEN])
{
	int rc = confirm(c, type, resv_entry(r), exec, NULL);

	if (rc != CARMY_EDISCONNECTED)
		return rc;
	rc = back_for(c, r);
	if (rc == 0) {
		rc = confirm(c, type, resv_entry(r), exec, NULL);
		if (rc == CARMY_EDISCONNECTED)
			rc = away(c, r, rc);
	}
	return rc;
}

EXPORT int carmy_complete(carmy_t *c, struct carmy_reservation *r, int status,
			  const void *result, size_t len)
{
	uint8_t exec[SHM_EXEC_LEN];
	struct shm_entry *en;
	msgpack_sbuffer sb;
	int code = 0, rc;
	uint32_t b;
	uint64_t w;

	if (c == NULL || r == NULL || (result == NULL && len > 0))
		return -EINVAL;
	if (forked(c))
		return CARMY_EFORKED;
	if (status < CARMY_STATUS_COMPLETED || status > CARMY_STATUS_CANCELLED)
		return CARMY_EINVALID_STATUS;
	if (len > c->max_result) {
		/* Recorded, not dropped: the call failed with this code. */
		status = CARMY_STATUS_FAILED;
		code = CARMY_ERESULT_TOO_LARGE;
		result = NULL;
		len = 0;
	}
	rc = owned(c, r, &b, &w);
	if (rc == CARMY_EDISCONNECTED &&
	    completed_meanwhile(c, r, status, code, result, len)) {
		resv_done(r);
		return code;
	}
	if (rc != 0)
		return rc;
	en = shm_entry_at(&c->view, resv_entry(r));
	memcpy(exec, en->en_exec, sizeof(exec));

	msgpack_sbuffer_init(&sb);
	rc = wire_put_complete(&sb, resv_entry(r), exec, status, code, result,
			       len);
	if (rc == 0)
		rc = complete_msg(c, exec, &sb);
	if (rc == CARMY_EDISCONNECTED) {
		rc = back_for(c, r);
		if (rc == 0) {
			rc = complete_msg(c, exec, &sb);
			if (rc == CARMY_EDISCONNECTED)
				rc = away(c, r, rc);
		}
	}
	msgpack_sbuffer_destroy(&sb);
	if (rc == CARMY_EDISCONNECTED &&
	    completed_meanwhile(c, r, status, code, result, len))
		rc = 0;
	if (rc != 0)
		return rc;
	resv_done(r);
	return code;
}

/*
 * Release with a durable store, the store first, then the entry, which
 * carmyd gives back once the store has forgotten the execution.
 *
 * A store other carmyds share must hear of it first: the other way round,
 * a call of this process could reserve the identity again in between and
 * find its own withdrawn execution in the store (uncertain, for nothing).
 * If the store did not hear of it, the reservation stays as it was and
 * release may be called again; a carmyd that went away after the store
 * forgot it leaves the entry to be swept uncertain with the rest of this
 * handle's calls if the owner id is not given back (it never runs twice).
 *
 * A store of carmyd's own (the journal) is told first when carmyd takes
 * it so (WIRE_F_RELEASE_FIRST): freed first, the entry could be claimed by
 * another call before carmyd checked that the RELEASE named a call given
 * back (released_here()), and the release would fail for nothing. Here a
 * store that failed it has carmyd give the entry back anyway
 * (STORE_FAILED: free on this host, after a reboot interrupted), and with
 * no carmyd to tell, the entry is given back here, as it was before a
 * release went first.
 */
static int release_first(carmy_t *c, struct carmy_reservation *r,
			 const uint8_t exec[SHM_EXEC_LEN])
{
	int rc = confirm_again(c, r, WIRE_RELEASE, exec);

	if (rc == CARMY_EDISCONNECTED && released_meanwhile(c, r, exec))
		rc = 0;
	if (c->shared) {
		if (rc == 0)
			resv_done(r);
		return rc;
	}
	if (rc != 0 && rc != CARMY_ESTORE) {
		int own = shm_release(&c->view, resv_entry(r), resv_owner(r));

		if (own != 0)
			return own;
		rc = CARMY_ESTORE;
	}
	resv_done(r);
	return rc;
}

/* What release and abandon check first: r is a live reservation of c's,
 * running, in the process that connected c; its execution id into exec.
 * 0, GONE_MEANWHILE (a release got through before carmyd went away:
 * released_meanwhile()), or the code to return. */
static int running_exec(carmy_t *c, struct carmy_reservation *r,
			uint8_t exec[SHM_EXEC_LEN])
{
	uint32_t b;
	uint64_t w;
	int rc;

	if (c == NULL || r == NULL)
		return -EINVAL;
	if (forked(c))
		return CARMY_EFORKED;
	rc = owned(c, r, &b, &w);
	if (rc == CARMY_EDISCONNECTED && execid_parse(r->execution_id,
						      exec) == 0 &&
	    released_meanwhile(c, r, exec))
		return GONE_MEANWHILE;
	if (rc != 0)
		return rc;
	/* Ours while running: nobody else writes it. */
	memcpy(exec, shm_entry_at(&c->view, resv_entry(r))->en_exec,
	       SHM_EXEC_LEN);
	return 0;
}

EXPORT int carmy_release(carmy_t *c, struct carmy_reservation *r)
{
	uint8_t exec[SHM_EXEC_LEN];
	int rc = running_exec(c, r, exec);

	if (rc == GONE_MEANWHILE) {
		resv_done(r);
		return 0;
	}
	if (rc != 0)
		return rc;
	if (c->release_first)
		return release_first(c, r, exec);
	rc = shm_release(&c->view, resv_entry(r), resv_owner(r));
	if (rc != 0)
		return rc;
	resv_done(r);
	if (!__atomic_load_n(&c->durable, __ATOMIC_RELAXED)) {
		/* Free already; told, carmyd hands the identity to anyone
		 * waiting for it now rather than at its next tick. Its
		 * answer is waited for as a completion's is: giving up on
		 * it would leave a reply in flight on the connection, which
		 * could only be dropped, and carmyd would take the dropped
		 * connection for this process dying and turn every call it
		 * still runs uncertain. */
		(void)confirm(c, WIRE_RELEASE, resv_entry(r), exec, NULL);
		return 0;
	}
	/* Released in the segment, so the identity is free on this host
	 * already; the store hears of it too, or after a reboot it would be
	 * uncertain instead of free (never run twice either way). If the
	 * connection broke (carmyd restarting?), tell the one that comes
	 * back: a RELEASE needs no owner, only the entry given back, still
	 * holding this execution id (daemon/store.c: released_here()). */
	rc = confirm(c, WIRE_RELEASE, resv_entry(r), exec, NULL);
	if (rc == CARMY_EDISCONNECTED && reconnect(c, c->reconnect_ms) == 0)
		rc = confirm(c, WIRE_RELEASE, resv_entry(r), exec, NULL);
	/* Free here either way: what failed is the store's record of it. */
	return rc == 0 ? 0 : CARMY_ESTORE;
}

EXPORT int carmy_abandon(carmy_t *c, struct carmy_reservation *r)
{
	uint8_t exec[SHM_EXEC_LEN];
	int rc = running_exec(c, r, exec);

	if (rc == GONE_MEANWHILE) {
		resv_done(r);			/* released, not running */
		return CARMY_ENOT_RESERVED;
	}
	if (rc != 0)
		return rc;
	if (!__atomic_load_n(&c->abandon, __ATOMIC_RELAXED))
		return -ENOTSUP;	/* an older carmyd */
	/* Given a new owner id, carmyd takes the old owner for dead and makes
	 * the entry uncertain itself; with no carmyd yet, r stays live, to
	 * abandon again or to leave to the handle's close. */
	rc = confirm_again(c, r, WIRE_ABANDON, exec);
	if (rc == 0 || (rc == CARMY_EDISCONNECTED &&
			uatomic_read(&c->lost_owner) == resv_owner(r)))
		resv_done(r);
	return rc;
}

EXPORT int carmy_wait(carmy_t *c, const struct carmy_call *call,
		      struct carmy_reservation *r, int timeout_ms)
{
	/* In nanoseconds, and what is left rounded up to carmyd: in whole
	 * milliseconds on both sides, the wait could end up to a
	 * millisecond before its deadline. */
	uint64_t deadline = clock_mono_ns() +
			    (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000u;

	if (c == NULL || call == NULL || r == NULL)
		return -EINVAL;
	if (forked(c))
		return CARMY_EFORKED;
	for (;;) {
		const void *part[3] = { call->principal, call->session,
					call->request_id };
		const size_t len[3] = { call->principal_len, call->session_len,
					call->request_id_len };
		uint8_t exec[SHM_EXEC_LEN], buf[REPLY_MAX];
		struct wire_msg m;
		msgpack_sbuffer sb;
		uint64_t left;
		int rc = carmy_begin(c, call, r), fd = -1, wrc;

		left = deadline - clock_mono_ns();
		if (rc != CARMY_EUNCERTAIN || r->state != CARMY_STATE_RUNNING ||
		    (int64_t)left <= 0)
			return rc;
		left = (left + 999999u) / 1000000u;	/* ms, rounded up */
		if (execid_parse(r->execution_id, exec) != 0)
			return CARMY_EPROTOCOL;
		/* A connection of its own: the wait does not hold up other
		 * requests on c, and closing it ends the wait. */
		/* A stalled carmyd holds this up no longer than the answer
		 * below may take: the deadline, and a second. */
		wrc = dial_trusted(c, &fd, NULL);
		/* A carmyd on another segment knows nothing of ours. */
		if (wrc == 0 && (wrc = same_segment(c)) != 0) {
			close(fd);
			return wrc;
		}
		if (wrc == 0)
			wrc = hello(fd, 0, 0,
				    left + 1000 < HELLO_TIMEOUT_MS ?
					    (int)(left + 1000) :
					    HELLO_TIMEOUT_MS, &m);
		msgpack_sbuffer_init(&sb);
		if (wrc == 0)
			wrc = wire_put_settle(&sb, WIRE_WAIT, part, len, exec,
					      NULL, 0, 0, NULL, 0,
					      (uint32_t)left);
		if (wrc == 0)
			wrc = send_msg(fd, sb.data, sb.size);
		msgpack_sbuffer_destroy(&sb);
		/* carmyd answers by the deadline (its tick is 100 ms); a
		 * second more is for carmyd going away meanwhile (never past
		 * INT_MAX, where it would turn into forever). */
		if (wrc == 0) {
			uint64_t ms = left + 1000;

			wrc = recv_msg(fd, ms > INT_MAX ? INT_MAX : (int)ms, 0,
				       &m, buf, sizeof(buf));
		}
		if (fd >= 0)
			close(fd);
		if (wrc == 0 && m.type == WIRE_WAIT &&
		    m.u.reply.code == -ETIMEDOUT)
			return rc;
		if (wrc == CARMY_EUNTRUSTED)
			return wrc;	/* trust_why says why */
		if (wrc != 0 || m.type != WIRE_WAIT ||
		    (m.u.reply.code != 0 && m.u.reply.code != -ETIMEDOUT))
			return rc;	/* no carmyd to wait with: as begin */
		/* It stopped running: ask the table what it became. */
	}
}

EXPORT int carmy_resolve(carmy_t *c, const struct carmy_call *call,
			 const char *execution_id, int committed, int status,
			 const void *result, size_t len)
{
	const void *part[3];
	size_t plen[3];
	uint8_t fp[SHM_FP_LEN], exec[SHM_EXEC_LEN];
	msgpack_sbuffer sb;
	int rc;

	if (c == NULL || call == NULL || execution_id == NULL ||
	    (result == NULL && len > 0))
		return -EINVAL;
	if (forked(c))
		return CARMY_EFORKED;
	if (committed &&
	    (status < CARMY_STATUS_COMPLETED || status > CARMY_STATUS_CANCELLED))
		return CARMY_EINVALID_STATUS;
	part[0] = call->principal;
	part[1] = call->session;
	part[2] = call->request_id;
	plen[0] = call->principal_len;
	plen[1] = call->session_len;
	plen[2] = call->request_id_len;
	for (int i = 0; i < 3; i++)
		if (part[i] == NULL || plen[i] == 0 || plen[i] > CARMY_ID_MAX)
			return CARMY_EINVALID_ID;
	if (execid_parse(execution_id, exec) != 0)
		return -EINVAL;
	if (committed && len > c->max_result)
		return CARMY_ERESULT_TOO_LARGE;	/* nothing is recorded */
	rc = canon_fingerprint(call, fp);
	if (rc != 0)
		return rc;
	if (!alive(c)) {
		rc = reconnect(c, c->reconnect_ms);
		if (rc != 0)
			return rc;
	}
	msgpack_sbuffer_init(&sb);
	rc = wire_put_settle(&sb, WIRE_RESOLVE, part, plen, exec, fp,
			     committed, committed ? status : 0, result,
			     committed ? len : 0, 0);
	if (rc == 0)
		rc = request(c, WIRE_RESOLVE, &sb, -1);
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

/* ------------------------------------------------------------ helpers */

/*
 * Is r a running reservation of this handle, still ours to complete or
 * release? After carmyd restarted, first get our owner id back (trying for
 * reconnect_ms): a tool that is running must be able to record its result.
 * Returns 0 with the entry's bucket and word, CARMY_ENOT_RESERVED, or
 * CARMY_EDISCONNECTED when it was ours but no longer is (the entry is then
 * uncertain).
 */
static int owned(carmy_t *c, struct carmy_reservation *r, uint32_t *b,
		 uint64_t *w)
{
	uint32_t owner;

	if (resv_owner(r) == 0)
		return CARMY_ENOT_RESERVED;
	if (!alive(c)) {
		int back = reconnect(c, c->reconnect_ms);

		if (back != 0)
			return away(c, r, back);
	}
	owner = uatomic_read(&c->owner);
	if (resv_owner(r) != owner)
		return resv_owner(r) == uatomic_read(&c->lost_owner) ?
			       CARMY_EDISCONNECTED : CARMY_ENOT_RESERVED;
	if (!shm_owns(&c->view, resv_entry(r), owner, b, w))
		return alive(c) ? CARMY_ENOT_RESERVED : CARMY_EDISCONNECTED;
	return 0;
}

/* HELLO on fd and its reply, awaited for timeout_ms: a new owner (owner
 * 0), or owner of epoch back. Returns 0 with the reply in *m, or an
 * error. */
static int hello(int fd, uint32_t owner, uint32_t epoch, int timeout_ms,
		 struct wire_msg *m)
{
	uint8_t buf[REPLY_MAX];
	msgpack_sbuffer sb;
	int rc, sent;

	msgpack_sbuffer_init(&sb);
	rc = wire_put_hello(&sb, shm_layout_signature(), owner, epoch);
	sent = rc == 0 ? send_msg(fd, sb.data, sb.size) : rc;
	msgpack_sbuffer_destroy(&sb);
	/* Refused at once (TOO_MANY_CLIENTS), we may find the connection
	 * closed before the HELLO went out: the reason is still there. */
	if (rc == 0)
		rc = recv_msg(fd, timeout_ms, 0, m, buf, sizeof(buf));
	if (rc == 0 && m->type == WIRE_ERROR)
		return m->u.reply.code < 0 ? m->u.reply.code : CARMY_EPROTOCOL;
	if (sent != 0)
		return sent;
	if (rc != 0)
		return rc;
	if (m->type == WIRE_ERROR)
		return m->u.reply.code < 0 ? m->u.reply.code : CARMY_EPROTOCOL;
	if (m->type != WIRE_HELLO || m->u.hello_ok.owner < SHM_OWNER_MIN)
		return CARMY_EPROTOCOL;
	return 0;
}

/*
 * Connect again after carmyd restarted or dropped us, asking for our owner
 * id back so that the reservations we hold stay ours (a restarted carmyd
 * holds it for this process while it runs, --grace at most). If it is not
 * given back we carry on under a new id, and what we held is uncertain.
 * Only to the same segment (same_segment()): a new one means our entries
 * are gone, and this handle with them. Tries for wait_ms while no carmyd answers (a restart
 * takes a moment), backing off from 5 to 100 ms between tries.
 * Returns 0, CARMY_EUNAVAILABLE, CARMY_EDISCONNECTED or an error.
 */
static int reconnect(carmy_t *c, int wait_ms)
{
	uint64_t deadline = mono_ms() + (uint64_t)wait_ms;
	int rc, pause = 5;

	pthread_mutex_lock(&c->io);
	if (alive(c)) {
		pthread_mutex_unlock(&c->io);
		return 0;	/* another thread was first */
	}
	if (uatomic_read(&c->orphaned)) {
		pthread_mutex_unlock(&c->io);
		return CARMY_EDISCONNECTED;
	}
	for (;;) {
		struct wire_msg m;
		bool retry;
		int fd = -1;

		/* A restarted carmyd is checked as the first was. */
		rc = dial_trusted(c, &fd, NULL);
		retry = rc == CARMY_EUNAVAILABLE;
		if (rc == 0) {
			rc = hello(fd, uatomic_read(&c->owner),
				   uatomic_read(&c->epoch), HELLO_TIMEOUT_MS,
				   &m);
			/* Closed on us mid-way: carmyd starting or stopping;
			 * or it is full for the moment. */
			retry = rc == CARMY_EDISCONNECTED ||
				rc == CARMY_EUNAVAILABLE ||
				rc == CARMY_ETOO_MANY_CLIENTS;
			/* Not ours: that carmyd serves another segment, and
			 * ours none (this handle is done). */
			if (rc == 0 &&
			    (strcmp(m.u.hello_ok.shm_name, c->shm_name) != 0 ||
			     m.u.hello_ok.max_result != c->max_result)) {
				uatomic_set(&c->orphaned, 1);
				rc = CARMY_EDISCONNECTED;
			}
			/* The same name may hold a new segment (carmyd
			 * --transient removed ours, or an operator did). */
			if (rc == 0)
				rc = same_segment(c);
			if (rc == 0) {
				handle_set_fd(c, fd);
				if (!(m.u.hello_ok.flags & WIRE_F_RESUMED)) {
					uatomic_set(&c->lost_owner, c->owner);
					uatomic_set(&c->owner,
						    m.u.hello_ok.owner);
				}
				take_flags(c, m.u.hello_ok.flags);
				take_slot(c, &m);
				uatomic_set(&c->epoch, m.u.hello_ok.epoch);
				uatomic_set(&c->dead, 0);
				break;
			}
			close(fd);
		}
		if (!retry || mono_ms() >= deadline)
			break;
		poll(NULL, 0, pause);
		pause = pause < 50 ? pause * 2 : 100;
	}
	pthread_mutex_unlock(&c->io);
	return rc;
}

/*
 * Is carmyd still the one that gave us our owner id? A restarted carmyd
 * bumps the epoch in the header and no longer knows our id: one load tells
 * us, without a system call, that a reservation made now could never be
 * completed, and that the ones we hold are uncertain.
 */
static bool alive(carmy_t *c)
{
	if (uatomic_read(&c->dead) || uatomic_read(&c->orphaned))
		return false;
	if (uatomic_read(&shm_header(&c->view)->sh_epoch) !=
	    uatomic_read(&c->epoch)) {
		uatomic_set(&c->dead, 1);
		return false;
	}
	return true;
}

/*
 * One request and its reply: the message in sb (NULL: a bare RECLAIM),
 * the reply awaited for timeout_ms (-1: however long it takes). Returns
 * the reply's code, or CARMY_EDISCONNECTED / CARMY_EPROTOCOL when the
 * connection failed or the reply was late, after which the handle is dead
 * (a late reply must not be read as the next request's).
 */
static int request(carmy_t *c, int type, msgpack_sbuffer *sb,
		   int timeout_ms)
{
	struct wire_msg m;

	return request_msg(c, type, sb, timeout_ms, &m);
}

/* request(), with the reply in *reply (its pointers into a buffer that is
 * gone: only scalars and arrays may be read). */
static int request_msg(carmy_t *c, int type, msgpack_sbuffer *sb,
		       int timeout_ms, struct wire_msg *reply)
{
	msgpack_sbuffer own;
	int rc;

	if (sb == NULL) {
		msgpack_sbuffer_init(&own);
		rc = wire_put_reclaim(&own);
		if (rc == 0)
			rc = request(c, type, &own, timeout_ms);
		msgpack_sbuffer_destroy(&own);
		return rc;
	}
	return exchange(c, type, sb, timeout_ms, NULL, NULL, reply);
}

/*
 * Send sb and take the answer. With exec (a RESERVE or COMPLETE naming
 * that execution), a durable store and an ack slot, a success is told in
 * the slot and nothing comes on the socket (shm_ack): the wait is on the
 * slot's word, and *reply then holds the bare success. Otherwise the
 * answer is read from the socket.
 */
static int exchange(carmy_t *c, int type, msgpack_sbuffer *sb,
		    int timeout_ms, const uint8_t *exec,
		    const struct shm_post *post, struct wire_msg *reply)
{
	uint8_t buf[REPLY_MAX];
	struct wire_msg m;
	uint64_t spin;
	bool posted;
	int rc;

	pthread_mutex_lock(&c->io);
	/* Another thread's request failed on this connection while we
	 * waited for it: its reply may still come, and must not be read as
	 * ours. */
	if (uatomic_read(&c->dead)) {
		pthread_mutex_unlock(&c->io);
		return CARMY_EDISCONNECTED;
	}
	/* A durable store answers after a flush, far beyond any spin. */
	spin = __atomic_load_n(&c->durable, __ATOMIC_RELAXED) ? 0 : c->spin_ns;
	/* Read under io, which a reconnect holds: the carmyd this goes to
	 * is the one that said whether its store is durable, and gave the
	 * slot. */
	if (c->ack_slot >= SHM_ACK_SLOTS)
		exec = NULL;
	/* Not ours any more (carmyd handed it on: it took this connection
	 * for gone), or written over: start afresh on a new connection. */
	if (exec != NULL &&
	    !shm_ack_expect(&c->view, c->ack_slot, &c->ack_last, exec)) {
		uatomic_set(&c->dead, 1);
		pthread_mutex_unlock(&c->io);
		return CARMY_EDISCONNECTED;
	}
	/* Posted in the slot while the loop serving us is awake: no
	 * send() here, no wake-up and recv() in carmyd. */
	rc = exec != NULL && post != NULL && c->bell < SHM_BELLS ?
		     shm_post(&c->view, c->ack_slot, c->bell, c->ack_gen,
			      post) :
		     SHM_WITHDRAWN;
	if (rc < 0) {	/* the slot is not ours any more */
		uatomic_set(&c->dead, 1);
		pthread_mutex_unlock(&c->io);
		return CARMY_EDISCONNECTED;
	}
	posted = rc == SHM_POSTED;
	rc = posted ? 0 : send_msg(c->fd, sb->data, sb->size);
	for (;;) {
		if (rc == 0 && exec != NULL) {
			rc = await_ack(c, exec, sb, &posted, spin);
			if (rc == SHM_ACK_DONE) {
				pthread_mutex_unlock(&c->io);
				memset(reply, 0, sizeof(*reply));
				reply->type = type;
				return 0;
			}
			if (rc == SHM_ACK_SOCKET)
				rc = 0;
		}
		if (rc == 0)
			rc = recv_msg(c->fd, timeout_ms, spin, &m, buf,
				      sizeof(buf));
		/* Our post was torn by another writer of the segment
		 * (carmyd did nothing with it): send it, once. A RESEND
		 * of a request not posted, or posted no more, is another
		 * writer's doing: out of step, start afresh. */
		if (rc != 0 || m.type != WIRE_RESEND)
			break;
		if (!posted) {
			rc = CARMY_EDISCONNECTED;
			break;
		}
		posted = false;
		rc = shm_ack_expect(&c->view, c->ack_slot, &c->ack_last, exec) ?
			     send_msg(c->fd, sb->data, sb->size) :
			     CARMY_EDISCONNECTED;
	}
	/* Before the next request can go out on this connection: after a
	 * failure, carmyd's ERROR, or a reply of another type (out of step
	 * with carmyd: every later reply would be the one before it), a new
	 * connection starts afresh. */
	if (rc != 0 || m.type == WIRE_ERROR || m.type != type)
		uatomic_set(&c->dead, 1);
	pthread_mutex_unlock(&c->io);
	if (rc != 0)
		return rc == CARMY_EPROTOCOL ? rc : CARMY_EDISCONNECTED;
	if (m.type == WIRE_ERROR)
		return m.u.reply.code < 0 ? m.u.reply.code : CARMY_EPROTOCOL;
	if (m.type != type)
		return CARMY_EPROTOCOL;
	*reply = m;
	return m.u.reply.code;
}

/*
 * The answer to the RESERVE or COMPLETE naming exec just sent:
 * SHM_ACK_DONE when our slot says it succeeded; SHM_ACK_SOCKET once
 * something waits on the socket (a refusal, carmyd's ERROR, or the end of
 * the connection: recv_msg() takes it); or
 * CARMY_EDISCONNECTED when carmyd restarted, whose old connection says
 * nothing more, or the word was written over (the answer may have been
 * there: a new connection starts afresh, and a completion is sent again).
 * The socket is never read before it has something: a read there would
 * wait for ever for a success told in the slot.
 *
 * A dead carmyd cannot write the slot; the socket, closed, says so. So the
 * word is awaited ack_check_ms at a time, and the socket looked at in
 * between; once the word says the answer is on the socket (or futex()
 * cannot wait here), the socket is waited on, ack_check_ms at a time.
 *
 * A request posted in the slot (*posted) that carmyd has not taken by
 * then is taken back and sent (sb), and *posted cleared: a bell that said
 * "awake" wrongly (written over) costs ack_check_ms, never the answer.
 *
 * The word is first looked at for up to spin_ns (a store that is not
 * durable answers within microseconds), yielding the CPU between looks,
 * as recv_msg() polls the socket: the loop that owes the answer may
 * share this CPU.
 */
static int await_ack(carmy_t *c, const uint8_t *exec,
		     const msgpack_sbuffer *sb, bool *posted, uint64_t spin_ns)
{
	for (uint64_t until = spin_ns ? clock_mono_ns() + spin_ns : 0;
	     shm_ack_awaits(&c->view, c->ack_slot, exec) &&
	     clock_mono_ns() < until;)
		sched_yield();
	for (;;) {
		int ack = shm_ack_wait(&c->view, c->ack_slot, &c->ack_last,
				       exec, c->ack_check_ms);

		if (ack == SHM_ACK_DONE)
			return ack;
		if (ack == SHM_ACK_LOST)
			return CARMY_EDISCONNECTED;
		if (*posted && ack < 0 &&
		    shm_post_withdraw(&c->view, c->ack_slot, c->ack_gen)) {
			*posted = false;
			if (send_msg(c->fd, sb->data, sb->size) != 0)
				return CARMY_EDISCONNECTED;
			continue;
		}
		if (wait_readable(c->fd, ack == -ETIMEDOUT ? 0 :
						 c->ack_check_ms)) {
			/* A success told just before carmyd went away
			 * comes first: it sent nothing on the socket. */
			if (shm_ack_wait(&c->view, c->ack_slot, &c->ack_last,
					 exec, 0) == SHM_ACK_DONE)
				return SHM_ACK_DONE;
			return SHM_ACK_SOCKET;
		}
		if (!alive(c))
			return CARMY_EDISCONNECTED;
	}
}

/* RESERVE or RELEASE: have carmyd's durable store record it. The reply is
 * in *reply if reply is not NULL. */
static int confirm(carmy_t *c, int type, uint32_t entry,
		   const uint8_t exec[SHM_EXEC_LEN], struct wire_msg *reply)
{
	struct shm_post post = { .type = WIRE_RESERVE, .entry = entry };
	struct wire_msg m;
	msgpack_sbuffer sb;
	int rc;

	memcpy(post.exec, exec, sizeof(post.exec));
	msgpack_sbuffer_init(&sb);
	rc = wire_put_reserve(&sb, type, entry, exec);
	if (rc == 0)
		rc = exchange(c, type, &sb, -1,
			      type == WIRE_RESERVE ? exec : NULL,
			      type == WIRE_RESERVE ? &post : NULL,
			      reply ? reply : &m);
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

/* What the HELLO reply's flags say of carmyd and its store. */
static void take_flags(carmy_t *c, uint32_t flags)
{
	__atomic_store_n(&c->durable, (flags & WIRE_F_DURABLE) != 0,
			 __ATOMIC_RELAXED);
	c->shared = (flags & WIRE_F_SHARED) != 0;
	c->release_first = (flags & WIRE_F_SHARED) != 0 ||
			   (flags & (WIRE_F_DURABLE | WIRE_F_RELEASE_FIRST)) ==
				   (WIRE_F_DURABLE | WIRE_F_RELEASE_FIRST);
	__atomic_store_n(&c->abandon, (flags & WIRE_F_ABANDON) != 0,
			 __ATOMIC_RELAXED);
}

/* The ack slot and bell the HELLO reply m gives us. carmyd marked the
 * slot before it replied: the mark is the first word we "last saw" there,
 * and says the slot's generation, which our posts carry. */
static void take_slot(carmy_t *c, const struct wire_msg *m)
{
	c->ack_slot = m->u.hello_ok.ack_slot;
	c->bell = m->u.hello_ok.bell;
	if (c->ack_slot < SHM_ACK_SLOTS) {
		c->ack_last = shm_load(&c->view.acks[c->ack_slot].ak_word);
		c->ack_gen = c->ack_last >> 2;
	} else {
		c->bell = UINT32_MAX;
	}
}

/* Has the socket something to read (a reply, carmyd's ERROR, or its end),
 * or within timeout_ms? A poll() cut short by a signal says no. */
static bool wait_readable(int fd, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return poll(&pfd, 1, timeout_ms) > 0;
}

/*
 * path, made absolute from the working directory if it is relative (its
 * symbolic links left as they are, for the trust checks to see): a handle
 * connects again to the carmyd it first found, wherever the application
 * has chdir()ed since. 0, or -ENAMETOOLONG when that does not fit a
 * socket address, or -errno from getcwd().
 */
static int absolute(const char *path, char *out, size_t size)
{
	char cwd[PATH_MAX];
	int n;

	if (path[0] == '/')
		n = snprintf(out, size, "%s", path);
	else if (getcwd(cwd, sizeof(cwd)) == NULL)
		return errno == ERANGE ? -ENAMETOOLONG : -errno;
	else
		n = snprintf(out, size, "%s%s%s", cwd,
			     strcmp(cwd, "/") == 0 ? "" : "/", path);
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return 0;
}

static int dial(const char *path, int *fdp)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		int err = errno;

		close(fd);
		/* No socket, nobody listening, or not allowed: in every case
		 * there is no carmyd for us, and nothing may run. */
		if (err == ENOENT || err == ECONNREFUSED || err == EACCES ||
		    err == ENOTDIR || err == EAGAIN)
			return CARMY_EUNAVAILABLE;
		return -err;
	}
	*fdp = fd;
	return 0;
}

/*
 * Dial c->path, checking before anything is sent that the carmyd there is
 * one c trusts (libclient/trust.h): the socket's directory, then the uid
 * the kernel gives for the peer. With peer NULL (a new connection of a
 * connected handle) it must be the uid of the first one, whose segment c
 * has mapped: a carmyd of another uid cannot be serving that segment.
 * Returns 0, CARMY_EUNTRUSTED (trust_why says why), or as dial().
 */
static int dial_trusted(carmy_t *c, int *fdp, uid_t *peer)
{
	uid_t uid;
	int rc;

	rc = trust_socket_dir(&c->trust, c->path, trust_why,
			      sizeof(trust_why));
	if (rc != 0)
		return rc;
	rc = dial(c->path, fdp);
	if (rc != 0)
		return rc;
	rc = trust_peer(&c->trust, *fdp, c->path, &uid, trust_why,
			sizeof(trust_why));
	if (rc == 0 && peer == NULL && uid != c->peer) {
		snprintf(trust_why, sizeof(trust_why), "the carmyd on %s runs "
			 "as uid %u, not as uid %u, whose segment this handle "
			 "has mapped", c->path, (unsigned)uid,
			 (unsigned)c->peer);
		rc = CARMY_EUNTRUSTED;
	}
	if (rc != 0) {
		close(*fdp);
		*fdp = -1;
		return rc;
	}
	if (peer != NULL)
		*peer = uid;
	trust_why[0] = '\0';	/* only the last failure is kept */
	return 0;
}

/* shm_map_vetted()'s look at the segment carmyd named (arg: the handle),
 * at connect: which file it is is kept, for same_segment(). */
static int vet_segment(const struct stat *st, void *arg)
{
	carmy_t *c = arg;
	int rc;

	rc = trust_segment(&c->trust, st, c->peer, c->shm_name, trust_why,
			   sizeof(trust_why));
	c->seg_dev = st->st_dev;
	c->seg_ino = st->st_ino;
	return rc;
}

/*
 * Is the segment at c's name still the one c mapped? A carmyd that starts
 * afresh on a new segment (--transient removed ours at its exit, an
 * operator removed it) has it under the same name, and knows nothing of
 * what this handle holds or reserves in the old one, which no carmyd
 * serves any more: the same file (device and inode), with the same seed
 * and birth in its header (an inode number can be used again), vetted as
 * at connect. Returns 0; CARMY_EUNTRUSTED (trust_why says why); or
 * CARMY_EDISCONNECTED, gone or another, after which the handle is done:
 * what it reserved is uncertain, and a new handle must connect.
 */
static int same_segment(carmy_t *c)
{
	uint64_t seed, born;
	struct stat st;
	int fd, rc = CARMY_EDISCONNECTED;

	fd = shm_open(c->shm_name, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
	if (fd < 0 && errno != ENOENT)
		return -errno;
	if (fd >= 0 && fstat(fd, &st) == 0) {
		rc = trust_segment(&c->trust, &st, c->peer, c->shm_name,
				   trust_why, sizeof(trust_why));
		if (rc == 0 &&
		    (st.st_dev != c->seg_dev || st.st_ino != c->seg_ino ||
		     pread(fd, &seed, sizeof(seed),
			   offsetof(struct shm_header, sh_seed)) !=
			     (ssize_t)sizeof(seed) ||
		     pread(fd, &born, sizeof(born),
			   offsetof(struct shm_header, sh_created_ns)) !=
			     (ssize_t)sizeof(born) ||
		     seed != c->seg_seed || born != c->seg_created))
			rc = CARMY_EDISCONNECTED;
	}
	if (fd >= 0)
		close(fd);
	if (rc == CARMY_EDISCONNECTED) {
		uatomic_set(&c->orphaned, 1);
		uatomic_set(&c->dead, 1);
	}
	return rc;
}

/* Read exactly one message. Replies are small and there is only ever one
 * outstanding, so any byte beyond the message is a protocol error. */
static int recv_msg(int fd, int timeout_ms, uint64_t spin_ns,
		    struct wire_msg *m, uint8_t *buf, size_t cap)
{
	const uint64_t deadline = timeout_ms >= 0 ?
					  mono_ms() + (uint64_t)timeout_ms : 0;
	size_t have = 0;
	long n;

	/*
	 * Sleep in poll(), never in a blocking recv(): a reader asleep in
	 * recv() is woken each time carmyd reads our request (the freed send
	 * space wakes every sleeper on the socket), only to sleep again, and
	 * being woken it often takes carmyd's CPU from it. poll() asks to be
	 * woken for input alone. With 64 clients on a journal a blocking
	 * recv() makes two of a cycle's four sleeps (README, Performance).
	 * Without a spin the reply is not there yet (a durable store's waits
	 * for a flush): sleep first rather than try a recv() bound to fail.
	 */
	for (bool block = spin_ns == 0;; block = true) {
		ssize_t got;

		if (block) {
			struct pollfd pfd = { .fd = fd, .events = POLLIN };
			int pr;

			if (timeout_ms >= 0) {
				/* The time left: neither a signal nor a reply
				 * in pieces starts the wait over. */
				uint64_t now = mono_ms();

				timeout_ms = now < deadline ?
						     (int)(deadline - now) : 0;
			}
			pr = poll(&pfd, 1, timeout_ms);
			if (pr == 0)
				return CARMY_EUNAVAILABLE;
			if (pr < 0 && errno != EINTR)
				return -errno;
		}
		got = recv(fd, buf + have, cap - have, MSG_DONTWAIT);
		/* A reply is usually a few microseconds away: polling for it
		 * costs this CPU, sleeping costs a wake-up (tens of
		 * microseconds on a VM whose idle vCPU halts). Yielding lets
		 * the carmyd loop that owes the reply run first when it
		 * shares this CPU. */
		for (uint64_t until = block || spin_ns == 0 ? 0 :
						       clock_mono_ns() + spin_ns;
		     got < 0 && errno == EAGAIN && clock_mono_ns() < until;) {
			sched_yield();
			got = recv(fd, buf + have, cap - have, MSG_DONTWAIT);
		}
		if (got < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return CARMY_EDISCONNECTED;
		}
		if (got == 0)
			return CARMY_EDISCONNECTED;
		have += (size_t)got;
		n = wire_scan(buf, have, cap);
		if (n < 0)
			return CARMY_EPROTOCOL;
		if (n > 0)
			break;
	}
	if ((size_t)n != have)
		return CARMY_EPROTOCOL;
	return wire_decode(buf, (size_t)n, 0, m);
}

/*
 * A new execution id: a keyed hash, under the handle's random key, of a
 * number no other call of this process ever uses: the calling thread's
 * serial (handed out once per thread, never reused) and a count of that
 * thread's ids. Unique and unpredictable without a system call, and
 * without a locked add on the reserve path: the entry's stores are still
 * on their way to memory here, and a locked instruction would wait for
 * all of them (the publishing CAS waits for them anyway, later, after
 * this hash has overlapped with them). Returns the start time.
 */
static uint64_t exec_threads;		/* serials handed out (atomic) */
static __thread uint64_t exec_thread;	/* this thread's, 0 until needed */
static __thread uint64_t exec_count;	/* ids this thread made */

static uint64_t new_exec_id(void *arg, uint8_t out[SHM_EXEC_LEN])
{
	carmy_t *c = arg;
	uint8_t in[32];
	XXH128_canonical_t can;

	if (exec_thread == 0)
		exec_thread = __atomic_add_fetch(&exec_threads, 1,
						 __ATOMIC_RELAXED);
	exec_count++;
	memcpy(in, c->exec_key, 16);
	memcpy(in + 16, &exec_thread, 8);
	memcpy(in + 24, &exec_count, 8);
	XXH128_canonicalFromHash(&can, XXH3_128bits_withSeed(in, sizeof(in),
							     c->exec_seed));
	memcpy(out, can.digest, SHM_EXEC_LEN);
	return clock_coarse_ns();
}

/*
 * Map the entries ahead of this handle's ticket cursor, and their calls,
 * into this process before reserves write to them. Pages of the segment
 * are carmyd's from the start, but each process takes a page fault on its
 * first touch of each page: every four or five fresh entries (ten calls),
 * over a microsecond each, and serialised between processes on the
 * segment's file. Two madvise(MADV_POPULATE_WRITE) calls map
 * PREFAULT_ENTRIES of them at once, half a window before the cursor gets
 * there. Only a hint: a kernel
 * without it (before 5.14) or a failed call leaves the faults where they
 * were, and threads racing here at worst map a window twice.
 */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define PREFAULT_ENTRIES 256u

static int prefault_works = 1;		/* atomic: 0 once the kernel refused */

static void prefault_ahead(carmy_t *c)
{
	const uint32_t cap = c->view.geo.capacity;
	/* Relaxed loads: a stale view at worst maps a window twice. The
	 * cursor is the table's (shm_store() in ticket_claim()). */
	const uint32_t cur = shm_load(&c->ticket_cursor) % cap;
	const uint64_t win = __atomic_load_n(&c->prefault, __ATOMIC_RELAXED);
	const uint32_t lo = (uint32_t)(win >> 32), hi = (uint32_t)win;
	uint32_t from, to;
	uintptr_t page, a, b;

	if (cur >= lo && cur < hi &&
	    (hi == cap || hi - cur > PREFAULT_ENTRIES / 2))
		return;		/* well inside the mapped window */
	if (!__atomic_load_n(&prefault_works, __ATOMIC_RELAXED))
		return;
	page = (uintptr_t)sysconf(_SC_PAGESIZE);
	from = cur >= lo && cur < hi ? hi : cur;
	to = cap - from > PREFAULT_ENTRIES ? from + PREFAULT_ENTRIES : cap;
	__atomic_store_n(&c->prefault, (uint64_t)cur << 32 | to,
			 __ATOMIC_RELAXED);
	a = (uintptr_t)shm_entry_at(&c->view, from) & ~(uintptr_t)(page - 1);
	b = (uintptr_t)shm_entry_at(&c->view, to);
	if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) != 0 &&
	    (errno == EINVAL || errno == ENOSYS)) {
		__atomic_store_n(&prefault_works, 0, __ATOMIC_RELAXED);
		return;
	}
	/* Their calls too: a page holds ten or eleven of them. */
	a = (uintptr_t)shm_call_at(&c->view, from) & ~(uintptr_t)(page - 1);
	b = (uintptr_t)shm_call_at(&c->view, to);
	(void)madvise((void *)a, b - a, MADV_POPULATE_WRITE);
}

/*
 * Map the segment's index, its tickets and buckets, into this process at
 * connect. Reserves and lookups touch it at random, so prefault_ahead()'s
 * window cannot cover it, and without this each first touch of one of its
 * pages is a page fault on the reserve path (a reserve in some 1,600 over
 * the first million on a table of 1.1 million entries, the kernel's fault
 * around mapping sixteen pages at a time). Up to INDEX_PREFAULT_MAX: a
 * table of up to 2^21 entries (48 MiB of index, milliseconds at connect);
 * a larger index is left to fault in as it is used.
 */
#define INDEX_PREFAULT_MAX ((uintptr_t)64 << 20)

static void prefault_index(carmy_t *c)
{
	const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	const uintptr_t a = (uintptr_t)c->view.tickets & ~(page - 1);
	const uintptr_t b = (uintptr_t)(c->view.buckets + c->view.geo.nbuckets);

	if (b - a <= INDEX_PREFAULT_MAX &&
	    __atomic_load_n(&prefault_works, __ATOMIC_RELAXED))
		(void)madvise((void *)a, b - a, MADV_POPULATE_WRITE);
}

/*
 * One more answer of a kind, in our stripe. A plain load and store, not a
 * locked add: replay is a 0.08 µs path and a locked add costs a tenth of
 * it. A stripe is shared only by handles whose owner ids are a multiple of
 * SHM_STATS_STRIPES / 2 apart, and only two of those counting in the same
 * few nanoseconds can lose one count: operators' figures, not accounts.
 */
static inline void count(uint64_t *counter)
{
	__atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELAXED);
}

/* A whole message to carmyd, or DISCONNECTED. */
static int send_msg(int fd, const void *buf, size_t len)
{
	return io_send_all(fd, buf, len) == 0 ? 0 : CARMY_EDISCONNECTED;
}

static uint64_t mono_ms(void)
{
	return clock_mono_ns() / 1000000u;
}

/* An integer setting from the environment, 0..max; anything else (unset,
 * empty, not a number, out of range) leaves the default. */
static int env_int(const char *name, int dflt, int max)
{
	const char *env = getenv(name);
	char *end;
	long v;

	if (env == NULL || env[0] == '\0')
		return dflt;
	v = strtol(env, &end, 10);
	return *end == '\0' && v >= 0 && v <= max ? (int)v : dflt;
}
