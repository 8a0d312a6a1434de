/*
 * carmy-bench - measure a running carmyd against the floor of this machine.
 *
 *   carmy-bench [--socket PATH] [--procs 1,2] [--ops N] [--replay-set K]
 *               [--only FIGURE,...] [--echo-cpu N] [--rounds N] [--json]
 *               [--redis SOCKET] [--redis-ops N] [--pg CONNINFO]
 *               [--pg-ops N]
 *
 * For each process count P it forks P workers, each with its own
 * carmy_connect(), started together, each doing --ops timed operations:
 *
 *   reserve   carmy_begin() of a new identity (released afterwards, untimed)
 *   replay    carmy_begin() of one of K identities completed beforehand
 *   cycle     carmy_begin() of a new identity + carmy_complete(), 100 bytes
 *
 * and, in the same run and with the same harness, the floors they are
 * quoted against (see bench_floor.h): cas-insert for reserve, lookup for
 * replay, msgpack-rt for cycle.
 *
 * With --redis and --pg, the same workload runs against Redis and
 * PostgreSQL in the same run (see bench_peer.h), and a last table divides
 * Carmy's figures by theirs. With --rounds N every figure runs N times,
 * Carmy's and then the peers' in each round for one P: each figure quoted
 * is its median round, and each ratio the median of the rounds' ratios,
 * each between two figures of one round. Exit status: 0 on success, 2 if
 * carmyd's table is too small for the run, 1 on any other failure.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>

#include "carmy.h"
#include "bench/bench_floor.h"
#include "bench/bench_machine.h"
#include "bench/bench_peer.h"
#include "bench/bench_run.h"
#include "shm/shm.h"

#define MAX_PROC_COUNTS 16
#define MAX_ROUNDS 15
#define RESULT_LEN 100
#define RID_MAX 64

enum fig {
	FIG_CAS,
	FIG_LOOKUP,
	FIG_RT,
	FIG_RESERVE,
	FIG_REPLAY,
	FIG_CYCLE,
	FIG_COUNT,
};

static const char *const fig_names[FIG_COUNT] = {
	"cas-insert", "lookup", "msgpack-rt", "reserve", "replay", "cycle",
};

/* Pieces of the CPU's pace timed before the figures and after each round
 * (bench_machine_pace(): about half a millisecond each). */
#define PACE_PIECES_FIRST 100
#define PACE_PIECES_ROUND 20
_Static_assert(PACE_PIECES_FIRST + PACE_PIECES_ROUND * MAX_ROUNDS *
		       MAX_PROC_COUNTS <= BENCH_PACE_PIECES,
	       "every round's pieces have room");

/* The floor each carmyd figure is divided by. */
static const int fig_floor[FIG_COUNT] = {
	-1, -1, -1, FIG_CAS, FIG_LOOKUP, FIG_RT,
};

struct opts {
	const char *socket;	/* NULL: libcarmy's default */
	int procs[MAX_PROC_COUNTS];
	int nprocs;
	uint64_t ops;
	uint32_t replay_set;
	int echo_cpu;		/* pin the echo server there; -1: do not */
	bool only[FIG_COUNT];
	bool json;
	int rounds;		/* of every figure, interleaved with the peers' */
	const char *peer_where[PEER_COUNT];	/* NULL: not compared */
	uint64_t peer_ops[PEER_COUNT];
	const char *disk;	/* measure a flush there; NULL: do not */
};

/* The peers' figures, for every P, next to carmyd's: each the median
 * round's. */
struct peer_results {
	struct peer_cfg cfg[PEER_COUNT];
	struct bench_stats st[PEER_COUNT][PEER_OP_COUNT][MAX_PROC_COUNTS];
	bool ran[PEER_COUNT][PEER_OP_COUNT][MAX_PROC_COUNTS];
};

/* Every round's figures, carmyd's and the peers'. A ratio between two
 * figures is taken in each round, between figures measured minutes apart
 * at most, and the median of those is quoted (round_ratio()). */
struct rounds {
	int n;
	struct bench_stats carmy[FIG_COUNT][MAX_PROC_COUNTS][MAX_ROUNDS];
	struct bench_stats peer[PEER_COUNT][PEER_OP_COUNT][MAX_PROC_COUNTS]
			       [MAX_ROUNDS];
};

/* Which carmyd figure selects each peer figure in --only. */
static const int peer_fig[PEER_OP_COUNT] = {
	FIG_RT, FIG_RESERVE, FIG_REPLAY, FIG_CYCLE,
};

/* What the segment header says about the carmyd we measure. */
struct daemon_info {
	char socket[256];
	uint32_t pid;
	uint32_t capacity;
	uint32_t nbuckets;	/* its index: the CAS floor's table matches it */
	uint32_t max_result;
	uint32_t free_entries;	/* FREE tickets */
	uint32_t free_buckets;	/* FREE index buckets */
	uint32_t tombs;		/* released buckets not yet reclaimed */
	bool durable;		/* a journal or PostgreSQL: cycles wait */
};

/* Shared by every carmyd worker; set before the fork. */
struct carmy_fig {
	const char *socket;
	char nonce[17];		/* random per run: ids never repeat */
	char tag;		/* 'r' reserve, 'c' cycle */
	uint32_t replay_set;
	const uint8_t *args;
	size_t args_len;
	uint8_t result[RESULT_LEN];
};

struct carmy_worker {
	carmy_t *c;
	struct carmy_call call;
	char rid[RID_MAX];
	size_t prefix;		/* bytes of rid before the counter */
	struct carmy_reservation *res;	/* reserve: one per op */
	struct carmy_reservation one;
	int rc;			/* of carmy_begin() */
	int rc2;		/* of carmy_complete() */
};

static int parse_opts(int argc, char **argv, struct opts *o);
static int new_nonce(char nonce[17]);
static int daemon_probe(const struct opts *o, struct carmy_fig *cf,
			struct daemon_info *di);
static void daemon_settle(const struct daemon_info *di);
static int replay_prepare(const struct carmy_fig *cf);
static uint64_t capacity_needed(const struct opts *o);
static void capacity_fail(const struct opts *o, const struct daemon_info *di,
			  const char *what) __attribute__((noreturn));
static void carmy_figure(struct bench_figure *f, enum fig which,
			 struct carmy_fig *cf);

/* The CPU's pace: how often this machine's CPU ran slow, so that a
 * figure measured in such a time is not taken for a slow Carmy. */
static void print_pace(const struct bench_machine *mc)
{
	struct bench_pace p;

	bench_machine_pace_sum(mc, &p);
	if (p.fast_us <= 0)
		return;
	printf("cpu: a fixed piece of work took %.0f µs at the CPU's fastest; "
	       "%.0f%% of %u pieces, timed before the figures and after each "
	       "round, took %.2fx that or longer\n", p.fast_us,
	       100.0 * p.slow_share, mc->pace_n, BENCH_PACE_SLOW);
}

/* The machine, so that a reader can tell a busy or slow one from a slow
 * Carmy: busy time counts everyone's work, this bench's and carmyd's
 * included (all of it on P CPUs when the bench runs P processes), so
 * figures taken while it is well above that shared the CPUs. Then what a
 * page costs: a reserve writes into about a third of a page of entry and
 * call it has never touched (mapped/op), so where the first touch of a
 * mapped page is dear, that share of it is in every reserve's mean. */
static void print_machine(const struct bench_machine *mc)
{
	printf("machine: %s, %ld CPUs, Linux %s; load %.2f at the start",
	       mc->model[0] ? mc->model : "unknown CPU", mc->nproc,
	       mc->kernel[0] ? mc->kernel : "?", mc->load1);
	if (mc->busy_pct >= 0)
		printf("; during the run the CPUs were %.0f%% busy and %.1f%% "
		       "stolen by the hypervisor", mc->busy_pct, mc->steal_pct);
	printf("\n");
	if (mc->touch_us >= 0)
		printf("pages: a write to a shared page costs %.2f µs the first "
		       "time after it was mapped ahead, %.2f µs as a page "
		       "fault, %.3f µs after that%s\n", mc->touch_us,
		       mc->fault_us, mc->warm_us,
		       mc->shm_huge == 1 ? "; the segment can be in huge pages" :
		       mc->shm_huge == 0 ? "; the segment cannot be in huge pages "
					   "(carmyd(8), HUGE PAGES)" : "");
	if (mc->switch_us >= 0 && mc->wake_us >= 0)
		printf("scheduling: handing the CPU to another process costs "
		       "%.2f µs on the same CPU, %.2f µs to one on another "
		       "CPU\n", mc->switch_us, mc->wake_us);
	else if (mc->switch_us >= 0)
		printf("scheduling: handing the CPU to another process costs "
		       "%.2f µs on the same CPU (one CPU only)\n",
		       mc->switch_us);
	print_pace(mc);
	if (mc->disk.dir != NULL)
		printf("disk: a 4 KiB write and fdatasync() in %s take %.0f "
		       "µs (the median of %d; 90%% within %.0f µs), what every "
		       "commit of the journal or of PostgreSQL there waits for "
		       "at least\n", mc->disk.dir, mc->disk.flush_us,
		       BENCH_DISK_FLUSHES, mc->disk.flush_p90_us);
}

/* A figure's trapped page faults per op, or "n/a" when perf would not
 * count them. */
static const char *faults_str(const struct bench_stats *s, char *buf,
			      size_t size)
{
	if (s->minflt_per_op < 0)
		return "n/a";
	snprintf(buf, size, "%.4f", s->minflt_per_op);
	return buf;
}

static void slow_mode_note(const struct daemon_info *di,
			   const struct bench_stats *base);
static void print_table(const struct opts *o, const struct daemon_info *di,
			const struct bench_machine *mc, double timer_us, struct bench_stats st[][MAX_PROC_COUNTS],
			const bool ran[][MAX_PROC_COUNTS],
			const struct rounds *rd);
static void print_json(const struct opts *o, const struct daemon_info *di,
		       const struct bench_machine *mc, double timer_us, struct bench_stats st[][MAX_PROC_COUNTS],
		       const bool ran[][MAX_PROC_COUNTS],
		       const struct peer_results *pr, const struct rounds *rd);
static const struct peer_backend *built_backend(enum peer_kind k);
static int peers_prepare(const struct opts *o, struct peer_results *pr,
			 const struct carmy_fig *cf);
static int carmy_round(const struct opts *o, int k, int r,
		       struct carmy_fig *cf, const struct daemon_info *di,
		       struct floor_echo *echo, struct rounds *rd);
static int peers_run(const struct opts *o, struct peer_results *pr,
		     enum peer_kind kind, int k, int r, int maxp,
		     struct rounds *rd);
static void keep_medians(const struct opts *o, int k, const struct rounds *rd,
			 struct bench_stats st[][MAX_PROC_COUNTS],
			 bool ran[][MAX_PROC_COUNTS], struct peer_results *pr);
static struct bench_stats median_round(const struct bench_stats *each,
				       int n);
static double round_ratio(const struct bench_stats *a,
			  const struct bench_stats *b, int n, bool ops);
static void print_peers(const struct opts *o,
			struct bench_stats st[][MAX_PROC_COUNTS],
			const bool ran[][MAX_PROC_COUNTS],
			const struct peer_results *pr, const struct rounds *rd);
static void print_rounds(const struct opts *o,
			 const bool ran[][MAX_PROC_COUNTS],
			 const struct peer_results *pr, const struct rounds *rd);
static void print_floor_rounds(const struct opts *o,
			       const bool ran[][MAX_PROC_COUNTS],
			       const struct rounds *rd);
static double div_or(double a, double b);
static void print_peers_json(const struct opts *o,
			     const struct peer_results *pr,
			     const struct rounds *rd);
static void json_rounds(const struct bench_stats *each, int n);
static void json_str(const char *s);
static void build_args(msgpack_sbuffer *sb);

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
	static struct bench_stats st[FIG_COUNT][MAX_PROC_COUNTS];
	static bool ran[FIG_COUNT][MAX_PROC_COUNTS];
	static struct peer_results pr;
	static struct rounds rd;
	struct carmy_fig cf = { 0 };
	struct daemon_info di = { 0 };
	struct floor_echo echo = { .stop_fd = -1 };
	struct bench_machine mc;
	struct bench_disk disk = { 0 };
	bool need_carmy = false, need_echo = false;
	msgpack_sbuffer args;
	struct opts o;
	double timer_us;
	int maxp = 0, rc;

	if (parse_opts(argc, argv, &o) != 0)
		return 1;
	/* The disk first: where no file can be made, the run is refused
	 * before carmyd's table is touched. */
	if (o.disk != NULL) {
		rc = bench_machine_disk(&disk, o.disk);
		if (rc != 0) {
			fprintf(stderr, "carmy-bench: --disk %s: cannot time a "
				"flush there: %s\n", o.disk, strerror(-rc));
			return 1;
		}
	}
	for (int k = 0; k < o.nprocs; k++)
		if (o.procs[k] > maxp)
			maxp = o.procs[k];
	need_carmy = o.only[FIG_RESERVE] || o.only[FIG_REPLAY] ||
		     o.only[FIG_CYCLE];
	need_echo = o.only[FIG_RT];

	msgpack_sbuffer_init(&args);
	build_args(&args);
	cf.socket = o.socket;
	cf.replay_set = o.replay_set;
	cf.args = (const uint8_t *)args.data;
	cf.args_len = args.size;
	for (int k = 0; k < RESULT_LEN; k++)
		cf.result[k] = (uint8_t)(' ' + k % 95);

	if (need_carmy) {
		if (daemon_probe(&o, &cf, &di) != 0)
			return 1;
		daemon_settle(&di);
		if (di.capacity != 0 && (di.free_entries < capacity_needed(&o) ||
					 di.free_buckets < capacity_needed(&o)))
			capacity_fail(&o, &di, "before starting");
		if (o.only[FIG_REPLAY]) {
			rc = replay_prepare(&cf);
			if (rc == CARMY_ECAPACITY)
				capacity_fail(&o, &di, "preparing the replay set");
			if (rc != 0)
				return 1;
		}
	}
	if (peers_prepare(&o, &pr, &cf) != 0)
		return 1;
	rc = bench_init(maxp, o.ops);
	if (rc != 0) {
		fprintf(stderr, "carmy-bench: cannot map %d x %llu samples: %s\n",
			maxp, (unsigned long long)o.ops, strerror(-rc));
		return 1;
	}
	if (need_echo) {
		rc = floor_echo_start(&echo, o.echo_cpu);
		if (rc != 0) {
			fprintf(stderr, "carmy-bench: cannot start the echo "
				"server: %s\n", strerror(-rc));
			return 1;
		}
	}
	timer_us = bench_timer_overhead_us();

	/* Round by round, each process count runs its figures and then the
	 * peers' (with --redis-ops and --pg-ops, ops of their own): every
	 * round sees Carmy and its peers at the same moment of this noisy
	 * machine, and the round with the median ops/s stands for the
	 * figure. */
	rd.n = o.rounds;
	bench_machine_start(&mc);
	bench_machine_pages(&mc);
	bench_machine_switches(&mc);
	bench_machine_pace(&mc, PACE_PIECES_FIRST);
	mc.disk = disk;
	for (int k = 0; k < o.nprocs; k++) {
		for (int r = 0; r < o.rounds; r++) {
			if (carmy_round(&o, k, r, &cf, &di, &echo, &rd) != 0)
				goto fail;
			for (int kind = 0; kind < PEER_COUNT; kind++)
				if (peers_run(&o, &pr, (enum peer_kind)kind, k,
					      r, maxp, &rd) != 0)
					goto fail;
			bench_machine_pace(&mc, PACE_PIECES_ROUND);
		}
		keep_medians(&o, k, &rd, st, ran, &pr);
	}
	bench_machine_end(&mc);
	floor_echo_stop(&echo);
	msgpack_sbuffer_destroy(&args);
	if (o.json) {
		print_json(&o, &di, &mc, timer_us, st, ran, &pr, &rd);
	} else {
		print_table(&o, &di, &mc, timer_us, st, ran, &rd);
		print_peers(&o, st, ran, &pr, &rd);
	}
	return 0;
fail:
	floor_echo_stop(&echo);
	msgpack_sbuffer_destroy(&args);
	return 1;
}

/* ------------------------------------------------------------ options */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: carmy-bench [--socket PATH] [--procs 1,2] [--ops N]\n"
		"                   [--replay-set K] [--only FIGURE,...]\n"
		"                   [--echo-cpu N] [--rounds N] [--disk DIR]\n"
		"                   [--json]\n"
		"       carmy-bench --help | --version\n"
		"\n"
		"Measures a running carmyd (reserve, replay, reserve+complete\n"
		"cycle) with 1..N client processes, and this machine's floors\n"
		"(cas-insert, lookup, msgpack-rt) in the same run.\n"
		"\n"
		"  --socket PATH    carmyd's socket (default: $CARMY_SOCKET or\n"
		"                   libcarmy's default path)\n"
		"  --procs LIST     process counts to measure (default 1,2)\n"
		"  --ops N          timed operations per process and figure\n"
		"                   (default 100000); a figure stops when its\n"
		"                   first process has done them all\n"
		"  --replay-set K   identities the replay figure cycles over, and\n"
		"                   keys the lookup floor cycles over (default 1000)\n"
		"  --only LIST      figures to run, of: cas-insert, lookup,\n"
		"                   msgpack-rt, reserve, replay, cycle (default all)\n"
		"  --echo-cpu N     pin the msgpack-rt echo server to CPU N, to\n"
		"                   compare like with like when carmyd is pinned\n"
		"  --rounds N       run every figure N times (1 to %d, default 1),\n"
		"                   each round Carmy's and then the peers', and\n"
		"                   quote the round with the median ops/s\n"
		"  --disk DIR       also time 200 writes of 4 KiB, each followed\n"
		"                   by fdatasync(), into a file made in DIR (and\n"
		"                   removed), and print their median and 90th\n"
		"                   percentile: what a durable store's commit\n"
		"                   there waits for at least\n"
		"  --json           print one JSON object instead of a table\n"
		"  --redis SOCKET   run the same workload against the Redis\n"
		"                   server on this Unix socket (SET NX, SET, GET)\n"
		"  --redis-ops N    ops per process and figure for Redis\n"
		"                   (default: --ops)\n"
		"  --pg CONNINFO    and against PostgreSQL (INSERT ... ON CONFLICT\n"
		"                   DO NOTHING, UPDATE, SELECT), e.g.\n"
		"                   'host=/tmp/pgdir user=me dbname=postgres'\n"
		"  --pg-ops N       ops per process and figure for PostgreSQL\n"
		"                   (default: --ops)\n"
		"\n"
		"The peers' figures follow --only: reserve, replay and cycle, and\n"
		"their plain round trip with msgpack-rt. Built into this one:\n"
		"  --redis  %s\n"
		"  --pg     %s\n"
		"\n"
		"Figures that keep entries need room in carmyd's table: start it\n"
		"with --capacity of at least ops x (sum of procs) for cycle, plus\n"
		"ops x (largest procs) for reserve, plus K for replay, with cycle's\n"
		"share times --rounds; carmy-bench says how much and exits 2 if\n"
		"that is missing.\n", MAX_ROUNDS,
		built_backend(PEER_REDIS) != NULL ? "yes" :
		"no (configure did not find hiredis)",
		built_backend(PEER_PG) != NULL ? "yes" :
		"no (configure did not find libpq)");
}

static int parse_list_int(const char *s, struct opts *o)
{
	char *end;

	o->nprocs = 0;
	for (;;) {
		long v;

		errno = 0;
		v = strtol(s, &end, 10);
		if (errno != 0 || end == s || v < 1 || v > BENCH_MAX_PROCS ||
		    o->nprocs == MAX_PROC_COUNTS)
			return -1;
		o->procs[o->nprocs++] = (int)v;
		if (*end == '\0')
			return 0;
		if (*end != ',')
			return -1;
		s = end + 1;
	}
}

static int parse_only(const char *s, struct opts *o)
{
	char buf[256], *save = NULL;

	if (strlen(s) >= sizeof(buf))
		return -1;
	strcpy(buf, s);
	memset(o->only, 0, sizeof(o->only));
	for (char *t = strtok_r(buf, ",", &save); t != NULL;
	     t = strtok_r(NULL, ",", &save)) {
		int g = 0;

		while (g < FIG_COUNT && strcmp(t, fig_names[g]) != 0)
			g++;
		if (g == FIG_COUNT)
			return -1;
		o->only[g] = true;
	}
	return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option longs[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "procs", required_argument, NULL, 'p' },
		{ "ops", required_argument, NULL, 'n' },
		{ "replay-set", required_argument, NULL, 'k' },
		{ "only", required_argument, NULL, 'o' },
		{ "echo-cpu", required_argument, NULL, 'e' },
		{ "json", no_argument, NULL, 'j' },
		{ "redis", required_argument, NULL, 'R' },
		{ "pg", required_argument, NULL, 'P' },
		{ "pg-ops", required_argument, NULL, 'N' },
		{ "redis-ops", required_argument, NULL, 'M' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "disk", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned long long v;
	char *end;
	int ch;

	memset(o, 0, sizeof(*o));
	o->procs[0] = 1;
	o->procs[1] = 2;
	o->nprocs = 2;
	o->ops = 100000;
	o->replay_set = 1000;
	o->echo_cpu = -1;
	o->rounds = 1;
	for (int g = 0; g < FIG_COUNT; g++)
		o->only[g] = true;
	while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (ch) {
		case 's':
			o->socket = optarg;
			break;
		case 'p':
			if (parse_list_int(optarg, o) != 0) {
				fprintf(stderr, "carmy-bench: --procs: expected "
					"a comma-separated list of 1..%d\n",
					BENCH_MAX_PROCS);
				return -1;
			}
			break;
		case 'n':
		case 'N':
		case 'M':
		case 'k':
			errno = 0;
			v = strtoull(optarg, &end, 10);
			if (errno != 0 || *end != '\0' || optarg[0] < '0' ||
			    optarg[0] > '9' || v < 1 ||
			    v > (ch != 'k' ? 100000000ull : 1000000ull)) {
				fprintf(stderr, "carmy-bench: --%s: expected an "
					"integer from 1 to %s\n",
					ch == 'n' ? "ops" : ch == 'N' ? "pg-ops" :
					ch == 'M' ? "redis-ops" : "replay-set",
					ch != 'k' ? "100000000" : "1000000");
				return -1;
			}
			if (ch == 'n')
				o->ops = v;
			else if (ch == 'N')
				o->peer_ops[PEER_PG] = v;
			else if (ch == 'M')
				o->peer_ops[PEER_REDIS] = v;
			else
				o->replay_set = (uint32_t)v;
			break;
		case 'R':
		case 'P': {
			enum peer_kind kind = ch == 'R' ? PEER_REDIS : PEER_PG;

			if (built_backend(kind) == NULL) {
				fprintf(stderr, "carmy-bench: --%s: the comparison "
					"with %s is not built (configure did not "
					"find %s)\n", ch == 'R' ? "redis" : "pg",
					ch == 'R' ? "Redis" : "PostgreSQL",
					ch == 'R' ? "hiredis" : "libpq");
				return -1;
			}
			o->peer_where[kind] = optarg;
			break;
		}
		case 'o':
			if (parse_only(optarg, o) != 0) {
				fprintf(stderr, "carmy-bench: --only: expected "
					"figures among cas-insert, lookup, "
					"msgpack-rt, reserve, replay, cycle\n");
				return -1;
			}
			break;
		case 'r':
			errno = 0;
			v = strtoull(optarg, &end, 10);
			if (errno != 0 || *end != '\0' || optarg[0] < '0' ||
			    optarg[0] > '9' || v < 1 || v > MAX_ROUNDS) {
				fprintf(stderr, "carmy-bench: --rounds: expected "
					"an integer from 1 to %d\n", MAX_ROUNDS);
				return -1;
			}
			o->rounds = (int)v;
			break;
		case 'e':
			errno = 0;
			v = strtoull(optarg, &end, 10);
			if (errno != 0 || *end != '\0' || optarg[0] < '0' ||
			    optarg[0] > '9' || v >= CPU_SETSIZE) {
				fprintf(stderr, "carmy-bench: --echo-cpu: "
					"expected a CPU number\n");
				return -1;
			}
			o->echo_cpu = (int)v;
			break;
		case 'j':
			o->json = true;
			break;
		case 'D':
			if (optarg[0] == '\0') {
				fprintf(stderr, "carmy-bench: --disk: expected "
					"a directory\n");
				return -1;
			}
			o->disk = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			puts("carmy-bench " PACKAGE_VERSION);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "carmy-bench: unexpected argument '%s'\n",
			argv[optind]);
		return -1;
	}
	for (int p = 0; p < PEER_COUNT; p++)
		if (o->peer_ops[p] == 0)
			o->peer_ops[p] = o->ops;
	return 0;
}

/* ------------------------------------------------------------ carmyd */

/* 16 random hex digits: ids of one run never meet another run's. */
static int new_nonce(char nonce[17])
{
	uint64_t v;

	if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
		fprintf(stderr, "carmy-bench: getrandom: %s\n", strerror(errno));
		return -1;
	}
	snprintf(nonce, 17, "%016llx", (unsigned long long)v);
	return 0;
}

/*
 * Connect once to find out what we are measuring: carmyd's pid, capacity
 * and free entries come from the header and ticket words of the segment
 * this process then has mapped (found in /proc/self/maps; read-only, and
 * checked like any untrusted memory). Also picks the run's nonce.
 */
static int daemon_probe(const struct opts *o, struct carmy_fig *cf,
			struct daemon_info *di)
{
	char line[512], path[512];
	carmy_t *c;
	FILE *maps;
	int rc;

	if (new_nonce(cf->nonce) != 0)
		return -1;
	if (o->socket != NULL)
		snprintf(di->socket, sizeof(di->socket), "%s", o->socket);
	else if (carmy_default_socket(di->socket, sizeof(di->socket)) < 0)
		strcpy(di->socket, "(default)");

	rc = carmy_connect(&c, o->socket);
	if (rc != 0) {
		fprintf(stderr, "carmy-bench: cannot connect to carmyd at %s: "
			"%s: %s\n", di->socket, carmy_errname(rc),
			carmy_strerror(rc));
		return -1;
	}
	di->max_result = (uint32_t)carmy_max_result(c);
	di->durable = carmy_durable(c) == 1;
	if (di->max_result < RESULT_LEN) {
		fprintf(stderr, "carmy-bench: carmyd's --max-result is %u; the "
			"figures record %d-byte results\n", di->max_result,
			RESULT_LEN);
		carmy_close(c);
		return -1;
	}
	maps = fopen("/proc/self/maps", "r");
	while (maps != NULL && fgets(line, sizeof(line), maps) != NULL) {
		const struct shm_header *h;
		char *p = strstr(line, " /dev/shm/");
		struct stat sb;
		size_t len;
		void *m;
		int fd;

		if (p == NULL)
			continue;
		snprintf(path, sizeof(path), "%s", p + 1);
		path[strcspn(path, "\n")] = '\0';
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &sb) != 0 ||
		    sb.st_size < (off_t)sizeof(struct shm_header)) {
			close(fd);
			continue;
		}
		len = (size_t)sb.st_size;
		m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (m == MAP_FAILED)
			continue;
		h = m;
		if (h->sh_magic == SHM_MAGIC) {
			uint32_t cap = h->sh_capacity;
			uint64_t toff = h->sh_tickets_off;

			uint32_t nb = h->sh_nbuckets;
			uint64_t boff = h->sh_buckets_off;

			di->pid = h->sh_daemon_pid;
			if (toff <= len && cap <= (len - toff) / sizeof(uint64_t) &&
			    boff <= len && nb <= (len - boff) / sizeof(uint64_t)) {
				const volatile uint64_t *t =
					(const uint64_t *)((const uint8_t *)m +
							   toff);
				const volatile uint64_t *b =
					(const uint64_t *)((const uint8_t *)m +
							   boff);

				di->capacity = cap;
				di->nbuckets = nb;
				for (uint32_t i = 0; i < cap; i++)
					di->free_entries +=
						t[i] == SHM_TICKET_FREE;
				for (uint32_t i = 0; i < nb; i++) {
					unsigned st = SHM_W_STATE(b[i]);

					di->free_buckets += st == SHM_FREE;
					di->tombs += st == SHM_TOMB;
				}
			}
		}
		munmap(m, len);
		if (di->capacity != 0)
			break;
	}
	if (maps != NULL)
		fclose(maps);
	carmy_close(c);
	return 0;
}

/*
 * Whether carmyd (pid) is still reading its segment in: 1 while its thread
 * carmyd-populate runs, 0 once it is gone, -1 where /proc cannot tell (no
 * such process, or another user's hidden by hidepid).
 */
static int daemon_populating(uint32_t pid)
{
	char path[96], comm[32];
	struct dirent *e;
	int found = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%u/task", pid);
	d = opendir(path);
	if (d == NULL)
		return -1;
	while (found == 0 && (e = readdir(d)) != NULL) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%u/task/%.16s/comm", pid,
			 e->d_name);
		f = fopen(path, "r");
		if (f == NULL)
			continue;	/* that thread is gone */
		if (fgets(comm, sizeof(comm), f) != NULL &&
		    strcmp(comm, "carmyd-populate\n") == 0)
			found = 1;
		fclose(f);
	}
	closedir(d);
	return found;
}

/*
 * A fresh carmyd zeroes and reads its segment on a thread of its own after
 * its ready line, seconds for a table of millions of entries, holding a
 * CPU throughout: figures taken meanwhile measure that, not Carmy (docs/
 * performance.md). Wait for it, saying so on stderr.
 */
static void daemon_settle(const struct daemon_info *di)
{
	const struct timespec tick = { .tv_nsec = 10 * 1000 * 1000 };
	struct timespec t0, t1;

	if (di->pid == 0 || daemon_populating(di->pid) != 1)
		return;
	fprintf(stderr, "carmy-bench: carmyd pid %u is still reading its "
		"segment in (thread carmyd-populate, which holds a CPU); "
		"waiting for it\n", di->pid);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (daemon_populating(di->pid) == 1)
		nanosleep(&tick, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	fprintf(stderr, "carmy-bench: carmyd's segment was read in %.2f s "
		"later; the run starts\n",
		(double)(t1.tv_sec - t0.tv_sec) +
			(double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
}

/* The K identities the replay figure replays: reserved and completed once,
 * before anything is timed. Returns 0, CARMY_ECAPACITY, or -1. */
static int replay_prepare(const struct carmy_fig *cf)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct carmy_call call = {
		.principal = "bench", .principal_len = 5,
		.session = "carmy-bench", .session_len = 11,
		.tool = "bench.echo", .tool_len = 10,
		.args = cf->args, .args_len = cf->args_len,
	};
	char rid[RID_MAX];
	size_t prefix;
	carmy_t *c;
	int rc;

	rc = carmy_connect(&c, cf->socket);
	if (rc != 0) {
		fprintf(stderr, "carmy-bench: connect: %s\n", carmy_strerror(rc));
		return -1;
	}
	prefix = (size_t)snprintf(rid, sizeof(rid), "%s-replay-", cf->nonce);
	call.request_id = rid;
	for (uint32_t j = 0; j < cf->replay_set; j++) {
		call.request_id_len = prefix + peer_put_hex(rid + prefix, j);
		rc = carmy_begin(c, &call, &r);
		if (rc == CARMY_RESERVED)
			rc = carmy_complete(c, &r, CARMY_STATUS_COMPLETED,
					    cf->result, RESULT_LEN);
		else if (rc >= 0)
			rc = CARMY_EPROTOCOL;	/* a fresh id must be new */
		carmy_reservation_clear(&r);
		if (rc != 0) {
			if (rc != CARMY_ECAPACITY)
				fprintf(stderr, "carmy-bench: preparing replay "
					"identity %u: %s: %s\n", j,
					carmy_errname(rc), carmy_strerror(rc));
			carmy_close(c);
			return rc == CARMY_ECAPACITY ? rc : -1;
		}
	}
	carmy_close(c);
	return 0;
}

/* Entries this run holds at its peak: figures run in order for each P, the
 * replay set first; reserve's entries live until released at its end and
 * cycle's for good. */
static uint64_t capacity_needed(const struct opts *o)
{
	uint64_t kept = o->only[FIG_REPLAY] ? o->replay_set : 0, peak = kept;

	/* reserve gives its entries back; cycle keeps its own, every round. */
	for (int k = 0; k < o->nprocs; k++) {
		uint64_t n = (uint64_t)o->procs[k] * o->ops;

		for (int r = 0; r < o->rounds; r++) {
			if (o->only[FIG_RESERVE] && kept + n > peak)
				peak = kept + n;
			if (o->only[FIG_CYCLE])
				kept += n;
			if (kept > peak)
				peak = kept;
		}
	}
	return peak;
}

static void capacity_fail(const struct opts *o, const struct daemon_info *di,
			  const char *what)
{
	unsigned long long need = capacity_needed(o);
	int sum = 0, max = 0;

	for (int k = 0; k < o->nprocs; k++) {
		sum += o->procs[k];
		if (o->procs[k] > max)
			max = o->procs[k];
	}
	fprintf(stderr, "carmy-bench: IDEMPOTENCY_CAPACITY (%s): carmyd's "
		"table is too small for this run.\n"
		"  carmyd pid %u has capacity %u with %u entries free; this "
		"run needs %llu:\n", what, di->pid, di->capacity,
		di->free_entries, need);
	if (o->only[FIG_CYCLE])
		fprintf(stderr, "    cycle   %llu ops x %d processes (sum of "
			"--procs) x %d rounds, kept\n",
			(unsigned long long)o->ops, sum, o->rounds);
	if (o->only[FIG_RESERVE])
		fprintf(stderr, "    reserve %llu ops x %d processes at once, "
			"released after\n", (unsigned long long)o->ops, max);
	if (o->only[FIG_REPLAY])
		fprintf(stderr, "    replay  %u identities (--replay-set), "
			"kept\n", o->replay_set);
	fprintf(stderr,
		"  Its index has %u free buckets and %u tombstones (released "
		"entries carmyd\n"
		"  reclaims about once a second, and only where a free bucket "
		"follows).\n"
		"  Start a fresh carmyd with a bigger table, e.g.\n"
		"    carmyd --transient --capacity %llu --max-result 1K "
		"--socket %s\n"
		"  or lower --ops or --rounds.\n", di->free_buckets, di->tombs,
		need + need / 4 + 1000, di->socket);
	exit(2);
}

/* ------------------------------------------------------------ figures */

static int cw_setup(struct bench_worker *w)
{
	struct carmy_fig *cf = w->arg;
	struct carmy_worker *s = calloc(1, sizeof(*s));
	int rc;

	if (s == NULL)
		return bench_failf(w, BENCH_FAIL, "out of memory");
	w->state = s;
	s->call = (struct carmy_call){
		.principal = "bench", .principal_len = 5,
		.session = "carmy-bench", .session_len = 11,
		.request_id = s->rid,
		.tool = "bench.echo", .tool_len = 10,
		.args = cf->args, .args_len = cf->args_len,
	};
	s->prefix = (size_t)snprintf(s->rid, sizeof(s->rid), "%s-%u.%d-%c-",
				     cf->nonce, w->run, w->index, cf->tag);
	rc = carmy_connect(&s->c, cf->socket);
	if (rc != 0)
		return bench_failf(w, BENCH_FAIL, "carmy_connect: %s: %s",
				   carmy_errname(rc), carmy_strerror(rc));
	return BENCH_OK;
}

static int cw_teardown(struct bench_worker *w, uint64_t done)
{
	struct carmy_worker *s = w->state;

	(void)done;
	if (s == NULL)
		return BENCH_OK;
	carmy_reservation_clear(&s->one);
	carmy_close(s->c);
	free(s);
	w->state = NULL;
	return BENCH_OK;
}

/* An unexpected code from begin: a full table gets its own exit. */
static int begin_failed(struct bench_worker *w, uint64_t i, int rc,
			const char *want)
{
	struct carmy_worker *s = w->state;

	return bench_failf(w, rc == CARMY_ECAPACITY ? BENCH_FULL : BENCH_FAIL,
			   "op %llu (request_id %.*s): carmy_begin returned %s "
			   "(%s), expected %s", (unsigned long long)i,
			   (int)s->call.request_id_len, s->rid,
			   carmy_errname(rc), carmy_strerror(rc), want);
}

/* New identities: "<nonce>-<run>.<index>-<tag>-<i in hex>". */
static void new_id_prep(struct bench_worker *w, uint64_t i)
{
	struct carmy_worker *s = w->state;

	s->call.request_id_len = s->prefix + peer_put_hex(s->rid + s->prefix, i);
}

/* reserve */

static int reserve_setup(struct bench_worker *w)
{
	struct carmy_worker *s;
	int rc = cw_setup(w);

	if (rc != BENCH_OK)
		return rc;
	s = w->state;
	/* Written by every timed begin: fault it in now. */
	s->res = malloc(w->ops * sizeof(*s->res));
	if (s->res == NULL)
		return bench_failf(w, BENCH_FAIL, "out of memory for %llu "
				   "reservations", (unsigned long long)w->ops);
	memset(s->res, 0, w->ops * sizeof(*s->res));
	return BENCH_OK;
}

static void reserve_op(struct bench_worker *w, uint64_t i)
{
	struct carmy_worker *s = w->state;

	s->rc = carmy_begin(s->c, &s->call, &s->res[i]);
}

static int reserve_check(struct bench_worker *w, uint64_t i)
{
	struct carmy_worker *s = w->state;

	if (s->rc != CARMY_RESERVED)
		return begin_failed(w, i, s->rc, "RESERVED");
	return BENCH_OK;
}

/* Give every reservation back, so the figure consumes no capacity. */
static int reserve_teardown(struct bench_worker *w, uint64_t done)
{
	struct carmy_worker *s = w->state;
	int rc = BENCH_OK;

	if (s == NULL)
		return BENCH_OK;
	for (uint64_t i = 0; s->res != NULL && i < done; i++) {
		int r = carmy_release(s->c, &s->res[i]);

		if (r != 0 && rc == BENCH_OK)
			rc = bench_failf(w, BENCH_FAIL, "carmy_release of op "
					 "%llu: %s: %s", (unsigned long long)i,
					 carmy_errname(r), carmy_strerror(r));
	}
	free(s->res);
	s->res = NULL;
	cw_teardown(w, done);
	return rc;
}

/* replay */

static void replay_prep(struct bench_worker *w, uint64_t i)
{
	struct carmy_fig *cf = w->arg;
	struct carmy_worker *s = w->state;
	uint64_t j = (i + (uint64_t)w->index * cf->replay_set / w->procs) %
		     cf->replay_set;

	s->call.request_id_len = s->prefix + peer_put_hex(s->rid + s->prefix, j);
}

static int replay_setup(struct bench_worker *w)
{
	struct carmy_fig *cf = w->arg;
	struct carmy_worker *s;
	int rc = cw_setup(w);

	if (rc != BENCH_OK)
		return rc;
	s = w->state;
	s->prefix = (size_t)snprintf(s->rid, sizeof(s->rid), "%s-replay-",
				     cf->nonce);
	return BENCH_OK;
}

static void replay_op(struct bench_worker *w, uint64_t i)
{
	struct carmy_worker *s = w->state;

	(void)i;
	s->rc = carmy_begin(s->c, &s->call, &s->one);
}

static int replay_check(struct bench_worker *w, uint64_t i)
{
	struct carmy_fig *cf = w->arg;
	struct carmy_worker *s = w->state;
	const struct carmy_reservation *r = &s->one;
	int rc = BENCH_OK;

	if (s->rc != CARMY_REPLAY)
		return begin_failed(w, i, s->rc, "REPLAY");
	if (r->status != CARMY_STATUS_COMPLETED || r->result_code != 0 ||
	    r->result_len != RESULT_LEN ||
	    memcmp(r->result, cf->result, RESULT_LEN) != 0 ||
	    strncmp(r->execution_id, "exec_", 5) != 0)
		rc = bench_failf(w, BENCH_FAIL, "op %llu (request_id %.*s): "
				 "replayed status %d code %d, %zu result bytes "
				 "%s, execution_id '%s'",
				 (unsigned long long)i,
				 (int)s->call.request_id_len, s->rid,
				 r->status, r->result_code, r->result_len,
				 r->result_len == RESULT_LEN &&
						 memcmp(r->result, cf->result,
							RESULT_LEN) == 0 ?
					 "as recorded" : "differing",
				 r->execution_id);
	carmy_reservation_clear(&s->one);
	return rc;
}

/* cycle */

static void cycle_op(struct bench_worker *w, uint64_t i)
{
	struct carmy_fig *cf = w->arg;
	struct carmy_worker *s = w->state;

	(void)i;
	s->rc2 = 0;
	s->rc = carmy_begin(s->c, &s->call, &s->one);
	if (s->rc == CARMY_RESERVED)
		s->rc2 = carmy_complete(s->c, &s->one, CARMY_STATUS_COMPLETED,
					cf->result, RESULT_LEN);
}

static int cycle_check(struct bench_worker *w, uint64_t i)
{
	struct carmy_worker *s = w->state;

	if (s->rc != CARMY_RESERVED)
		return begin_failed(w, i, s->rc, "RESERVED");
	if (s->rc2 != 0)
		return bench_failf(w, BENCH_FAIL, "op %llu: carmy_complete "
				   "returned %s (%s)", (unsigned long long)i,
				   carmy_errname(s->rc2),
				   carmy_strerror(s->rc2));
	return BENCH_OK;
}

static void carmy_figure(struct bench_figure *f, enum fig which,
			 struct carmy_fig *cf)
{
	memset(f, 0, sizeof(*f));
	f->name = fig_names[which];
	f->arg = cf;
	switch (which) {
	case FIG_RESERVE:
		cf->tag = 'r';
		f->setup = reserve_setup;
		f->prep = new_id_prep;
		f->op = reserve_op;
		f->check = reserve_check;
		f->teardown = reserve_teardown;
		break;
	case FIG_REPLAY:
		f->setup = replay_setup;
		f->prep = replay_prep;
		f->op = replay_op;
		f->check = replay_check;
		f->teardown = cw_teardown;
		break;
	default:
		cf->tag = 'c';
		f->setup = cw_setup;
		f->prep = new_id_prep;
		f->op = cycle_op;
		f->check = cycle_check;
		f->teardown = cw_teardown;
		break;
	}
}

/* ------------------------------------------------------------ peers */

/* The backends built into this carmy-bench; NULL when configure did not
 * find the client library. */
static const struct peer_backend *built_backend(enum peer_kind k)
{
	switch (k) {
#ifdef HAVE_HIREDIS
	case PEER_REDIS:
		return &peer_redis;
#endif
#ifdef HAVE_LIBPQ
	case PEER_PG:
		return &peer_pg;
#endif
	default:
		return NULL;
	}
}

/* Each requested peer gets carmyd's call (arguments, result, replay set
 * size) under a nonce of its own, and its replay set recorded, before
 * anything is timed. Returns 0 or -1. */
static int peers_prepare(const struct opts *o, struct peer_results *pr,
			 const struct carmy_fig *cf)
{
	for (int p = 0; p < PEER_COUNT; p++) {
		struct peer_cfg *c = &pr->cfg[p];
		char err[PEER_ERR_MAX + 64];

		if (o->peer_where[p] == NULL)
			continue;
		c->be = built_backend((enum peer_kind)p);
		c->where = o->peer_where[p];
		c->replay_set = o->replay_set;
		c->args = cf->args;
		c->args_len = cf->args_len;
		c->result = cf->result;
		c->result_len = RESULT_LEN;
		if (new_nonce(c->nonce) != 0)
			return -1;
		if (peer_prepare(c, err, sizeof(err)) != 0) {
			fprintf(stderr, "carmy-bench: %s at '%s': %s\n",
				c->be->name, c->where, err);
			return -1;
		}
	}
	return 0;
}

/* The peer's figures for procs[k], round r of them, in the order the
 * carmyd ones ran, into rd. A peer with an op count of its own
 * (--redis-ops, --pg-ops) gets a harness block of that size for the
 * round, and carmyd's is put back after. Returns 0 or -1 (said why). */
static int peers_run(const struct opts *o, struct peer_results *pr,
		     enum peer_kind kind, int k, int r, int maxp,
		     struct rounds *rd)
{
	bool own = o->peer_ops[kind] != o->ops;
	int p = o->procs[k], rc = 0;

	if (o->peer_where[kind] == NULL)
		return 0;
	if (own && (rc = bench_init(maxp, o->peer_ops[kind])) != 0)
		goto no_block;
	for (int op = 0; op < PEER_OP_COUNT; op++) {
		struct bench_stats *st = &rd->peer[kind][op][k][r];
		struct bench_figure f;

		if (!o->only[peer_fig[op]])
			continue;
		peer_figure(&f, &pr->cfg[kind], (enum peer_op)op);
		if (bench_run(&f, p, st) != 0) {
			fprintf(stderr, "carmy-bench: %s %s, %d process%s: %s\n",
				peer_kind_name(kind), f.name, p,
				p == 1 ? "" : "es", st->msg);
			return -1;
		}
		pr->ran[kind][op][k] = true;
	}
	if (own && (rc = bench_init(maxp, o->ops)) != 0) {
		fprintf(stderr, "carmy-bench: cannot map the samples of "
			"carmyd's figures again: %s\n", strerror(-rc));
		return -1;
	}
	return 0;
no_block:
	fprintf(stderr, "carmy-bench: cannot map the samples of the %s "
		"figures: %s\n", peer_kind_name(kind), strerror(-rc));
	return -1;
}

/* Round r of carmyd's figures and the floors for procs[k], into rd.
 * Returns 0 or -1 (said why); exits 2 if carmyd's table filled up. */
static int carmy_round(const struct opts *o, int k, int r,
		       struct carmy_fig *cf, const struct daemon_info *di,
		       struct floor_echo *echo, struct rounds *rd)
{
	int p = o->procs[k], rc = 0;
	struct floor_table table = { 0 };
	struct bench_stats *st;
	struct bench_figure f;

	if (o->only[FIG_CAS] || o->only[FIG_LOOKUP]) {
		/* As big as carmyd's index, so that a random bucket costs
		 * the floor what it costs carmyd: a smaller table fits a
		 * cache level carmyd's does not, and measures the cache
		 * instead. A new one each round: cas-insert fills it. */
		rc = floor_table_new(&table, (uint64_t)p * o->ops +
					     o->replay_set, di->nbuckets);
		if (rc == 0)
			rc = floor_table_fill(&table, o->replay_set);
		if (rc != 0) {
			fprintf(stderr, "carmy-bench: CAS table: %s\n",
				strerror(-rc));
			floor_table_free(&table);
			return -1;
		}
	}
	for (int g = 0; g < FIG_COUNT && rc == 0; g++) {
		if (!o->only[g])
			continue;
		switch (g) {
		case FIG_CAS:
			floor_insert_figure(&f, &table);
			break;
		case FIG_LOOKUP:
			floor_lookup_figure(&f, &table);
			break;
		case FIG_RT:
			floor_rt_figure(&f, echo);
			break;
		default:
			carmy_figure(&f, g, cf);
			break;
		}
		st = &rd->carmy[g][k][r];
		rc = bench_run(&f, p, st);
		if (rc == 0)
			continue;
		floor_table_free(&table);
		if (st->fail == BENCH_FULL) {
			floor_echo_stop(echo);
			capacity_fail(o, di, st->msg);
		}
		fprintf(stderr, "carmy-bench: %s, %d process%s: %s\n",
			fig_names[g], p, p == 1 ? "" : "es", st->msg);
		return -1;
	}
	floor_table_free(&table);
	return 0;
}

/* What stands for procs[k] once its rounds ran: each figure's median
 * round (median_round()). */
static void keep_medians(const struct opts *o, int k, const struct rounds *rd,
			 struct bench_stats st[][MAX_PROC_COUNTS],
			 bool ran[][MAX_PROC_COUNTS], struct peer_results *pr)
{
	for (int g = 0; g < FIG_COUNT; g++) {
		if (!o->only[g])
			continue;
		st[g][k] = median_round(rd->carmy[g][k], rd->n);
		ran[g][k] = true;
	}
	for (int kind = 0; kind < PEER_COUNT; kind++)
		for (int op = 0; op < PEER_OP_COUNT; op++)
			if (pr->ran[kind][op][k])
				pr->st[kind][op][k] =
					median_round(rd->peer[kind][op][k],
						     rd->n);
}

/* The round whose ops/s is the median of n, the lower of the two middle
 * ones if n is even: a figure as one run measured it, its median and p99
 * latencies with it, rather than a blend of rounds. */
static struct bench_stats median_round(const struct bench_stats *each, int n)
{
	int order[MAX_ROUNDS];

	for (int i = 0; i < n; i++) {
		int j = i;

		for (; j > 0 && each[order[j - 1]].ops_per_s >
					each[i].ops_per_s; j--)
			order[j] = order[j - 1];
		order[j] = i;
	}
	return each[order[(n - 1) / 2]];
}

/* The median over n rounds of a's figure over b's, each pair from the
 * same round: ops/s over ops/s if ops, else median µs over median µs.
 * The lower of the two middle ones if n is even; -1 if a round lacks
 * either figure. */
static double round_ratio(const struct bench_stats *a,
			  const struct bench_stats *b, int n, bool ops)
{
	double r[MAX_ROUNDS];

	for (int i = 0; i < n; i++) {
		double x = ops ? a[i].ops_per_s : a[i].median_us;
		double y = ops ? b[i].ops_per_s : b[i].median_us;
		int j = i;

		if (x <= 0 || y <= 0)
			return -1;
		for (; j > 0 && r[j - 1] > x / y; j--)
			r[j] = r[j - 1];
		r[j] = x / y;
	}
	return n > 0 ? r[(n - 1) / 2] : -1;
}

/* ------------------------------------------------------------ output */

static long nproc(void)
{
	return sysconf(_SC_NPROCESSORS_ONLN);
}

/* The ratio of a figure's median to its floor's for the same P (the
 * median of the rounds'), or a negative value when the floor was not
 * measured. */
static double floor_ratio(const struct rounds *rd,
			  const bool ran[][MAX_PROC_COUNTS], int g, int k)
{
	int fl = fig_floor[g];

	if (fl < 0 || !ran[fl][k] || !ran[g][k])
		return -1;
	return round_ratio(rd->carmy[g][k], rd->carmy[fl][k], rd->n, false);
}

/* Throughput of cycle at procs[k] over cycle at P=1 (or the first P). */
static int scaling_base(const struct opts *o, const bool ran[][MAX_PROC_COUNTS])
{
	for (int k = 0; k < o->nprocs; k++)
		if (o->procs[k] == 1 && ran[FIG_CYCLE][k])
			return k;
	for (int k = 0; k < o->nprocs; k++)
		if (ran[FIG_CYCLE][k])
			return k;
	return -1;
}

static void print_table(const struct opts *o, const struct daemon_info *di,
			const struct bench_machine *mc, double timer_us, struct bench_stats st[][MAX_PROC_COUNTS],
			const bool ran[][MAX_PROC_COUNTS],
			const struct rounds *rd)
{
	int base = scaling_base(o, ran);
	const char *sep = "\n";
	char fb[24];

	printf("carmy-bench: nproc %ld", nproc());
	if (di->capacity != 0 || di->pid != 0)
		printf("; carmyd pid %u, capacity %u (%u free before the run), "
		       "index %u buckets, max-result %u, socket %s", di->pid,
		       di->capacity, di->free_entries, di->nbuckets,
		       di->max_result, di->socket);
	printf("\nup to %llu ops per process and figure (each stops when its "
	       "first process is done); replay set %u; timer "
	       "overhead %.3f µs (in every sample)\n",
	       (unsigned long long)o->ops, o->replay_set, timer_us);
	print_machine(mc);
	if (o->rounds > 1)
		printf("%d rounds of every figure, each round Carmy's and then "
		       "its peers'; each line is the round with the median "
		       "ops/s, each ratio the median of the rounds' ratios\n",
		       o->rounds);
	printf("\n");
	printf("%-11s %5s %12s %10s %10s %9s %9s %7s  %s\n", "figure",
	       "procs", "ops/s", "median µs", "p99 µs", "faults/op",
	       "mapped/op", "csw/op", "median vs floor");
	for (int k = 0; k < o->nprocs; k++) {
		for (int g = 0; g < FIG_COUNT; g++) {
			const struct bench_stats *s = &st[g][k];
			double r = floor_ratio(rd, ran, g, k);

			if (!ran[g][k])
				continue;
			printf("%-11s %5d %12.0f %10.3f %10.3f %9s %9.3f %7.3f",
			       s->name, s->procs, s->ops_per_s, s->median_us,
			       s->p99_us, faults_str(s, fb, sizeof(fb)),
			       s->mapped_per_op, s->csw_per_op);
			if (r >= 0)
				printf("  %.2fx %s", r, fig_names[fig_floor[g]]);
			printf("\n");
		}
	}
	for (int k = 0; base >= 0 && k < o->nprocs; k++) {
		if (k == base || !ran[FIG_CYCLE][k] ||
		    st[FIG_CYCLE][base].ops_per_s <= 0)
			continue;
		printf("%scycle throughput P=%d vs P=%d: %.2fx\n",
		       sep, o->procs[k], o->procs[base],
		       st[FIG_CYCLE][k].ops_per_s /
			       st[FIG_CYCLE][base].ops_per_s);
		sep = "";
	}
	if (base >= 0 && !sep[0])	/* a ratio was printed */
		slow_mode_note(di, &st[FIG_CYCLE][base]);
	print_floor_rounds(o, ran, rd);
}

/* With --rounds, each figure over its floor in every round: a round that
 * met a slow time of the CPU (the cpu: line) stands out, and the median
 * quoted above is the middle one of these. */
static void print_floor_rounds(const struct opts *o,
			       const bool ran[][MAX_PROC_COUNTS],
			       const struct rounds *rd)
{
	const char *head = "\nEach figure over its floor, round by round:\n";

	if (o->rounds < 2)
		return;
	for (int k = 0; k < o->nprocs; k++) {
		for (int g = 0; g < FIG_COUNT; g++) {
			int fl = fig_floor[g];

			if (fl < 0 || !ran[fl][k] || !ran[g][k])
				continue;
			printf("%s  %-7s / %-10s %3d procs:", head,
			       fig_names[g], fig_names[fl], o->procs[k]);
			head = "";
			for (int r = 0; r < o->rounds; r++)
				printf(" %6.2fx",
				       div_or(rd->carmy[g][k][r].median_us,
					      rd->carmy[fl][k][r].median_us));
			printf("\n");
		}
	}
}

/*
 * With the memory store a lone client and carmyd's loop each poll for the
 * other: where both keep a CPU, a few switches of the CPU in a hundred
 * cycles at most. Where they do not (one CPU for both, other work on the
 * CPUs, a side that slept and is woken), a cycle waits for a switch, which
 * the scheduling: line prices (on a virtual machine tens of microseconds
 * to another CPU), and the one-process figure the ratios are taken against
 * is another figure: say so.
 */
static void slow_mode_note(const struct daemon_info *di,
			   const struct bench_stats *base)
{
	if (di->durable || base->csw_per_op < 0.1)
		return;
	printf("  (the cycle with %d process%s switched the CPU %.3f times a "
	       "cycle, where a client and carmyd's loop that both keep "
	       "polling switch a few times in a hundred: its cycles waited "
	       "for switches, which the scheduling: line prices, and the "
	       "ratios above are against it)\n", base->procs,
	       base->procs == 1 ? "" : "es", base->csw_per_op);
}

static void print_json(const struct opts *o, const struct daemon_info *di,
		       const struct bench_machine *mc, double timer_us, struct bench_stats st[][MAX_PROC_COUNTS],
		       const bool ran[][MAX_PROC_COUNTS],
		       const struct peer_results *pr, const struct rounds *rd)
{
	int base = scaling_base(o, ran);
	struct bench_pace pace;
	bool first = true;
	char fb[24];

	printf("{\"nproc\":%ld,\"machine\":{\"model\":", nproc());
	json_str(mc->model);
	printf(",\"kernel\":");
	json_str(mc->kernel);
	printf(",\"load1\":%.2f,\"busy_pct\":%.1f,\"steal_pct\":%.1f,"
	       "\"page_touch_us\":%.3f,\"page_fault_us\":%.3f,"
	       "\"page_warm_us\":%.3f,\"shm_huge\":%s,"
	       "\"switch_us\":%.3f,\"wake_us\":%.3f,"
	       "\"flush_us\":%.3f,\"flush_p90_us\":%.3f,\"flush_dir\":",
	       mc->load1, mc->busy_pct, mc->steal_pct, mc->touch_us,
	       mc->fault_us, mc->warm_us, mc->shm_huge < 0 ? "null" :
			    mc->shm_huge ? "true" : "false",
	       mc->switch_us, mc->wake_us,
	       mc->disk.dir != NULL ? mc->disk.flush_us : -1.0,
	       mc->disk.dir != NULL ? mc->disk.flush_p90_us : -1.0);
	if (mc->disk.dir != NULL)
		json_str(mc->disk.dir);
	else
		printf("null");
	bench_machine_pace_sum(mc, &pace);
	printf(",\"pace_pieces\":%u,\"pace_fast_us\":%.1f,"
	       "\"pace_slow_share\":%.3f},", mc->pace_n, pace.fast_us,
	       pace.slow_share);
	if (di->capacity != 0 || di->pid != 0) {
		printf("\"carmyd\":{\"pid\":%u,\"capacity\":%u,"
		       "\"buckets\":%u,"
		       "\"free_before\":%u,\"free_buckets_before\":%u,"
		       "\"tombstones_before\":%u,\"max_result\":%u,"
		       "\"socket\":", di->pid, di->capacity, di->nbuckets,
		       di->free_entries, di->free_buckets, di->tombs,
		       di->max_result);
		json_str(di->socket);
		printf("},");
	} else {
		printf("\"carmyd\":null,");
	}
	printf("\"ops_per_process\":%llu,\"replay_set\":%u,\"rounds\":%d,"
	       "\"timer_overhead_us\":%.3f,\"figures\":[",
	       (unsigned long long)o->ops, o->replay_set, o->rounds,
	       timer_us);
	for (int k = 0; k < o->nprocs; k++) {
		for (int g = 0; g < FIG_COUNT; g++) {
			const struct bench_stats *s = &st[g][k];
			double r = floor_ratio(rd, ran, g, k);

			if (!ran[g][k])
				continue;
			printf("%s{\"figure\":\"%s\",\"procs\":%d,\"ops\":%llu,"
			       "\"ops_per_s\":%.0f,\"median_us\":%.3f,"
			       "\"p99_us\":%.3f,\"faults_per_op\":%s,"
			       "\"mapped_per_op\":%.4f,\"csw_per_op\":%.4f,",
			       first ? "" : ",", s->name, s->procs,
			       (unsigned long long)s->ops, s->ops_per_s,
			       s->median_us, s->p99_us,
			       s->minflt_per_op < 0 ? "null" :
				       faults_str(s, fb, sizeof(fb)),
			       s->mapped_per_op, s->csw_per_op);
			json_rounds(rd->carmy[g][k], rd->n);
			putchar(',');
			first = false;
			if (fig_floor[g] < 0)
				printf("\"floor\":null,\"ratio\":null}");
			else if (r < 0)
				printf("\"floor\":\"%s\",\"ratio\":null}",
				       fig_names[fig_floor[g]]);
			else
				printf("\"floor\":\"%s\",\"ratio\":%.3f}",
				       fig_names[fig_floor[g]], r);
		}
	}
	printf("],\"cycle_scaling\":[");
	first = true;
	for (int k = 0; base >= 0 && k < o->nprocs; k++) {
		if (k == base || !ran[FIG_CYCLE][k] ||
		    st[FIG_CYCLE][base].ops_per_s <= 0)
			continue;
		printf("%s{\"procs\":%d,\"vs_procs\":%d,\"ratio\":%.3f}",
		       first ? "" : ",", o->procs[k], o->procs[base],
		       st[FIG_CYCLE][k].ops_per_s /
			       st[FIG_CYCLE][base].ops_per_s);
		first = false;
	}
	printf("]");
	print_peers_json(o, pr, rd);
	printf("}\n");
}

/* One cell of the comparison: a figure with prec decimals (blank when prec
 * is negative, "-" when not measured) and, when both sides ran, how many
 * times Carmy's is better. */
static void cell(int prec, double v, double ratio)
{
	char num[32] = "", x[16] = "";

	if (v < 0) {
		printf(" %12s %8s", "-", "");
		return;
	}
	if (prec >= 0)
		snprintf(num, sizeof(num), "%.*f", prec, v);
	if (ratio >= 0)
		snprintf(x, sizeof(x), "%.2fx", ratio);
	printf(" %12s %8s", num, x);
}

/* s left-aligned in width columns: printf counts µ's two bytes as two. */
static void pad_label(const char *s, int width)
{
	int cols = 0;

	for (const char *c = s; *c != '\0'; c++)
		cols += ((unsigned char)*c & 0xc0) != 0x80;
	printf("%s%*s", s, cols < width ? width - cols : 0, "");
}

static double div_or(double a, double b)
{
	return a > 0 && b > 0 ? a / b : -1;
}

/* One line of the goals: a ratio for every P, met or missed. */
static void goal(const char *what, const struct opts *o, const double *r,
		 double want)
{
	printf("  ");
	pad_label(what, 48);
	for (int k = 0; k < o->nprocs; k++)
		if (r[k] >= 0)
			printf("  P=%d %.2fx %s", o->procs[k], r[k],
			       r[k] >= want ? "met" : "MISSED");
	printf("\n");
}

/*
 * The peers' figures in the main table's columns, then Carmy against each
 * of them: throughput ratios are Carmy's ops/s over the peer's, latency
 * ratios the peer's median over Carmy's; both read "Carmy is N times
 * better". Last, Carmy's goals against Redis (docs/performance.md, "make bench"), met or missed in this run.
 */
static void print_peers(const struct opts *o,
			struct bench_stats st[][MAX_PROC_COUNTS],
			const bool ran[][MAX_PROC_COUNTS],
			const struct peer_results *pr, const struct rounds *rd)
{
	static const struct cmp_row {
		const char *label;
		int fig;	/* carmyd's figure, -1 for none */
		int pop;	/* the peer's */
		enum { CMP_OPS, CMP_MEDIAN, CMP_RT, CMP_VS_RT } kind;
	} cmp[] = {
		{ "cycle ops/s", FIG_CYCLE, PEER_CYCLE, CMP_OPS },
		{ "reserve median µs", FIG_RESERVE, PEER_RESERVE, CMP_MEDIAN },
		{ "replay median µs", FIG_REPLAY, PEER_REPLAY, CMP_MEDIAN },
		{ "round trip median µs", -1, PEER_RT, CMP_RT },
		{ "reserve vs round trip", FIG_RESERVE, PEER_RT, CMP_VS_RT },
		{ "replay vs round trip", FIG_REPLAY, PEER_RT, CMP_VS_RT },
	};
	double cyc[MAX_PROC_COUNTS], res[MAX_PROC_COUNTS], rep[MAX_PROC_COUNTS];
	bool any = false;
	char fb[24];

	for (int p = 0; p < PEER_COUNT; p++)
		any |= o->peer_where[p] != NULL;
	if (!any)
		return;
	printf("\nThe same workload against its peers:\n");
	for (int p = 0; p < PEER_COUNT; p++)
		if (o->peer_where[p] != NULL)
			printf("  %-5s %s; up to %llu ops per process and figure\n",
			       peer_kind_name((enum peer_kind)p),
			       pr->cfg[p].settings,
			       (unsigned long long)o->peer_ops[p]);
	printf("\n%-13s %5s %12s %10s %10s %9s %9s %7s\n", "figure", "procs",
	       "ops/s", "median µs", "p99 µs", "faults/op", "mapped/op",
	       "csw/op");
	for (int p = 0; p < PEER_COUNT; p++) {
		for (int k = 0; k < o->nprocs; k++) {
			for (int op = 0; op < PEER_OP_COUNT; op++) {
				const struct bench_stats *s = &pr->st[p][op][k];
				char name[32];

				if (!pr->ran[p][op][k])
					continue;
				snprintf(name, sizeof(name), "%s %s",
					 peer_kind_name((enum peer_kind)p),
					 s->name);
				printf("%-13s %5d %12.0f %10.3f %10.3f %9s "
				       "%9.3f %7.3f\n", name, s->procs,
				       s->ops_per_s, s->median_us, s->p99_us,
				       faults_str(s, fb, sizeof(fb)),
				       s->mapped_per_op, s->csw_per_op);
			}
		}
	}

	printf("\nCarmy against its peers (Nx: Carmy is N times better)\n");
	printf("%-26s %5s %12s %8s", "figure", "procs", "carmy", "");
	for (int p = 0; p < PEER_COUNT; p++)
		if (o->peer_where[p] != NULL)
			printf(" %12s %8s", peer_kind_name((enum peer_kind)p),
			       "");
	printf("\n");
	for (int k = 0; k < o->nprocs; k++) {
		for (size_t row = 0; row < sizeof(cmp) / sizeof(cmp[0]); row++) {
			const struct cmp_row *r = &cmp[row];
			const struct bench_stats *mine = NULL;

			if (r->fig >= 0 && !ran[r->fig][k])
				continue;
			if (r->fig >= 0)
				mine = &st[r->fig][k];
			pad_label(r->label, 26);
			printf(" %5d", o->procs[k]);
			if (r->kind == CMP_OPS)
				cell(0, mine->ops_per_s, -1);
			else if (r->kind == CMP_MEDIAN)
				cell(3, mine->median_us, -1);
			else
				cell(-1, 0, -1);
			for (int p = 0; p < PEER_COUNT; p++) {
				const struct bench_stats *ps =
					&pr->st[p][r->pop][k];
				const struct bench_stats *peer =
					rd->peer[p][r->pop][k];
				const struct bench_stats *own =
					r->fig >= 0 ? rd->carmy[r->fig][k] :
						      NULL;

				if (o->peer_where[p] == NULL)
					continue;
				if (!pr->ran[p][r->pop][k])
					cell(0, -1, -1);
				else if (r->kind == CMP_OPS)
					cell(0, ps->ops_per_s,
					     round_ratio(own, peer, rd->n,
							 true));
				else if (r->kind == CMP_MEDIAN)
					cell(3, ps->median_us,
					     round_ratio(peer, own, rd->n,
							 false));
				else if (r->kind == CMP_RT)
					cell(3, ps->median_us, -1);
				else
					cell(-1, 0, round_ratio(peer, own,
								rd->n, false));
			}
			printf("\n");
		}
	}

	print_rounds(o, ran, pr, rd);
	if (o->peer_where[PEER_REDIS] == NULL)
		return;
	for (int k = 0; k < o->nprocs; k++) {
		const struct bench_stats *rt = rd->peer[PEER_REDIS][PEER_RT][k];
		bool has_rt = pr->ran[PEER_REDIS][PEER_RT][k];

		cyc[k] = ran[FIG_CYCLE][k] &&
				 pr->ran[PEER_REDIS][PEER_CYCLE][k] ?
				 round_ratio(rd->carmy[FIG_CYCLE][k],
					     rd->peer[PEER_REDIS][PEER_CYCLE][k],
					     rd->n, true) : -1;
		res[k] = has_rt && ran[FIG_RESERVE][k] ?
				 round_ratio(rt, rd->carmy[FIG_RESERVE][k],
					     rd->n, false) : -1;
		rep[k] = has_rt && ran[FIG_REPLAY][k] ?
				 round_ratio(rt, rd->carmy[FIG_REPLAY][k],
					     rd->n, false) : -1;
	}
	printf("\nGoals against Redis, as ratios within this run:\n");
	goal("cycle throughput ≥ 2x Redis's", o, cyc, 2);
	goal("reserve ≥ 100x faster than a Redis round trip", o, res, 100);
	goal("replay ≥ 100x faster than a Redis round trip", o, rep, 100);
}

/* With --rounds, the cycle's ratio in every round: how far one run's
 * figure may stray on this machine. */
static void print_rounds(const struct opts *o,
			 const bool ran[][MAX_PROC_COUNTS],
			 const struct peer_results *pr, const struct rounds *rd)
{
	if (o->rounds < 2)
		return;
	printf("\nCycle ops/s, Carmy's over the peer's, round by round:\n");
	for (int p = 0; p < PEER_COUNT; p++) {
		for (int k = 0; k < o->nprocs; k++) {
			if (!ran[FIG_CYCLE][k] || !pr->ran[p][PEER_CYCLE][k])
				continue;
			printf("  %-5s %3d procs:",
			       peer_kind_name((enum peer_kind)p), o->procs[k]);
			for (int r = 0; r < o->rounds; r++)
				printf(" %6.2fx",
				       div_or(rd->carmy[FIG_CYCLE][k][r]
						      .ops_per_s,
					      rd->peer[p][PEER_CYCLE][k][r]
						      .ops_per_s));
			printf("\n");
		}
	}
}

static void print_peers_json(const struct opts *o,
			     const struct peer_results *pr,
			     const struct rounds *rd)
{
	bool first = true;

	printf(",\"peers\":[");
	for (int p = 0; p < PEER_COUNT; p++) {
		bool ffirst = true;

		if (o->peer_where[p] == NULL)
			continue;
		printf("%s{\"store\":\"%s\",\"settings\":", first ? "" : ",",
		       peer_kind_name((enum peer_kind)p));
		json_str(pr->cfg[p].settings);
		printf(",\"ops_per_process\":%llu,\"figures\":[",
		       (unsigned long long)o->peer_ops[p]);
		first = false;
		for (int k = 0; k < o->nprocs; k++) {
			for (int op = 0; op < PEER_OP_COUNT; op++) {
				const struct bench_stats *s = &pr->st[p][op][k];

				if (!pr->ran[p][op][k])
					continue;
				printf("%s{\"figure\":\"%s\",\"procs\":%d,"
				       "\"ops\":%llu,\"ops_per_s\":%.0f,"
				       "\"median_us\":%.3f,\"p99_us\":%.3f,",
				       ffirst ? "" : ",", s->name, s->procs,
				       (unsigned long long)s->ops,
				       s->ops_per_s, s->median_us, s->p99_us);
				json_rounds(rd->peer[p][op][k], rd->n);
				putchar('}');
				ffirst = false;
			}
		}
		printf("]}");
	}
	printf("]");
}

/* "rounds_ops_per_s": every round's ops/s, in the order they ran. */
static void json_rounds(const struct bench_stats *each, int n)
{
	printf("\"rounds_ops_per_s\":[");
	for (int r = 0; r < n; r++)
		printf("%s%.0f", r > 0 ? "," : "", each[r].ops_per_s);
	putchar(']');
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s != '\0'; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

/* ------------------------------------------------------------ helpers */

/* The arguments every call carries: a small map, so the fingerprint's
 * canonicalisation (decode, sort keys, re-encode) is part of every begin. */
static void build_args(msgpack_sbuffer *sb)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 3);
	msgpack_pack_str_with_body(&pk, "path", 4);
	msgpack_pack_str_with_body(&pk, "/srv/data/report.csv", 20);
	msgpack_pack_str_with_body(&pk, "mode", 4);
	msgpack_pack_str_with_body(&pk, "read", 4);
	msgpack_pack_str_with_body(&pk, "limit", 5);
	msgpack_pack_uint32(&pk, 42);
}
