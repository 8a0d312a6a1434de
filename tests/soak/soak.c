/*
 * soak.c - the chaos soak's driver. Starts carmyd and worker processes
 * (worker.c), kills workers with SIGKILL at random moments and, in carmyd
 * mode, carmyd too (restarting it on the same socket and segment), then
 * stops everything, runs the final pass (verify.c) and the checker
 * (check.c), and reports in TAP.
 *
 *   soak [--mode workers|carmyd|both] [--seconds S] [--workers N]
 *        [--ids N] [--kill-ms MS] [--carmyd-ms MS] [--journal] [--seed N]
 *        [--keep]
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
 * acknowledged must come back from the journal.
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

struct opts {
	const char *mode;
	double seconds, round;
	unsigned workers, nids, kill_ms, carmyd_ms, max_result, capacity;
	uint64_t seed;
	bool keep;
	bool journal;		/* --store journal, and reboots */
};

/* What one mode adds up over its rounds. */
struct totals {
	uint64_t rounds, kills, aimed, carmyd_kills, final_kills;
	uint64_t reboots, reboot_kills;	/* --journal: workers killed by one */
	uint64_t died_in[SOAK_P_COUNT];
	struct soak_figures f;
	double secs;
	/* When carmyd is next killed. Kept across rounds: a round ends
	 * when its window of identities is used up, which can be sooner
	 * than the mean pause between carmyd kills. */
	uint64_t next_carmyd;
	bool failed;		/* the harness itself went wrong */
};

/* One round: its own carmyd, segment and logs. */
struct run {
	const struct opts *o;
	struct soak_cfg cfg;
	struct soak_space *sp;
	struct carmyd_proc d;
	const char *const *extra;
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
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .mode = "both", .seconds = 24, .round = 15,
			  .workers = 8, .nids = 200, .kill_ms = 15,
			  .carmyd_ms = 1000, .max_result = 4096,
			  .capacity = 8192, .seed = 0 };
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
		default: usage();
		}
	}
	if (optind != argc || o.seconds <= 0 || o.round <= 0 ||
	    o.workers == 0 || o.nids == 0 || o.max_result < 32 ||
	    o.capacity < o.nids + o.workers + 64 ||
	    (strcmp(o.mode, "workers") && strcmp(o.mode, "carmyd") &&
	     strcmp(o.mode, "both")))
		usage();
	if (o.seed == 0)
		o.seed = harness_now_ns() ^ ((uint64_t)getpid() << 32);
	/* carmyd reports every dead owner at "warn": thousands of lines. */
	setenv("CARMY_TEST_LOG", "error", 0);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("# soak: mode %s, %.0f s in rounds of %.0f s, %u workers, "
	       "window of %u identities, capacity %u, store %s, seed %#"
	       PRIx64 "\n", o.mode, o.seconds, o.round, o.workers, o.nids,
	       o.capacity, o.journal ? "journal (reboots)" : "memory", o.seed);

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
		"[--capacity N] [--journal] [--seed N] [--keep]\n"
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
	struct totals t = { 0 };
	int bad = 0;

	for (unsigned round = 0; !bad; round++) {
		double left = seconds - (double)(harness_now_ns() - t0) / 1e9;

		if (left < 0.5 && round > 0)
			break;
		bad = run_round(o, sp, carmyd_kills, left < o->round ?
				left : o->round, round, &t);
	}
	t.secs = (double)(harness_now_ns() - t0) / 1e9;
	report(carmyd_kills ? "carmyd" : "workers", carmyd_kills, &t);
	return bad || t.failed;
}

static void report(const char *name, bool carmyd_kills, struct totals *t)
{
	const struct soak_figures *f = &t->f;
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
	       PRIu64 " identities interrupted in final passes\n", name,
	       f->effects, f->acked, f->releases, f->disconnects,
	       f->interrupted_final);
	tap(!t->failed, "%s: every worker died by our hand, every final pass "
	    "and check ran", name);
	for (int p = 0; p < SOAK_PROP_COUNT; p++)
		tap(!t->failed && f->violations[p] == 0, "%s: %s (%" PRIu64
		    " violations)", name, soak_prop_names[p], f->violations[p]);
	/* Not vacuous: every kind of event the properties are about
	 * happened, and kills landed inside begin and complete. */
	busy = t->kills >= 20 && f->replays >= 100 && f->conflicts >= 10 &&
	       f->uncertain >= 10 && f->effects >= 50 && f->acked >= 50 &&
	       f->interrupted_final >= 5 && t->died_in[SOAK_P_BEGIN] > 0 &&
	       t->died_in[SOAK_P_COMPLETE] > 0 &&
	       (!carmyd_kills || (t->carmyd_kills >= 2 && f->unavailable > 0));
	tap(busy, "%s: exercised kills (inside begin and complete too), "
	    "replays, conflicts, uncertain answers%s", name,
	    carmyd_kills ? ", carmyd kills" : "");
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
	char store[320];
	const char *extra[] = { "--capacity", cap, "--max-result", maxr,
				"--grace", "2", NULL, NULL, NULL };
	struct run r = { .o = o, .sp = sp, .extra = extra, .t = t };
	size_t shared_len = sizeof(struct shared) +
			    o->workers * sizeof(struct soak_slot);
	uint64_t t0, deadline;
	struct soak_figures before;
	bool ok = false;
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
	};
	snprintf(cap, sizeof(cap), "%u", o->capacity);
	snprintf(maxr, sizeof(maxr), "%u", o->max_result);
	if (o->journal) {
		snprintf(store, sizeof(store), "journal:%s/journal", dir);
		extra[6] = "--store";
		extra[7] = store;
	}
	r.rng = r.cfg.seed;
	fflush(NULL);
	if (harness_start(&r.d, extra) != 0) {
		printf("# %s: carmyd did not start\n", name);
		t->failed = true;
		goto out;
	}
	r.cfg.socket = r.d.socket;

	t0 = harness_now_ns();
	deadline = t0 + (uint64_t)(seconds * 1e9);
	if (t->next_carmyd == 0)
		t->next_carmyd = t0 + (soak_below(&r.rng, o->carmyd_ms) +
				       o->carmyd_ms / 2) * 1000000ull;
	for (unsigned i = 0; i < o->workers; i++)
		spawn(&r, i);
	while (!t->failed && harness_now_ns() < deadline &&
	       __atomic_load_n(&sh->fresh, __ATOMIC_RELAXED) < r.cfg.max_ids) {
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
		if (carmyd_kills && harness_now_ns() >= t->next_carmyd) {
			kill_carmyd(&r);
			t->next_carmyd = harness_now_ns() +
				(soak_below(&r.rng, o->carmyd_ms) +
				 o->carmyd_ms / 2) * 1000000ull;
		}
	}
	for (unsigned i = 0; i < o->workers; i++)
		kill_worker(&r, i, true);
	t->rounds++;
	write_params(&r.cfg);

	before = t->f;
	if (!t->failed && r.d.pid > 0 && soak_verify(&r.cfg, sp) == 0 &&
	    soak_check(&r.cfg, &t->f) == 0) {
		ok = true;
		for (int p = 0; p < SOAK_PROP_COUNT; p++)
			ok &= t->f.violations[p] == before.violations[p];
	} else {
		t->failed = true;
	}
	if (harness_stop(&r.d) < 0)
		printf("# %s: carmyd did not stop cleanly\n", name);
	printf("# %s: round %u done: %" PRIu64 " worker kills, %" PRIu64
	       " carmyd kills, %" PRIu64 " calls so far%s\n", name, round,
	       t->kills, t->carmyd_kills, t->f.calls, ok ? "" : ", FAILED");
out:
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

	harness_kill9(&r->d);
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
		if (shm_unlink(r->d.segment) != 0) {
			printf("# reboot: shm_unlink %s: %s\n", r->d.segment,
			       strerror(errno));
			r->t->failed = true;
		}
	}
	/* Down for a random while: workers meanwhile get fail-closed
	 * answers and retry their connection. */
	pace(r, DOWN_MS / 2);
	fflush(NULL);
	if (harness_restart(&r->d, r->extra) != 0) {
		printf("# carmyd did not start again%s\n",
		       reboot ? " from its journal" : " on its segment");
		r->t->failed = true;
	}
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
	fprintf(fp, "%u %u %u %u %zu %u %d\n", cfg->nids, cfg->max_ids,
		*cfg->fresh, cfg->nworkers, cfg->max_result, cfg->capacity,
		cfg->carmyd_kills);
	fclose(fp);
}

/*
 * Check a kept round's logs again, as they are now: to look at a failure
 * again, or to see the checker catch a log edited to show a bug.
 */
static int recheck(const char *dir)
{
	struct soak_cfg cfg = { .dir = dir };
	struct soak_figures f = { 0 };
	uint32_t fresh;
	char path[300];
	int carmyd, bad = 0;
	FILE *fp;

	snprintf(path, sizeof(path), "%s/params", dir);
	fp = fopen(path, "r");
	if (fp == NULL || fscanf(fp, "%u %u %u %u %zu %u %d", &cfg.nids,
				 &cfg.max_ids, &fresh, &cfg.nworkers,
				 &cfg.max_result, &cfg.capacity, &carmyd) != 7) {
		fprintf(stderr, "soak: cannot read %s\n", path);
		return 2;
	}
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
