/*
 * soak.c - the chaos soak's driver. Starts carmyd and worker processes
 * (worker.c), kills workers with SIGKILL at random moments and, in carmyd
 * mode, carmyd too (restarting it on the same socket and segment), then
 * stops everything, runs the final pass (verify.c) and the checker
 * (check.c), and reports in TAP.
 *
 *   soak [--mode workers|carmyd|both] [--seconds S] [--workers N]
 *        [--ids N] [--kill-ms MS] [--carmyd-ms MS] [--journal] [--seed N]
 *        [--keep] [--todo KIND,...]
 *   soak --pg CONNINFO [--pg-fifo PREFIX] [--pg-ms MS]
 *        [--floors KILLS,CARMYD,PG] [other options as above]
 *
 * With no option it is the short run of make check: both modes, about
 * 12 s each. "both" runs the two modes one after the other, each against
 * its own carmyd and logs, for half the time each.
 *
 * With --journal, carmyd records into a journal (--store journal:DIR in the
 * round's directory), and every other carmyd kill is a simulated reboot:
 * carmyd and every worker are killed with SIGKILL, the segment is removed
 * (a reboot takes shared memory with it) and carmyd starts afresh from the
 * journal alone. The checker's properties are the same: what was
 * acknowledged must come back from the journal. Even rounds run carmyd's
 * loops as a journal carmyd runs them by default (no polling), odd ones
 * with --spin-us 50 (polling after each event and for the journal's
 * answers, clients posting their reservations).
 *
 * With --pg, two carmyds (each its own socket and segment, instance
 * names of their own) record into one PostgreSQL database through the
 * PostgreSQL store plugin, the "shared" store: workers alternate between
 * them (even slots call through carmyd 0, odd ones through carmyd 1) and
 * race on the same identities; either carmyd is killed and restarted at
 * random, and, given --pg-fifo, the database crashes at random: the driver
 * writes "crash" to PREFIX.req and whoever runs the cluster (the script
 * tests/soak/shared.test, via tests/pg_cluster.sh) SIGQUITs the postmaster
 * as `pg_ctl restart -m immediate` does, starts it again and answers a
 * line on PREFIX.ack. No carmyd is killed while the database is down (a
 * carmyd cannot start without it). Each round takes a principal of its
 * own, so rounds share the database but no identity. The final pass asks
 * through both carmyds, and the checker wants every acknowledged
 * completion to replay through both; STORE_FAILED answers are allowed
 * (counted). --floors fails the run unless it reached that many worker
 * kills, carmyd kills and database crashes.
 *
 * The checker (check.c) tells kinds of failure apart (double, split,
 * orphan, wrong, lost, stale, lagging, uncertain, answers: soak.h) and
 * prints a trace of the first identity of each. --todo names kinds known to be open: their
 * violations are reported, and their properties marked TAP TODO, without
 * failing the run; any other kind fails it.
 *
 * Kills are aimed: the workers publish their phase in shared memory
 * (soak.h), and most kills wait (bounded) for some worker to enter a
 * chosen phase -- inside begin, holding the reservation, during the tool,
 * after it, inside complete, after the ack -- while the rest strike at
 * whatever moment the random pacing gives. Where each victim really died is
 * read after reaping and reported, so a run shows that kills landed inside
 * begin and complete rather than assuming it.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/soak/soak.h"

/* Longest wait for a worker to enter the phase a kill aims at. */
#define AIM_MS 20
/* Longest carmyd stays down before it is restarted. */
#define DOWN_MS 100
/* Longest the database takes to come back from a crash. */
#define PG_BACK_MS 120000

struct opts {
	const char *mode;
	double seconds, round;
	unsigned workers, nids, kill_ms, carmyd_ms, max_result, capacity;
	uint64_t seed;
	bool keep;
	bool journal;		/* --store journal, and reboots */
	const char *pg;		/* --pg: conninfo of the shared database */
	const char *pg_fifo;	/* PREFIX of PREFIX.req and PREFIX.ack */
	unsigned pg_ms;		/* mean time between database crashes */
	unsigned todo;		/* kinds known to be open */
	unsigned floors[3];	/* worker kills, carmyd kills, crashes */
};

/* What one mode adds up over its rounds. */
struct totals {
	uint64_t rounds, kills, aimed, carmyd_kills, final_kills;
	uint64_t reboots, reboot_kills;	/* --journal: workers killed by one */
	uint64_t pg_crashes, carmyd_postponed;
	uint64_t died_in[SOAK_P_COUNT];
	struct soak_figures f;
	double secs;
	/* When carmyd is next killed. Kept across rounds: a round ends
	 * when its window of identities is used up, which can be sooner
	 * than the mean pause between carmyd kills. */
	uint64_t next_carmyd, next_pg;
	const struct opts *o;
	int pg_req, pg_ack;	/* the crash FIFOs, or -1 */
	bool pg_down;		/* a crash asked for, not yet answered */
	bool failed;		/* the harness itself went wrong */
};

/* One round: its own carmyd, segment and logs. */
struct run {
	const struct opts *o;
	struct soak_cfg cfg;
	struct soak_space *sp;
	struct carmyd_proc d[SOAK_MAX_INST];
	const char *const *extra[SOAK_MAX_INST];
	struct soak_slot *slots;
	pid_t *pids;
	unsigned next_inc;
	uint64_t rng;
	struct totals *t;
};

/* The page the driver and its workers share. */
struct shared {
	uint32_t fresh;
	uint8_t pad[60];
	struct soak_slot slots[];
};

static int tap_no;

static void tap(bool ok, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int run_mode(const struct opts *o, struct soak_space *sp,
		    bool carmyd_kills, double seconds);
static int run_round(const struct opts *o, struct soak_space *sp,
		     bool carmyd_kills, double seconds, unsigned round,
		     struct totals *t);
static void report(const char *name, bool carmyd_kills, struct totals *t);
static void spawn(struct run *r, unsigned slot);
static int kill_worker(struct run *r, unsigned slot, bool final);
static unsigned aim(struct run *r);
static void kill_carmyd(struct run *r);
static bool short_of_events(const struct opts *o, const struct totals *t,
			    bool carmyd_kills);
static void pg_crash(struct run *r);
static bool pg_back(struct run *r, int wait_ms);
static void pace(struct run *r, unsigned mean_ms);
static void write_params(const struct soak_cfg *cfg);
static int recheck(const char *dir);
static int rm_tree(const char *dir);
static void usage(void) __attribute__((noreturn));

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "mode", required_argument, NULL, 'm' },
		{ "seconds", required_argument, NULL, 's' },
		{ "round", required_argument, NULL, 'R' },
		{ "workers", required_argument, NULL, 'w' },
		{ "ids", required_argument, NULL, 'i' },
		{ "kill-ms", required_argument, NULL, 'k' },
		{ "carmyd-ms", required_argument, NULL, 'c' },
		{ "max-result", required_argument, NULL, 'r' },
		{ "capacity", required_argument, NULL, 'C' },
		{ "seed", required_argument, NULL, 'S' },
		{ "keep", no_argument, NULL, 'K' },
		{ "journal", no_argument, NULL, 'J' },
		{ "check", required_argument, NULL, 'X' },
		{ "pg", required_argument, NULL, 'P' },
		{ "pg-fifo", required_argument, NULL, 'F' },
		{ "pg-ms", required_argument, NULL, 'G' },
		{ "todo", required_argument, NULL, 'T' },
		{ "floors", required_argument, NULL, 'L' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .mode = "both", .seconds = 24, .round = 15,
			  .workers = 8, .nids = 200, .kill_ms = 15,
			  .carmyd_ms = 1000, .max_result = 4096,
			  .capacity = 8192, .seed = 0, .pg_ms = 5000 };
	struct soak_space *sp;
	int c, bad = 0;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'm': o.mode = optarg; break;
		case 's': o.seconds = atof(optarg); break;
		case 'R': o.round = atof(optarg); break;
		case 'w': o.workers = (unsigned)atoi(optarg); break;
		case 'i': o.nids = (unsigned)atoi(optarg); break;
		case 'k': o.kill_ms = (unsigned)atoi(optarg); break;
		case 'c': o.carmyd_ms = (unsigned)atoi(optarg); break;
		case 'r': o.max_result = (unsigned)atoi(optarg); break;
		case 'C': o.capacity = (unsigned)atoi(optarg); break;
		case 'S': o.seed = strtoull(optarg, NULL, 0); break;
		case 'K': o.keep = true; break;
		case 'J': o.journal = true; break;
		case 'X': return recheck(optarg);
		case 'P': o.pg = optarg; break;
		case 'F': o.pg_fifo = optarg; break;
		case 'G': o.pg_ms = (unsigned)atoi(optarg); break;
		case 'T':
			if (soak_kinds_parse(optarg, &o.todo) != 0)
				usage();
			break;
		case 'L':
			if (sscanf(optarg, "%u,%u,%u", &o.floors[0],
				   &o.floors[1], &o.floors[2]) != 3)
				usage();
			break;
		default: usage();
		}
	}
	if (optind != argc || o.seconds <= 0 || o.round <= 0 ||
	    o.workers == 0 || o.nids == 0 || o.max_result < 32 ||
	    o.capacity < o.nids + o.workers + 64 || o.pg_ms == 0 ||
	    (o.pg != NULL && o.journal) || (o.pg_fifo && !o.pg) ||
	    (strcmp(o.mode, "workers") && strcmp(o.mode, "carmyd") &&
	     strcmp(o.mode, "both")))
		usage();
	if (o.seed == 0)
		o.seed = harness_now_ns() ^ ((uint64_t)getpid() << 32);
	/* carmyd reports every dead owner at "warn": thousands of lines. */
	setenv("CARMY_TEST_LOG", "error", 0);
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* Two carmyds on one database are always killed too: "both"
	 * (workers alone, then carmyd) would only halve the run. */
	if (o.pg != NULL && strcmp(o.mode, "both") == 0)
		o.mode = "carmyd";
	printf("# soak: mode %s, %.0f s in rounds of %.0f s, %u workers, "
	       "window of %u identities, capacity %u, store %s, seed %#"
	       PRIx64 "\n", o.mode, o.seconds, o.round, o.workers, o.nids,
	       o.capacity, o.journal ? "journal (reboots)" : o.pg ?
	       "PostgreSQL, shared by two carmyds" : "memory", o.seed);
	if (o.pg != NULL)
		printf("# soak: database crashes %s\n", o.pg_fifo ?
		       "at random" : "off (no --pg-fifo)");

	sp = soak_space_new();
	if (strcmp(o.mode, "both") == 0) {
		bad |= run_mode(&o, sp, false, o.seconds / 2);
		bad |= run_mode(&o, sp, true, o.seconds / 2);
	} else {
		bad |= run_mode(&o, sp, strcmp(o.mode, "carmyd") == 0,
				o.seconds);
	}
	soak_space_free(sp);
	printf("1..%d\n", tap_no);
	return bad ? 1 : 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: soak [--mode workers|carmyd|both] "
		"[--seconds S] [--round S] [--workers N] [--ids N] "
		"[--kill-ms MS] [--carmyd-ms MS] [--max-result BYTES] "
		"[--capacity N] [--journal] [--seed N] [--keep] "
		"[--todo KIND,...]\n"
		"            [--pg CONNINFO [--pg-fifo PREFIX] [--pg-ms MS] "
		"[--floors KILLS,CARMYD,PG]]\n"
		"       soak --check DIR     check the logs a round kept\n");
	exit(2);
}

static void tap(bool ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s %d - ", ok ? "ok" : "not ok", ++tap_no);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

/* ------------------------------------------------------------ one mode */

/*
 * Rounds, each with a fresh carmyd and segment: completed entries are
 * never evicted, so a segment holds only so many new identities; a round
 * ends when its time is up or its identities run out.
 */
static int run_mode(const struct opts *o, struct soak_space *sp,
		    bool carmyd_kills, double seconds)
{
	uint64_t t0 = harness_now_ns();
	struct totals t = { .pg_req = -1, .pg_ack = -1, .o = o };
	int bad = 0;

	if (o->pg_fifo != NULL) {
		char path[512];

		/* Read and write ends both: opening never blocks, and a
		 * line stays in the FIFO until the other side reads it. */
		snprintf(path, sizeof(path), "%s.req", o->pg_fifo);
		t.pg_req = open(path, O_RDWR | O_CLOEXEC);
		snprintf(path, sizeof(path), "%s.ack", o->pg_fifo);
		t.pg_ack = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
		if (t.pg_req < 0 || t.pg_ack < 0) {
			printf("# %s: %s\n", path, strerror(errno));
			tap(false, "the database's crash FIFOs open");
			return 1;
		}
	}

	/* A round whose checker found violations keeps its logs, and the
	 * run goes on to count more; one whose harness failed ends it. */
	for (unsigned round = 0; !t.failed; round++) {
		double left = seconds - (double)(harness_now_ns() - t0) / 1e9;

		if (left < 0.5 && round > 0)
			break;
		bad |= run_round(o, sp, carmyd_kills, left < o->round ?
				 left : o->round, round, &t);
	}
	t.secs = (double)(harness_now_ns() - t0) / 1e9;
	report(carmyd_kills ? "carmyd" : "workers", carmyd_kills, &t);
	if (t.pg_req >= 0) {
		close(t.pg_req);
		close(t.pg_ack);
	}
	return bad || t.failed;
}

static void report(const char *name, bool carmyd_kills, struct totals *t)
{
	const struct soak_figures *f = &t->f;
	const struct opts *o = t->o;
	bool busy;

	printf("# %s: %.1f s in %" PRIu64 " rounds, %" PRIu64 " worker kills "
	       "(%" PRIu64 " aimed, %" PRIu64 " more at round ends), %" PRIu64
	       " carmyd kills\n", name, t->secs, t->rounds, t->kills, t->aimed,
	       t->final_kills, t->carmyd_kills);
	if (t->reboots > 0)
		printf("# %s: %" PRIu64 " of the carmyd kills were reboots "
		       "(segment removed, rebuilt from the journal), killing "
		       "%" PRIu64 " workers with it (counted among the worker "
		       "kills)\n", name, t->reboots,
		       t->reboot_kills);
	if (o->pg != NULL)
		printf("# %s: %" PRIu64 " PostgreSQL crashes, %" PRIu64
		       " STORE_FAILED answers, %" PRIu64 " carmyd kills put "
		       "off while the database was down\n", name, t->pg_crashes,
		       f->store_failed, t->carmyd_postponed);
	printf("# %s: victims died in:", name);
	for (int p = 0; p < SOAK_P_COUNT; p++)
		printf(" %s %" PRIu64, soak_phase_names[p], t->died_in[p]);
	printf("\n");
	printf("# %s: %" PRIu64 " calls: %" PRIu64 " reserved, %" PRIu64
	       " replays, %" PRIu64 " conflicts, %" PRIu64 " uncertain, %"
	       PRIu64 " capacity, %" PRIu64 " fail-closed\n", name, f->calls,
	       f->reserved, f->replays, f->conflicts, f->uncertain,
	       f->capacity, f->unavailable);
	printf("# %s: %" PRIu64 " effects, %" PRIu64 " acknowledged "
	       "completions, %" PRIu64 " releases, %" PRIu64 " disconnects, %"
	       PRIu64 " abandoned, %" PRIu64 " identities interrupted in "
	       "final passes\n", name, f->effects, f->acked, f->releases,
	       f->disconnects, f->abandons, f->interrupted_final);
	printf("# %s: failures by kind:", name);
	for (int k = 0; k < SOAK_KIND_COUNT; k++)
		printf(" %s %" PRIu64 "%s", soak_kind_names[k], f->kinds[k],
		       o->todo & (1u << k) ? " (todo)" : "");
	printf("\n");
	printf("# %s: counts: %" PRIu64 " cycles (calls), %" PRIu64 " worker "
	       "kills, %" PRIu64 " carmyd kills, %" PRIu64 " PG crashes, %"
	       PRIu64 " STORE_FAILED answers, %" PRIu64 " double executions, %"
	       PRIu64 " lost acknowledged completions (%" PRIu64 " lost, %"
	       PRIu64 " stale, %" PRIu64 " lagging), %" PRIu64 " wrong "
	       "replays\n", name, f->calls, t->kills, t->carmyd_kills,
	       t->pg_crashes, f->store_failed, f->kinds[SOAK_K_DOUBLE],
	       f->kinds[SOAK_K_LOST] + f->kinds[SOAK_K_STALE] +
	       f->kinds[SOAK_K_LAGGING], f->kinds[SOAK_K_LOST],
	       f->kinds[SOAK_K_STALE], f->kinds[SOAK_K_LAGGING],
	       f->kinds[SOAK_K_WRONG]);
	tap(!t->failed, "%s: every worker died by our hand, every final pass "
	    "and check ran", name);
	for (int p = 0; p < SOAK_PROP_COUNT; p++) {
		uint64_t todo = 0;

		for (int k = 0; k < SOAK_KIND_COUNT; k++)
			if (soak_kind_prop[k] == (enum soak_prop)p &&
			    (o->todo & (1u << k)))
				todo += f->kinds[k];
		/* TODO only when todo kinds alone fail it: a TODO that
		 * passes would count as an unexpected pass. */
		if (!t->failed && todo > 0 && todo == f->violations[p])
			printf("not ok %d - %s: %s (%" PRIu64 " violations) "
			       "# TODO known open kinds\n", ++tap_no, name,
			       soak_prop_names[p], f->violations[p]);
		else
			tap(!t->failed && f->violations[p] == 0, "%s: %s (%"
			    PRIu64 " violations)", name, soak_prop_names[p],
			    f->violations[p]);
	}
	if (o->floors[0] || o->floors[1] || o->floors[2]) {
		bool ok = t->kills >= o->floors[0] &&
			  t->carmyd_kills >= o->floors[1] &&
			  t->pg_crashes >= o->floors[2];

		tap(ok, "%s: floors of %u worker kills, %u carmyd kills, %u "
		    "PostgreSQL crashes reached", name, o->floors[0],
		    o->floors[1], o->floors[2]);
		if (!ok)
			t->failed = true;
	}
	/* Not vacuous: every kind of event the properties are about
	 * happened, and kills landed inside begin and complete. */
	busy = t->kills >= 20 && f->replays >= 100 && f->conflicts >= 10 &&
	       f->uncertain >= 10 && f->effects >= 50 && f->acked >= 50 &&
	       f->interrupted_final >= 5 && t->died_in[SOAK_P_BEGIN] > 0 &&
	       t->died_in[SOAK_P_COMPLETE] > 0 &&
	       /* Two carmyds: a worker of the one killed reconnects
		* while the other one serves; fail-closed answers are
		* then rare, and not asked for. */
	       (!carmyd_kills || (t->carmyd_kills >= 2 &&
				  (f->unavailable > 0 || o->pg != NULL))) &&
	       (o->pg_fifo == NULL || (t->pg_crashes >= 1 &&
				       f->store_failed > 0));
	tap(busy, "%s: exercised kills (inside begin and complete too), "
	    "replays, conflicts, uncertain answers%s%s", name,
	    carmyd_kills ? ", carmyd kills" : "",
	    o->pg_fifo ? ", database crashes and STORE_FAILED" : "");
	if (!busy)
		t->failed = true;
}

static int run_round(const struct opts *o, struct soak_space *sp,
		     bool carmyd_kills, double seconds, unsigned round,
		     struct totals *t)
{
	const char *name = carmyd_kills ? "carmyd" : "workers";
	char dir[256], path[300], cap[16], maxr[16];
	/* A grace period shorter than the final pass's settling time: a
	 * worker alive across a carmyd restart takes its reservations back,
	 * and the entries of those that died are uncertain before the pass
	 * judges them. */
	char store[SOAK_MAX_INST][1024], so[512], principal[24];
	const char *extra[SOAK_MAX_INST][11] = {
		{ "--capacity", cap, "--max-result", maxr, "--grace", "2",
		  NULL, NULL, NULL, NULL, NULL },
		{ "--capacity", cap, "--max-result", maxr, "--grace", "2",
		  NULL, NULL, NULL, NULL, NULL },
	};
	unsigned ninst = o->pg != NULL ? 2 : 1;
	struct run r = { .o = o, .sp = sp, .t = t };
	size_t shared_len = sizeof(struct shared) +
			    o->workers * sizeof(struct soak_slot);
	uint64_t t0, deadline;
	uint64_t hard_before = soak_hard_violations(&t->f, o->todo);
	bool ok = false, started = true;
	struct shared *sh;
	int fd;

	snprintf(dir, sizeof(dir), "%s/carmy-soak.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (mkdtemp(dir) == NULL) {
		printf("# mkdtemp: %s\n", strerror(errno));
		t->failed = true;
		return 1;
	}
	snprintf(path, sizeof(path), "%s/answers", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/effects.log", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
	sh = mmap(NULL, shared_len, PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	r.pids = calloc(o->workers, sizeof(*r.pids));
	if (sh == MAP_FAILED || r.pids == NULL)
		abort();
	r.slots = sh->slots;
	sh->fresh = o->nids;

	/* Room for every identity of the round plus a ticket per worker
	 * mid-claim: a capacity refusal is then a bug, not load. */
	r.cfg = (struct soak_cfg){
		.dir = dir, .nids = o->nids,
		.max_ids = o->capacity - o->workers - 16, .fresh = &sh->fresh,
		.nworkers = o->workers, .max_result = o->max_result,
		.capacity = o->capacity, .tool_us = 300, .think_us = 50,
		.seed = o->seed + round * 0x9e3779b97f4a7c15ull +
			(carmyd_kills ? 0x5eed : 0),
		.carmyd_kills = carmyd_kills,
		.store_faults = o->pg != NULL, .ninst = ninst, .todo = o->todo,
	};
	snprintf(cap, sizeof(cap), "%u", o->capacity);
	snprintf(maxr, sizeof(maxr), "%u", o->max_result);
	if (o->journal) {
		snprintf(store[0], sizeof(store[0]), "journal:%s/journal", dir);
		extra[0][6] = "--store";
		extra[0][7] = store[0];
		extra[0][8] = round % 2 == 1 ? "--spin-us" : NULL;
		extra[0][9] = "50";
	}
	/* On the shared database: instance names and a principal of this
	 * round's own. */
	harness_path("stores/pg/.libs/carmy_store_pg.so", so, sizeof(so));
	snprintf(principal, sizeof(principal), "soak%u-%u", (unsigned)getpid(),
		 round);
	for (unsigned i = 0; o->pg != NULL && i < ninst; i++) {
		snprintf(store[i], sizeof(store[i]),
			 "plugin:%s:instance=soak%c-%u-%u timeout=5 %s", so,
			 'a' + i, (unsigned)getpid(), round, o->pg);
		extra[i][6] = "--store";
		extra[i][7] = store[i];
		soak_space_principal(sp, principal);
	}
	r.rng = r.cfg.seed;
	for (unsigned i = 0; i < ninst; i++) {
		r.extra[i] = extra[i];
		fflush(NULL);
		if (harness_start(&r.d[i], extra[i]) != 0) {
			printf("# %s: carmyd %u did not start\n", name, i);
			t->failed = true;
			started = false;
			break;
		}
		r.cfg.socket[i] = r.d[i].socket;
	}
	if (!started)
		goto stop;

	t0 = harness_now_ns();
	deadline = t0 + (uint64_t)(seconds * 1e9);
	if (t->next_carmyd == 0)
		t->next_carmyd = t0 + (soak_below(&r.rng, o->carmyd_ms) +
				       o->carmyd_ms / 2) * 1000000ull;
	if (t->next_pg == 0)
		t->next_pg = t0 + (soak_below(&r.rng, o->pg_ms) +
				   o->pg_ms / 2) * 1000000ull;
	for (unsigned i = 0; i < o->workers; i++)
		spawn(&r, i);
	while (!t->failed && harness_now_ns() < deadline &&
	       (__atomic_load_n(&sh->fresh, __ATOMIC_RELAXED) <
			r.cfg.max_ids ||
		short_of_events(o, t, carmyd_kills))) {
		pace(&r, o->kill_ms);
		/* A worker gone by itself (a crash, a sanitizer report) is
		 * a failure, not a kill. */
		for (unsigned i = 0; i < o->workers; i++) {
			int st;

			if (waitpid(r.pids[i], &st, WNOHANG) == r.pids[i]) {
				printf("# worker %u (incarnation %u) died on "
				       "its own: wait status %#x\n", i,
				       r.slots[i].ss_inc, st);
				r.pids[i] = 0;
				t->failed = true;
			}
		}
		if (t->failed || kill_worker(&r, aim(&r), false) != 0)
			break;
		if (t->pg_down)
			pg_back(&r, 0);
		if (carmyd_kills && harness_now_ns() >= t->next_carmyd) {
			/* carmyd cannot start without its database: put the
			 * kill off until the database is back. */
			if (t->pg_down) {
				t->carmyd_postponed++;
			} else {
				kill_carmyd(&r);
				t->next_carmyd = harness_now_ns() +
					(soak_below(&r.rng, o->carmyd_ms) +
					 o->carmyd_ms / 2) * 1000000ull;
			}
		}
		if (t->pg_req >= 0 && !t->pg_down &&
		    harness_now_ns() >= t->next_pg) {
			pg_crash(&r);
			t->next_pg = harness_now_ns() +
				(soak_below(&r.rng, o->pg_ms) +
				 o->pg_ms / 2) * 1000000ull;
		}
	}
	if (t->pg_down && !pg_back(&r, PG_BACK_MS)) {
		printf("# %s: the database did not come back from its crash\n",
		       name);
		t->failed = true;
	}
	for (unsigned i = 0; i < o->workers; i++)
		kill_worker(&r, i, true);
	t->rounds++;
	write_params(&r.cfg);

	if (!t->failed && r.d[0].pid > 0 && (ninst < 2 || r.d[1].pid > 0) &&
	    soak_verify(&r.cfg, sp) == 0 && soak_check(&r.cfg, &t->f) == 0)
		ok = soak_hard_violations(&t->f, o->todo) == hard_before;
	else
		t->failed = true;
stop:
	for (unsigned i = 0; i < ninst; i++) {
		bool up = r.d[i].pid > 0;

		/* Also one that did not start again: its files go. */
		if (r.d[i].dir[0] != '\0' && harness_stop(&r.d[i]) < 0 && up)
			printf("# %s: carmyd %u did not stop cleanly\n", name,
			       i);
	}
	printf("# %s: round %u done%s: %" PRIu64 " worker kills, %" PRIu64
	       " carmyd kills, %" PRIu64 " calls so far%s\n", name, round,
	       extra[0][8] != NULL ? " (--spin-us 50)" : "", t->kills,
	       t->carmyd_kills, t->f.calls, ok ? "" : ", FAILED");
	/* Logs of a round with todo failures go too: their traces are in
	 * the output. */
	if (ok && !o->keep)
		rm_tree(dir);
	else
		printf("# %s: round %u: logs kept in %s (seed %#" PRIx64 ")\n",
		       name, round, dir, r.cfg.seed);
	munmap(sh, shared_len);
	free(r.pids);
	return ok ? 0 : 1;
}

static void spawn(struct run *r, unsigned slot)
{
	unsigned inc = r->next_inc++;
	pid_t pid;

	r->slots[slot].ss_phase = SOAK_P_CONNECT;
	r->slots[slot].ss_inc = inc;
	r->slots[slot].ss_inst = slot % r->cfg.ninst;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		printf("# fork: %s\n", strerror(errno));
		r->t->failed = true;
		return;
	}
	if (pid == 0)
		soak_worker(&r->cfg, r->sp, &r->slots[slot], inc);
	r->pids[slot] = pid;
}

/* SIGKILL one worker, reap it, note where it died, and (unless the run is
 * over) start a new incarnation in its slot. */
static int kill_worker(struct run *r, unsigned slot, bool final)
{
	int st;

	if (r->pids[slot] <= 0)
		return 0;
	kill(r->pids[slot], SIGKILL);
	st = harness_waitpid(r->pids[slot], 10000);
	r->pids[slot] = 0;
	if (st == -1 || !WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) {
		printf("# worker %u (incarnation %u) did not die of our "
		       "SIGKILL: wait status %#x\n", slot, r->slots[slot].ss_inc,
		       st);
		r->t->failed = true;
		return -1;
	}
	/* Reaped: the word is final, it is where the victim died. */
	r->t->died_in[__atomic_load_n(&r->slots[slot].ss_phase,
				   __ATOMIC_RELAXED) % SOAK_P_COUNT]++;
	if (final) {
		r->t->final_kills++;
		return 0;
	}
	r->t->kills++;
	spawn(r, slot);
	return r->t->failed ? -1 : 0;
}

/*
 * Pick the next victim. A third of the time any worker, at whatever moment
 * the pacing gave; otherwise wait (at most AIM_MS) for some worker to be in
 * a chosen phase. Begin and complete are short, so they are aimed at most.
 */
static unsigned aim(struct run *r)
{
	static const enum soak_phase targets[] = {
		SOAK_P_BEGIN, SOAK_P_BEGIN, SOAK_P_RESERVED, SOAK_P_TOOL,
		SOAK_P_AFTER_TOOL, SOAK_P_COMPLETE, SOAK_P_COMPLETE,
		SOAK_P_ACKED,
	};
	unsigned n = r->o->workers, start = (unsigned)soak_below(&r->rng, n);
	uint64_t until;
	int want;

	if (soak_below(&r->rng, 3) == 0)
		return start;
	want = targets[soak_below(&r->rng, sizeof(targets) / sizeof(*targets))];
	until = harness_now_ns() + AIM_MS * 1000000ull;
	do {
		for (unsigned k = 0; k < n; k++) {
			unsigned s = (start + k) % n;

			if (__atomic_load_n(&r->slots[s].ss_phase,
					    __ATOMIC_RELAXED) == want) {
				r->t->aimed++;
				return s;
			}
		}
	} while (harness_now_ns() < until);
	return start;
}

static void kill_carmyd(struct run *r)
{
	bool reboot = r->o->journal && r->t->carmyd_kills % 2 == 1;
	unsigned victim = (unsigned)soak_below(&r->rng, r->cfg.ninst);
	struct carmyd_proc *d = &r->d[victim];

	harness_kill9(d);
	r->t->carmyd_kills++;
	if (reboot) {
		/* A reboot takes every process and the shared memory: only
		 * the journal is left to say what happened. The workers
		 * start again at once and fail closed until carmyd is back. */
		r->t->reboots++;
		for (unsigned i = 0; i < r->o->workers && !r->t->failed; i++) {
			if (r->pids[i] > 0)
				r->t->reboot_kills++;
			kill_worker(r, i, false);
		}
		if (shm_unlink(d->segment) != 0) {
			printf("# reboot: shm_unlink %s: %s\n", d->segment,
			       strerror(errno));
			r->t->failed = true;
		}
	}
	/* Down for a random while: workers meanwhile get fail-closed
	 * answers and retry their connection. */
	pace(r, DOWN_MS / 2);
	fflush(NULL);
	if (harness_restart(d, r->extra[victim]) != 0) {
		printf("# carmyd %u did not start again%s\n", victim,
		       reboot ? " from its journal" : " on its segment");
		r->t->failed = true;
	}
}

/* Ask for a database crash (the FIFO's other end does it); the soak goes
 * on meanwhile, its carmyds answering STORE_FAILED while the database is
 * away. */
/*
 * Does the run still lack a kill the final "exercised" check asks for (a
 * database crash with --pg-fifo, two carmyd kills in carmyd mode)? A round
 * whose identities are used up before then goes on with the ones it has,
 * up to its time: on a quiet machine the window fills in a few seconds.
 */
static bool short_of_events(const struct opts *o, const struct totals *t,
			    bool carmyd_kills)
{
	return (o->pg_fifo != NULL && t->pg_crashes == 0) ||
	       (carmyd_kills && t->carmyd_kills < 2);
}

static void pg_crash(struct run *r)
{
	if (write(r->t->pg_req, "crash\n", 6) != 6) {
		printf("# crash request: %s\n", strerror(errno));
		r->t->failed = true;
		return;
	}
	r->t->pg_crashes++;
	r->t->pg_down = true;
}

/* Has the database come back from the crash asked for? Waits up to
 * wait_ms for the other end's answer: "ok", or anything else for a
 * database that did not come back. */
static bool pg_back(struct run *r, int wait_ms)
{
	struct pollfd p = { .fd = r->t->pg_ack, .events = POLLIN };
	char buf[64];
	ssize_t n;

	if (poll(&p, 1, wait_ms) != 1)
		return false;
	n = read(r->t->pg_ack, buf, sizeof(buf) - 1);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	r->t->pg_down = false;
	if (strncmp(buf, "ok", 2) != 0) {
		printf("# the database did not start again: %s", buf);
		r->t->failed = true;
	}
	return true;
}

/* Random pacing between kills (not synchronisation: nothing waits for
 * anything here), uniform in [0, 2 * mean_ms]. */
static void pace(struct run *r, unsigned mean_ms)
{
	poll(NULL, 0, (int)soak_below(&r->rng, 2 * (uint64_t)mean_ms + 1));
}

/* What soak --check needs to judge a kept round again. */
static void write_params(const struct soak_cfg *cfg)
{
	char path[300];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/params", cfg->dir);
	fp = fopen(path, "w");
	if (fp == NULL)
		return;
	fprintf(fp, "%u %u %u %u %zu %u %d %u %d\n", cfg->nids, cfg->max_ids,
		*cfg->fresh, cfg->nworkers, cfg->max_result, cfg->capacity,
		cfg->carmyd_kills, cfg->ninst, cfg->store_faults);
	fclose(fp);
}

/*
 * Check a kept round's logs again, as they are now: to look at a failure
 * again, or to see the checker catch a log edited to show a bug.
 */
static int recheck(const char *dir)
{
	struct soak_cfg cfg = { .dir = dir, .ninst = 1 };
	struct soak_figures f = { 0 };
	uint32_t fresh;
	char path[300];
	int carmyd, store = 0, bad = 0;
	FILE *fp;

	snprintf(path, sizeof(path), "%s/params", dir);
	fp = fopen(path, "r");
	if (fp == NULL || fscanf(fp, "%u %u %u %u %zu %u %d", &cfg.nids,
				 &cfg.max_ids, &fresh, &cfg.nworkers,
				 &cfg.max_result, &cfg.capacity, &carmyd) != 7) {
		fprintf(stderr, "soak: cannot read %s\n", path);
		return 2;
	}
	/* Rounds with two carmyds name them and the store's faults too. */
	if (fscanf(fp, "%u %d", &cfg.ninst, &store) != 2 || cfg.ninst == 0 ||
	    cfg.ninst > SOAK_MAX_INST)
		cfg.ninst = 1;
	cfg.store_faults = store != 0;
	fclose(fp);
	cfg.fresh = &fresh;
	cfg.carmyd_kills = carmyd != 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (soak_check(&cfg, &f) != 0) {
		printf("not ok 1 - logs in %s could not be read\n1..1\n", dir);
		return 1;
	}
	printf("# %" PRIu64 " calls, %" PRIu64 " replays, %" PRIu64
	       " effects\n", f.calls, f.replays, f.effects);
	for (int p = 0; p < SOAK_PROP_COUNT; p++) {
		tap(f.violations[p] == 0, "%s (%" PRIu64 " violations)",
		    soak_prop_names[p], f.violations[p]);
		bad |= f.violations[p] != 0;
	}
	printf("1..%d\n", tap_no);
	return bad;
}

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int rm_tree(const char *dir)
{
	return nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
