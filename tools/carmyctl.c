/*
 * carmyctl.c - the operator's tool.
 *
 *   carmyctl [--socket PATH] [--segment NAME] [--json] COMMAND [ARGS]
 *
 * Reading commands (status, list, show, metrics) map carmyd's segment
 * read-only and change nothing; they work while carmyd is down when given
 * --segment. Changing commands (resolve, release, purge, forget) and wait
 * ask the carmyd at the socket, which records who asked (uid and pid) and
 * when; they refuse --segment, which names a table but not the carmyd that
 * owns it. journal-check reads a journal directory offline. Tables for
 * people; --json for scripts. See README, "carmyctl".
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "carmy.h"
#include "carmy_store.h"
#include "common/age.h"
#include "common/clock.h"
#include "common/execid.h"
#include "common/log.h"
#include "common/runfmt.h"
#include "common/sockpath.h"
#include "libclient/trust.h"
#include "libclient/wire.h"
#include "shm/shm.h"
#include "stores/journal/journal.h"
#include "tools/json.h"
#include "tools/mpjson.h"
#include "tools/text.h"

#define EXIT_USAGE 64
#define EXIT_FAIL 1
#define EXIT_IO 74		/* standard output not written (EX_IOERR) */
#define EXIT_UNTRUSTED 77	/* DAEMON_UNTRUSTED (sysexits' EX_NOPERM) */
#define REPLY_MAX 512
#define ASK_LOST (-1)	/* ask(): a WAIT's connection (or a redial's) is gone */
#define DIAL_NOT_YET (-2)	/* dial_hello(quiet): carmyd is not back yet */
/* list: columns for the tool name, and for the arguments when standard
 * output is not a terminal (on one, what is left of its width, and at
 * least LIST_ARGS_MIN). */
#define LIST_TOOL_COLS 16
#define LIST_ARGS_COLS 48
#define LIST_ARGS_MIN 24
#define LIST_USED_COLS 141	/* the columns before ARGS, at their widths */

static const char usage[] =
	"usage: carmyctl [--socket PATH] [--segment NAME] [--json] COMMAND\n"
	"\n"
	"  status                       capacity and fill, entries by state,\n"
	"                               result bytes, the oldest completed\n"
	"                               entry, carmyd's --retain, the\n"
	"                               clients it holds from before its\n"
	"                               restart, and the answers clients\n"
	"                               were given\n"
	"  list [--state S] [--principal P] [--session S]\n"
	"       [--older-than AGE] [--newer-than AGE] [--limit N]\n"
	"                               entries, one a line, with each call's\n"
	"                               tool and arguments (cut to fit); S is\n"
	"                               running, uncertain (or interrupted,\n"
	"                               as clients call it) or completed; AGE\n"
	"                               like 90s, 200ms, 15m, 2h, 7d, since\n"
	"                               the call started (the AGE column)\n"
	"  show EXECUTION_ID            one entry, with its call (tool,\n"
	"                               arguments as JSON, result format)\n"
	"                               and its result\n"
	"  wait EXECUTION_ID [--timeout SECONDS]\n"
	"                               wait (default 30 s) for a running\n"
	"                               execution to stop running, then show\n"
	"                               what it became; exit 1 if it still\n"
	"                               runs at the deadline\n"
	"  resolve EXECUTION_ID --committed [--status S] [--result TEXT]\n"
	"  resolve EXECUTION_ID --committed [--status S] --exit-code N\n"
	"          [--stdout TEXT | --stdout-file PATH]\n"
	"  resolve EXECUTION_ID --not-committed\n"
	"                               settle an interrupted execution: it\n"
	"                               happened (its result replays from now\n"
	"                               on; S completed, failed, timed_out or\n"
	"                               cancelled, default completed, or\n"
	"                               failed for a non-zero --exit-code, as\n"
	"                               carmy-run records it) or it did not\n"
	"                               (the identity is free again).\n"
	"                               The result must be in the format\n"
	"                               show gives: bytes take --result\n"
	"                               TEXT; a carmy-run call's\n"
	"                               (exit_output) --exit-code 0-255\n"
	"                               and the output it printed (PATH -:\n"
	"                               standard input). carmyd refuses\n"
	"                               any other (INVALID_RESULT)\n"
	"  release EXECUTION_ID         the same as resolve --not-committed\n"
	"  purge --older-than AGE       forget completed entries that finished\n"
	"                               longer ago than AGE (never running or\n"
	"                               uncertain ones)\n"
	"  forget EXECUTION_ID          forget one completed execution: a call\n"
	"                               with its identity runs anew\n"
	"  metrics                      the status in Prometheus text format,\n"
	"                               with --json too; carmy_up 0 (and exit\n"
	"                               0) when no carmyd answers\n"
	"  journal-check DIR            read a journal as carmyd would at start,\n"
	"                               changing nothing\n"
	"\n"
	"  --socket PATH    carmyd's socket (default: $CARMY_SOCKET, else\n"
	"                   libcarmy's default path)\n"
	"  --segment NAME   read this segment directly (carmyd may be down);\n"
	"                   refused by wait and the changing commands, which\n"
	"                   ask the carmyd at the socket\n"
	"  --json           one JSON object (list: an array) on standard output\n"
	"  -h, --help       print this help and exit\n"
	"  --version        print the version and exit\n"
	"\n"
	"Changing commands are for carmyd's own user, root and carmyd's\n"
	"--admin-group: others get NOT_PERMITTED.\n"
	"\n"
	"Exit status: 0 done; 1 the request was refused or failed (its code\n"
	"name on standard error: NOT_FOUND for an execution the table does\n"
	"not hold, NOT_COMPLETED for one forget cannot take); 64 usage error;\n"
	"69 carmyd unavailable (or full: TOO_MANY_CLIENTS); 74 standard\n"
	"output could not be written; 77\n"
	"DAEMON_UNTRUSTED: carmyd, its socket's directory or its segment\n"
	"belongs to a user not trusted (see $CARMY_TRUSTED_USERS).\n";

struct ctl {
	const char *socket;
	const char *segment;
	bool json;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int fd;			/* to carmyd, once asked */
	bool redialing;		/* a lost HELLO is ASK_LOST, not a failure */
	char shm_name[WIRE_SHM_NAME_MAX];
	struct shm_view view;
	bool mapped;
	dev_t seg_dev;		/* which segment is mapped: its file, */
	ino_t seg_ino;
	uint64_t seg_seed;	/* and its header's seed and birth */
	uint64_t seg_created;
	struct trust trust;	/* who may run carmyd (libclient/trust.h) */
	bool trusting;		/* trust is filled in */
	uid_t peer;		/* who does, once dialled: the segment's owner */
	bool peered;
	bool down;		/* no carmyd answered at the socket */
	bool dir_trusted;	/* the socket's directory passed its check */
	bool quiet_down;	/* attach() says "no carmyd" itself */
	char why[TRUST_WHY_MAX];	/* what a failed check found */
	size_t args_cols;	/* list: columns for a call's arguments */
};

/* One entry, read out of the segment. */
struct row {
	uint32_t entry;
	unsigned state;
	char exec[CARMY_EXECUTION_ID_LEN + 1];
	uint8_t exec_bytes[SHM_EXEC_LEN];
	uint8_t fp[SHM_FP_LEN];
	char part[3][CARMY_ID_MAX + 1];
	uint16_t len[3];
	uint32_t pid;
	uint64_t started_ns, finished_ns, resolved_ns;
	uint32_t resolved_uid, resolved_pid;
	int status, result_code;
	uint32_t result_len;
	struct shm_call call;	/* what the call was: a private copy */
};

struct filter {
	int state;		/* -1: any */
	const char *principal, *session;
	uint64_t older_ns;	/* 0: no bound */
	uint64_t newer_ns;	/* UINT64_MAX: no bound (0 is one) */
	long limit;
};

static int cmd_status(struct ctl *x, int argc, char **argv, bool metrics);
static int cmd_list(struct ctl *x, int argc, char **argv);
static int cmd_show(struct ctl *x, int argc, char **argv);
static int cmd_wait(struct ctl *x, int argc, char **argv);
static void show_row(const struct ctl *x, const struct row *r);
static int cmd_resolve(struct ctl *x, int argc, char **argv, bool release);
static int cmd_purge(struct ctl *x, int argc, char **argv);
static int cmd_forget(struct ctl *x, int argc, char **argv);
static int cmd_journal_check(struct ctl *x, int argc, char **argv);
static int attach(struct ctl *x, bool reading);
static bool left_segment(struct ctl *x);
static int map_segment(struct ctl *x);
static int ask(struct ctl *x, msgpack_sbuffer *sb, int type, int wait_ms,
	       int *code);
static int dial_hello(struct ctl *x, bool quiet);
static int trusting(struct ctl *x);
static int vet_segment(const struct stat *st, void *arg);
static int redial(struct ctl *x, uint64_t deadline);
static bool read_row(const struct shm_view *v, uint32_t e, struct row *r);
static bool find_exec(const struct shm_view *v, const char *id,
		      struct row *r);
static int look_up(struct ctl *x, const char *cmd, const char *id,
		   bool carmyd, struct row *r);
static int asks_carmyd(const struct ctl *x, const char *cmd);
static size_t args_columns(void);
static int read_upto(const char *path, uint8_t *buf, size_t room, size_t *n);
static int parse_state(const char *s);
static const char *state_name(unsigned st);
static const char *coarse_age(char *buf, size_t size, uint64_t ns);
static void put_age(FILE *f, uint64_t ns);
static int fail(const char *what, int code);
static void say(const char *what, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static const char *journal_errname(int code);
static int not_found(const struct ctl *x, const char *what, const char *id);
static int not_completed(const char *id, unsigned state);
static void held_read(const struct shm_header *h, uint32_t *held,
		      uint64_t *until_ns);
static int still_running(const struct ctl *x, const char *what,
			 const struct row *r);
static int bad_option(const char *cmd, int o, char **argv);
static int plain_args(struct ctl *x, const char *cmd, int argc, char **argv,
		      const char *what, bool json);
static int flush_stdout(int rc);
static int usage_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* The command running, for say(): whether it prints JSON. */
static const struct ctl *running;

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "segment", required_argument, NULL, 'g' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl x = { .fd = -1 };
	const char *cmd;
	int o, rc;

	running = &x;
	log_level = LOG_ERROR;
	/* Every unknown option is told by name, as bad_option() says it. */
	opterr = 0;
	/* '+': options after COMMAND belong to it. */
	while ((o = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		switch (o) {
		case 's':
			/* An empty PATH names no socket. */
			if (optarg[0] == '\0')
				return usage_error("carmyctl: --socket needs a "
						   "path, not an empty one%s",
						   "");
			x.socket = optarg;
			break;
		case 'g':
			x.segment = optarg;
			break;
		case 'j':
			x.json = true;
			break;
		case 'h':
			/* Longer than stdout's buffer, so a write that fails
			 * may fail within fputs(), where flush_stdout() cannot
			 * see its errno: said here. */
			errno = 0;
			if (fputs(usage, stdout) == EOF && errno != 0) {
				fprintf(stderr, "carmyctl: cannot write "
					"standard output: %s\n",
					strerror(errno));
				return EXIT_IO;
			}
			return flush_stdout(0);
		case 'V':
			printf("carmyctl %s\n", PACKAGE_VERSION);
			return flush_stdout(0);
		default:
			return bad_option(NULL, o, argv);
		}
	}
	if (optind >= argc)
		return usage_error("carmyctl: a COMMAND is needed%s", "");
	cmd = argv[optind];
	argc -= optind;
	argv += optind;
	optind = 0;	/* glibc: start afresh on the command's arguments */
	/* --json may also follow the command. */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0 &&
		    (strcmp(cmd, "status") == 0 || strcmp(cmd, "show") == 0 ||
		     strcmp(cmd, "wait") == 0 ||
		     strcmp(cmd, "journal-check") == 0)) {
			x.json = true;
			memmove(&argv[i], &argv[i + 1],
				(size_t)(argc - i) * sizeof(*argv));
			argc--;
			i--;
		}
	}
	if (strcmp(cmd, "status") == 0)
		rc = cmd_status(&x, argc, argv, false);
	else if (strcmp(cmd, "metrics") == 0)
		rc = cmd_status(&x, argc, argv, true);
	else if (strcmp(cmd, "list") == 0)
		rc = cmd_list(&x, argc, argv);
	else if (strcmp(cmd, "show") == 0)
		rc = cmd_show(&x, argc, argv);
	else if (strcmp(cmd, "wait") == 0)
		rc = cmd_wait(&x, argc, argv);
	else if (strcmp(cmd, "resolve") == 0)
		rc = cmd_resolve(&x, argc, argv, false);
	else if (strcmp(cmd, "release") == 0)
		rc = cmd_resolve(&x, argc, argv, true);
	else if (strcmp(cmd, "purge") == 0)
		rc = cmd_purge(&x, argc, argv);
	else if (strcmp(cmd, "forget") == 0)
		rc = cmd_forget(&x, argc, argv);
	else if (strcmp(cmd, "journal-check") == 0)
		rc = cmd_journal_check(&x, argc, argv);
	else
		rc = usage_error("carmyctl: unknown command '%s'", cmd);
	if (x.mapped)
		shm_unmap(&x.view);
	if (x.fd >= 0)
		close(x.fd);
	return flush_stdout(rc);
}

/* ------------------------------------------------------------ reading */

/* What status and metrics report, read off the segment. */
struct tally {
	uint64_t n[6];		/* published buckets by state */
	uint64_t bytes;		/* of completed entries' results */
	uint64_t ans[5];	/* the clients' answers (struct shm_stats) */
	uint64_t used;		/* tickets not free: entries in use */
	uint64_t oldest_ns;	/* finished_ns of the oldest completed, or 0 */
	uint64_t now_ns;
	uint64_t retain_ms;	/* sh_retain_ms */
	uint32_t held;		/* sh_held, 0 while no carmyd is up */
	uint64_t held_until_ns;	/* sh_held_until_ns, likewise */
	bool up;
};

static void tally(const struct shm_view *v, struct tally *t)
{
	const struct shm_header *h = shm_header(v);

	memset(t, 0, sizeof(*t));
	t->now_ns = clock_real_ns();
	for (uint32_t b = 0; b < v->geo.nbuckets; b++) {
		uint64_t w = __atomic_load_n(&v->buckets[b], __ATOMIC_RELAXED);
		unsigned st = SHM_W_STATE(w);
		uint32_t e = SHM_W_ENTRY(w);
		const struct shm_entry *en;

		if (st >= 6)
			continue;
		t->n[st]++;
		if (st != SHM_COMPLETED || e >= v->geo.capacity)
			continue;
		en = shm_entry_at(v, e);
		t->bytes += en->en_result_len <= v->geo.max_result ?
				    en->en_result_len : 0;
		if (t->oldest_ns == 0 || en->en_finished_ns < t->oldest_ns)
			t->oldest_ns = en->en_finished_ns;
	}
	for (uint32_t e = 0; e < v->geo.capacity; e++)
		t->used += __atomic_load_n(&v->tickets[e], __ATOMIC_RELAXED) !=
			   SHM_TICKET_FREE;
	for (int i = 0; i < SHM_STATS_STRIPES; i++) {
		const struct shm_stats *st = &v->stats[i];

		t->ans[0] += __atomic_load_n(&st->st_reserves, __ATOMIC_RELAXED);
		t->ans[1] += __atomic_load_n(&st->st_replays, __ATOMIC_RELAXED);
		t->ans[2] += __atomic_load_n(&st->st_conflicts, __ATOMIC_RELAXED);
		t->ans[3] += __atomic_load_n(&st->st_uncertain, __ATOMIC_RELAXED);
		t->ans[4] += __atomic_load_n(&st->st_capacity, __ATOMIC_RELAXED);
	}
	t->retain_ms = __atomic_load_n(&h->sh_retain_ms, __ATOMIC_RELAXED);
	t->up = shm_daemon_alive(h);
	held_read(h, &t->held, &t->held_until_ns);
}

/* How many clients of the previous carmyd the carmyd up holds, and until
 * when (sh_held, sh_held_until_ns); 0 and 0 while no carmyd is up: what a
 * carmyd that is gone held is nobody's now, the next one holds anew. */
static void held_read(const struct shm_header *h, uint32_t *held,
		      uint64_t *until_ns)
{
	*held = 0;
	*until_ns = 0;
	if (shm_daemon_alive(h)) {
		*held = __atomic_load_n(&h->sh_held, __ATOMIC_RELAXED);
		*until_ns = __atomic_load_n(&h->sh_held_until_ns,
					    __ATOMIC_RELAXED);
	}
}

/* From now until until (both CLOCK_REALTIME ns), or 0 if it is past. The
 * held clients' end (sh_held_until_ns) is on this clock, where carmyd
 * lets them go on its monotonic clock: after a clock step or a suspend,
 * "0 more" may still see some held, for at most as long. */
static uint64_t time_left_ns(uint64_t until, uint64_t now)
{
	return until > now ? until - now : 0;
}

/* Seconds since the oldest completed entry finished; 0 if there is none
 * (or its clock reads ahead of ours). */
static double oldest_age_s(const struct tally *t)
{
	return t->oldest_ns != 0 && t->now_ns > t->oldest_ns ?
		       (double)(t->now_ns - t->oldest_ns) / 1e9 : 0;
}

static void print_metrics(const struct shm_view *v, const struct tally *t)
{
	static const char *const kinds[5] = { "reserved", "replayed",
		"conflict", "uncertain", "capacity" };

	printf("# HELP carmy_up Whether a carmyd holds the segment.\n"
	       "# TYPE carmy_up gauge\ncarmy_up %d\n", t->up);
	printf("# HELP carmy_capacity_entries Entries the table holds.\n"
	       "# TYPE carmy_capacity_entries gauge\n"
	       "carmy_capacity_entries %u\n", v->geo.capacity);
	printf("# HELP carmy_entries Entries in the table, by state.\n"
	       "# TYPE carmy_entries gauge\n");
	printf("carmy_entries{state=\"running\"} %llu\n",
	       (unsigned long long)t->n[SHM_RUNNING]);
	printf("carmy_entries{state=\"uncertain\"} %llu\n",
	       (unsigned long long)t->n[SHM_UNCERTAIN]);
	printf("carmy_entries{state=\"completed\"} %llu\n",
	       (unsigned long long)t->n[SHM_COMPLETED]);
	printf("# HELP carmy_fill_ratio Entries in use (published or being "
	       "reserved) over capacity; new calls are refused at 1.\n"
	       "# TYPE carmy_fill_ratio gauge\ncarmy_fill_ratio %.6f\n",
	       (double)t->used / v->geo.capacity);
	printf("# HELP carmy_oldest_completed_age_seconds Since the oldest "
	       "completed entry finished; 0 if there is none.\n"
	       "# TYPE carmy_oldest_completed_age_seconds gauge\n"
	       "carmy_oldest_completed_age_seconds %.3f\n", oldest_age_s(t));
	/* Not told by a carmyd of an older build: no sample. */
	if (t->retain_ms != 0) {
		printf("# HELP carmy_retain_seconds carmyd's --retain: completed "
		       "entries older are forgotten (+Inf: never).\n"
		       "# TYPE carmy_retain_seconds gauge\n");
		if (t->retain_ms == SHM_RETAIN_NEVER)
			printf("carmy_retain_seconds +Inf\n");
		else
			printf("carmy_retain_seconds %.3f\n",
			       (double)t->retain_ms / 1e3);
	}
	printf("# HELP carmy_held_clients Clients of the previous carmyd "
	       "still held: their running calls stay theirs until they come "
	       "back or exit, or --grace is over.\n"
	       "# TYPE carmy_held_clients gauge\ncarmy_held_clients %u\n",
	       t->held);
	printf("# HELP carmy_result_bytes Bytes of recorded results.\n"
	       "# TYPE carmy_result_bytes gauge\n"
	       "carmy_result_bytes %llu\n", (unsigned long long)t->bytes);
	printf("# HELP carmy_answers_total Answers clients were given "
	       "by begin, by kind.\n# TYPE carmy_answers_total "
	       "counter\n");
	for (int i = 0; i < 5; i++)
		printf("carmy_answers_total{answer=\"%s\"} %llu\n",
		       kinds[i], (unsigned long long)t->ans[i]);
	printf("# HELP carmy_epoch carmyd starts on this segment.\n"
	       "# TYPE carmy_epoch counter\ncarmy_epoch %u\n",
	       shm_header(v)->sh_epoch);
}

/* No carmyd answered: all a scraper can be told. */
static void print_metrics_down(void)
{
	printf("# HELP carmy_up Whether a carmyd holds the segment.\n"
	       "# TYPE carmy_up gauge\ncarmy_up 0\n");
}

/* carmyd's --retain as status shows it: "24h", "never" or "unknown" (a
 * carmyd of an older build does not say). */
static const char *retain_text(char *buf, const struct tally *t)
{
	if (t->retain_ms == 0)
		return "unknown";
	if (t->retain_ms == SHM_RETAIN_NEVER)
		return "never";
	return age_format(buf, t->retain_ms * 1000000u);
}

static void print_status_json(const struct ctl *x, const struct tally *t)
{
	const struct shm_view *v = &x->view;
	const struct shm_header *h = shm_header(v);
	char age[AGE_TEXT_MAX];

	printf("{\"segment\":");
	json_put_str(stdout, x->shm_name);
	printf(",\"carmyd_up\":%s,\"carmyd_pid\":%u,\"epoch\":%u,"
	       "\"capacity\":%u,\"max_result\":%u,\"used\":%llu,"
	       "\"fill\":%.6f,\"live\":%llu,"
	       "\"running\":%llu,\"uncertain\":%llu,\"completed\":%llu,"
	       "\"result_bytes\":%llu,", t->up ? "true" : "false",
	       h->sh_daemon_pid, h->sh_epoch, v->geo.capacity,
	       v->geo.max_result, (unsigned long long)t->used,
	       (double)t->used / v->geo.capacity,
	       (unsigned long long)(t->n[SHM_RUNNING] + t->n[SHM_COMPLETED] +
				    t->n[SHM_UNCERTAIN]),
	       (unsigned long long)t->n[SHM_RUNNING],
	       (unsigned long long)t->n[SHM_UNCERTAIN],
	       (unsigned long long)t->n[SHM_COMPLETED],
	       (unsigned long long)t->bytes);
	if (t->oldest_ns != 0)
		printf("\"oldest_completed_ns\":%llu,"
		       "\"oldest_completed_age_s\":%.3f,",
		       (unsigned long long)t->oldest_ns, oldest_age_s(t));
	else
		printf("\"oldest_completed_ns\":null,"
		       "\"oldest_completed_age_s\":null,");
	printf("\"retain\":\"%s\",", retain_text(age, t));
	if (t->retain_ms != 0 && t->retain_ms != SHM_RETAIN_NEVER)
		printf("\"retain_ms\":%llu,", (unsigned long long)t->retain_ms);
	else
		printf("\"retain_ms\":null,");
	if (!t->up)
		printf("\"held_clients\":null,\"held_until_ns\":null,");
	else if (t->held == 0)
		printf("\"held_clients\":0,\"held_until_ns\":null,");
	else
		printf("\"held_clients\":%u,\"held_until_ns\":%llu,", t->held,
		       (unsigned long long)t->held_until_ns);
	printf("\"reserves\":%llu,\"replays\":%llu,\"conflicts\":%llu,"
	       "\"uncertain_answers\":%llu,\"capacity_refusals\":%llu}\n",
	       (unsigned long long)t->ans[0], (unsigned long long)t->ans[1],
	       (unsigned long long)t->ans[2], (unsigned long long)t->ans[3],
	       (unsigned long long)t->ans[4]);
}

static void print_status_text(const struct ctl *x, const struct tally *t)
{
	const struct shm_view *v = &x->view;
	const struct shm_header *h = shm_header(v);
	uint64_t live = t->n[SHM_RUNNING] + t->n[SHM_COMPLETED] +
			t->n[SHM_UNCERTAIN];
	char age[AGE_TEXT_MAX];

	printf("segment     %s (carmyd %s, pid %u, epoch %u)\n", x->shm_name,
	       t->up ? "up" : "DOWN", h->sh_daemon_pid, h->sh_epoch);
	printf("capacity    %u entries, max-result %u bytes\n",
	       v->geo.capacity, v->geo.max_result);
	printf("fill        %llu in use (%.1f%%): new calls are refused at "
	       "100%%\n", (unsigned long long)t->used,
	       100.0 * (double)t->used / v->geo.capacity);
	printf("live        %llu (%.1f%%)\n", (unsigned long long)live,
	       100.0 * (double)live / v->geo.capacity);
	printf("  running   %llu\n  uncertain %llu\n  completed %llu\n",
	       (unsigned long long)t->n[SHM_RUNNING],
	       (unsigned long long)t->n[SHM_UNCERTAIN],
	       (unsigned long long)t->n[SHM_COMPLETED]);
	printf("results     %llu bytes\n", (unsigned long long)t->bytes);
	if (t->oldest_ns != 0)
		printf("oldest      completed %s ago\n",
		       coarse_age(age, sizeof(age),
				  (uint64_t)(oldest_age_s(t) * 1e9)));
	else
		printf("oldest      no completed entry\n");
	printf("retain      %s\n", retain_text(age, t));
	if (t->held != 0)
		printf("held        %u client%s of the previous carmyd, for "
		       "%s more at most (--grace): %s running calls stay "
		       "running (resolve refuses them) until %s back or "
		       "exit%s\n", t->held, t->held == 1 ? "" : "s",
		       coarse_age(age, sizeof(age),
				  time_left_ns(t->held_until_ns, t->now_ns)),
		       t->held == 1 ? "its" : "their",
		       t->held == 1 ? "it comes" : "they come",
		       t->held == 1 ? "s" : "");
	else if (t->up)
		printf("held        none\n");
	printf("answers     %llu reserved, %llu replayed, %llu conflicts, "
	       "%llu uncertain, %llu refused for capacity\n",
	       (unsigned long long)t->ans[0], (unsigned long long)t->ans[1],
	       (unsigned long long)t->ans[2], (unsigned long long)t->ans[3],
	       (unsigned long long)t->ans[4]);
}

static int cmd_status(struct ctl *x, int argc, char **argv, bool metrics)
{
	struct tally t;
	int rc = plain_args(x, metrics ? "metrics" : "status", argc, argv,
			    NULL, !metrics);

	if (rc != 0)
		return rc;
	if (metrics)
		x->json = false;	/* Prometheus text whatever is asked */
	rc = attach(x, true);
	/* A scraper is told that no carmyd answers, and that is all. */
	if (rc != 0 && metrics && x->down) {
		print_metrics_down();
		return 0;
	}
	if (rc != 0)
		return rc;
	tally(&x->view, &t);
	if (metrics)
		print_metrics(&x->view, &t);
	else if (x->json)
		print_status_json(x, &t);
	else
		print_status_text(x, &t);
	return 0;
}

/* Is r completed with a result in carmy-run's format? Its exit code and
 * output (pointing into the segment) if so. */
static bool exit_output(const struct ctl *x, const struct row *r, int *code,
			const uint8_t **out, size_t *len)
{
	return r->state == SHM_COMPLETED && r->result_code == 0 &&
	       r->call.cl_format == CARMY_FORMAT_EXIT_OUTPUT &&
	       runfmt_read(shm_result_area(&x->view, r->entry),
			   r->result_len, code, out, len) == 0;
}

static const char *format_name(unsigned format)
{
	return format == CARMY_FORMAT_BYTES ? "bytes" :
	       format == CARMY_FORMAT_EXIT_OUTPUT ? "exit_output" : "unknown";
}

/* The kept bytes of r's arguments, and whether there were more. */
static const uint8_t *args_kept(const struct row *r, size_t *kept)
{
	*kept = shm_call_args_kept(&r->call);
	return r->call.cl_data + shm_call_tool_kept(&r->call);
}

/*
 * r's arguments as text, into a malloc'd buffer *out of *n bytes: their
 * JSON (mpjson_put(): whole, or what parsed and "…"), or, if they are not
 * msgpack, their bytes as text_put_bytes() shows them, then "…" if some
 * were not kept. Returns what mpjson_put() did, or -ENOMEM.
 */
static int args_text(const struct row *r, char **out, size_t *n)
{
	size_t kept;
	const uint8_t *args = args_kept(r, &kept);
	FILE *mem = open_memstream(out, n);
	int rc;

	if (mem == NULL)
		return -ENOMEM;
	rc = mpjson_put(mem, args, kept, r->call.cl_args_len);
	if (rc == MPJSON_NOT) {
		text_put_bytes(mem, args, kept, 0);
		if (kept < r->call.cl_args_len)
			fputs("\u2026", mem);
	}
	if (fclose(mem) != 0) {
		free(*out);
		*out = NULL;
		return -ENOMEM;
	}
	return rc;
}

/* r's tool name for a person, in at most max columns (0: all of it);
 * "-" for none. Returns the columns written. */
static size_t put_tool_text(const struct row *r, size_t max)
{
	size_t kept = shm_call_tool_kept(&r->call);

	if (r->call.cl_tool_len == 0) {
		putchar('-');
		return 1;
	}
	if (kept < r->call.cl_tool_len && (max == 0 || kept < max)) {
		/* Cut where it was kept: say so. */
		size_t cols = text_put_clipped(stdout, r->call.cl_data, kept,
					       max == 0 ? 0 : max - 1);

		fputs("\u2026", stdout);
		return cols + 1;
	}
	return text_put_clipped(stdout, r->call.cl_data, kept, max);
}

/* r's arguments for a person, in at most max columns (0: all that was
 * kept); "-" for none. */
static void put_args_text(const struct row *r, size_t max)
{
	char *text = NULL;
	size_t n = 0;
	int rc;

	if (r->call.cl_args_len == 0) {
		putchar('-');
		return;
	}
	rc = args_text(r, &text, &n);
	if (rc == -ENOMEM)
		fputs("(out of memory)", stdout);
	else	/* JSON, or bytes escaped already: as they are, clipped */
		text_put_json(stdout, text, n, max);
	free(text);
}

/* r's call as the fields of its JSON object: tool, args (the JSON of
 * whole msgpack arguments) or args_prefix (as a person sees them), their
 * lengths and whether they were cut (bytes not kept, or JSON cut at
 * MPJSON_BUDGET), and the result format. */
static void put_call_json(const struct row *r)
{
	const struct shm_call *cl = &r->call;
	size_t tk = shm_call_tool_kept(cl), ak = shm_call_args_kept(cl);
	char *text = NULL;
	size_t n = 0;
	int rc = MPJSON_WHOLE;

	printf(",\"tool\":");
	text_put_json_bytes(stdout, cl->cl_data, tk);
	printf(",\"tool_len\":%u,\"tool_truncated\":%s", cl->cl_tool_len,
	       tk < cl->cl_tool_len ? "true" : "false");
	if (cl->cl_args_len == 0) {
		printf(",\"args\":null");
	} else {
		rc = args_text(r, &text, &n);
		if (rc == MPJSON_WHOLE) {
			printf(",\"args\":");
			text_put_json(stdout, text, n, 0);
		} else {
			printf(",\"args_prefix\":");
			text_put_json_bytes(stdout, text,
					    rc == -ENOMEM ? 0 : n);
		}
		free(text);
	}
	/* Cut: fewer bytes kept, or their JSON past MPJSON_BUDGET. */
	printf(",\"args_len\":%u,\"args_truncated\":%s,"
	       "\"result_format\":\"%s\"", cl->cl_args_len,
	       ak < cl->cl_args_len || rc == MPJSON_PREFIX ? "true" : "false",
	       format_name(cl->cl_format));
}

static void print_row(const struct ctl *x, const struct row *r, bool first,
		      bool full)
{
	uint64_t now = clock_real_ns();
	static const char *const names[3] = { "principal", "session",
					      "request_id" };
	char age[AGE_TEXT_MAX];

	if (!x->json) {
		if (first && !full)
			printf("%-37s  %-9s  %6s  %-12s  %-12s  %-16s  %-9s  "
			       "%-6s  %-16s  %s\n", "EXECUTION_ID", "STATE",
			       "AGE", "PRINCIPAL", "SESSION", "REQUEST_ID",
			       "STATUS", "BYTES", "TOOL", "ARGS");
		if (!full) {
			char bytes[16] = "-";
			size_t cols;

			printf("%-37s  %-9s  ", r->exec, state_name(r->state));
			put_age(stdout, now > r->started_ns ?
						now - r->started_ns : 0);
			/* Identities as text_put_bytes() shows them: they
			 * are anybody's bytes. */
			fputs("  ", stdout);
			text_put_bytes(stdout, r->part[0], r->len[0], 12);
			fputs("  ", stdout);
			text_put_bytes(stdout, r->part[1], r->len[1], 12);
			fputs("  ", stdout);
			text_put_bytes(stdout, r->part[2], r->len[2], 16);
			if (r->state == SHM_COMPLETED)
				snprintf(bytes, sizeof(bytes), "%u",
					 r->result_len);
			printf("  %-9s  %-6s  ", r->state == SHM_COMPLETED ?
					carmy_status_name(r->status) : "-",
			       bytes);
			cols = put_tool_text(r, LIST_TOOL_COLS);
			for (; cols < LIST_TOOL_COLS; cols++)
				putchar(' ');
			fputs("  ", stdout);
			put_args_text(r, x->args_cols);
			putchar('\n');
			return;
		}
		printf("execution_id  %s\nstate         %s\n", r->exec,
		       state_name(r->state));
		for (int i = 0; i < 3; i++) {
			printf("%-13s ", names[i]);
			text_put_bytes(stdout, r->part[i], r->len[i], 0);
			putchar('\n');
		}
		printf("tool          ");
		put_tool_text(r, 0);
		if (shm_call_tool_kept(&r->call) < r->call.cl_tool_len)
			printf(" (%u bytes, the first %zu kept)",
			       r->call.cl_tool_len,
			       shm_call_tool_kept(&r->call));
		printf("\nargs          ");
		put_args_text(r, 0);
		if (shm_call_args_kept(&r->call) < r->call.cl_args_len)
			printf(" (%u bytes, the first %zu kept)",
			       r->call.cl_args_len,
			       shm_call_args_kept(&r->call));
		printf("\nresult format %s\n",
		       r->call.cl_format == CARMY_FORMAT_BYTES ? "bytes" :
		       r->call.cl_format == CARMY_FORMAT_EXIT_OUTPUT ?
			       "an exit code and output (resolve with "
			       "--exit-code)" :
		       r->call.cl_format == CARMY_STORE_FORMAT_UNKNOWN ?
			       "not kept (resolve with --result or "
			       "--exit-code)" : "unknown");
		printf("pid           %u\nage           %s\n", r->pid,
		       coarse_age(age, sizeof(age), now > r->started_ns ?
					now - r->started_ns : 0));
		if (r->state == SHM_COMPLETED)
			printf("status        %s%s%s\nresult        %u bytes\n",
			       carmy_status_name(r->status),
			       r->result_code ? " " : "",
			       r->result_code ? carmy_errname(r->result_code) : "",
			       r->result_len);
		if (r->resolved_ns != 0) {
			printf("resolved by   uid %u pid %u, %s ago\n",
			       r->resolved_uid, r->resolved_pid,
			       coarse_age(age, sizeof(age),
					  now > r->resolved_ns ?
						  now - r->resolved_ns : 0));
		}
		return;
	}
	printf("%s{\"execution_id\":\"%s\",\"state\":\"%s\"", first ? "" : ",",
	       r->exec, state_name(r->state));
	/* Anybody's bytes, as are a call's and its result: in JSON
	 * strings that show plainly on a terminal too
	 * (text_put_json_bytes()). */
	for (int i = 0; i < 3; i++) {
		printf(",\"%s\":", names[i]);
		text_put_json_bytes(stdout, r->part[i], r->len[i]);
	}
	put_call_json(r);
	printf(",\"pid\":%u,\"started_ns\":%llu", r->pid,
	       (unsigned long long)r->started_ns);
	if (r->state == SHM_COMPLETED)
		printf(",\"status\":\"%s\",\"result_code\":\"%s\","
		       "\"finished_ns\":%llu,\"result_bytes\":%u",
		       carmy_status_name(r->status),
		       r->result_code ? carmy_errname(r->result_code) : "",
		       (unsigned long long)r->finished_ns, r->result_len);
	if (r->resolved_ns != 0)
		printf(",\"resolved_ns\":%llu,\"resolved_uid\":%u,"
		       "\"resolved_pid\":%u",
		       (unsigned long long)r->resolved_ns, r->resolved_uid,
		       r->resolved_pid);
	if (full && r->state == SHM_COMPLETED) {
		const uint8_t *out;
		size_t len;
		int code;

		printf(",\"result\":");
		text_put_json_bytes(stdout,
				    shm_result_area(&x->view, r->entry),
				    r->result_len);
		if (exit_output(x, r, &code, &out, &len)) {
			printf(",\"exit_code\":%d,\"stdout\":", code);
			text_put_json_bytes(stdout, out, len);
		}
	}
	printf("}");
}

static bool keep(const struct filter *f, const struct row *r, uint64_t now)
{
	uint64_t age = now > r->started_ns ? now - r->started_ns : 0;

	if (f->state >= 0 && r->state != (unsigned)f->state)
		return false;
	if (f->principal != NULL &&
	    (strlen(f->principal) != r->len[0] ||
	     memcmp(f->principal, r->part[0], r->len[0]) != 0))
		return false;
	if (f->session != NULL &&
	    (strlen(f->session) != r->len[1] ||
	     memcmp(f->session, r->part[1], r->len[1]) != 0))
		return false;
	if (age < f->older_ns || age > f->newer_ns)
		return false;
	return true;
}

static int cmd_list(struct ctl *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "state", required_argument, NULL, 's' },
		{ "principal", required_argument, NULL, 'p' },
		{ "session", required_argument, NULL, 'e' },
		{ "older-than", required_argument, NULL, 'o' },
		{ "newer-than", required_argument, NULL, 'n' },
		{ "limit", required_argument, NULL, 'l' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	struct filter f = { .state = -1, .newer_ns = UINT64_MAX, .limit = -1 };
	long shown = 0;
	uint64_t now;
	int o, rc;

	while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		char *end;

		switch (o) {
		case 's':
			f.state = parse_state(optarg);
			if (f.state < 0)
				return usage_error("carmyctl list: --state is "
						   "running, uncertain (or "
						   "interrupted) or "
						   "completed, not '%s'", optarg);
			break;
		case 'p':
			f.principal = optarg;
			break;
		case 'e':
			f.session = optarg;
			break;
		case 'o':
		case 'n':
			if (age_parse(optarg, o == 'o' ? &f.older_ns :
							 &f.newer_ns) != 0)
				return usage_error("carmyctl list: an age is "
						   "like 90s, 200ms, 15m, 2h or "
						   "7d, not '%s'", optarg);
			break;
		case 'j':
			x->json = true;
			break;
		case 'l':
			errno = 0;
			f.limit = strtol(optarg, &end, 10);
			if (optarg[0] < '0' || optarg[0] > '9' ||
			    *end != '\0' || errno != 0)
				return usage_error("carmyctl list: --limit "
						   "needs a count, not '%s'",
						   optarg);
			break;
		default:
			return bad_option("list", o, argv);
		}
	}
	if (optind != argc)
		return usage_error("carmyctl list: unexpected '%s'",
				   argv[optind]);
	rc = attach(x, true);
	if (rc != 0)
		return rc;
	x->args_cols = args_columns();
	now = clock_real_ns();
	if (x->json)
		printf("[");
	for (uint32_t e = 0; e < x->view.geo.capacity; e++) {
		struct row r;

		if (f.limit >= 0 && shown >= f.limit)
			break;
		if (!read_row(&x->view, e, &r) || !keep(&f, &r, now))
			continue;
		print_row(x, &r, shown == 0, false);
		shown++;
	}
	if (x->json)
		printf("]\n");
	else if (shown == 0)
		printf("no entries\n");
	return 0;
}

/* How many columns list gives a call's arguments: what a terminal has
 * left after the other columns, else LIST_ARGS_COLS. */
static size_t args_columns(void)
{
	struct winsize ws;

	if (!isatty(STDOUT_FILENO) ||
	    ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0)
		return LIST_ARGS_COLS;
	return ws.ws_col >= LIST_USED_COLS + LIST_ARGS_MIN ?
		       (size_t)ws.ws_col - LIST_USED_COLS : LIST_ARGS_MIN;
}

static int cmd_show(struct ctl *x, int argc, char **argv)
{
	struct row r;
	int rc = plain_args(x, "show", argc, argv, "EXECUTION_ID", true);

	if (rc == 0)
		rc = look_up(x, "show", argv[optind], false, &r);
	if (rc != 0)
		return rc;
	show_row(x, &r);
	return 0;
}

/* One entry in full, as show prints it: for a person, the tool's output
 * (or result) as a JSON string in which nothing can drive the terminal or
 * turn the text around (text_put_json_bytes()). */
static void show_row(const struct ctl *x, const struct row *r)
{
	const uint8_t *out;
	size_t len;
	int code;

	print_row(x, r, true, true);
	if (x->json) {
		printf("\n");
	} else if (exit_output(x, r, &code, &out, &len)) {
		printf("exit code     %d\noutput        ", code);
		text_put_json_bytes(stdout, out, len);
		printf("\n");
	} else if (r->state == SHM_COMPLETED) {
		printf("result bytes  ");
		text_put_json_bytes(stdout,
				    shm_result_area(&x->view, r->entry),
				    r->result_len);
		printf("\n");
	}
}

/*
 * Wait for a running execution to stop running, then show it: carmyd
 * answers the moment it completes, is released or turns uncertain (the
 * WAIT request libcarmy's carmy_wait() makes, without its begin: an
 * operator's wait never takes a reservation). One that is not running is
 * shown at once. Still running at the deadline: exit 1, EXECUTION_UNCERTAIN.
 * If carmyd restarts meanwhile, the wait goes on with the one that comes
 * back, until the same deadline.
 */
static int cmd_wait(struct ctl *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "timeout", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	uint32_t timeout_ms = 30000;
	uint64_t deadline;
	msgpack_sbuffer sb;
	const char *id;
	struct row r;
	int o, rc, code = 0;

	while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		char *end;
		double secs;

		switch (o) {
		case 't':
			errno = 0;
			secs = strtod(optarg, &end);
			if (errno != 0 || end == optarg || *end != '\0' ||
			    !(secs >= 0 && secs <= 86400))
				return usage_error("carmyctl wait: --timeout is "
						   "0 to 86400 seconds, not "
						   "'%s'", optarg);
			timeout_ms = (uint32_t)(secs * 1000 + 0.5);
			break;
		case 'j':
			x->json = true;
			break;
		default:
			return bad_option("wait", o, argv);
		}
	}
	if (optind + 1 != argc)
		return usage_error("carmyctl wait: one EXECUTION_ID%s", "");
	id = argv[optind];
	/* Waiting needs carmyd: the segment alone cannot say when. */
	rc = look_up(x, "wait", id, true, &r);
	if (rc != 0)
		return rc;
	deadline = clock_mono_ns() + (uint64_t)timeout_ms * 1000000u;
	for (bool first = true; r.state == SHM_RUNNING; first = false) {
		const void *part[3] = { r.part[0], r.part[1], r.part[2] };
		const size_t len[3] = { r.len[0], r.len[1], r.len[2] };
		uint64_t now = clock_mono_ns();
		/* What is left, once carmyd came back; all of it first. */
		uint32_t left = first ? timeout_ms : now < deadline ?
			(uint32_t)((deadline - now + 999999) / 1000000) : 0;
		bool lost;

		msgpack_sbuffer_init(&sb);
		rc = wire_put_settle(&sb, WIRE_WAIT, part, len, r.exec_bytes,
				     r.fp, 0, 0, NULL, 0, left);
		if (rc == 0)
			rc = ask(x, &sb, WIRE_WAIT, (int)left, &code);
		msgpack_sbuffer_destroy(&sb);
		lost = rc == ASK_LOST;
		/* carmyd stopped, and lets its waiters go without a word:
		 * wait for it to come back, and look again. */
		if (lost) {
			dev_t dev = x->seg_dev;
			ino_t ino = x->seg_ino;
			uint64_t seed = x->seg_seed, born = x->seg_created;

			rc = redial(x, deadline);
			/* Back on a new segment (--transient, or ours was
			 * removed): one that does not hold the execution
			 * knows nothing of it. Not "released": it may still
			 * run where the old one was reserved. */
			if (rc == 0 &&
			    (x->seg_dev != dev || x->seg_ino != ino ||
			     x->seg_seed != seed || x->seg_created != born) &&
			    !find_exec(&x->view, id, &r)) {
				fprintf(stderr, "carmyctl: wait: "
					"EXECUTION_UNCERTAIN: carmyd came back "
					"on a new segment, which does not know "
					"%s: what became of it is unknown\n",
					id);
				return EXIT_FAIL;
			}
		}
		if (rc != 0)
			return rc;
		if (!lost && code == -ETIMEDOUT) {
			fprintf(stderr, "carmyctl: wait: EXECUTION_UNCERTAIN: "
				"%s still runs after %.3f s\n", id,
				timeout_ms / 1000.0);
			return EXIT_FAIL;
		}
		/* -EREMOTE: a shared store's carmyd found the identity
		 * gone between our look and its own: released. */
		if (!lost && code != 0 && code != -EREMOTE)
			return fail("wait", code);
		/* What did it become? Gone from the table, it was released
		 * (or carmyd came back without it): the identity is free. */
		if (!find_exec(&x->view, id, &r)) {
			if (x->json)
				printf("{\"execution_id\":\"%s\","
				       "\"state\":\"released\"}\n", id);
			else
				printf("%s was released: its identity is "
				       "free\n", id);
			return 0;
		}
	}
	show_row(x, &r);
	return 0;
}

/*
 * carmyd went away during a wait: dial it again every 100 ms until it is
 * back or the deadline passes (exit 69), then map its segment afresh (a
 * carmyd that started on a new one has it under the same name; cmd_wait
 * tells the two apart). Returns 0, or an exit status after saying why.
 */
static int redial(struct ctl *x, uint64_t deadline)
{
	int rc;

	do {
		if (x->fd >= 0)
			close(x->fd);
		x->fd = -1;
		if (clock_mono_ns() >= deadline) {
			fprintf(stderr, "carmyctl: wait: %s: carmyd went away "
				"during the wait and was not back by its end\n",
				carmy_errname(CARMY_EUNAVAILABLE));
			return 69;
		}
		/* Before every try, the first too: a carmyd that is
		 * stopping accepts and drops until it is gone, and one that
		 * drops every WAIT must not be asked in a tight loop. */
		(void)poll(NULL, 0, 100);
		rc = dial_hello(x, true);
	} while (rc == DIAL_NOT_YET);
	return rc != 0 ? rc : map_segment(x);
}

/* ------------------------------------------------------------ changing */

/* What resolve was told. */
struct verdict {
	int committed;		/* 1, 0, or -1: not said */
	int status;
	const char *result;	/* --result, or NULL */
	int exit_code;		/* --exit-code, or -1 */
	const char *out;	/* --stdout, or NULL */
	const char *out_file;	/* --stdout-file, or NULL */
};

static int resolve_opts(struct ctl *x, int argc, char **argv, bool release,
			struct verdict *v);
static int check_verdict(const struct verdict *v, const char *id,
			 const char *cmd);
static int fits_format(const struct verdict *v, const struct row *r);
static int verdict_result(const struct ctl *x, const struct verdict *v,
			  uint8_t **buf, size_t *len);

static int cmd_resolve(struct ctl *x, int argc, char **argv, bool release)
{
	const char *what = release ? "release" : "resolve", *id;
	struct verdict v = { .committed = release ? 0 : -1,
			     .status = CARMY_STATUS_COMPLETED,
			     .exit_code = -1 };
	uint8_t *result = NULL;
	size_t len = 0;
	msgpack_sbuffer sb;
	struct row r;
	int rc, code;

	rc = resolve_opts(x, argc, argv, release, &v);
	if (rc == 0)
		rc = asks_carmyd(x, what);
	if (rc != 0)
		return rc;
	id = argv[optind];
	rc = attach(x, false);
	if (rc != 0)
		return rc;
	/* The execution names the identity and fingerprint carmyd checks. */
	if (!find_exec(&x->view, id, &r))
		return not_found(x, what, id);
	if (v.committed) {
		rc = fits_format(&v, &r);
		if (rc == 0)
			rc = verdict_result(x, &v, &result, &len);
		if (rc != 0)
			return rc;
	}
	{
		const void *part[3] = { r.part[0], r.part[1], r.part[2] };
		const size_t plen[3] = { r.len[0], r.len[1], r.len[2] };

		msgpack_sbuffer_init(&sb);
		rc = wire_put_settle(&sb, WIRE_RESOLVE, part, plen,
				     r.exec_bytes, r.fp, v.committed,
				     v.committed ? v.status : 0, result, len,
				     0);
	}
	free(result);
	if (rc == 0)
		rc = ask(x, &sb, WIRE_RESOLVE, 0, &code);
	msgpack_sbuffer_destroy(&sb);
	if (rc != 0)
		return rc;
	if (code == CARMY_ENOT_INTERRUPTED && r.state == SHM_RUNNING)
		return still_running(x, what, &r);
	if (code != 0)
		return fail(what, code);
	if (x->json)
		printf("{\"execution_id\":\"%s\",\"resolved\":\"%s\"}\n", id,
		       v.committed ? "committed" : "not_committed");
	else
		printf("%s resolved as %s\n", id,
		       v.committed ? "committed" : "not committed (released)");
	return 0;
}

/*
 * NOT_INTERRUPTED for a call that was running when resolve looked: if it
 * still is (the same execution in the same entry; carmyd's refusal may be
 * for a call that completed or left since), said so, and, for a client of
 * the previous carmyd while the carmyd up holds such clients, until when
 * at most (--grace). Its ticket tells: an owner id below sh_owner_base is
 * an earlier carmyd's, still held or come back.
 */
static int still_running(const struct ctl *x, const char *what,
			 const struct row *r)
{
	const struct shm_header *h = shm_header(&x->view);
	uint64_t ticket, until;
	uint32_t owner, held;
	char age[AGE_TEXT_MAX];
	struct row now;

	if (!find_exec(&x->view, r->exec, &now) || now.entry != r->entry ||
	    now.state != SHM_RUNNING)
		return fail(what, CARMY_ENOT_INTERRUPTED);
	ticket = __atomic_load_n(&x->view.tickets[r->entry], __ATOMIC_RELAXED);
	owner = SHM_T_WHAT(ticket);
	held_read(h, &held, &until);
	if (held == 0 || owner < SHM_OWNER_MIN ||
	    owner >= __atomic_load_n(&h->sh_owner_base, __ATOMIC_RELAXED)) {
		say(what, "NOT_INTERRUPTED", "%s is running: only an "
		    "interrupted execution can be resolved", r->exec);
		return EXIT_FAIL;
	}
	say(what, "NOT_INTERRUPTED", "%s is running: its client (pid %u) is "
	    "from before carmyd's restart; while carmyd holds it, it is let "
	    "go when it exits, or in %s at most (--grace; carmyctl status); "
	    "only an interrupted execution can be resolved", r->exec,
	    (unsigned)SHM_T_PID(ticket),
	    coarse_age(age, sizeof(age), time_left_ns(until, clock_real_ns())));
	return EXIT_FAIL;
}

/* resolve's (or release's) options and EXECUTION_ID, checked against each
 * other: 0, or the exit status of a usage error (said). */
static int resolve_opts(struct ctl *x, int argc, char **argv, bool release,
			struct verdict *v)
{
	static const struct option opts[] = {
		{ "committed", no_argument, NULL, 'c' },
		{ "not-committed", no_argument, NULL, 'n' },
		{ "status", required_argument, NULL, 's' },
		{ "result", required_argument, NULL, 'r' },
		{ "exit-code", required_argument, NULL, 'x' },
		{ "stdout", required_argument, NULL, 'o' },
		{ "stdout-file", required_argument, NULL, 'f' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	bool status = false;
	int o;

	while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		if (o == '?' || o == ':')
			return bad_option(release ? "release" : "resolve", o,
					  argv);
		char *end;
		long n;

		if (release && o != 'j')
			return usage_error("carmyctl release: only "
					   "EXECUTION_ID (and --json)%s", "");
		switch (o) {
		case 'c':
		case 'n':
			if (v->committed >= 0)
				return usage_error("carmyctl resolve: "
						   "--committed or "
						   "--not-committed, once%s",
						   "");
			v->committed = o == 'c';
			break;
		case 's':
			status = true;
			v->status = 0;
			for (int st = CARMY_STATUS_COMPLETED;
			     st <= CARMY_STATUS_CANCELLED; st++)
				if (strcmp(optarg, carmy_status_name(st)) == 0)
					v->status = st;
			if (v->status == 0)
				return usage_error("carmyctl resolve: --status "
						   "is completed, failed, "
						   "timed_out or cancelled, "
						   "not '%s'", optarg);
			break;
		case 'r':
			v->result = optarg;
			break;
		case 'x':
			errno = 0;
			n = strtol(optarg, &end, 10);
			if (optarg[0] < '0' || optarg[0] > '9' ||
			    *end != '\0' || errno != 0 || n > RUNFMT_EXIT_MAX)
				return usage_error("carmyctl resolve: "
						   "--exit-code is 0 to 255, "
						   "not '%s'", optarg);
			v->exit_code = (int)n;
			break;
		case 'o':
			v->out = optarg;
			break;
		case 'f':
			v->out_file = optarg;
			break;
		case 'j':
			x->json = true;
			break;
		default:
			return bad_option("resolve", o, argv);
		}
	}
	/* What the command is about comes first: without it, no option
	 * says anything. */
	if (optind == argc)
		return usage_error("carmyctl %s: no EXECUTION_ID: which "
				   "execution? (carmyctl list --state "
				   "uncertain shows the interrupted ones)",
				   release ? "release" : "resolve");
	if (v->committed < 0)
		return usage_error("carmyctl resolve: say --committed or "
				   "--not-committed%s", "");
	/* Not run: there is no outcome to record, and one given would be
	 * dropped without a word. */
	if (v->committed == 0 &&
	    (status || v->result != NULL || v->exit_code >= 0 ||
	     v->out != NULL || v->out_file != NULL))
		return usage_error("carmyctl resolve: --status, --result, "
				   "--exit-code, --stdout and --stdout-file "
				   "go with --committed, not --not-committed%s",
				   "");
	if (optind + 1 != argc)
		return usage_error("carmyctl %s: one EXECUTION_ID",
				   release ? "release" : "resolve");
	/* As carmy-run records a run: a non-zero exit code failed. */
	if (!status && v->exit_code > 0)
		v->status = CARMY_STATUS_FAILED;
	return check_verdict(v, argv[optind], release ? "release" : "resolve");
}

/* The result options of a verdict agree, and its EXECUTION_ID is one (cmd:
 * resolve or release, as the usage error names it). */
static int check_verdict(const struct verdict *v, const char *id,
			 const char *cmd)
{
	uint8_t exec[SHM_EXEC_LEN];

	if (v->out != NULL && v->out_file != NULL)
		return usage_error("carmyctl resolve: --stdout or "
				   "--stdout-file, not both%s", "");
	if ((v->out != NULL || v->out_file != NULL) && v->exit_code < 0)
		return usage_error("carmyctl resolve: --stdout and "
				   "--stdout-file go with --exit-code%s", "");
	if (v->result != NULL && v->exit_code >= 0)
		return usage_error("carmyctl resolve: --result (opaque bytes) "
				   "or --exit-code (an exit code and output), "
				   "not both%s", "");
	if (execid_parse(id, exec) != 0)
		return usage_error("carmyctl %s: an EXECUTION_ID is exec_ and "
				   "32 hex digits (lower case)", cmd);
	return 0;
}

/*
 * Does the verdict give a result in the format r's client reads (carmyd
 * would refuse it otherwise)? carmy-run's calls read an exit code and
 * output (--exit-code); other clients' opaque bytes (--result): an exit
 * code given to one of those would be replayed to it as 4 bytes it never
 * wrote. 0, or the exit status of a refusal (said).
 */
static int fits_format(const struct verdict *v, const struct row *r)
{
	const char *name = carmy_errname(CARMY_EINVALID_RESULT);

	/* Kept by an earlier carmyd, without its call: either is taken. */
	if (r->call.cl_format == CARMY_STORE_FORMAT_UNKNOWN)
		return 0;
	if (r->call.cl_format == CARMY_FORMAT_EXIT_OUTPUT &&
	    v->exit_code < 0) {
		fprintf(stderr, "carmyctl: resolve: %s: %s records its "
			"result as an exit code and output (carmy-run's): "
			"give --exit-code N [--stdout TEXT | --stdout-file "
			"PATH], not --result\n", name, r->exec);
		return EXIT_FAIL;
	}
	if (r->call.cl_format != CARMY_FORMAT_EXIT_OUTPUT &&
	    v->exit_code >= 0) {
		fprintf(stderr, "carmyctl: resolve: %s: %s records its "
			"result as %s bytes, not as an exit code and output: "
			"give --result TEXT, not --exit-code\n", name,
			r->exec, r->call.cl_format == CARMY_FORMAT_BYTES ?
					 "opaque" : "unknown");
		return EXIT_FAIL;
	}
	return 0;
}

/*
 * A committed verdict's result, malloc'd into *buf: --result's bytes, or
 * --exit-code's exit code and the output (--stdout, or --stdout-file's
 * contents, "-" for standard input) in the format carmy-run reads. 0, or
 * the exit status of a failure (said).
 */
static int verdict_result(const struct ctl *x, const struct verdict *v,
			  uint8_t **buf, size_t *len)
{
	const size_t max = x->view.geo.max_result;
	size_t n = 0, cap;
	int rc = 0;

	if (v->exit_code < 0) {
		const char *res = v->result != NULL ? v->result : "";

		*len = strlen(res);
		*buf = (uint8_t *)strdup(res);
		return *buf != NULL ? 0 : fail("resolve", -ENOMEM);
	}
	/* One byte past what carmyd takes tells "too large". */
	cap = (v->out != NULL ? strlen(v->out) : max) + RUNFMT_HEAD + 1;
	*buf = malloc(cap);
	if (*buf == NULL)
		return fail("resolve", -ENOMEM);
	runfmt_put_head(*buf, v->exit_code);
	n = RUNFMT_HEAD;
	if (v->out != NULL) {
		memcpy(*buf + n, v->out, strlen(v->out));
		n += strlen(v->out);
	} else if (v->out_file != NULL) {
		rc = read_upto(v->out_file, *buf + n, cap - n, &n);
		if (rc != 0) {
			fprintf(stderr, "carmyctl: resolve: cannot read %s: "
				"%s\n", v->out_file, strerror(-rc));
			free(*buf);
			*buf = NULL;
			return EXIT_FAIL;
		}
	}
	if (n > max) {
		free(*buf);
		*buf = NULL;
		return fail("resolve", CARMY_ERESULT_TOO_LARGE);
	}
	*len = n;
	return 0;
}

static int cmd_purge(struct ctl *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "older-than", required_argument, NULL, 'o' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t age = 0;
	bool have = false;
	msgpack_sbuffer sb;
	int o, rc, code;

	while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		if (o == 'j') {
			x->json = true;
			continue;
		}
		if (o != 'o')
			return bad_option("purge", o, argv);
		if (age_parse(optarg, &age) != 0)
			return usage_error("carmyctl purge: --older-than AGE, "
					   "like 90s, 200ms, 15m, 2h or 7d, not "
					   "'%s'", optarg);
		have = true;
	}
	if (!have || optind != argc)
		return usage_error("carmyctl purge: --older-than AGE is "
				   "needed%s", "");
	rc = asks_carmyd(x, "purge");
	if (rc == 0)
		rc = attach(x, false);
	if (rc != 0)
		return rc;
	msgpack_sbuffer_init(&sb);
	rc = wire_put_purge(&sb, age / 1000000u);
	if (rc == 0)
		rc = ask(x, &sb, WIRE_PURGE, 0, &code);
	msgpack_sbuffer_destroy(&sb);
	if (rc != 0)
		return rc;
	if (code < 0)
		return fail("purge", code);
	if (x->json)
		printf("{\"purged\":%d}\n", code);
	else
		printf("purged %d completed entr%s\n", code,
		       code == 1 ? "y" : "ies");
	return 0;
}

/*
 * Forget one completed execution, as a purge would: a call with its
 * identity then runs anew. Running and interrupted ones are refused
 * (NOT_COMPLETED): an interrupted one is resolved first. carmyd decides
 * both, whether the user may forget first: what the table shows here is
 * only the entry to name, lest a user who may not forget be told about
 * its state instead.
 */
static int cmd_forget(struct ctl *x, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	msgpack_sbuffer sb;
	const char *id;
	struct row r;
	int o, rc, code;

	while ((o = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		if (o != 'j')
			return bad_option("forget", o, argv);
		x->json = true;
	}
	if (optind + 1 != argc)
		return usage_error("carmyctl forget: one EXECUTION_ID%s", "");
	id = argv[optind];
	/* The table looked at must be the one of the carmyd asked. */
	rc = look_up(x, "forget", id, true, &r);
	if (rc != 0)
		return rc;
	msgpack_sbuffer_init(&sb);
	rc = wire_put_reserve(&sb, WIRE_FORGET, r.entry, r.exec_bytes);
	if (rc == 0)
		rc = ask(x, &sb, WIRE_FORGET, 0, &code);
	msgpack_sbuffer_destroy(&sb);
	if (rc != 0)
		return rc;
	/* Gone meanwhile (purged, or forgotten by carmyd's retention). */
	if (code == -ENOENT)
		return not_found(x, "forget", id);
	if (code == -EBUSY)
		return not_completed(id, r.state);
	if (code != 0)
		return fail("forget", code);
	if (x->json)
		printf("{\"execution_id\":\"%s\",\"forgotten\":true}\n", id);
	else
		printf("%s forgotten: a call with its identity runs anew\n",
		       id);
	return 0;
}

static int cmd_journal_check(struct ctl *x, int argc, char **argv)
{
	static const char *const ops[] = { "", "reserve", "complete",
					   "release", "resolve", "purge" };
	struct journal_report rep;
	char err[512] = "";
	const char *dir;
	int rc = plain_args(x, "journal-check", argc, argv, "DIR", true);

	if (rc != 0)
		return rc;
	dir = argv[optind];
	rc = journal_check(dir, &rep, err, sizeof(err));
	if (x->json) {
		printf("{\"journal\":");
		json_put_str(stdout, dir);
		printf(",\"ok\":%s", rc == 0 ? "true" : "false");
		if (rc != 0) {
			printf(",\"error\":{\"code\":\"%s\",\"message\":",
			       journal_errname(rc));
			json_put_str(stdout, err);
			printf("}}\n");
			return EXIT_FAIL;
		}
		printf(",\"format\":%u,\"records\":%llu", rep.version,
		       (unsigned long long)rep.records);
		for (int op = 1; op <= CARMY_STORE_PURGE; op++)
			printf(",\"%s\":%llu", ops[op],
			       (unsigned long long)rep.by_op[op]);
		printf(",\"end\":%llu,\"torn_bytes\":%llu,\"completed\":%llu,"
		       "\"unfinished\":%llu}\n", (unsigned long long)rep.end,
		       (unsigned long long)rep.torn,
		       (unsigned long long)rep.completed,
		       (unsigned long long)rep.unfinished);
		return 0;
	}
	if (rc != 0) {
		fprintf(stderr, "carmyctl: journal-check: %s: %s\n",
			journal_errname(rc), err);
		return EXIT_FAIL;
	}
	printf("journal     %s: good\n", dir);
	if (rep.version != JOURNAL_VERSION_NOW)
		printf("format      %u: a start rewrites it in format %u\n",
		       rep.version, JOURNAL_VERSION_NOW);
	printf("records     %llu:", (unsigned long long)rep.records);
	for (int op = 1; op <= CARMY_STORE_PURGE; op++)
		printf(" %llu %s", (unsigned long long)rep.by_op[op], ops[op]);
	printf("\nends at     byte %llu of %llu\n", (unsigned long long)rep.end,
	       (unsigned long long)rep.file_bytes);
	if (rep.torn != 0)
		printf("torn tail   %llu bytes: a start zeroes them (never "
		       "acknowledged)\n", (unsigned long long)rep.torn);
	printf("standing    %llu completed, %llu unfinished (uncertain after "
	       "a reboot)\n", (unsigned long long)rep.completed,
	       (unsigned long long)rep.unfinished);
	return 0;
}

/* ------------------------------------------------------------ carmyd */

/* Map the segment read-only: the one named, else the one carmyd says;
 * for a reading command, with no carmyd there, the one it left. */
static int attach(struct ctl *x, bool reading)
{
	int rc;

	if (x->segment == NULL) {
		x->quiet_down = reading;
		rc = dial_hello(x, false);
		x->quiet_down = false;
		if (rc == 69 && x->down && reading) {
			if (!left_segment(x)) {
				say("socket", "DAEMON_UNAVAILABLE", "no carmyd "
				    "at %s, and no segment left by one there; "
				    "give --segment NAME to read a segment "
				    "without it", x->path);
				return rc;
			}
			fprintf(stderr, "carmyctl: no carmyd at %s: reading "
				"the segment it left, %s (a call shown running "
				"there is watched by no carmyd until one "
				"starts)\n", x->path, x->shm_name);
			return map_segment(x);
		}
		if (rc != 0)
			return rc;
	} else {
		snprintf(x->shm_name, sizeof(x->shm_name), "%s", x->segment);
	}
	return map_segment(x);
}

/*
 * With no carmyd at the socket, the name of the segment the last one there
 * served, into x->shm_name: the second line of the socket's lock file,
 * where each carmyd notes it once it started (daemon/main.c:
 * note_segment()). Only in a directory that passed the socket's check,
 * whose files are a trusted user's; the segment itself is vetted as one
 * named with --segment would be. false: no lock file, no name in it, or
 * no such segment (gone with carmyd, --transient, or a reboot).
 */
static bool left_segment(struct ctl *x)
{
	char lock[sizeof(x->path) + 8], name[WIRE_SHM_NAME_MAX];
	struct stat st;
	bool noted;
	int fd;

	if (!x->dir_trusted)
		return false;
	snprintf(lock, sizeof(lock), "%s.lock", x->path);
	fd = open(lock, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return false;
	}
	noted = sockpath_noted_segment(fd, name, sizeof(name));
	close(fd);
	if (!noted)
		return false;
	fd = shm_open(name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
		      0);
	if (fd < 0)
		return false;
	close(fd);
	snprintf(x->shm_name, sizeof(x->shm_name), "%s", name);
	return true;
}

/* Map x->shm_name read-only, in place of any segment mapped before.
 * Returns 0 or an exit status after saying why. */
static int map_segment(struct ctl *x)
{
	int rc;

	if (x->mapped)
		shm_unmap(&x->view);
	x->mapped = false;
	rc = trusting(x);
	if (rc != 0)
		return rc;
	/* The segment carmyd named is its uid's; one named with --segment
	 * (carmyd may be down) any trusted uid's. */
	rc = shm_map_vetted(x->shm_name, false, vet_segment, x, &x->view);
	if (rc == CARMY_EUNTRUSTED) {
		say("trust", "DAEMON_UNTRUSTED", "%s", x->why);
		return EXIT_UNTRUSTED;
	}
	if (rc != 0) {
		say("segment", carmy_errname(rc), "cannot read segment %s: %s",
		    x->shm_name, carmy_strerror(rc));
		return EXIT_FAIL;
	}
	x->mapped = true;
	x->seg_seed = shm_header(&x->view)->sh_seed;
	x->seg_created = shm_header(&x->view)->sh_created_ns;
	return 0;
}

/* Connect to carmyd and say HELLO. Returns 0 or an exit status (69: not
 * there); quiet, it returns DIAL_NOT_YET instead, without a word, for a
 * carmyd that is not listening or went away while it was asked. */
static int dial_hello(struct ctl *x, bool quiet)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dflt[PATH_MAX];
	const char *path = x->socket, *env = getenv("CARMY_SOCKET");
	msgpack_sbuffer sb;
	int code, rc;

	/* The default in full, to be named if it is too long too. */
	if (path == NULL) {
		rc = carmy_default_socket(dflt, sizeof(dflt));
		if (rc < 0)
			return fail("socket", rc);
		path = dflt;
	}
	if (strlen(path) >= sizeof(x->path)) {
		if (x->socket != NULL)
			return usage_error("carmyctl: --socket %s: a socket "
					   "path is at most %zu bytes", path,
					   sizeof(x->path) - 1);
		fprintf(stderr, "carmyctl: socket %s (%s): a socket path is "
			"at most %zu bytes\n", path,
			env != NULL && env[0] != '\0' ? "$CARMY_SOCKET" :
							"the default",
			sizeof(x->path) - 1);
		return EXIT_FAIL;
	}
	strcpy(x->path, path);
	strcpy(sa.sun_path, x->path);
	rc = trusting(x);
	if (rc != 0)
		return rc;
	/* As libcarmy checks them: the directory before anything is sent,
	 * the peer's uid once connected. */
	rc = trust_socket_dir(&x->trust, x->path, x->why, sizeof(x->why));
	x->dir_trusted = rc == 0;
	if (rc == CARMY_EUNAVAILABLE) {
		errno = ENOENT;
	} else if (rc == CARMY_EUNTRUSTED) {
		say("trust", "DAEMON_UNTRUSTED", "%s", x->why);
		return EXIT_UNTRUSTED;
	} else if (rc != 0) {
		return fail("socket", rc);
	}
	if (rc == 0)
		x->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (rc != 0 || x->fd < 0 ||
	    connect(x->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		int e = errno;

		/* Not left open for a request to go out on. */
		if (rc == 0 && x->fd >= 0) {
			close(x->fd);
			x->fd = -1;
		}
		errno = e;
		/* Gone, or not listening yet: a carmyd on its way back. */
		if (quiet && (errno == ENOENT || errno == ECONNREFUSED))
			return DIAL_NOT_YET;
		x->down = true;
		if (!x->quiet_down)
			say("socket", "DAEMON_UNAVAILABLE", "no carmyd at %s "
			    "(%s); give --segment NAME to read a segment "
			    "without it", x->path, strerror(errno));
		return 69;
	}
	if (trust_peer(&x->trust, x->fd, x->path, &x->peer, x->why,
		       sizeof(x->why)) != 0) {
		say("trust", "DAEMON_UNTRUSTED", "%s", x->why);
		return EXIT_UNTRUSTED;
	}
	x->peered = true;
	msgpack_sbuffer_init(&sb);
	rc = wire_put_hello(&sb, shm_layout_signature(), 0, 0);
	x->redialing = quiet;
	if (rc == 0)
		rc = ask(x, &sb, WIRE_HELLO, 0, &code);
	x->redialing = false;
	msgpack_sbuffer_destroy(&sb);
	/* A carmyd that is stopping still accepts on its way out, and
	 * resets what it accepted. */
	return rc == ASK_LOST ? DIAL_NOT_YET : rc;
}

/* Fill in x->trust once. 0, or an exit status after saying why. */
static int trusting(struct ctl *x)
{
	if (x->trusting)
		return 0;
	if (trust_init(&x->trust, x->why, sizeof(x->why)) != 0) {
		say("trust", "DAEMON_UNTRUSTED", "%s", x->why);
		return EXIT_UNTRUSTED;
	}
	x->trusting = true;
	return 0;
}

/* shm_map_vetted()'s look at the segment (arg: the ctl). */
static int vet_segment(const struct stat *st, void *arg)
{
	struct ctl *x = arg;

	x->seg_dev = st->st_dev;
	x->seg_ino = st->st_ino;
	return trust_segment(&x->trust, st, x->peered ? x->peer : (uid_t)-1,
			     x->shm_name, x->why, sizeof(x->why));
}

/* Send one request and read its reply; HELLO's fills x->shm_name. A WAIT
 * may be answered wait_ms later. Returns 0 with the reply's code, or an
 * exit status after saying why, or for a WAIT ASK_LOST, silently, if the
 * connection is gone. */
static int ask(struct ctl *x, msgpack_sbuffer *sb, int type, int wait_ms,
	       int *code)
{
	/* Lost, a WAIT (or a redial's HELLO) is dialled again. */
	const bool may_lose = type == WIRE_WAIT ||
			      (type == WIRE_HELLO && x->redialing);
	uint8_t buf[REPLY_MAX];
	struct wire_msg m;
	size_t have = 0;
	bool sent;
	long n = 0;

	if (x->fd < 0) {
		int rc = dial_hello(x, false);

		if (rc != 0)
			return rc;
	}
	/* Unsent, it may still have been answered: carmyd refuses a
	 * connection beyond --max-clients at once, and closes it. */
	sent = send(x->fd, sb->data, sb->size, MSG_NOSIGNAL) ==
	       (ssize_t)sb->size;
	while (n == 0) {
		struct pollfd p = { .fd = x->fd, .events = POLLIN };
		ssize_t got;

		/* carmyd answers at once but for a purge, which waits for
		 * the store (a minute is plenty), and a wait. */
		if (poll(&p, 1, 60000 + wait_ms) != 1)
			return fail("reply", CARMY_EUNAVAILABLE);
		got = recv(x->fd, buf + have, sizeof(buf) - have, 0);
		if (got <= 0 && !sent)
			return may_lose ? ASK_LOST :
					  fail("send", CARMY_EDISCONNECTED);
		if (got <= 0 && may_lose)
			return ASK_LOST;
		if (got <= 0)
			return fail("reply", CARMY_EDISCONNECTED);
		have += (size_t)got;
		n = wire_scan(buf, have, sizeof(buf));
		if (n < 0)
			return fail("reply", CARMY_EPROTOCOL);
	}
	if (wire_decode(buf, (size_t)n, 0, &m) != 0)
		return fail("reply", CARMY_EPROTOCOL);
	if (m.type == WIRE_ERROR)
		return fail(type == WIRE_HELLO ? "connect" : "request",
			    m.u.reply.code);
	if (m.type != type)
		return fail("reply", CARMY_EPROTOCOL);
	if (type == WIRE_HELLO) {
		memcpy(x->shm_name, m.u.hello_ok.shm_name,
		       sizeof(x->shm_name));
		*code = 0;
	} else {
		*code = m.u.reply.code;
	}
	return 0;
}

/* ------------------------------------------------------------ entries */

/* Entry e as it stands, if it is published (running, completed or
 * uncertain). Nothing read from the segment is trusted: lengths are
 * clamped, and the word is read again after the entry, so a row that
 * changed while it was read is skipped rather than shown torn. */
static bool read_row(const struct shm_view *v, uint32_t e, struct row *r)
{
	const struct shm_entry *en = shm_entry_at(v, e);
	uint32_t b = __atomic_load_n(&en->en_bucket, __ATOMIC_ACQUIRE);
	uint64_t w;
	size_t off = 0;

	if (b >= v->geo.nbuckets)
		return false;
	w = __atomic_load_n(&v->buckets[b], __ATOMIC_ACQUIRE);
	if (SHM_W_ENTRY(w) != e ||
	    (SHM_W_STATE(w) != SHM_RUNNING && SHM_W_STATE(w) != SHM_COMPLETED &&
	     SHM_W_STATE(w) != SHM_UNCERTAIN))
		return false;
	memset(r, 0, sizeof(*r));
	r->entry = e;
	r->state = SHM_W_STATE(w);
	for (int i = 0; i < 3; i++) {
		uint16_t len = en->en_len[i];

		if (len == 0 || len > CARMY_ID_MAX || off + len > sizeof(en->en_ident))
			return false;
		memcpy(r->part[i], en->en_ident + off, len);
		r->len[i] = len;
		off += len;
	}
	memcpy(r->exec_bytes, en->en_exec, SHM_EXEC_LEN);
	memcpy(r->fp, en->en_fingerprint, SHM_FP_LEN);
	execid_format(r->exec, r->exec_bytes);
	r->pid = en->en_pid;
	r->started_ns = en->en_started_ns;
	r->finished_ns = en->en_finished_ns;
	r->resolved_ns = en->en_resolved_ns;
	r->resolved_uid = en->en_resolved_uid;
	r->resolved_pid = en->en_resolved_pid;
	r->status = en->en_status;
	r->result_code = en->en_result_code;
	r->result_len = en->en_result_len <= v->geo.max_result ?
				en->en_result_len : 0;
	shm_call_copy(v, e, &r->call);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(&v->buckets[b], __ATOMIC_RELAXED) == w;
}

static bool find_exec(const struct shm_view *v, const char *id,
		      struct row *r)
{
	uint8_t want[SHM_EXEC_LEN];

	if (execid_parse(id, want) != 0)
		return false;
	for (uint32_t e = 0; e < v->geo.capacity; e++) {
		if (memcmp(shm_entry_at(v, e)->en_exec, want, SHM_EXEC_LEN) != 0)
			continue;
		/* read_row() skips a row that changed while it was read:
		 * the one asked for is read again, since changing (being
		 * completed, resolved) is what an operator looks for. */
		for (int tries = 0; tries < 100; tries++) {
			if (read_row(v, e, r))
				return memcmp(r->exec_bytes, want,
					      SHM_EXEC_LEN) == 0;
			sched_yield();
		}
	}
	return false;
}

/*
 * The execution id for cmd, in the table: parsed (a usage error if it is
 * not one), the segment mapped (with carmyd, the segment must be its own:
 * asks_carmyd()), and the entry read into r (NOT_FOUND if the table does
 * not hold it). Returns 0, or an exit status after saying why.
 */
static int look_up(struct ctl *x, const char *cmd, const char *id,
		   bool carmyd, struct row *r)
{
	uint8_t exec[SHM_EXEC_LEN];
	int rc;

	if (execid_parse(id, exec) != 0)
		return usage_error("carmyctl %s: an EXECUTION_ID is exec_ and "
				   "32 hex digits (lower case)", cmd);
	rc = carmyd ? asks_carmyd(x, cmd) : 0;
	if (rc == 0)
		rc = attach(x, !carmyd);
	if (rc != 0)
		return rc;
	return find_exec(&x->view, id, r) ? 0 : not_found(x, cmd, id);
}

/*
 * cmd asks the carmyd at the socket, and looks at that carmyd's own table.
 * --segment names a table but not the carmyd that owns it: with another
 * carmyd at the socket, the entry looked at in one table would be acted on
 * by the other. So it is a usage error. Returns 0, or EXIT_USAGE after
 * saying why.
 */
static int asks_carmyd(const struct ctl *x, const char *cmd)
{
	if (x->segment == NULL)
		return 0;
	return usage_error("carmyctl %s: asks carmyd, not a segment: give "
			   "--socket PATH of the carmyd that owns %s, not "
			   "--segment", cmd, x->segment);
}

/* ------------------------------------------------------------ helpers */

/* The bytes of file path ("-": standard input), up to room of them, into
 * buf; *n grows by how many. 0, or -errno. */
static int read_upto(const char *path, uint8_t *buf, size_t room, size_t *n)
{
	int fd = strcmp(path, "-") == 0 ? STDIN_FILENO :
					  open(path, O_RDONLY | O_CLOEXEC);
	size_t got = 0;
	int rc = 0;

	if (fd < 0)
		return -errno;
	while (got < room) {
		ssize_t r = read(fd, buf + got, room - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			rc = -errno;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (fd != STDIN_FILENO)
		close(fd);
	*n += got;
	return rc;
}

/* Clients (carmy-run, the gateway, the bindings) call an uncertain entry
 * "interrupted" (carmy_state_name()): either name selects it. */
static int parse_state(const char *s)
{
	if (strcmp(s, "running") == 0)
		return SHM_RUNNING;
	if (strcmp(s, "uncertain") == 0 || strcmp(s, "interrupted") == 0)
		return SHM_UNCERTAIN;
	if (strcmp(s, "completed") == 0)
		return SHM_COMPLETED;
	return -1;
}

static const char *state_name(unsigned st)
{
	return st == SHM_RUNNING ? "running" :
	       st == SHM_COMPLETED ? "completed" : "uncertain";
}

/* An age for people, in one unit, rounded down: "42s", "15m", "3h", "9d". */
static const char *coarse_age(char *buf, size_t size, uint64_t ns)
{
	uint64_t s = ns / 1000000000u;

	if (s < 120)
		snprintf(buf, size, "%llus", (unsigned long long)s);
	else if (s < 7200)
		snprintf(buf, size, "%llum", (unsigned long long)(s / 60));
	else if (s < 172800)
		snprintf(buf, size, "%lluh", (unsigned long long)(s / 3600));
	else
		snprintf(buf, size, "%llud", (unsigned long long)(s / 86400));
	return buf;
}

static void put_age(FILE *f, uint64_t ns)
{
	char buf[32];

	fprintf(f, "%6s", coarse_age(buf, sizeof(buf), ns));
}

/*
 * A refusal or failure with its code: "carmyctl: WHAT: CODE: message" on
 * standard error, and with --json {"error":{"code","message"}} on standard
 * output too, so that a script reading the output has one object either
 * way.
 */
static void say(const char *what, const char *code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "carmyctl: %s: %s: %s\n", what, code, msg);
	if (running != NULL && running->json) {
		printf("{\"error\":{\"code\":");
		json_put_str(stdout, code);
		printf(",\"message\":");
		json_put_str(stdout, msg);
		printf("}}\n");
	}
}

static int fail(const char *what, int code)
{
	say(what, carmy_errname(code), "%s", carmy_strerror(code));
	/* Full for the moment is as unavailable: try again later. */
	return code == CARMY_EUNAVAILABLE || code == CARMY_ETOO_MANY_CLIENTS ?
		       69 : EXIT_FAIL;
}

/* journal-check's name for what journal_check() returned: a journal's
 * damage and format have names of their own, not those of the segment's
 * whose codes they share. */
static const char *journal_errname(int code)
{
	if (code == CARMY_ECORRUPT)
		return "JOURNAL_DAMAGED";
	if (code == CARMY_ELAYOUT)
		return "JOURNAL_FORMAT_UNKNOWN";
	return carmy_errname(code);
}

/* An execution the table does not hold: exit 1, NOT_FOUND. */
static int not_found(const struct ctl *x, const char *what, const char *id)
{
	say(what, "NOT_FOUND", "no execution %s in the table of segment %s "
	    "(a completed one is forgotten after carmyd's --retain, or by "
	    "carmyctl purge or forget)", id, x->shm_name);
	return EXIT_FAIL;
}

/* forget of an execution that is not completed: exit 1, NOT_COMPLETED. */
static int not_completed(const char *id, unsigned state)
{
	say("forget", "NOT_COMPLETED", "%s is %s: only a completed execution "
	    "can be forgotten%s", id,
	    state == SHM_UNCERTAIN ? "interrupted" : "running",
	    state == SHM_UNCERTAIN ? " (settle it first: carmyctl resolve or "
				     "release)" : "");
	return EXIT_FAIL;
}

/*
 * getopt_long()'s '?' (an unknown option) or ':' (one without its value)
 * for cmd (NULL: before the command), told by name as a usage error. The
 * option is the argument getopt_long() just stepped over, or for a short
 * one optopt.
 */
static int bad_option(const char *cmd, int o, char **argv)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "";
	char shopt[3] = { '-', (char)optopt, '\0' };
	const char *opt = strncmp(arg, "--", 2) == 0 || optopt == 0 ? arg :
									shopt;

	if (o == ':')
		return usage_error("carmyctl%s%s: option '%s' needs a value",
				   cmd ? " " : "", cmd ? cmd : "", opt);
	return usage_error("carmyctl%s%s: unknown option '%s'", cmd ? " " : "",
			   cmd ? cmd : "", opt);
}

/*
 * The arguments of a command that takes no option but --json (if json):
 * none, or with what (its name in the usage) exactly one, left at
 * argv[optind]. Returns 0, or EXIT_USAGE after saying why.
 */
static int plain_args(struct ctl *x, const char *cmd, int argc, char **argv,
		      const char *what, bool json)
{
	static const struct option with_json[] = {
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	int o;

	while ((o = getopt_long(argc, argv, ":", with_json + !json,
				NULL)) != -1) {
		if (o != 'j')
			return bad_option(cmd, o, argv);
		x->json = true;
	}
	if (what == NULL && optind < argc)
		return usage_error("carmyctl %s: unexpected argument '%s'", cmd,
				   argv[optind]);
	if (what != NULL && optind + 1 != argc)
		return usage_error("carmyctl %s: one %s", cmd, what);
	return 0;
}

/*
 * Standard output written out: rc, or, if it could not all be written (a
 * full disk), EXIT_IO after saying so. A command that failed already keeps
 * its own status.
 */
static int flush_stdout(int rc)
{
	bool lost = ferror(stdout) != 0;	/* an earlier write failed */

	errno = 0;
	if (fflush(stdout) == 0 && !lost)
		return rc;
	/* errno is the failed write's if it was this flush's. */
	fprintf(stderr, "carmyctl: cannot write standard output%s%s\n",
		errno != 0 ? ": " : "", errno != 0 ? strerror(errno) : "");
	return rc != 0 ? rc : EXIT_IO;
}

static int usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n(carmyctl --help for usage)\n", stderr);
	return EXIT_USAGE;
}
