/*
 * store.c - carmyd's side of the shared segment, and the store behind it
 * (--store: stores/memory.c, stores/journal/, or a plugin).
 *
 * carmyd creates the segment once, sized from --capacity and --max-result,
 * and reserves all of its memory up front (posix_fallocate), so recording a
 * result can never fail for lack of room. If the segment already exists
 * (carmyd was restarted), it is validated and adopted: recorded results
 * survive a carmyd crash, and the reservations of clients that were
 * connected to the dead carmyd become uncertain.
 *
 * carmyd runs several event loops, but its own writes to the segment are
 * made one at a time, under s->lock: every store_* function below takes it
 * (they are short: a completion is a copy and two CASes). So carmyd's
 * maintenance (sweeps, compaction, the header check) never races one of
 * carmyd's completions; it races only clients, which the segment protocol
 * is built for (docs/segment.md). What runs in parallel is the part that
 * costs: system calls, waking up, decoding.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <urcu/uatomic.h>
#include <xxhash.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23	/* Linux 5.14 */
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25	/* Linux 6.1 */
#endif

#include "common/clock.h"
#include "common/execid.h"
#include "common/hugepage.h"
#include "common/log.h"
#include "common/thread.h"
#include "daemon/carmyd.h"
#include "stores/journal/journal.h"

_Static_assert(SHM_TOOL_KEEP == CARMY_STORE_TOOL_MAX &&
	       SHM_ARGS_KEEP == CARMY_STORE_ARGS_MAX,
	       "a store keeps what the segment keeps of a call");

/* Owner ids restart from the bottom when they get this high: by then the
 * start-up sweep has settled every ticket of the earlier epochs. */
#define OWNER_WRAP UINT32_C(0xf0000000)

static int create_segment(struct store *s, const struct carmyd_config *cfg,
			  const struct shm_geometry *geo);
static int attach_segment(struct store *s, const struct carmyd_config *cfg);
static int vet_segment(struct store *s, const struct carmyd_config *cfg,
		       const struct stat *st);
static void recover(struct store *s, uint32_t grace_ms);
static void forget_owed(struct store *s);
static int proc_ticks(uint32_t pid, uint64_t *ticks);
static uint64_t boot_time_ns(void);
static struct held_owner *held_find(struct store *s, uint32_t owner);
static void hold_previous(struct store *s, uint32_t grace_ms);
static void held_check(struct store *s);
static void held_tell(struct store *s);
static uint64_t held_until(const struct store *s);
static void check(struct store *s);
static void check_header(struct store *s);
static void check_linked(struct store *s);
static void sweep_dead(struct store *s, const char *why);
static void sweep_range(struct store *s, uint32_t from, uint32_t to,
			struct shm_sweep_stats *st);
static void swept_said(const char *why, const struct shm_sweep_stats *st);
static void scribbled_said(struct store *s, uint32_t n);
static void tick_slice(struct store *s);
static void tick_reclaim(struct store *s);
static uint32_t reclaim(struct store *s);
static int backend_open(struct store *s, const char *spec);
static uint64_t store_identity(const char *spec);
static int backend_load(struct store *s, bool fresh);
static int restore_one(void *arg, const struct carmy_store_record *r);
struct restore_ctx;
static bool never_told(const struct shm_view *v, const struct shm_key *k,
		       const uint8_t *exec);
static void remember_untold(struct restore_ctx *ctx,
			    const struct carmy_store_record *r);
static void release_untold(struct store *s, const struct restore_ctx *ctx);
static void take_call(struct store *s, uint32_t e,
		      struct carmy_store_record *rec, uint8_t *buf);
static void keep_call(struct carmy_store_record *rec, uint8_t *buf);
static struct shm_summary record_call(const struct carmy_store_record *r);
static void *populate(void *arg);
static void populate_end(struct store *s);
static bool dead_owner(uint32_t owner, void *arg);
static bool pid_gone(uint32_t pid, void *arg);
static ssize_t read_proc(pid_t pid, const char *name, char *buf, size_t size);

/*
 * An owner id of the previous carmyd whose client may still come back for
 * it: its running entries stay running, for their results, while the
 * client's process runs. libcarmy connects again only when it has
 * something to say, typically a tool's result at its end, so a tool
 * running through a restart (an upgrade's) comes back whenever it ends.
 */
struct held_owner {
	uint32_t owner;
	uint32_t pid;
	uint64_t pid_ticks;	/* its start, in clock ticks since boot */
	uint64_t first_ns;	/* its oldest entry's en_started_ns */
	bool mixed;		/* tickets of more than one pid: not held */
	bool let_go;		/* back, refused, or its process exited */
	bool gone;		/* held_check()'s, without the lock */
};
/* A clock stepped forward by up to this much between a reservation and a
 * restart does not keep its client from being held (hold_previous()):
 * more would let a pid reused that much later pass for the client. */
#define HOLD_SLACK_NS (2 * 1000000000ull)

int store_open(struct store *s, const struct carmyd_config *cfg)
{
	struct shm_geometry geo;
	struct shm_header *h;
	bool fresh = false, load_all;
	uint64_t id;
	int rc;

	memset(s, 0, sizeof(*s));
	s->fd = -1;
	snprintf(s->shm_name, sizeof(s->shm_name), "%s", cfg->shm_name);
	s->started_ns = clock_real_ns();
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->owed_back, NULL);
	rc = shm_geometry(cfg->capacity, cfg->max_result, &geo);
	if (rc != 0) {
		log_error("capacity %u with max-result %u is out of range",
			  cfg->capacity, cfg->max_result);
		return rc;
	}
	/* The store first: a journal that cannot be read stops us before
	 * any segment is made. */
	rc = backend_open(s, cfg->store ? cfg->store : "memory");
	if (rc != 0)
		return rc;
	s->fd = shm_open(cfg->shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
			 cfg->use_group ? 0660 : 0600);
	if (s->fd >= 0)
		rc = create_segment(s, cfg, &geo), fresh = true;
	else if (errno == EEXIST)
		rc = attach_segment(s, cfg);
	else {
		rc = -errno;
		log_error("cannot create segment %s: %s", cfg->shm_name,
			  strerror(errno));
	}
	if (rc != 0)
		return rc;
	/* One carmyd per segment, whatever sockets they serve: two would
	 * sweep each other's clients and race each other's compaction. */
	if (flock(s->fd, LOCK_EX | LOCK_NB) != 0) {
		log_error("another carmyd is already using segment %s",
			  cfg->shm_name);
		return -EBUSY;
	}
	/* Its pages mapped and read ahead of the loops (populate()), while
	 * the store is restored into it and clients are served. */
	s->populate_fresh = fresh;
	if (pthread_create(&s->populater, NULL, populate, s) == 0)
		s->populating = true;
	/* A segment whose carmyd died or gave up while loading the store into
	 * it (a kill, a --capacity too small for the journal) lacks some of
	 * what the store holds, and an identity it lacks would run again; so
	 * does one loaded from another store (after a reboot, carmyd started
	 * once with the wrong --store). Either is loaded in full, as a new
	 * one is (shm_restore keeps what is there), until a load of this
	 * store has gone through to its end. */
	h = shm_header(&s->view);
	id = store_identity(cfg->store ? cfg->store : "memory");
	load_all = fresh || __atomic_load_n(&h->sh_loaded,
					    __ATOMIC_ACQUIRE) == 0 ||
		   uatomic_read(&h->sh_store) != id;
	if (load_all && !fresh && s->durable)
		log_warn("segment %s was never fully loaded from this store "
			 "(a carmyd stopped while starting, or ran with "
			 "another --store): loading it all", cfg->shm_name);
	recover(s, fresh ? 0 : cfg->grace_ms);
	rc = backend_load(s, load_all);
	s->loading = false;
	if (rc != 0) {
		populate_end(s);
		return rc;
	}
	store_sweep_dead(s, "start-up, the store loaded");
	s->store_id = id;
	uatomic_set(&h->sh_store, id);
	/* For operators: carmyctl status shows it. */
	s->retain_ms = cfg->retain_ns == 0 ? SHM_RETAIN_NEVER :
		       cfg->retain_ns < 1000000u ? 1 :
		       cfg->retain_ns / 1000000u;
	uatomic_set(&h->sh_retain_ms, s->retain_ms);
	__atomic_store_n(&h->sh_loaded, 1, __ATOMIC_RELEASE);
	/* From here until we exit, however we exit, clients can tell that
	 * a carmyd stands behind the segment. */
	rc = shm_hold_alive(&s->alive, &s->view);
	if (rc != 0) {
		log_error("cannot hold the segment's liveness word (a robust "
			  "futex, set_robust_list(2)): %s", strerror(-rc));
		populate_end(s);
		return rc;
	}
	s->holding = true;
	return 0;
}

void store_close(struct store *s, const struct carmyd_config *cfg, bool remove)
{
	populate_end(s);
	/* A store closes once every request it was given is answered. The
	 * releases still owed stay pending in the segment: the next carmyd
	 * settles them at load. */
	forget_owed(s);
	free(s->held);
	s->held = NULL;
	s->nheld = s->held_left = 0;
	if (s->ops != NULL)
		s->ops->close(s->st);
	s->ops = NULL;
	if (s->plugin != NULL)
		dlclose(s->plugin);
	s->plugin = NULL;
	/* Before the unmap: the kernel could not mark a word that is no
	 * longer mapped. */
	store_let_go_alive(s);
	shm_unmap(&s->view);
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	if (remove && shm_unlink(cfg->shm_name) == 0)
		log_info("removed segment %s", cfg->shm_name);
}

/*
 * Clients read "no carmyd" from here on: carmyd is stopping, and serves
 * no new request. A new call fails closed at once, and a handle closed
 * from now on makes its running calls uncertain itself (libcarmy's
 * abandon_left()), since no carmyd sweeps them: the next one would hold
 * them for a process that lives on.
 */
void store_let_go_alive(struct store *s)
{
	pthread_mutex_lock(&s->lock);
	if (s->holding)
		shm_let_go_alive(&s->alive);
	s->holding = false;
	pthread_mutex_unlock(&s->lock);
}

/* Hand out the next owner id; ids are never reused within an epoch, and the
 * header remembers the next one so that a restarted carmyd never reuses an
 * id a live or zombie client may still hold. */
int store_new_owner(struct store *s, uint32_t *id)
{
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	if (s->next_owner >= UINT32_MAX - 1) {
		rc = -EOVERFLOW;
	} else {
		*id = s->next_owner++;
		uatomic_set(&shm_header(&s->view)->sh_next_owner,
			    s->next_owner);
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/*
 * A client of the previous carmyd asks for its owner id back, so that the
 * reservations it holds stay its own (it is running their tools). Granted
 * to a held owner (hold_previous()) asked for by the process it is held
 * for: its pid (the kernel's word, SO_PEERCRED), started at the same
 * clock tick as the one held, so a reused pid cannot pass. Either way an
 * owner asked for by its pid is no longer held: given back, it is a
 * client like any other, whose disconnect ends its calls; refused, the
 * asker is another process. Asked for by another pid, it stays held. The
 * id is registered to conn before the lock is let go, so no sweep can
 * come in between. Returns 0, -EPERM when the id is not given back, or
 * -EAGAIN when there is no telling now (still held: to ask again).
 */
int store_resume(struct store *s, uint32_t owner, pid_t pid, void *conn)
{
	const char *why = NULL;
	struct held_owner *h;
	uint64_t ticks = 0;
	int rc = -EPERM, alive;

	/* The asker runs: its pid names it, unless /proc cannot be read
	 * (out of descriptors, say), and then it is to ask again. */
	alive = pid > 0 ? proc_ticks((uint32_t)pid, &ticks) : 0;
	pthread_mutex_lock(&s->lock);
	h = held_find(s, owner);
	if (h != NULL && h->pid == (uint32_t)pid) {
		if (alive < 0)
			rc = -EAGAIN;
		else if (alive == 0 || ticks != h->pid_ticks)
			why = "another process now";
		else if (owners_add(owner, conn) != 0)
			why = "cannot register it";
		else
			rc = 0;
		if (rc != -EAGAIN) {
			h->let_go = true;
			s->held_left--;
			held_tell(s);
		}
	}
	pthread_mutex_unlock(&s->lock);
	if (why != NULL)
		log_info("owner %u of the previous carmyd not given back to pid "
			 "%d (%s): its running entries turn uncertain", owner,
			 (int)pid, why);
	return rc;
}

int store_complete(struct store *s, uint32_t entry, uint32_t owner,
		   const uint8_t *exec, int status, int code,
		   const void *data, size_t len)
{
	int rc;

	pthread_mutex_lock(&s->lock);
	rc = shm_record_result(&s->view, entry, owner, exec, status, code,
			       data, len, clock_real_ns());
	/* Sent again after a reconnect, when the first one got through
	 * before carmyd died: it is recorded, and that is the answer. */
	if (rc != 0 && shm_completed_as(&s->view, entry, exec, status, code,
					 data, len))
		rc = 0;
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int store_abandon(struct store *s, uint32_t entry, uint32_t owner,
		  const uint8_t *exec)
{
	int rc;

	pthread_mutex_lock(&s->lock);
	rc = shm_abandon(&s->view, entry, owner, exec);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/*
 * May a RELEASE of exec at entry e, sent by a client that gave the entry
 * back itself, go to the store? Under s->lock. Only if e is in the table,
 * still carries exec (the copy left when it was freed), is published as
 * nothing, and the identity in that copy is published as no entry of
 * exec either: a RELEASE naming another entry would otherwise have the
 * store forget an execution that still runs or stands somewhere (another
 * owner's, perhaps), whose identity would be free after the next load.
 * An entry reused since its release fails the check: the store keeps the
 * execution, which the next load makes uncertain (never run twice), and
 * the client's release says STORE_FAILED.
 * Checked on copies a segment writer could forge, like everything in the
 * segment: this stops a client's mistake, not a writer of the table.
 */
static bool released_here(struct store *s, uint32_t e, const uint8_t *exec)
{
	const struct shm_view *v = &s->view;
	uint8_t ident[3 * CARMY_ID_MAX];
	struct shm_found f;
	struct shm_key k;

	/* The identity, the exec id, then the ticket: a claim takes the
	 * ticket before it writes the entry, so a ticket still free after
	 * both were read means no claim was writing them meanwhile (one
	 * that came and went has changed the exec id). */
	if (shm_entry_key(v, e, ident, &k) != 0)
		return false;
	cmm_smp_rmb();
	if (memcmp(shm_entry_at(v, e)->en_exec, exec, SHM_EXEC_LEN) != 0 ||
	    shm_published_as(v, e, exec))
		return false;
	cmm_smp_rmb();
	if (uatomic_read(&v->tickets[e]) != SHM_TICKET_FREE)
		return false;
	return !shm_lookup(v, &k, &f) ||
	       memcmp(f.exec, exec, SHM_EXEC_LEN) != 0;
}

/*
 * Check that owner holds entry, running with this exec id, and copy into
 * op->rec what the store needs to record it: for a reservation the whole
 * entry (identity, fingerprints, pid, start), for the others the exec id.
 * Lengths read from the segment are clamped: a client that scribbled on
 * its own entry gets a wrong record of its own call, never a crash.
 */
int store_prepare(struct store *s, struct store_op *op, uint32_t owner,
		  const uint8_t exec[SHM_EXEC_LEN])
{
	const struct shm_entry *en;
	uint32_t b;
	uint64_t w;
	size_t off = 0;

	memcpy(op->rec.exec, exec, SHM_EXEC_LEN);
	/* A store hears of a release before the entry is given back
	 * (carmy_store.h; wire.h, WIRE_F_RELEASE_FIRST): then it is still
	 * ours, and checked as such. */
	pthread_mutex_lock(&s->lock);
	if (!shm_owns(&s->view, op->entry, owner, &b, &w) ||
	    memcmp(shm_entry_at(&s->view, op->entry)->en_exec, exec,
		   SHM_EXEC_LEN) != 0) {
		/* A release sent again after its entry was given back (by a
		 * restarted carmyd that found it released in the store, or
		 * once a release the store failed went through), or by a
		 * client that gave the entry back first (one that does not
		 * know WIRE_F_RELEASE_FIRST): the store is told, and nothing
		 * here is touched. A RELEASE for an execution still
		 * published (running, uncertain or completed: anyone's)
		 * would let the store forget it: no. */
		op->gone = op->req.op == CARMY_STORE_RELEASE &&
			   released_here(s, op->entry, exec);
		pthread_mutex_unlock(&s->lock);
		return op->gone ? 0 : CARMY_ENOT_RESERVED;
	}
	/* Until the store answers, a call finding it waits (the store may
	 * let another instance have the identity from its commit on). */
	if (op->req.op == CARMY_STORE_RELEASE)
		(void)shm_mark_pending(&s->view, op->entry, exec);
	en = shm_entry_at(&s->view, op->entry);
	if (op->req.op == CARMY_STORE_RESERVE) {
		for (int i = 0; i < 3; i++) {
			uint16_t len = uatomic_read(&en->en_len[i]);

			if (len == 0 || len > CARMY_ID_MAX) {
				pthread_mutex_unlock(&s->lock);
				return CARMY_ECORRUPT;
			}
			memcpy(op->ident + off, en->en_ident + off, len);
			op->rec.part[i] = op->ident + off;
			op->rec.len[i] = len;
			off += len;
		}
		memcpy(op->rec.fingerprint, en->en_fingerprint, SHM_FP_LEN);
		memcpy(op->rec.rawprint, en->en_rawprint, SHM_FP_LEN);
		op->rec.pid = en->en_pid;
		op->rec.started_ns = en->en_started_ns;
		take_call(s, op->entry, &op->rec, op->call);
	}
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* A completion sent again (after a reconnect) whose first one was recorded:
 * exactly this result is in the table already. */
bool store_completed_as(struct store *s, uint32_t entry, const uint8_t *exec,
			int status, int code, const void *data, size_t len)
{
	bool done;

	pthread_mutex_lock(&s->lock);
	done = shm_completed_as(&s->view, entry, exec, status, code, data, len);
	pthread_mutex_unlock(&s->lock);
	return done;
}

/*
 * An operator's RESOLVE: find k's entry, which must be UNCERTAIN (its owner
 * died), of execution exec, with fingerprint fp. Remember where (op->entry,
 * bucket, word) for store_resolve(), and hold the entry against a second
 * RESOLVE until store_resolve_done(). Copies into op->rec what a store
 * records. Returns 0, CARMY_ECONFLICT (another fingerprint),
 * CARMY_ENOT_INTERRUPTED (absent, running, completed, another execution,
 * or being resolved) or CARMY_ECAPACITY when too many are in flight.
 */
int store_find_uncertain(struct store *s, struct store_op *op,
			 const struct shm_key *k, const uint8_t fp[SHM_FP_LEN],
			 const uint8_t exec[SHM_EXEC_LEN])
{
	struct shm_found f;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	if (!shm_lookup(&s->view, k, &f) || f.state != SHM_UNCERTAIN ||
	    memcmp(f.exec, exec, SHM_EXEC_LEN) != 0)
		rc = CARMY_ENOT_INTERRUPTED;
	else if (memcmp(shm_entry_at(&s->view, f.entry)->en_fingerprint, fp,
			SHM_FP_LEN) != 0)
		rc = CARMY_ECONFLICT;
	for (unsigned i = 0; rc == 0 && i < s->nresolving; i++)
		if (s->resolving[i] == f.entry)
			rc = CARMY_ENOT_INTERRUPTED;
	if (rc == 0 && s->nresolving == sizeof(s->resolving) /
					     sizeof(s->resolving[0]))
		rc = CARMY_ECAPACITY;
	if (rc == 0) {
		struct shm_call cl;

		s->resolving[s->nresolving++] = f.entry;
		op->entry = f.entry;
		op->bucket = f.bucket;
		op->word = f.word;
		memcpy(op->rec.exec, exec, SHM_EXEC_LEN);
		/* UNCERTAIN is final: nothing but a scribbler writes it. */
		shm_call_copy(&s->view, f.entry, &cl);
		op->rec.result_format = cl.cl_format;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* Apply a RESOLVE found by store_find_uncertain() (and recorded by a
 * durable store) to the segment. The entry is looked up again: carmyd's
 * compaction may have moved its bucket while the store was writing. */
int store_resolve(struct store *s, const struct store_op *op)
{
	struct shm_restored r = {
		.completed = op->rec.state == CARMY_STORE_COMPLETED,
		.finished_ns = op->rec.finished_ns, .status = op->rec.status,
		.result_code = op->rec.result_code, .result = op->rec.result,
		.result_len = op->rec.result_len,
		.resolved_ns = op->rec.resolved_ns,
		.resolved_uid = op->rec.resolved_uid,
		.resolved_pid = op->rec.resolved_pid,
	};
	int rc;

	pthread_mutex_lock(&s->lock);
	rc = shm_resolve(&s->view, op->entry, op->rec.exec, &r);
	pthread_mutex_unlock(&s->lock);
	if (rc != 0)
		log_error("resolution of entry %u recorded by the store could "
			  "not be applied to the segment: %s", op->entry,
			  carmy_errname(rc));
	return rc;
}

void store_resolve_done(struct store *s, uint32_t entry)
{
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < s->nresolving; i++) {
		if (s->resolving[i] == entry) {
			s->resolving[i] = s->resolving[--s->nresolving];
			break;
		}
	}
	pthread_mutex_unlock(&s->lock);
}

/* WAIT: is k's entry running as execution exec? Returns 0 with its index,
 * or CARMY_ENOT_RESERVED if not (finished, another execution). With a
 * shared store, an identity absent here may run on another instance, out of
 * this carmyd's sight: -EREMOTE. */
int store_find_running(struct store *s, const struct shm_key *k,
		       const uint8_t exec[SHM_EXEC_LEN], uint32_t *entry)
{
	struct shm_found f;
	int rc = CARMY_ENOT_RESERVED;

	pthread_mutex_lock(&s->lock);
	if (!shm_lookup(&s->view, k, &f)) {
		if (s->shared)
			rc = -EREMOTE;
	} else if (f.state == SHM_RUNNING &&
		   memcmp(f.exec, exec, SHM_EXEC_LEN) == 0) {
		*entry = f.entry;
		rc = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* Is entry still published RUNNING as execution exec? Under the lock, like
 * every look carmyd takes at an entry; waiters are few. */
bool store_running(struct store *s, uint32_t entry,
		   const uint8_t exec[SHM_EXEC_LEN])
{
	const struct shm_view *v = &s->view;
	bool running = false;
	uint32_t b;
	uint64_t w;

	if (entry >= v->geo.capacity)
		return false;
	pthread_mutex_lock(&s->lock);
	b = uatomic_read(&shm_entry_at(v, entry)->en_bucket);
	if (b < v->geo.nbuckets) {
		w = uatomic_read(&v->buckets[b]);
		running = SHM_W_STATE(w) == SHM_RUNNING &&
			  SHM_W_ENTRY(w) == entry &&
			  memcmp(shm_entry_at(v, entry)->en_exec, exec,
				 SHM_EXEC_LEN) == 0;
	}
	pthread_mutex_unlock(&s->lock);
	return running;
}

/* A shared store's RESERVE found the identity held (carmy_store.h): keep
 * a copy of the standing execution for request.c's finish(), on whatever
 * thread. */
static void on_taken(struct carmy_store_req *req,
		     const struct carmy_store_record *r)
{
	struct store_op *op = req->cookie;

	if (op->taken)
		return;		/* called twice: the first one stands */
	op->taken = true;
	op->standing = *r;
	memset(op->standing.part, 0, sizeof(op->standing.part));
	op->standing.result = NULL;
	keep_call(&op->standing, op->standing_call);
	if (r->state == CARMY_STORE_COMPLETED && r->result_len > 0) {
		void *copy = r->result ? malloc(r->result_len) : NULL;

		if (copy == NULL) {
			op->taken_rc = r->result ? -ENOMEM : CARMY_ECORRUPT;
			op->standing.result_len = 0;
			return;
		}
		memcpy(copy, r->result, r->result_len);
		op->standing.result = copy;
	}
}

void store_submit(struct store *s, struct store_op *op, bool more)
{
	op->req.rec = &op->rec;
	op->req.flags = more ? CARMY_STORE_MORE : 0;
	op->req.taken = s->shared && op->req.op == CARMY_STORE_RESERVE ?
				on_taken : NULL;
	s->ops->submit(s->st, &op->req);
}

/* store_taken(): the new reservation is the standing execution. */
static uint64_t standing_exec(void *arg, uint8_t exec[SHM_EXEC_LEN])
{
	const struct carmy_store_record *r = arg;

	memcpy(exec, r->exec, SHM_EXEC_LEN);
	return r->started_ns;
}

/*
 * A shared store answered op, a client's RESERVE, with the execution that
 * holds the identity already (another instance's, or one this instance
 * forgot). The client's entry goes back: the tool must not run. Then
 *
 *   - the standing one is completed: it takes the entry's place in the
 *     segment, reserved and completed as an ordinary call would be (the
 *     claim protocol keeps one entry per identity against clients
 *     reserving meanwhile; pending until its result is in, so nobody is
 *     told it runs), and the client is told CARMY_REPLAY: look again. It
 *     then finds a replay or, with other arguments, a conflict, and this
 *     instance replays it from now on without asking the store. A result
 *     larger than this instance's --max-result cannot be kept:
 *     CARMY_ERESULT_TOO_LARGE.
 *   - it is running (on another instance; its own process may be dead,
 *     which only that instance can tell): CARMY_EUNCERTAIN with its exec
 *     id, or CARMY_ECONFLICT if its fingerprint is another. Nothing is
 *     kept: the next call asks the store again, and finds it completed
 *     once it is.
 *
 * Returns the code for the client, with *exec and *state for the second
 * case.
 */
int store_taken(struct store *s, struct store_op *op, uint32_t owner,
		pid_t pid, uint8_t exec[SHM_EXEC_LEN], uint32_t *state)
{
	const struct carmy_store_record *r = &op->standing;
	struct shm_view *v = &s->view;
	struct shm_summary call = record_call(r);
	struct shm_claim claim = {
		.owner = owner, .pid = (uint32_t)pid, .fp = r->fingerprint,
		.rawfp = r->rawprint, .make_exec = standing_exec,
		.arg = &op->standing, .cursor = &s->taken_cursor,
		.pending = true,	/* until its result is in */
		.call = &call,
	};
	struct shm_found f;
	struct shm_key k;
	int rc;

	/* The client's entry goes back first, whatever the answer: the
	 * store holds another execution, so this one must never run, nor
	 * turn uncertain here if its client has gone. Callers waiting to
	 * learn whether it stands look again. */
	pthread_mutex_lock(&s->lock);
	shm_withdraw_pending(v, op->entry, op->rec.exec);
	rc = shm_release_as(v, op->entry, owner, op->rec.exec);
	pthread_mutex_unlock(&s->lock);
	if (rc != 0)
		return rc;	/* no longer the client's (swept) */
	if (op->taken_rc != 0)
		return op->taken_rc;
	if (r->state == CARMY_STORE_RUNNING) {
		memcpy(exec, r->exec, SHM_EXEC_LEN);
		*state = CARMY_STATE_RUNNING;
		return memcmp(r->fingerprint, op->rec.fingerprint,
			      SHM_FP_LEN) == 0 ? CARMY_EUNCERTAIN :
						 CARMY_ECONFLICT;
	}
	if (r->state != CARMY_STORE_COMPLETED ||
	    r->status < CARMY_STATUS_COMPLETED ||
	    r->status > CARMY_STATUS_CANCELLED ||
	    (r->result_code != 0 && r->result_code != CARMY_ERESULT_TOO_LARGE))
		return CARMY_ECORRUPT;
	if (r->result_len > v->geo.max_result) {
		/* Recorded by an instance with a larger --max-result: it
		 * cannot be replayed from this one's segment. */
		log_warn("a result of %u bytes in the store is larger than "
			 "--max-result %u: instances sharing a store need the "
			 "same --max-result", r->result_len,
			 v->geo.max_result);
		return CARMY_ERESULT_TOO_LARGE;
	}
	rc = shm_key_init(&k, v->seed, op->rec.part[0], op->rec.len[0],
			  op->rec.part[1], op->rec.len[1], op->rec.part[2],
			  op->rec.len[2]);
	if (rc != 0)
		return rc;
	pthread_mutex_lock(&s->lock);
	for (bool reclaimed = false;;) {
		switch (shm_reserve(v, &k, &claim, &f)) {
		case SHM_OUT_RESERVED:
			rc = shm_record_result(v, f.entry, owner, r->exec,
					       r->status, r->result_code,
					       r->result, r->result_len,
					       r->finished_ns);
			if (rc != 0) {
				log_warn("entry %u: cannot record a result "
					 "from the store: %s", f.entry,
					 carmy_errname(rc));
				shm_withdraw_pending(v, f.entry, r->exec);
			} else {
				shm_settle_pending(v, f.entry, r->exec);
				rc = CARMY_REPLAY;
			}
			break;
		case SHM_OUT_FOUND:
			rc = CARMY_REPLAY;	/* a call of ours came first */
			break;
		case SHM_OUT_NOFREE:
			if (!reclaimed) {
				reclaimed = true;
				s->last_reclaim_ns = 0;
				reclaim(s);
				continue;
			}
			/* fall through */
		case SHM_OUT_FULL:
			rc = CARMY_ECAPACITY;
			break;
		default:
			rc = CARMY_EUNAVAILABLE;
			break;
		}
		break;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* A durable store has recorded op, a RESERVE: callers that found its
 * entry running may now name its execution. */
void store_settle(struct store *s, const struct store_op *op)
{
	shm_settle_pending(&s->view, op->entry, op->rec.exec);
}

/*
 * A shared store failed op, a client's RESERVE (it is answered
 * STORE_FAILED): the store holds no row of it (a commit whose answer was
 * lost, the store withdraws itself: docs/postgresql.md). The entry goes
 * back now, still owner's and this execution's
 * (the client gives back too, and finds it gone). Kept running, it would
 * turn uncertain here once its owner is swept, while every other instance
 * may run the identity. Except a reservation claimed before this carmyd
 * began: it may have reached the previous carmyd's store, whose
 * withdrawal died with it, and its client keeps it after a failed resend
 * (libclient, confirm_reserve()). Its tool never ran (the client was
 * never told it stands): carmyd releases it in the store, then gives it
 * back, as for a release the store failed.
 */
void store_reserve_failed(struct store *s, const struct store_op *op,
			  uint32_t owner)
{
	struct shm_view *v = &s->view;
	bool earlier;

	pthread_mutex_lock(&s->lock);
	earlier = op->entry < v->geo.capacity &&
		  uatomic_read(&shm_entry_at(v, op->entry)->en_started_ns) <=
			  s->started_ns;
	if (!earlier) {
		shm_withdraw_pending(v, op->entry, op->rec.exec);
		(void)shm_release_as(v, op->entry, owner, op->rec.exec);
	}
	pthread_mutex_unlock(&s->lock);
	if (earlier)
		store_owe_release(s, op);
}

/* A release carmyd owes a shared store (store_owe_release()): sent again
 * every second (store_tick()) until the store records it. */
struct owed {
	struct carmy_store_req req;	/* first: done() gets it */
	struct carmy_store_record rec;	/* the execution id alone */
	struct store *s;
	struct owed *next;		/* s->owed, under s->lock */
	struct owed *send;		/* store_tick()'s, to send now */
	uint32_t entry;
	bool sent;			/* with the store now */
};

static void owed_done(struct carmy_store_req *req, int rc);

void store_owe_release(struct store *s, const struct store_op *op)
{
	struct owed *o = calloc(1, sizeof(*o));
	char text[EXECID_TEXT_LEN + 1];

	execid_format(text, op->rec.exec);
	pthread_mutex_lock(&s->lock);
	for (struct owed *p = s->owed; p != NULL; p = p->next)
		if (memcmp(p->rec.exec, op->rec.exec, SHM_EXEC_LEN) == 0) {
			pthread_mutex_unlock(&s->lock);
			free(o);
			return;	/* owed already */
		}
	if (o == NULL) {
		/* It may stand in the store: counted as confirmed, it turns
		 * uncertain here when its owner is swept, as the store's row
		 * reads everywhere. */
		shm_settle_pending(&s->view, op->entry, op->rec.exec);
		pthread_mutex_unlock(&s->lock);
		log_warn("store: out of memory to send the release of %s "
			 "again: if it stays uncertain, resolve it as not "
			 "committed", text);
		return;
	}
	o->s = s;
	o->entry = op->entry;
	o->rec.state = CARMY_STORE_RUNNING;
	memcpy(o->rec.exec, op->rec.exec, SHM_EXEC_LEN);
	o->req.op = CARMY_STORE_RELEASE;
	o->req.rec = &o->rec;
	o->req.done = owed_done;
	o->req.cookie = o;
	o->next = s->owed;
	s->owed = o;
	pthread_mutex_unlock(&s->lock);
	log_info("store: the release of %s failed and may have committed: "
		 "sent again every second until the store records it", text);
}

/* The store's answer to an owed release (on its thread): recorded, the
 * entry goes back, whoever holds it, if it is still that execution's
 * (running, or uncertain once its owner was swept); failed, it is sent
 * again at the next second. */
static void owed_done(struct carmy_store_req *req, int rc)
{
	struct owed *o = req->cookie, **pp;
	struct store *s = o->s;
	char text[EXECID_TEXT_LEN + 1];

	pthread_mutex_lock(&s->lock);
	o->sent = false;
	s->owed_sent--;
	if (rc == 0) {
		shm_withdraw_pending(&s->view, o->entry, o->rec.exec);
		(void)shm_give_back_as(&s->view, o->entry, o->rec.exec);
		for (pp = &s->owed; *pp != o; pp = &(*pp)->next)
			;
		*pp = o->next;
	}
	pthread_cond_broadcast(&s->owed_back);
	pthread_mutex_unlock(&s->lock);
	if (rc == 0) {
		execid_format(text, o->rec.exec);
		log_info("store: the release of %s is recorded", text);
		free(o);
	}
}

/* At close: wait for the owed releases with the store now, then let
 * every one go. */
static void forget_owed(struct store *s)
{
	pthread_mutex_lock(&s->lock);
	while (s->owed_sent != 0)
		pthread_cond_wait(&s->owed_back, &s->lock);
	pthread_mutex_unlock(&s->lock);
	while (s->owed != NULL) {
		struct owed *next = s->owed->next;

		free(s->owed);
		s->owed = next;
	}
}

/* Every second: send again each owed release not with the store now.
 * After s->lock is let go: a store may answer within submit(). */
static void send_owed(struct store *s)
{
	struct owed *list = NULL;

	pthread_mutex_lock(&s->lock);
	for (struct owed *o = s->owed; o != NULL; o = o->next)
		if (!o->sent) {
			o->sent = true;
			s->owed_sent++;
			o->send = list;
			list = o;
		}
	pthread_mutex_unlock(&s->lock);
	while (list != NULL) {
		struct owed *next = list->send;

		s->ops->submit(s->st, &list->req);
		list = next;
	}
}

/* The store has recorded op, a RELEASE sent before its entry was given
 * back (or, a store of ours, failed to): give the entry back. */
int store_released(struct store *s, const struct store_op *op,
		   uint32_t owner)
{
	int rc;

	pthread_mutex_lock(&s->lock);
	/* Not pending but for a reservation whose client went away before
	 * its answer (request.c, give_back()). */
	shm_withdraw_pending(&s->view, op->entry, op->rec.exec);
	rc = shm_release_as(&s->view, op->entry, owner, op->rec.exec);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/*
 * Every second, under the lock: what clients may have written over that
 * would stop every new call while we run. The liveness word must hold our
 * keeper's thread id (else clients read "no carmyd" and fail
 * DAEMON_UNAVAILABLE), and the header must match our private copy. Each is
 * put back. A scribble logs once, when first seen: a client that keeps
 * writing is repaired every second, told of once more when it stops. The
 * buckets are checked likewise, a slice a tick (tick_slice()).
 */
static void check(struct store *s)
{
	uint32_t was;

	if (s->holding && shm_restore_alive(&s->alive, &was)) {
		if (s->alive_fixes++ == 0)
			log_error("the segment's liveness word held %#x, not "
				  "our keeper thread's id %u: a client wrote "
				  "over it (while it reads dead, new calls fail "
				  "DAEMON_UNAVAILABLE); restored", was,
				  s->alive.tid);
	} else if (s->alive_fixes != 0) {
		if (s->alive_fixes > 1)
			log_warn("the segment's liveness word was written "
				 "over again at %u checks in a row; it has "
				 "held since", s->alive_fixes);
		s->alive_fixes = 0;
	}
	check_header(s);
	check_linked(s);
}

/*
 * A pass over the buckets has ended, having made tombstones of n that were
 * BLOCKED by nobody (a client's write: no reclaim of ours is in flight
 * while we hold the lock, and every probe meeting a BLOCKED bucket spins,
 * then fails busy). A write may land in the middle of a pass, which meets
 * the buckets before it only in the next one; so a write is said once,
 * with its count, at the end of the pass after the first that met it, and
 * a client that keeps writing is said again once it stops, after more
 * than two passes in a row met its writes.
 */
static void scribbled_said(struct store *s, uint32_t n)
{
	if (n != 0) {
		s->scribbled += n;
		s->bucket_fixes++;
	}
	if (s->bucket_fixes == 0)
		return;
	if (!s->scribble_said && (n == 0 || s->bucket_fixes > 1)) {
		log_error("%u bucket%s BLOCKED (or in no valid state) with no "
			  "reclaim of ours in flight: a client wrote over "
			  "them (reserves that meet a BLOCKED one fail busy); "
			  "made tombstones", s->scribbled,
			  s->scribbled == 1 ? " was" : "s were");
		s->scribble_said = true;
	}
	if (n == 0) {
		if (s->bucket_fixes > 2)
			log_warn("buckets were BLOCKED by clients again at %u "
				 "passes in a row; none are since",
				 s->bucket_fixes);
		s->bucket_fixes = 0;
		s->scribbled = 0;
		s->scribble_said = false;
	}
}

/*
 * Is the segment still in /dev/shm? An operator's rm, or systemd-logind
 * at its user's last logout (RemoveIPC=, on by default, for a user's own
 * carmyd), takes its name away: the clients connected go on with it, but
 * a new one cannot map it and is refused, and once carmyd stops, what
 * only it held is gone. Nothing can put the name back; it is said, once.
 */
static void check_linked(struct store *s)
{
	struct stat st;

	if (s->unlinked || fstat(s->fd, &st) != 0 || st.st_nlink != 0)
		return;
	s->unlinked = true;
	log_error("segment %s was removed from /dev/shm (by hand, or by "
		  "systemd-logind's RemoveIPC= at its user's last logout: "
		  "run a user's carmyd with lingering on): new clients "
		  "cannot connect. Restart carmyd%s", s->shm_name,
		  s->durable ? ", which loads its store into a new segment" :
		  ": the memory store's results are lost with it");
}

/*
 * Run the sanity check again. carmyd itself never reads geometry from the
 * segment (its scans use the private copy), so a client that wrote over the
 * header cannot mislead it; but the other clients would refuse to attach.
 * Put the header back from the private copy and say so.
 */
static void check_header(struct store *s)
{
	struct shm_header *h = shm_header(&s->view);
	struct shm_geometry geo;
	int rc = shm_sane(s->view.base, s->view.mapped, &geo);

	if (rc == 0 && memcmp(&geo, &s->view.geo, sizeof(geo)) == 0 &&
	    h->sh_seed == s->view.seed && h->sh_epoch == s->epoch &&
	    h->sh_owner_base == s->owner_base &&
	    h->sh_next_owner == s->next_owner &&
	    h->sh_move_seq == s->view.move_seq &&
	    h->sh_loaded == 1 && h->sh_store == s->store_id &&
	    h->sh_retain_ms == s->retain_ms &&
	    h->sh_held == (uint32_t)s->held_left &&
	    h->sh_held_until_ns == held_until(s))
		return;
	log_error("segment header failed its sanity check (%s): a client "
		  "wrote over it; restoring it", carmy_errname(rc));
	shm_format(s->view.base, &s->view.geo, s->view.seed,
		   h->sh_created_ns);
	uatomic_set(&h->sh_owner_base, s->owner_base);
	uatomic_set(&h->sh_next_owner, s->next_owner);
	uatomic_set(&h->sh_daemon_pid, (uint32_t)getpid());
	uatomic_set(&h->sh_epoch, s->epoch);
	uatomic_set(&h->sh_move_seq, s->view.move_seq);
	uatomic_set(&h->sh_store, s->store_id);
	uatomic_set(&h->sh_retain_ms, s->retain_ms);
	held_tell(s);
	uatomic_set(&h->sh_loaded, 1);
}

/* Settle every ticket held by an owner that is not connected. */
void store_sweep_dead(struct store *s, const char *why)
{
	pthread_mutex_lock(&s->lock);
	sweep_dead(s, why);
	pthread_mutex_unlock(&s->lock);
}

static void sweep_dead(struct store *s, const char *why)
{
	struct shm_sweep_stats st = { 0 };

	sweep_range(s, 0, s->view.geo.capacity, &st);
	swept_said(why, &st);
}

/* Sweep the tickets [from, to), adding what was done to st. */
static void sweep_range(struct store *s, uint32_t from, uint32_t to,
			struct shm_sweep_stats *st)
{
	/* A shared store: a running entry it never confirmed is given back
	 * (shm/sweep.c, unconfirmed()); the others know nothing of it. */
	const struct shm_sweep_ops ops = { dead_owner, pid_gone, s };

	shm_sweep_range(&s->view, &ops, s->shared ? s->started_ns : 0, from,
			to, st);
}

static void swept_said(const char *why, const struct shm_sweep_stats *st)
{
	if (st->uncertain || st->freed || st->settled || st->orphaned ||
	    st->given_back)
		log_info("%s: %u running entr%s now uncertain, %u never "
			 "confirmed by the store given back, %u unfinished "
			 "claim%s given back, %u held until their process "
			 "exits, %u settled", why, st->uncertain,
			 st->uncertain == 1 ? "y" : "ies", st->given_back,
			 st->freed, st->freed == 1 ? "" : "s", st->orphaned,
			 st->settled);
}

/* Free what tombstones can be freed. Clients count the tombstones they make
 * in sh_tombs; we take off what we saw before the pass. */
uint32_t store_reclaim(struct store *s)
{
	uint32_t n;

	pthread_mutex_lock(&s->lock);
	n = reclaim(s);
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* Clients count the tombstones they make in sh_tombs: a pass about to walk
 * the index takes what they counted so far off, and returns it. */
static uint32_t take_tomb_count(struct store *s)
{
	uint32_t *hint = &shm_header(&s->view)->sh_tombs;
	uint32_t seen = uatomic_read(hint);

	if (seen != 0)
		uatomic_add(hint, -seen);
	return seen;
}

static uint32_t reclaim(struct store *s)
{
	uint64_t now = clock_mono_ns();

	/* A RECLAIM request costs a scan of the index: at most one per
	 * millisecond, however many clients ask, unless the last one freed
	 * something and the index has no FREE bucket left. A client asks
	 * when its probe found none: if there is one now, it was made
	 * since, and the client's next probe finds it; if there is none,
	 * the room the last reclaim made was taken already, and refusing
	 * this one would answer IDEMPOTENCY_CAPACITY with entries free. A
	 * last reclaim that freed nothing says there is nothing to free. */
	if (now - s->last_reclaim_ns < 1000000 &&
	    (s->reclaim_freed == 0 || shm_any_free(&s->view)))
		return 0;
	s->last_reclaim_ns = now;

	(void)take_tomb_count(s);
	uint32_t n = shm_reclaim(&s->view);

	s->reclaim_freed = n;
	s->reclaim_left = 0;	/* the ring is done, for what was counted */
	log_debug("reclaimed %u tombstones in %.3f ms", n,
		  (double)(clock_mono_ns() - now) / 1e6);
	return n;
}

#define TICK_SLICES 10u
#define TICK_SLICE_BUCKETS (1u << 18)

/*
 * The ticks give tombstones back a stretch of the index at a time: whole
 * clusters (shm_reclaim_some()), 2^14 buckets a step, steps until 2 ms or
 * 2^18 buckets have gone. A walk of the whole index takes tens of
 * milliseconds on a table of millions of entries, which the loop would
 * hold every call up for at once; a stretch costs more where more live
 * entries must be moved (compacted), hence the clock. Once clients
 * counted tombstones in sh_tombs, or a pass of tick_slice() met one nobody
 * counted, the ticks walk the ring once round from where they are,
 * starting again at each count: every tombstone counted is walked over
 * after its count. A client's RECLAIM, which needs room now, walks the
 * ring whole (reclaim()).
 */
#define TICK_RECLAIM_STEP (1u << 14)
#define TICK_RECLAIM_NS 2000000u

static void tick_reclaim(struct store *s)
{
	uint32_t walked, total = 0, n = 0;
	const uint64_t t0 = clock_mono_ns();

	if (take_tomb_count(s) != 0 || s->tomb_seen) {
		s->tomb_seen = false;
		s->reclaim_left = s->view.geo.nbuckets;
	}
	while (s->reclaim_left != 0 && total < TICK_SLICE_BUCKETS &&
	       clock_mono_ns() - t0 < TICK_RECLAIM_NS) {
		n += shm_reclaim_some(&s->view, &s->reclaim_cursor,
				      TICK_RECLAIM_STEP, &walked);
		total += walked;
		s->reclaim_left -= walked < s->reclaim_left ? walked :
							       s->reclaim_left;
	}
	if (total != 0)
		log_debug("reclaimed %u tombstones in a stretch of %u buckets",
			  n, total);
}

/*
 * The ticks walk the table a slice at a time: the tickets for dead owners
 * and orphaned claims (sweep_dead()'s), and the buckets, in one read of
 * each, for words a client scribbled (shm_unblock_scribbled_range()) and
 * for tombstones nobody counted in sh_tombs. A whole walk of a table of
 * millions of entries takes tens of milliseconds, which the loop would
 * hold every call up for at once. A pass is ten slices, a second, up to 2
 * Mi buckets (a table of up to 1,048,576 entries); a bigger index takes a
 * slice of 2^18 buckets a tick, with its share of the tickets, about 1.5
 * ms on this project's VMs. What a pass found is said at its end, as one
 * walk would have said it.
 */
static void tick_slice(struct store *s)
{
	const uint64_t k = s->slice, cap = s->view.geo.capacity,
		       nb = s->view.geo.nbuckets;
	const uint64_t n = nb / TICK_SLICE_BUCKETS > TICK_SLICES ?
				   nb / TICK_SLICE_BUCKETS : TICK_SLICES;
	const uint32_t tf = (uint32_t)(cap * k / n),
		       tt = (uint32_t)(cap * (k + 1) / n),
		       bf = (uint32_t)(nb * k / n),
		       bt = (uint32_t)(nb * (k + 1) / n);
	bool tomb;

	sweep_range(s, tf, tt, &s->pass_swept);
	s->pass_scribbled += shm_unblock_scribbled_range(&s->view, bf, bt,
							 &tomb);
	s->pass_tomb |= tomb;
	if (++s->slice < n)
		return;
	log_debug("the tick's pass over the table is done: %" PRIu64
		  " tickets, %" PRIu64 " buckets in %" PRIu64 " slices", cap,
		  nb, n);
	swept_said("orphaned tickets", &s->pass_swept);
	scribbled_said(s, s->pass_scribbled);
	s->tomb_seen |= s->pass_tomb;
	s->slice = 0;
	s->pass_swept = (struct shm_sweep_stats){ 0 };
	s->pass_scribbled = 0;
	s->pass_tomb = false;
}

/* Every 100 ms: a slice of the table's walks (tick_slice()) and, while
 * tombstones are to be given back, a stretch of the index
 * (tick_reclaim()). Every second: check the header and the liveness word,
 * and send the owed releases again. */
void store_tick(struct store *s)
{
	bool owed, held;

	pthread_mutex_lock(&s->lock);
	++s->ticks;
	held = s->held != NULL &&
	       (s->ticks % 10 == 0 || s->held_left == 0 ||
		clock_mono_ns() >= s->grace_until_ns);
	pthread_mutex_unlock(&s->lock);
	if (held)
		held_check(s);
	pthread_mutex_lock(&s->lock);
	if (s->ticks % 10 == 0)
		check(s);
	tick_slice(s);
	tick_reclaim(s);
	owed = s->ticks % 10 == 0 && s->owed != NULL;
	pthread_mutex_unlock(&s->lock);
	if (owed)
		send_owed(s);
}

/* ------------------------------------------------------------ stores */

/*
 * Which store a segment was loaded from, as a number for its header: the
 * --store spec with a journal's directory resolved, and that directory's
 * device and inode (a directory swapped in at the same path, or restored
 * from a copy, is another store). Called once the store is open, so the
 * directory exists. Never 0, which the header of a segment never loaded,
 * or of an older build, holds.
 */
static uint64_t store_identity(const char *spec)
{
	const char *jdir = store_journal_dir(spec);
	char dir[PATH_MAX], buf[PATH_MAX + 16];
	struct stat st;
	uint64_t h;

	if (jdir != NULL && realpath(jdir, dir) != NULL &&
	    stat(dir, &st) == 0) {
		snprintf(buf, sizeof(buf), "journal:%s", dir);
	} else {
		memset(&st, 0, sizeof(st));
		snprintf(buf, sizeof(buf), "%s", spec);
	}
	h = XXH3_64bits_withSeed(buf, strnlen(buf, sizeof(buf)),
				 (uint64_t)st.st_dev * 0x9e3779b97f4a7c15ull ^
					 (uint64_t)st.st_ino);
	return h != 0 ? h : 1;
}

/* What to add when PATH, which dlopen() refused, is a plugin of ours that
 * is not there: packages ship it apart from carmyd, so that its library
 * comes only with it. */
static const char *missing_plugin_hint(const char *path)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash != NULL ? slash + 1 : path;

	if (strcmp(base, "carmy_store_pg.so") != 0 || access(path, F_OK) == 0)
		return "";
	return " (the PostgreSQL store is packaged apart from carmyd: on "
	       "Debian and Ubuntu, install the carmy-store-pg package)";
}

/* Is gid carmyd's user's private group (its name the user's, no other
 * members), whose write permission gives no one else anything? The
 * usual group of files made under umask 002. */
static bool private_group(gid_t gid)
{
	struct passwd *pw = getpwuid(geteuid());
	struct group *gr = getgrgid(gid);

	return pw != NULL && gr != NULL && gid == pw->pw_gid &&
	       strcmp(gr->gr_name, pw->pw_name) == 0 &&
	       (gr->gr_mem == NULL || gr->gr_mem[0] == NULL);
}

/* A file or directory on a plugin's way that only root or carmyd's user
 * can change: owned by one of them, and writable by no one else (a
 * directory may be, if sticky, like /tmp: others can add names there,
 * not rename or remove ours; group write is nobody else's when the group
 * is carmyd's user's private one). */
static bool plugin_part_ok(const struct stat *st, bool dir)
{
	if (st->st_uid != 0 && st->st_uid != geteuid())
		return false;
	if ((st->st_mode & S_IWOTH) != 0)
		return dir && (st->st_mode & S_ISVTX) != 0;
	return (st->st_mode & S_IWGRP) == 0 || private_group(st->st_gid) ||
	       (dir && (st->st_mode & S_ISVTX) != 0);
}

/* Every directory above path (a string: "/a/b/c" gives "/a/b", "/a",
 * "/"), each stat()ed as a directory on the way is followed. 0, or -1
 * with why filled. */
static int plugin_dirs_ok(const char *path, char *why, size_t size)
{
	char dir[PATH_MAX];
	struct stat st;
	size_t len = strlen(path);

	if (len >= sizeof(dir))
		return -1;
	memcpy(dir, path, len + 1);
	while (len > 1) {
		while (len > 1 && dir[len - 1] != '/')
			len--;
		if (len > 1)
			len--;
		dir[len] = '\0';
		if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
		    !plugin_part_ok(&st, true)) {
			snprintf(why, size, "%s, on its way, %s", dir,
				 stat(dir, &st) != 0 ? "cannot be read" :
				 "can be changed by a user other than root "
				 "and carmyd's (owner, group or others may "
				 "write it)");
			return -1;
		}
	}
	return 0;
}

/*
 * A plugin is code carmyd runs as its own user, its constructors before
 * anything is checked: it is loaded only from an absolute path whose file
 * and every directory on the way (the path as given, and as resolved
 * through symbolic links) only root or carmyd's user can change, as the
 * journal's directory and the log file are. Into resolved, the path to
 * load. 0, or -1 after saying why.
 */
static int plugin_trusted(const char *path, char *resolved)
{
	char why[PATH_MAX + 160];
	struct stat st;

	if (path[0] != '/') {
		log_error("--store plugin:%s: give the plugin's absolute path "
			  "(a bare name would be looked for along the "
			  "library search path)", path);
		return -1;
	}
	if (realpath(path, resolved) == NULL) {
		/* Never a path not checked: what realpath() left in
		 * resolved is not the plugin. */
		log_error("cannot load store plugin %s: %s%s", path,
			  strerror(errno), missing_plugin_hint(path));
		return -1;
	}
	if (stat(resolved, &st) != 0 || !S_ISREG(st.st_mode) ||
	    !plugin_part_ok(&st, false)) {
		log_error("not loading store plugin %s: it is not a regular "
			  "file that only root or carmyd's user can change "
			  "(owner uid %u, mode %04o)", path,
			  (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		return -1;
	}
	if (plugin_dirs_ok(path, why, sizeof(why)) != 0 ||
	    plugin_dirs_ok(resolved, why, sizeof(why)) != 0) {
		log_error("not loading store plugin %s: %s", path, why);
		return -1;
	}
	return 0;
}

/* --store SPEC: memory, journal:DIR or plugin:PATH.so[:ARGS]. */
static int backend_open(struct store *s, const char *spec)
{
	const struct carmy_store_ops *ops;
	const char *args = "", *jdir;
	char err[512] = "", path[4096], shown[1024], resolved[PATH_MAX] = "";
	int rc;

	if (strcmp(spec, "memory") == 0) {
		ops = &memory_store_ops;
	} else if ((jdir = store_journal_dir(spec)) != NULL) {
		ops = &journal_store_ops;
		args = jdir;
	} else if (strncmp(spec, "plugin:", 7) == 0) {
		const char *colon = strchr(spec + 7, ':');
		size_t n = colon ? (size_t)(colon - spec - 7) : strlen(spec + 7);

		if (n == 0 || n >= sizeof(path)) {
			log_error("--store plugin:PATH.so[:ARGS] needs a path");
			return -EINVAL;
		}
		memcpy(path, spec + 7, n);
		path[n] = '\0';
		args = colon ? colon + 1 : "";
		if (plugin_trusted(path, resolved) != 0)
			return -EPERM;
		s->plugin = dlopen(resolved, RTLD_NOW | RTLD_LOCAL);
		if (s->plugin == NULL) {
			const char *why = dlerror();

			log_error("cannot load store plugin %s: %s%s", path,
				  why, missing_plugin_hint(path));
			return -ENOENT;
		}
		ops = dlsym(s->plugin, "carmy_store_plugin");
		if (ops != NULL && ops->abi != CARMY_STORE_ABI) {
			/* Its records are another shape: read as ours, they
			 * would be read past their end. */
			log_error("%s is a Carmy store plugin of ABI %u; this "
				  "carmyd needs ABI %u (struct "
				  "carmy_store_record gained a call's tool, "
				  "arguments and result format in ABI 3): "
				  "rebuild it against this carmyd's "
				  "carmy_store.h", path, ops->abi,
				  CARMY_STORE_ABI);
			dlclose(s->plugin);
			s->plugin = NULL;
			return -EINVAL;
		}
		if (ops == NULL || ops->open == NULL || ops->load == NULL ||
		    ops->submit == NULL || ops->close == NULL) {
			log_error("%s is not a Carmy store plugin of ABI %u "
				  "(it must export carmy_store_plugin, with "
				  "every operation set)", path, CARMY_STORE_ABI);
			dlclose(s->plugin);
			s->plugin = NULL;
			return -EINVAL;
		}
	} else {
		log_error("unknown --store %s: use memory, journal:DIR or "
			  "plugin:PATH.so[:ARGS]", spec);
		return -EINVAL;
	}
	rc = ops->open(args, &s->st, err, sizeof(err));
	if (rc != 0) {
		log_error("store %s: %s", ops->name ? ops->name : spec,
			  err[0] ? err : strerror(-rc));
		if (s->plugin != NULL)
			dlclose(s->plugin);
		s->plugin = NULL;
		return rc;
	}
	s->ops = ops;
	s->durable = ops->durable != 0 || ops->shared != 0;
	s->shared = ops->shared != 0;
	log_info("store: %s%s%s", ops->name ? ops->name : "plugin",
		 args[0] ? " " : "", store_spec_shown(args, shown,
						       sizeof(shown)));
	return 0;
}

/*
 * A store's spec (or its ARGS) as the log shows it: a password in it (a
 * PostgreSQL connection string's password=VALUE, quoted or not, or a
 * URI's user:PASSWORD@) becomes ***, since the log may be read by more
 * people than the database's credentials are for. Cut short to fit buf.
 */
const char *store_spec_shown(const char *spec, char *buf, size_t size)
{
	const char *p = spec;
	size_t n = 0;

	while (*p != '\0' && n + 1 < size) {
		const char *q = p + 8, *at;
		bool key = strncmp(p, "password", 8) == 0 &&
			   (p == spec || p[-1] == ' ' || p[-1] == '\t' ||
			    p[-1] == ':' || p[-1] == '?' || p[-1] == '&');

		/* libpq allows blanks around a keyword's '='. */
		while (key && (*q == ' ' || *q == '\t'))
			q++;
		if (key && *q == '=') {
			for (q++; *q == ' ' || *q == '\t'; q++)
				;
			n += (size_t)snprintf(buf + n, size - n,
					      "password=***");
			if (*q == '\'') {
				for (q++; *q != '\0' && *q != '\''; q++)
					if (*q == '\\' && q[1] != '\0')
						q++;
				if (*q == '\'')
					q++;
			} else {
				q += strcspn(q, " \t&");
			}
			p = q;
		} else if (p - spec >= 3 && memcmp(p - 3, "://", 3) == 0 &&
			   (at = strpbrk(p, "@/ ")) != NULL && *at == '@' &&
			   memchr(p, ':', (size_t)(at - p)) != NULL) {
			/* A URI's authority: user:password@host... */
			n += (size_t)snprintf(buf + n, size - n, "%.*s:***",
					      (int)((const char *)memchr(p, ':',
						(size_t)(at - p)) - p), p);
			p = at;
		} else {
			buf[n++] = *p++;
		}
		if (n >= size)
			n = size - 1;
	}
	buf[n] = '\0';
	return buf;
}

struct restore_ctx {
	struct store *s;
	bool fresh;
	uint32_t cursor;
	uint32_t completed, uncertain, skipped;
	int rc;
	uint8_t *recorded;	/* shared: a bit an entry the store holds */
	/* shared, an existing segment: running executions of ours the
	 * store holds and no client was told stand (never_told()) */
	struct untold *untold;
	size_t nuntold, untold_cap;
};

/* A running execution of ours the store holds and no client was told
 * stands: its identity and execution id, to release it once loaded. */
struct untold {
	uint8_t exec[SHM_EXEC_LEN];
	uint16_t len[3];
	uint8_t id[3 * CARMY_STORE_ID_MAX];
};

/*
 * Bring the segment up to what the store holds. A fresh segment (the
 * machine rebooted, or it was removed) gets every execution back: results
 * replay as before and reservations without a result are uncertain. So
 * does one never fully loaded from this store (see store_open). An
 * existing segment loaded from it is newer than the store for presence (an
 * entry it lacks was released), so it only gets the results it missed.
 */
static int backend_load(struct store *s, bool fresh)
{
	struct restore_ctx ctx = { .s = s, .fresh = fresh };
	uint32_t back = 0;
	int rc;

	if (s->shared) {
		ctx.recorded = calloc(s->view.geo.capacity / 8 + 1, 1);
		if (ctx.recorded == NULL)
			return -ENOMEM;
	}
	rc = s->ops->load(s->st, restore_one, &ctx);
	if (rc == 0)
		rc = ctx.rc;
	if (rc == 0)
		release_untold(s, &ctx);
	free(ctx.untold);
	/* What the segment holds of ours that the store never recorded
	 * (shm_give_back_unrecorded()): the store gives the identity to
	 * any instance, so it must not stay running or uncertain here. */
	for (uint32_t e = 0; rc == 0 && s->shared && e < s->view.geo.capacity;
	     e++)
		if (!(ctx.recorded[e / 8] & (1u << (e % 8))) &&
		    shm_give_back_unrecorded(&s->view, e))
			back++;
	free(ctx.recorded);
	if (back != 0)
		log_info("store: %u reservation%s the store never recorded "
			 "given back", back, back == 1 ? "" : "s");
	if (rc != 0) {
		log_error("cannot load the store into the segment: %s%s",
			  carmy_errname(rc),
			  rc == CARMY_ECAPACITY ?
				  " (the store holds more executions than "
				  "--capacity: start with a larger one)" : "");
		return rc;
	}
	if (ctx.completed || ctx.uncertain)
		log_info("store: %s %u completed and %u uncertain execution%s",
			 fresh ? "restored" : "brought up to date",
			 ctx.completed, ctx.uncertain,
			 ctx.uncertain == 1 ? "" : "s");
	return 0;
}

static int restore_one(void *arg, const struct carmy_store_record *r)
{
	struct restore_ctx *ctx = arg;
	struct shm_view *v = &ctx->s->view;
	struct shm_restored rs = {
		.fp = r->fingerprint, .rawfp = r->rawprint, .exec = r->exec,
		.pid = r->pid, .started_ns = r->started_ns,
		.completed = r->state == CARMY_STORE_COMPLETED,
		.finished_ns = r->finished_ns, .status = r->status,
		.result_code = r->result_code, .result = r->result,
		.result_len = r->result_len, .resolved_ns = r->resolved_ns,
		.resolved_uid = r->resolved_uid,
		.resolved_pid = r->resolved_pid,
		.call = record_call(r),
	};
	struct shm_key k;
	int rc;

	/* A shared store hears of a release before the segment does, so
	 * an execution of ours it holds running and the segment lacks was
	 * never given back: its answer was lost (carmyd died first). It is
	 * uncertain, here where it can be resolved. */
	if (!ctx->fresh && !rs.completed && !ctx->s->shared)
		return 0;
	rc = shm_key_init(&k, v->seed, r->part[0], r->len[0], r->part[1],
			  r->len[1], r->part[2], r->len[2]);
	if (rc == 0 && ctx->recorded != NULL) {
		struct shm_found f;

		if (shm_lookup(v, &k, &f) &&
		    memcmp(f.exec, r->exec, SHM_EXEC_LEN) == 0)
			ctx->recorded[f.entry / 8] |=
				(uint8_t)(1u << (f.entry % 8));
	}
	if (rc == 0 && ctx->recorded != NULL && !ctx->fresh && !rs.completed &&
	    never_told(v, &k, r->exec))
		remember_untold(ctx, r);
	if (rc == 0 && (rs.status < CARMY_STATUS_COMPLETED ||
			rs.status > CARMY_STATUS_CANCELLED) && rs.completed)
		rc = CARMY_ECORRUPT;
	if (rc == 0 && r->result_len > v->geo.max_result)
		rc = CARMY_ERESULT_TOO_LARGE;
	if (rc == 0)
		rc = shm_restore(v, &k, &rs, &ctx->cursor,
				 ctx->fresh || ctx->s->shared);
	if (rc != 0) {
		ctx->rc = rc;
		return rc;
	}
	if (rs.completed)
		ctx->completed++;
	else
		ctx->uncertain++;
	return 0;
}

/*
 * A shared store holds execution exec of ours, of identity k, running: was
 * no client ever told that it stands? So when the segment (an existing
 * one, loaded from this store before) does not hold it, or holds it
 * unconfirmed (en_pending not 0): carmyd settles en_pending before it
 * tells a client, and gives an entry back in the store before the
 * segment. Such a row is a RESERVE whose answer was lost and was answered
 * failed (the store was to withdraw it, and the carmyd that remembered to
 * died first), or one whose client went away: its tool never ran. A client
 * may write its own entry's words: one that does harms only its own calls.
 */
static bool never_told(const struct shm_view *v, const struct shm_key *k,
		       const uint8_t *exec)
{
	struct shm_found f;

	if (!shm_lookup(v, k, &f) || memcmp(f.exec, exec, SHM_EXEC_LEN) != 0)
		return true;
	return (f.state == SHM_RUNNING || f.state == SHM_UNCERTAIN) &&
	       uatomic_read(&shm_entry_at(v, f.entry)->en_pending) != 0;
}

/* Keep r, never_told(), to release once loaded; without the memory for
 * it, r stays uncertain here, as the store's row reads everywhere. */
static void remember_untold(struct restore_ctx *ctx,
			    const struct carmy_store_record *r)
{
	struct untold *u;

	if (ctx->nuntold == ctx->untold_cap) {
		size_t cap = ctx->untold_cap ? 2 * ctx->untold_cap : 16;
		struct untold *more = realloc(ctx->untold, cap * sizeof(*more));

		if (more == NULL)
			return;
		ctx->untold = more;
		ctx->untold_cap = cap;
	}
	u = &ctx->untold[ctx->nuntold];
	for (int i = 0; i < 3; i++) {
		if (r->len[i] == 0 || r->len[i] > CARMY_STORE_ID_MAX)
			return;
		u->len[i] = r->len[i];
		memcpy(u->id + i * CARMY_STORE_ID_MAX, r->part[i], r->len[i]);
	}
	memcpy(u->exec, r->exec, SHM_EXEC_LEN);
	ctx->nuntold++;
}

/* One request to the store, waited for: at start-up, before any client's. */
struct sync_req {
	struct carmy_store_req req;	/* first: done() gets it */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int rc;
};

static void sync_done(struct carmy_store_req *req, int rc)
{
	struct sync_req *sr = (struct sync_req *)req;

	pthread_mutex_lock(&sr->lock);
	sr->rc = rc;
	sr->done = true;
	pthread_cond_signal(&sr->cond);
	pthread_mutex_unlock(&sr->lock);
}

static int release_sync(struct store *s, const struct untold *u)
{
	struct carmy_store_record rec = { .state = CARMY_STORE_RUNNING };
	struct sync_req sr = {
		.req = { .op = CARMY_STORE_RELEASE, .rec = &rec,
			 .done = sync_done },
		.lock = PTHREAD_MUTEX_INITIALIZER,
		.cond = PTHREAD_COND_INITIALIZER,
	};

	for (int i = 0; i < 3; i++) {
		rec.part[i] = u->id + i * CARMY_STORE_ID_MAX;
		rec.len[i] = u->len[i];
	}
	memcpy(rec.exec, u->exec, SHM_EXEC_LEN);
	s->ops->submit(s->st, &sr.req);
	pthread_mutex_lock(&sr.lock);
	while (!sr.done)
		pthread_cond_wait(&sr.cond, &sr.lock);
	pthread_mutex_unlock(&sr.lock);
	pthread_mutex_destroy(&sr.lock);
	pthread_cond_destroy(&sr.cond);
	return sr.rc;
}

/*
 * Release in the store each execution of ours no client was told stands
 * (never_told()), then give its entry back here: the identity is free on
 * every instance, as its tool never ran. One the store fails to release
 * stays uncertain here, as its row reads everywhere.
 */
static void release_untold(struct store *s, const struct restore_ctx *ctx)
{
	struct shm_view *v = &s->view;
	uint32_t freed = 0;

	for (size_t i = 0; i < ctx->nuntold; i++) {
		const struct untold *u = &ctx->untold[i];
		char text[EXECID_TEXT_LEN + 1];
		struct shm_found f;
		struct shm_key k;
		int rc = release_sync(s, u);

		execid_format(text, u->exec);
		if (rc != 0) {
			log_warn("store: cannot release %s, which no client "
				 "was told stands: it stays uncertain: %s",
				 text, strerror(-rc));
			continue;
		}
		if (shm_key_init(&k, v->seed, u->id, u->len[0],
				 u->id + CARMY_STORE_ID_MAX, u->len[1],
				 u->id + 2 * CARMY_STORE_ID_MAX,
				 u->len[2]) == 0 &&
		    shm_lookup(v, &k, &f))
			(void)shm_give_back_as(v, f.entry, u->exec);
		log_info("store: released %s, which no client was told "
			 "stands (its tool never ran)", text);
		freed++;
	}
	if (freed != 0)
		log_info("store: %u reservation%s no client was told of "
			 "released", freed, freed == 1 ? "" : "s");
}

/* ------------------------------------------------------------ calls */

/* Entry e's call (its entry running as ours, under s->lock: nobody writes
 * it) into rec, for a RESERVE's record: its kept bytes copied into buf
 * (SHM_TOOL_KEEP + SHM_ARGS_KEEP bytes), which rec points into. */
static void take_call(struct store *s, uint32_t e,
		      struct carmy_store_record *rec, uint8_t *buf)
{
	struct shm_call cl;
	size_t tk, ak;

	shm_call_copy(&s->view, e, &cl);
	tk = shm_call_tool_kept(&cl);
	ak = shm_call_args_kept(&cl);
	memcpy(buf, cl.cl_data, tk + ak);
	rec->tool = buf;
	rec->tool_kept = (uint32_t)tk;
	rec->tool_len = cl.cl_tool_len;
	rec->args = buf + tk;
	rec->args_kept = (uint32_t)ak;
	rec->args_len = cl.cl_args_len;
	rec->result_format = cl.cl_format;
}

/* A store's record of a call, its bytes borrowed, made carmyd's: copied
 * into buf (SHM_TOOL_KEEP + SHM_ARGS_KEEP bytes), no more than that and
 * than the whole lengths say. A store that gives a pointer NULL with a
 * length gives nothing of it. */
static void keep_call(struct carmy_store_record *rec, uint8_t *buf)
{
	struct shm_summary in = record_call(rec);
	size_t tk = in.tool_kept, ak = in.args_kept;

	if (tk > 0)
		memcpy(buf, in.tool, tk);
	if (ak > 0)
		memcpy(buf + tk, in.args, ak);
	rec->tool = buf;
	rec->tool_kept = (uint32_t)tk;
	rec->args = buf + tk;
	rec->args_kept = (uint32_t)ak;
}

/* What a store's record says of its call, as a summary for the segment:
 * the kept lengths bounded by what the segment keeps and by the whole
 * lengths (none of a store's numbers is trusted). */
static struct shm_summary record_call(const struct carmy_store_record *r)
{
	struct shm_summary c = {
		.tool = r->tool, .tool_len = r->tool_len,
		.tool_kept = r->tool != NULL ? r->tool_kept : 0,
		.args = r->args, .args_len = r->args_len,
		.args_kept = r->args != NULL ? r->args_kept : 0,
		.format = r->result_format,
	};

	if (c.tool_kept > SHM_TOOL_KEEP)
		c.tool_kept = SHM_TOOL_KEEP;
	if (c.tool_kept > c.tool_len)
		c.tool_kept = (size_t)c.tool_len;
	if (c.args_kept > SHM_ARGS_KEEP)
		c.args_kept = SHM_ARGS_KEEP;
	if (c.args_kept > c.args_len)
		c.args_kept = (size_t)c.args_len;
	return c;
}

/* ------------------------------------------------------------ helpers */

static int create_segment(struct store *s, const struct carmyd_config *cfg,
			  const struct shm_geometry *geo)
{
	uint64_t seed;
	void *base;
	int rc;

	/* shm_open's mode is filtered by the umask; say exactly what we mean. */
	if (fchmod(s->fd, cfg->use_group ? 0660 : 0600) != 0 ||
	    (cfg->use_group && fchown(s->fd, (uid_t)-1, cfg->gid) != 0)) {
		rc = -errno;
		log_error("cannot set permissions of segment %s: %s",
			  cfg->shm_name, strerror(errno));
		goto fail;
	}
	/* The size first: a /dev/shm mounted huge=within_size gives huge
	 * pages only to what lies within the file's size, and
	 * posix_fallocate() sets the size once it has allocated. (Linux
	 * 6.18 also counts the range being allocated; kernels that look at
	 * the size alone would allocate 4 KiB pages.) */
	rc = ftruncate(s->fd, (off_t)geo->size) != 0 ? errno : 0;
	if (rc == 0)
		rc = posix_fallocate(s->fd, 0, (off_t)geo->size);
	if (rc != 0) {
		log_error("cannot reserve %llu bytes for segment %s in /dev/shm: "
			  "%s (lower --capacity or --max-result)",
			  (unsigned long long)geo->size, cfg->shm_name,
			  strerror(rc));
		rc = -rc;
		goto fail;
	}
	base = shm_mmap(s->fd, geo->size, true);
	if (base == MAP_FAILED) {
		rc = -errno;
		log_error("cannot map segment: %s", strerror(errno));
		goto fail;
	}
	(void)madvise(base, geo->size, MADV_HUGEPAGE);	/* populate() */
	if (getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed))
		seed = clock_real_ns() ^ ((uint64_t)getpid() << 32);
	shm_format(base, geo, seed, clock_real_ns());
	rc = shm_view_init(&s->view, base, geo->size);
	if (rc != 0) {
		munmap(base, geo->size);
		goto fail;
	}
	log_info("created segment %s: capacity %u entries, max-result %u "
		 "bytes, %llu bytes reserved", cfg->shm_name, geo->capacity,
		 geo->max_result, (unsigned long long)geo->size);
	return 0;
fail:
	shm_unlink(cfg->shm_name);
	return rc;
}

/*
 * An existing segment, before it is mapped (st from fstat() on s->fd): a
 * regular file of ours that nobody could write but us and, with --group,
 * that group. One that others could write may hold what they wrote (its
 * entries, recorded results) and is refused; one narrower than asked
 * (started before without --group) is widened to it, as it was never
 * exposed. Returns 0 or -EPERM.
 */
static int vet_segment(struct store *s, const struct carmyd_config *cfg,
		       const struct stat *st)
{
	const mode_t want = cfg->use_group ? 0660 : 0600;
	const mode_t mode = st->st_mode & 07777;

	if (!S_ISREG(st->st_mode)) {
		log_error("segment %s is not a regular file: refusing it",
			  cfg->shm_name);
		return -EPERM;
	}
	if (st->st_uid != geteuid()) {
		log_error("segment %s belongs to uid %u, not to us: refusing it",
			  cfg->shm_name, (unsigned)st->st_uid);
		return -EPERM;
	}
	if ((mode & ~want) != 0 ||
	    ((mode & 0070) != 0 && st->st_gid != cfg->gid)) {
		log_error("segment %s has mode %04o and group %u: others could "
			  "have written to it, so it is refused (%s; remove it "
			  "with rm /dev/shm%s to start afresh)", cfg->shm_name,
			  (unsigned)mode, (unsigned)st->st_gid,
			  cfg->use_group ? "expected 0660 with --group" :
					   "expected 0600; start with --group "
					   "if it was shared",
			  cfg->shm_name);
		return -EPERM;
	}
	if (mode != want || (cfg->use_group && st->st_gid != cfg->gid)) {
		if ((cfg->use_group &&
		     fchown(s->fd, (uid_t)-1, cfg->gid) != 0) ||
		    fchmod(s->fd, want) != 0) {
			int err = errno;

			log_error("cannot share segment %s with the group: %s",
				  cfg->shm_name, strerror(err));
			return -err;
		}
		log_info("segment %s had mode %04o: made it %04o", cfg->shm_name,
			 (unsigned)mode, (unsigned)want);
	}
	return 0;
}

static int attach_segment(struct store *s, const struct carmyd_config *cfg)
{
	struct stat st;
	void *base;
	int rc;

	s->fd = shm_open(cfg->shm_name, O_RDWR | O_NONBLOCK | O_CLOEXEC, 0);
	if (s->fd < 0 || fstat(s->fd, &st) != 0) {
		rc = -errno;
		log_error("cannot open segment %s: %s", cfg->shm_name,
			  strerror(errno));
		return rc;
	}
	rc = vet_segment(s, cfg, &st);
	if (rc != 0)
		return rc;
	if (st.st_size < (off_t)SHM_HEADER_SIZE) {
		log_error("segment %s is truncated (%lld bytes)", cfg->shm_name,
			  (long long)st.st_size);
		return CARMY_ECORRUPT;
	}
	base = shm_mmap(s->fd, (size_t)st.st_size, true);
	if (base == MAP_FAILED) {
		rc = -errno;
		log_error("cannot map segment: %s", strerror(errno));
		return rc;
	}
	(void)madvise(base, (size_t)st.st_size, MADV_HUGEPAGE);
	rc = shm_view_init(&s->view, base, (size_t)st.st_size);
	if (rc == CARMY_ELAYOUT) {
		munmap(base, (size_t)st.st_size);
		log_error("existing segment %s was made by another build of "
			  "Carmy (SEGMENT_LAYOUT_MISMATCH: this build's "
			  "segment format is %u); it was left untouched. Stop "
			  "that build's carmyd and clients, then remove it "
			  "(rm /dev/shm%s) and start again: the results it "
			  "holds are lost unless --store recorded them",
			  cfg->shm_name, SHM_FORMAT, cfg->shm_name);
		return rc;
	}
	if (rc != 0) {
		munmap(base, (size_t)st.st_size);
		log_error("existing segment %s is unusable (%s: %s); it was "
			  "left untouched: remove it (rm /dev/shm%s) to start "
			  "afresh",
			  cfg->shm_name, carmy_errname(rc), carmy_strerror(rc),
			  cfg->shm_name);
		return rc;
	}
	if ((cfg->capacity_set && s->view.geo.capacity != cfg->capacity) ||
	    (cfg->max_result_set && s->view.geo.max_result != cfg->max_result)) {
		log_error("existing segment %s has capacity %u and max-result "
			  "%u, not what was asked; its entries are kept. Start "
			  "with those values, or remove it to start afresh",
			  cfg->shm_name, s->view.geo.capacity,
			  s->view.geo.max_result);
		shm_unmap(&s->view);
		return -EINVAL;
	}
	log_info("attached to existing segment %s: capacity %u entries, "
		 "max-result %u bytes", cfg->shm_name, s->view.geo.capacity,
		 s->view.geo.max_result);
	return 0;
}

/*
 * Start a new epoch on the segment. Nobody is connected to us yet, so every
 * ticket still held belongs to a client of an earlier carmyd: its
 * connection is gone, and its running entries become uncertain (unless it
 * is held), but only once the store is loaded (store_open()): until then
 * the sweep here leaves every owner of an earlier carmyd, so that no
 * client looking at the segment meanwhile reads uncertain what the load
 * is to settle otherwise (a shared store's reservation it never recorded
 * is given back, and the identity may be another instance's).
 */
static void recover(struct store *s, uint32_t grace_ms)
{
	struct shm_header *h = shm_header(&s->view);
	uint32_t next = uatomic_read(&h->sh_next_owner);

	shm_unblock_all(&s->view);
	shm_repair_moves(&s->view);
	if (next < SHM_OWNER_MIN)
		next = SHM_OWNER_MIN;
	for (uint32_t e = 0; e < s->view.geo.capacity; e++) {
		uint32_t t = SHM_T_WHAT(uatomic_read(&s->view.tickets[e]));

		if (t >= SHM_OWNER_MIN && t >= next && t < OWNER_WRAP)
			next = t + 1;
	}
	if (next >= OWNER_WRAP)
		next = SHM_OWNER_MIN;
	s->next_owner = next;
	s->epoch = uatomic_read(&h->sh_epoch) + 1;
	s->owner_base = next;
	/* The previous carmyd's clients that still run may come back for
	 * their running reservations: the sweep leaves those. */
	if (grace_ms > 0 && s->epoch > 1)
		hold_previous(s, grace_ms);
	held_tell(s);	/* not what an earlier carmyd left there */
	s->loading = true;
	sweep_dead(s, "start-up");
	uatomic_set(&h->sh_owner_base, next);
	uatomic_set(&h->sh_next_owner, next);
	uatomic_set(&h->sh_daemon_pid, (uint32_t)getpid());
	uatomic_set(&h->sh_epoch, s->epoch);
	shm_reclaim(&s->view);
}

/* An owner is dead when no connection holds its id, except an owner of an
 * earlier carmyd while the store is loaded (recover()), or still held for
 * its client to come back (hold_previous()). */
static bool dead_owner(uint32_t owner, void *arg)
{
	struct store *s = arg;

	if (s->loading && owner < s->owner_base)
		return false;
	return !owners_alive(owner) && held_find(s, owner) == NULL;
}

static int held_cmp(const void *a, const void *b)
{
	const struct held_owner *x = a, *y = b;

	return x->owner < y->owner ? -1 : x->owner > y->owner;
}

/* owner, if it is held and not let go; under s->lock. */
static struct held_owner *held_find(struct store *s, uint32_t owner)
{
	const struct held_owner key = { .owner = owner };
	struct held_owner *h;

	if (s->held == NULL)
		return NULL;
	h = bsearch(&key, s->held, s->nheld, sizeof(key), held_cmp);
	return h != NULL && !h->let_go ? h : NULL;
}

/*
 * At start-up, before the first sweep: hold each owner of the previous
 * carmyd whose process still runs, for grace_ms at most. That process
 * claimed every entry the owner holds (its pid is on each ticket) and
 * started before the first of them, so a reused pid is not held: a
 * process started later could ask for the id and complete the calls with
 * results of its own. The two times are on the wall clock (en_started_ns;
 * the kernel's boot time plus the start's clock ticks), with HOLD_SLACK_NS
 * of slack for the boot time's whole seconds and a clock stepped forward
 * meanwhile (a bigger step lets the client go: its calls turn uncertain,
 * never run twice). From then on the process is told by its start in
 * clock ticks alone, which no clock step moves. The bound is for a
 * process that lives on without its handle (an exec, a handle leaked): it
 * will never come back. A process /proc cannot tell of now is not held,
 * nor is any without memory for the list: their entries turn uncertain,
 * as they always may. Each restart holds anew: a carmyd restarted again
 * and again holds a client that does not come back for as long.
 */
static void hold_previous(struct store *s, uint32_t grace_ms)
{
	long hz = sysconf(_SC_CLK_TCK);
	uint64_t tick_ns = hz > 0 ? 1000000000u / (uint64_t)hz : 0, boot_ns;
	struct held_owner *h = NULL;
	size_t n = 0, cap = 0, kept = 0;

	for (uint32_t e = 0; e < s->view.geo.capacity; e++) {
		uint64_t t = uatomic_read(&s->view.tickets[e]);
		uint32_t owner = SHM_T_WHAT(t);

		if (owner < SHM_OWNER_MIN || owner >= s->owner_base)
			continue;
		if (n == cap) {
			struct held_owner *m;

			cap = cap ? 2 * cap : 16;
			m = realloc(h, cap * sizeof(*h));
			if (m == NULL) {
				free(h);
				return;
			}
			h = m;
		}
		h[n++] = (struct held_owner){
			.owner = owner, .pid = SHM_T_PID(t),
			.first_ns = uatomic_read(
				&shm_entry_at(&s->view, e)->en_started_ns) };
	}
	if (n != 0)
		qsort(h, n, sizeof(*h), held_cmp);
	/* One per owner, with its oldest entry's start. */
	for (size_t i = 0; i < n; i++) {
		struct held_owner *k = kept != 0 ? &h[kept - 1] : NULL;

		if (k != NULL && k->owner == h[i].owner) {
			k->mixed |= k->pid != h[i].pid;
			if (h[i].first_ns != 0 &&
			    (k->first_ns == 0 || h[i].first_ns < k->first_ns))
				k->first_ns = h[i].first_ns;
			continue;
		}
		h[kept++] = h[i];
	}
	n = kept;
	kept = 0;
	boot_ns = boot_time_ns();
	for (size_t i = 0; i < n; i++) {
		uint64_t started;

		if (h[i].mixed || boot_ns == 0 || tick_ns == 0 ||
		    proc_ticks(h[i].pid, &h[i].pid_ticks) != 1)
			continue;
		started = boot_ns + h[i].pid_ticks * tick_ns;
		if (h[i].first_ns != 0 &&
		    started > h[i].first_ns + HOLD_SLACK_NS)
			continue;
		h[kept++] = h[i];
	}
	if (kept == 0) {
		free(h);
		return;
	}
	s->held = h;
	s->nheld = kept;
	s->held_left = kept;
	s->grace_until_ns = clock_mono_ns() + (uint64_t)grace_ms * 1000000u;
	s->grace_until_real_ns = clock_real_ns() +
				 (uint64_t)grace_ms * 1000000u;
	log_info("%zu client%s of the previous carmyd still running: %s "
		 "running entries stay theirs until they come back, exit, "
		 "or --grace (%u s) has passed", kept, kept == 1 ? "" : "s",
		 kept == 1 ? "its" : "their", grace_ms / 1000);
}

/*
 * Each second and when --grace is over, from store_tick() without s->lock:
 * let go of each held owner whose process exited or became another (a
 * reused pid), and of all once --grace is over. The /proc reads are made
 * without the lock, so that requests do not wait on them: only this
 * thread changes the list's size or frees it, and an owner's pid and
 * ticks never change (store_resume() only lets one go). An owner let go
 * is dead from then on (its entries turn uncertain at the sweep here)
 * unless it came back. The list goes when nobody is held.
 */
static void held_check(struct store *s)
{
	unsigned exited = 0, waited = 0;
	bool over;

	pthread_mutex_lock(&s->lock);
	over = clock_mono_ns() >= s->grace_until_ns;
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < s->nheld; i++) {
		struct held_owner *h = &s->held[i];
		uint64_t ticks = 0;

		/* Failed to read (out of descriptors, say): no telling,
		 * held. */
		h->gone = proc_ticks(h->pid, &ticks) == 0 ||
			  (ticks != 0 && ticks != h->pid_ticks);
	}
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->nheld; i++) {
		struct held_owner *h = &s->held[i];

		if (h->let_go || (!over && !h->gone))
			continue;
		h->let_go = true;
		s->held_left--;
		if (h->gone)
			exited++;
		else
			waited++;
	}
	if (exited != 0)
		log_info("%u client%s of the previous carmyd exited without "
			 "coming back", exited, exited == 1 ? "" : "s");
	if (waited != 0)
		log_info("--grace is over: %u client%s of the previous carmyd "
			 "still running did not come back", waited,
			 waited == 1 ? "" : "s");
	if (s->held_left == 0 || over) {
		free(s->held);
		s->held = NULL;
		s->nheld = 0;
		s->held_left = 0;
		s->grace_until_ns = 0;
	}
	held_tell(s);
	if (exited != 0 || waited != 0)
		sweep_dead(s, "clients of the previous carmyd let go");
	pthread_mutex_unlock(&s->lock);
}

/* When --grace lets the held clients go, as the header tells it: 0 when
 * none is held. */
static uint64_t held_until(const struct store *s)
{
	return s->held_left != 0 ? s->grace_until_real_ns : 0;
}

/* Under s->lock (or before the loops run): tell operators, in the header,
 * how many clients are still held and until when (carmyctl status). */
static void held_tell(struct store *s)
{
	struct shm_header *h = shm_header(&s->view);

	uatomic_set(&h->sh_held, (uint32_t)s->held_left);
	uatomic_set(&h->sh_held_until_ns, held_until(s));
}

/* The start of /proc/PID/NAME, NUL-terminated in buf: its length, or -1
 * with errno set (ENOENT: no such process). */
static ssize_t read_proc(pid_t pid, const char *name, char *buf, size_t size)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n <= 0) {
		errno = n == 0 ? EIO : errno;
		return -1;
	}
	buf[n] = '\0';
	return n;
}

/* Has process pid exited, so that it can no longer write into an entry it
 * claimed? (proc_ticks(); no telling counts as not gone.) A reused pid
 * only makes us wait longer, never free too early. */
static bool pid_gone(uint32_t pid, void *arg)
{
	uint64_t ticks;

	(void)arg;
	return proc_ticks(pid, &ticks) == 0;
}

/*
 * Does pid, as SO_PEERCRED gave it, name the same process the client calls
 * getpid()? Not for a client in another PID namespace: the kernel then maps
 * it to its pid here (or to 0, if it cannot be seen from here at all),
 * while the client writes its own in the tickets it claims. Those pids are
 * how carmyd tells a live claimer from a gone one and gives an owner id
 * back after a restart, so a claim of such a client could be freed while
 * it still writes. /proc/PID/status lists the pid in every namespace from
 * ours down (NSpid): one field means the client's namespace is ours.
 * Without NSpid (kernels before 4.1) there is no telling: believed.
 */
bool store_peer_pid_usable(pid_t pid)
{
	char buf[4096], *p;
	int fields = 0;

	if (pid <= 0)
		return false;
	if (read_proc(pid, "status", buf, sizeof(buf)) < 0)
		return true;	/* gone already: its connection ends */
	p = strstr(buf, "\nNSpid:");
	if (p == NULL)
		return true;
	for (p += 7; *p != '\0' && *p != '\n'; p++)
		if ((*p >= '0' && *p <= '9') && (p[-1] == ' ' || p[-1] == '\t'))
			fields++;
	return fields == 1;
}

/*
 * Process pid's start, in clock ticks since boot (field 22 of
 * /proc/PID/stat, fields counted after the last ')' since the name may
 * hold any byte), into *ticks: 1; 0 if it is gone; -1 if there is no
 * telling (out of descriptors, say). The ticks name one process for good.
 * Gone is a kernel fact: no such process, or a zombie (state Z or X) with
 * no thread left. Z alone is not enough: a process whose main thread
 * called pthread_exit() shows Z while its other threads run, and one of
 * those may be a claimer. num_threads (field 20) counts the zombie leader
 * until it is reaped, so a process that has wholly exited shows 1.
 */
static int proc_ticks(uint32_t pid, uint64_t *ticks)
{
	unsigned long threads = 0;
	char buf[1024], *p, state;
	ssize_t n;

	if (pid == 0 || pid > INT32_MAX)
		return 0;
	n = read_proc((pid_t)pid, "stat", buf, sizeof(buf));
	if (n < 0)
		return errno == ENOENT || errno == ESRCH ? 0 : -1;
	p = strrchr(buf, ')');
	if (p == NULL || p[1] != ' ')
		return -1;
	state = p[2];
	/* From the state (field 3) on to starttime (field 22). */
	p += 2;
	for (int field = 3; field < 22; field++) {
		p = strchr(p, ' ');
		if (p == NULL)
			return -1;
		p++;
		if (field == 19)
			threads = strtoul(p, NULL, 10);
	}
	*ticks = strtoull(p, NULL, 10);
	if ((state == 'Z' || state == 'X') && threads <= 1)
		return 0;
	return *ticks != 0 ? 1 : -1;
}

/* The wall clock's time at boot, in ns (btime in /proc/stat: computed by
 * the kernel from the wall clock now, in whole seconds), or 0. */
static uint64_t boot_time_ns(void)
{
	unsigned long long btime = 0;
	char buf[256];
	FILE *f = fopen("/proc/stat", "re");

	if (f == NULL)
		return 0;
	while (fgets(buf, sizeof(buf), f) != NULL)
		if (sscanf(buf, "btime %llu", &btime) == 1)
			break;
	fclose(f);
	return btime * 1000000000ull;
}

/*
 * Map the segment's pages into carmyd, at the kernel's pace, while the
 * store is restored into it and clients are already served. A new
 * segment's pages are allocated (posix_fallocate() in create_segment()) but
 * not yet zeroed: a big one takes most of a second to zero (1.3 GB: 0.65 s
 * in 4 KiB pages), which a restart restoring a million executions should
 * not wait for. Pages touched first are skipped.
 *
 * In steps: each holds this process's mmap lock, and everything here that
 * maps memory (a thread's stack, a large malloc) waits for it: one call
 * over a 17 GB segment would keep carmyd from starting its event loops for
 * 14 s after its ready line. A step takes a few milliseconds to zero.
 *
 * Each step is then made of huge pages where the kernel lets it:
 * MADV_COLLAPSE copies the step's 4 KiB pages into 2 MiB ones. Where
 * /dev/shm is mounted huge=within_size or always, a new segment's pages
 * are huge as allocated and the call finds nothing to do; elsewhere
 * (without huge=, most systems; huge=advise, whose advice does not reach
 * posix_fallocate()) they are 4 KiB, and Linux 6.18 collapses them
 * whatever the mount says, the mapping being on a 2 MiB boundary
 * (shm_mmap()). A kernel that refuses (before 6.1; shmem_enabled deny)
 * fails at once with EINVAL, and the call is not tried again; no 2 MiB
 * piece of free memory (ENOMEM, EAGAIN) leaves that step in 4 KiB pages.
 * Huge pages are the clients' too: libcarmy maps the segment on a 2 MiB
 * boundary as well, and the kernel maps a huge page whole there, so a
 * process takes one first touch and one TLB entry per 2 MiB of the
 * segment instead of per 4 KiB (docs/segment.md, Huge pages).
 *
 * Then each page of the step is read once, here, ahead of the loops. Under
 * some hypervisors a page the kernel mapped is not yet the CPU's: the first
 * access to it by a process exits to the hypervisor, which maps it for that
 * process (on this project's VMs, 5 µs a 4 KiB page after
 * MADV_POPULATE_WRITE, against 10 µs for a page fault and 0.02 µs for a
 * second touch: docs/performance.md; a step's reads then take about 40 ms,
 * so the stop is looked at every READ_BATCH pages). Without the read,
 * carmyd's loops took that cost on their first completion into each page
 * of entries and results, a page every few completions. One read per page
 * is enough for the writes after it. A page a loop reaches first still
 * costs it there.
 */
#define POPULATE_STEP (32u << 20)
#define READ_BATCH 1024u
#define HUGE_WORTH (8u << 20)	/* the least segment told of huge pages */

/* Read a byte of each page of len bytes at p; false once stopped. The
 * loops and the store's restore (backend_load()) may be writing the same
 * bytes meanwhile: a race in name only, since what is read is thrown
 * away, so ThreadSanitizer is told not to look. */
__attribute__((no_sanitize("thread")))
static bool read_pages(struct store *s, const uint8_t *p, size_t len,
		       size_t page)
{
	for (size_t at = 0, n = 0; at < len; at += page, n++) {
		if (n % READ_BATCH == 0 &&
		    __atomic_load_n(&s->populate_stop, __ATOMIC_RELAXED))
			return false;
		(void)*(volatile const uint8_t *)(p + at);
	}
	return true;
}

/* Stop populate() where it is, and wait for it. */
static void populate_end(struct store *s)
{
	if (!s->populating)
		return;
	__atomic_store_n(&s->populate_stop, 1, __ATOMIC_RELAXED);
	pthread_join(s->populater, NULL);
	s->populating = false;
}

/* ", N MiB of it in huge pages" for the log, or where to read why not. */
static void huge_said(const struct store *s, char *buf, size_t len)
{
	const int64_t huge = hugepage_mapped(s->view.base);

	if (huge > 0)
		snprintf(buf, len, ", %" PRId64 " MiB of it in huge pages",
			 huge >> 20);
	else if (huge == 0 && s->view.mapped >= HUGE_WORTH)
		snprintf(buf, len, ", in 4 KiB pages (carmyd(8), HUGE PAGES)");
	else
		buf[0] = '\0';
}

static void *populate(void *arg)
{
	struct store *s = arg;
	uint8_t *base = s->view.base;
	size_t size = s->view.mapped;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	bool collapse = true;
	struct timespec t0, t1;
	char huge[64];

	thread_name("carmyd-populate");
	clock_gettime(CLOCK_MONOTONIC, &t0);

	for (size_t off = 0; off < size; off += POPULATE_STEP) {
		size_t len = size - off < POPULATE_STEP ? size - off :
							  POPULATE_STEP;

		if (__atomic_load_n(&s->populate_stop, __ATOMIC_RELAXED))
			return NULL;
		if (madvise(base + off, len, MADV_POPULATE_WRITE) != 0) {
			log_info("segment: pages are mapped on first use "
				 "(MADV_POPULATE_WRITE: %s)", strerror(errno));
			return NULL;
		}
		/* Best effort: memory too scattered for 2 MiB pieces (ENOMEM,
		 * EAGAIN) leaves a step in 4 KiB pages; EINVAL is for good. */
		if (collapse && madvise(base + off, len, MADV_COLLAPSE) != 0 &&
		    errno == EINVAL)
			collapse = false;
		if (!read_pages(s, base + off, len, page))
			return NULL;
	}
	/* Said once it is over: until then the kernel zeroing pages takes
	 * CPU time from whatever runs, and a benchmark waits for this line
	 * (bench/bench_make.sh). */
	clock_gettime(CLOCK_MONOTONIC, &t1);
	huge_said(s, huge, sizeof(huge));
	log_info("segment: %zu MiB %s and read in %.2f s%s", size >> 20,
		 s->populate_fresh ? "zeroed" : "mapped",
		 (double)(t1.tv_sec - t0.tv_sec) +
			 (double)(t1.tv_nsec - t0.tv_nsec) / 1e9, huge);
	return NULL;
}

