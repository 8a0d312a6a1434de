/*
 * worker.c - one soak worker: random calls through libcarmy, forever, until
 * the driver kills it. Each reserved call runs a "tool" whose effect is one
 * line in the shared effect log; every answer is logged before the worker
 * acts on it, so that whatever moment the kill picks, the logs say what the
 * worker knew.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/soak/soak.h"

struct worker {
	const struct soak_cfg *cfg;
	struct soak_space *sp;
	struct soak_slot *slot;
	unsigned inc;
	uint64_t rng;
	int log;		/* this incarnation's answer file */
	int effects;		/* the shared effect log */
	carmy_t *c;
	struct carmy_reservation r;
	uint8_t *buf;		/* room for the largest result */
};

static void phase(struct worker *w, enum soak_phase p);
static void reconnect(struct worker *w);
static void one_call(struct worker *w);
static void run_tool(struct worker *w, unsigned id, unsigned var);
static void pause_us(struct worker *w, unsigned max_us, bool spin);
static unsigned pick_id(struct worker *w);

void soak_worker(const struct soak_cfg *cfg, struct soak_space *sp,
		 struct soak_slot *slot, unsigned inc)
{
	struct worker w = { .cfg = cfg, .sp = sp, .slot = slot, .inc = inc };
	char path[512];

	/* A driver that dies must not leave workers calling forever. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	w.rng = cfg->seed ^ ((uint64_t)inc * 0x2545f4914f6cdd1dull);
	snprintf(path, sizeof(path), "%s/answers/a%06u.log", cfg->dir, inc);
	w.log = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	snprintf(path, sizeof(path), "%s/effects.log", cfg->dir);
	w.effects = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	w.buf = malloc(cfg->max_result + 128);
	if (w.log < 0 || w.effects < 0 || w.buf == NULL)
		_exit(3);
	soak_write_line(w.log, "I %u\n", slot->ss_inst);
	reconnect(&w);
	for (;;)
		one_call(&w);
}

/* Relaxed is enough: the driver reads it either racily, to aim (a stale
 * value only makes a kill land elsewhere), or after waitpid, which orders
 * it. */
static void phase(struct worker *w, enum soak_phase p)
{
	__atomic_store_n(&w->slot->ss_phase, (int)p, __ATOMIC_RELAXED);
}

/*
 * carmyd may be down (carmyd mode): retry with a bounded back-off until it
 * is back. libcarmy does not reconnect by itself; a handle whose carmyd
 * went away stays dead, so every fail-closed answer ends here.
 */
static void reconnect(struct worker *w)
{
	unsigned us = 50;

	phase(w, SOAK_P_CONNECT);
	carmy_close(w->c);
	w->c = NULL;
	while (carmy_connect(&w->c, w->cfg->socket[w->slot->ss_inst]) != 0) {
		w->c = NULL;
		usleep(us);
		if (us < 5000)
			us *= 2;
	}
	phase(w, SOAK_P_IDLE);
}

static void one_call(struct worker *w)
{
	unsigned id = pick_id(w);
	uint64_t k = soak_below(&w->rng, 100);
	/* Mostly the usual arguments, so that replays dominate; the other
	 * variants make conflicts. */
	unsigned var = k < 80 ? 0 : k < 93 ? 1 : 2;
	struct carmy_reservation *r = &w->r;
	struct carmy_call call;
	uint64_t t0, t1;
	int rc;

	soak_space_call(w->sp, id, var, &call);
	pause_us(w, w->cfg->think_us, false);
	t0 = harness_now_ns();
	soak_write_line(w->log, "b %llu %u %u\n", (unsigned long long)t0, id,
			var);
	phase(w, SOAK_P_BEGIN);
	rc = carmy_begin(w->c, &call, r);
	phase(w, rc == CARMY_RESERVED ? SOAK_P_RESERVED : SOAK_P_IDLE);
	t1 = harness_now_ns();
	soak_write_line(w->log, "B %llu %llu %u %u %d %d %s %d %d %zu %016llx\n",
			(unsigned long long)t0, (unsigned long long)t1, id,
			var, rc, r->state,
			r->execution_id[0] ? r->execution_id : "-",
			rc == CARMY_REPLAY ? r->status : 0,
			rc == CARMY_REPLAY ? r->result_code : 0,
			rc == CARMY_REPLAY ? r->result_len : 0,
			(unsigned long long)(rc == CARMY_REPLAY ?
				soak_hash(r->result, r->result_len) : 0));
	if (rc == CARMY_RESERVED) {
		run_tool(w, id, var);
		return;
	}
	if (rc == CARMY_EUNAVAILABLE || rc == CARMY_EDISCONNECTED ||
	    rc == CARMY_EPROTOCOL)
		reconnect(w);
	else if (rc == CARMY_ESTORE)
		/* The store is away (a crashed database): an agent backs off
		 * a little before it asks again. */
		pause_us(w, 2000, false);
}

static void run_tool(struct worker *w, unsigned id, unsigned var)
{
	struct carmy_reservation *r = &w->r;
	const char *exec = r->execution_id;
	struct soak_result res;
	uint64_t k = soak_below(&w->rng, 1000), t0;
	int rc;

	/* The agent thinks a little before it acts: room for a kill with a
	 * reservation held and nothing done yet. */
	pause_us(w, 20, true);
	if (k < 40) {
		/* The tool provably did not run: give the identity back. */
		phase(w, SOAK_P_RELEASE);
		soak_write_line(w->log, "L %llu %u %s\n",
				(unsigned long long)harness_now_ns(), id, exec);
		rc = carmy_release(w->c, r);
		soak_write_line(w->log, "l %llu %u %s %d\n",
				(unsigned long long)harness_now_ns(), id, exec,
				rc);
		if (rc == CARMY_EDISCONNECTED || rc == CARMY_EUNAVAILABLE)
			reconnect(w);
		phase(w, SOAK_P_IDLE);
		return;
	}
	if (k < 50) {
		/* The agent goes away mid-call: a disconnect, not a death. */
		soak_write_line(w->log, "D %llu\n",
				(unsigned long long)harness_now_ns());
		reconnect(w);
		return;
	}

	phase(w, SOAK_P_TOOL);
	soak_result_pick(&w->rng, w->cfg->max_result, &res);
	/* The effect, before anything else the tool does. The leading
	 * newline ends a line another worker's kill may have torn. */
	soak_write_line(w->effects, "\nE %llu %u %u %s %llu %d %zu %u\n",
			(unsigned long long)harness_now_ns(), id, var, exec,
			(unsigned long long)res.seed, res.status, res.len,
			w->inc);
	soak_result_bytes(&res, w->buf);
	pause_us(w, w->cfg->tool_us, false);
	if (k < 60) {
		/* The agent lost track of what the tool did (a process it
		 * started, a remote call cut off): it gives the call up as
		 * uncertain, and goes on with the same handle. */
		phase(w, SOAK_P_ABANDON);
		soak_write_line(w->log, "G %llu %u %s\n",
				(unsigned long long)harness_now_ns(), id, exec);
		rc = carmy_abandon(w->c, r);
		soak_write_line(w->log, "g %llu %u %s %d\n",
				(unsigned long long)harness_now_ns(), id, exec,
				rc);
		phase(w, SOAK_P_IDLE);
		if (rc == CARMY_EDISCONNECTED || rc == CARMY_EPROTOCOL ||
		    rc == CARMY_EUNAVAILABLE)
			reconnect(w);
		return;
	}

	phase(w, SOAK_P_AFTER_TOOL);
	soak_write_line(w->log, "A %llu %u %s\n",
			(unsigned long long)harness_now_ns(), id, exec);
	pause_us(w, 20, true);
	t0 = harness_now_ns();
	phase(w, SOAK_P_COMPLETE);
	rc = carmy_complete(w->c, r, res.status, res.len ? w->buf : NULL,
			    res.len);
	phase(w, SOAK_P_ACKED);
	soak_write_line(w->log, "C %llu %llu %u %s %d\n",
			(unsigned long long)t0,
			(unsigned long long)harness_now_ns(), id, exec, rc);
	phase(w, SOAK_P_IDLE);
	if (rc == CARMY_EDISCONNECTED || rc == CARMY_EPROTOCOL ||
	    rc == CARMY_EUNAVAILABLE)
		reconnect(w);
}

/*
 * A new identity now and then (bumping the shared *fresh); otherwise one of
 * the newest few, which other workers are likely to be calling right now,
 * or any in the window below *fresh.
 */
static unsigned pick_id(struct worker *w)
{
	const struct soak_cfg *cfg = w->cfg;
	uint32_t top = __atomic_load_n(cfg->fresh, __ATOMIC_RELAXED);
	uint64_t k = soak_below(&w->rng, 100);
	unsigned span;

	if (top > cfg->max_ids)
		top = cfg->max_ids;
	if (k < 12 && top < cfg->max_ids) {
		uint32_t id = __atomic_fetch_add(cfg->fresh, 1, __ATOMIC_RELAXED);

		if (id < cfg->max_ids)
			return id;
	}
	span = k < 50 ? 8 : cfg->nids;
	if (span > top)
		span = top;
	return top - 1 - (unsigned)soak_below(&w->rng, span);
}

/* Simulated work (the agent thinking, the tool running), not
 * synchronisation: a random length, spun when it is too short to sleep. */
static void pause_us(struct worker *w, unsigned max_us, bool spin)
{
	uint64_t us;

	if (max_us == 0)
		return;
	us = soak_below(&w->rng, max_us + 1);
	if (spin) {
		uint64_t end = harness_now_ns() + us * 1000;

		while (harness_now_ns() < end)
			;
	} else if (us > 0) {
		struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)us * 1000 };

		nanosleep(&ts, NULL);
	}
}
