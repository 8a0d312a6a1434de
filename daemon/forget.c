/*
 * forget.c - how a recorded result leaves the table: an operator's purge
 * (carmyctl purge), an operator's forget of one execution (carmyctl
 * forget), and carmyd's retention (retain.c). Each forgets COMPLETED
 * entries only, never running or uncertain ones, and the same way: a
 * durable store records a PURGE of each first (the caller's thread waits
 * for it), then shm_purge() takes it out of the segment, checking under
 * s->lock that it is still COMPLETED as that execution. Only what the
 * store recorded is forgotten, so a restart from the store never brings
 * back what was forgotten here.
 *
 * The table is looked at a chunk of entries at a time, under s->lock, so
 * a completion on an event loop never waits for more than one chunk; the
 * store is waited for without the lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>


#include "common/clock.h"
#include "common/execid.h"
#include "common/log.h"
#include "daemon/carmyd.h"

/* Entries looked at per hold of s->lock, and forgotten per store batch. */
#define SURVEY_CHUNK 4096u
#define FORGET_BATCH 1024u

/* A store request made and waited for on this thread: done() counts
 * down. */
struct sync_batch {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned left;
};

struct sync_req {
	struct carmy_store_req req;
	struct carmy_store_record rec;
	struct sync_batch *batch;
	uint32_t entry;
	int rc;
};

static void sync_done(struct carmy_store_req *req, int rc)
{
	struct sync_req *sr = req->cookie;
	struct sync_batch *b = sr->batch;

	sr->rc = rc;
	pthread_mutex_lock(&b->lock);
	if (--b->left == 0)
		pthread_cond_signal(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

/* Have the store record a PURGE of each of the n executions in reqs, all
 * at once, and wait until it has answered every one (reqs[i].rc). */
static void record_purges(struct store *s, struct sync_req *reqs, size_t n)
{
	struct sync_batch batch;

	pthread_mutex_init(&batch.lock, NULL);
	pthread_cond_init(&batch.cond, NULL);
	batch.left = (unsigned)n;
	for (size_t i = 0; i < n; i++) {
		reqs[i].batch = &batch;
		reqs[i].req.op = CARMY_STORE_PURGE;
		reqs[i].req.rec = &reqs[i].rec;
		reqs[i].req.done = sync_done;
		reqs[i].req.cookie = &reqs[i];
		/* All at once: let them go out together. */
		reqs[i].req.flags = i + 1 < n ? CARMY_STORE_MORE : 0;
		s->ops->submit(s->st, &reqs[i].req);
	}
	pthread_mutex_lock(&batch.lock);
	while (batch.left > 0)
		pthread_cond_wait(&batch.cond, &batch.lock);
	pthread_mutex_unlock(&batch.lock);
	pthread_cond_destroy(&batch.cond);
	pthread_mutex_destroy(&batch.lock);
}

/*
 * Forget the n entries in reqs (entry and rec.exec set; each was found
 * COMPLETED under s->lock, which it stays until purged): recorded by a
 * durable store first, then taken out of the segment. Those the store
 * failed to record are counted in *refused and kept. Returns how many
 * were forgotten (one purged meanwhile by someone else is not).
 */
static size_t forget_batch(struct store *s, struct sync_req *reqs, size_t n,
			   size_t *refused)
{
	size_t forgotten = 0;

	if (s->durable && n > 0)
		record_purges(s, reqs, n);
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		if (reqs[i].rc != 0)
			(*refused)++;
		else if (shm_purge(&s->view, reqs[i].entry, reqs[i].rec.exec))
			forgotten++;
	}
	pthread_mutex_unlock(&s->lock);
	return forgotten;
}

/* Look at entries from *e on, at most one chunk, under s->lock, for
 * COMPLETED ones that finished before before_ns: into reqs from *n on,
 * up to room. */
static void survey(struct store *s, uint32_t *e, uint64_t before_ns,
		   struct sync_req *reqs, size_t *n, size_t room)
{
	uint32_t cap = s->view.geo.capacity;
	uint32_t end = cap - *e < SURVEY_CHUNK ? cap : *e + SURVEY_CHUNK;
	uint8_t exec[SHM_EXEC_LEN];

	pthread_mutex_lock(&s->lock);
	for (; *e < end && *n < room; (*e)++) {
		if (!shm_completed_before(&s->view, *e, before_ns, exec))
			continue;
		memset(&reqs[*n], 0, sizeof(reqs[*n]));
		reqs[*n].entry = *e;
		memcpy(reqs[*n].rec.exec, exec, SHM_EXEC_LEN);
		(*n)++;
	}
	pthread_mutex_unlock(&s->lock);
}

int store_forget_older(struct store *s, uint64_t before_ns, uint32_t budget,
		       struct store_forgot *out)
{
	struct sync_req *reqs = malloc(FORGET_BATCH * sizeof(*reqs));
	uint32_t e = 0, cap = s->view.geo.capacity;
	size_t found = 0, n = 0;

	memset(out, 0, sizeof(*out));
	if (reqs == NULL)
		return -ENOMEM;
	while (e < cap && found < budget) {
		size_t room = budget - found < FORGET_BATCH ?
				      budget - found : FORGET_BATCH;

		survey(s, &e, before_ns, reqs, &n, room);
		if (n < room && e < cap)
			continue;
		out->forgotten += forget_batch(s, reqs, n, &out->refused);
		found += n;
		n = 0;
	}
	out->more = found >= budget && e < cap;
	free(reqs);
	return 0;
}

/*
 * An operator's purge: forget every COMPLETED entry that finished more than
 * older_than_ms ago. Returns how many, or -ENOMEM.
 */
int store_purge(struct store *s, uint64_t older_than_ms, uid_t uid, pid_t pid)
{
	uint64_t now = clock_real_ns(), age = older_than_ms * 1000000u;
	uint64_t before = older_than_ms > UINT64_MAX / 1000000u || age > now ?
				  0 : now - age;
	struct store_forgot f;
	int rc = store_forget_older(s, before, UINT32_MAX, &f);

	if (rc != 0)
		return rc;
	log_info("pid %d uid %u purged %zu completed entr%s older than %llu "
		 "ms%s", (int)pid, (unsigned)uid, f.forgotten,
		 f.forgotten == 1 ? "y" : "ies",
		 (unsigned long long)older_than_ms,
		 f.refused ? " (the store refused some)" : "");
	return (int)f.forgotten;
}

/*
 * An operator's forget of one execution: entry, if it is COMPLETED as
 * exec. Returns 0, -ENOENT (not published as exec: unknown, or forgotten
 * meanwhile), -EBUSY (running or uncertain) or CARMY_ESTORE (the store
 * could not record it: kept).
 */
int store_forget(struct store *s, uint32_t entry,
		 const uint8_t exec[SHM_EXEC_LEN], uid_t uid, pid_t pid)
{
	struct sync_req req = { .entry = entry };
	char id[EXECID_TEXT_LEN + 1];
	size_t refused = 0;
	unsigned st;

	memcpy(req.rec.exec, exec, SHM_EXEC_LEN);
	pthread_mutex_lock(&s->lock);
	st = shm_state_as(&s->view, entry, exec);
	pthread_mutex_unlock(&s->lock);
	if (st == SHM_FREE)
		return -ENOENT;
	if (st != SHM_COMPLETED)
		return -EBUSY;
	if (forget_batch(s, &req, 1, &refused) == 0)
		return refused ? CARMY_ESTORE : -ENOENT;
	execid_format(id, exec);
	log_info("pid %d uid %u forgot %s (entry %u)", (int)pid, (unsigned)uid,
		 id, entry);
	return 0;
}

/* Tickets in use, and the refusals for capacity clients have counted, by
 * atomic loads: no lock, any thread. */
void store_fill(struct store *s, uint32_t *used, uint64_t *refused)
{
	const struct shm_view *v = &s->view;
	uint32_t n = 0;
	uint64_t r = 0;

	for (uint32_t e = 0; e < v->geo.capacity; e++)
		n += __atomic_load_n(&v->tickets[e], __ATOMIC_RELAXED) !=
		     SHM_TICKET_FREE;
	for (int i = 0; i < SHM_STATS_STRIPES; i++)
		r += __atomic_load_n(&v->stats[i].st_capacity,
				     __ATOMIC_RELAXED);
	*used = n;
	*refused = r;
}
