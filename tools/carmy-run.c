/*
 * carmy-run.c - run a command at most once per identity.
 *
 *   carmy-run [--socket PATH] --principal P --session S --request-id R
 *             [--tool NAME] [--meta KEY=VALUE]... [--timeout SECONDS]
 *             [--wait SECONDS] [--json] -- COMMAND [ARG]...
 *
 * The identity (P, S, R) is reserved in carmyd before COMMAND runs. The
 * fingerprint covers the tool name (--tool, else COMMAND's basename), the
 * ARGs in order (a msgpack array of str) and the --meta pairs (a msgpack
 * map of str to str; libcarmy sorts map keys, so their order is free). The
 * recorded result is COMMAND's exit code as 4 big-endian bytes followed by
 * its standard output (CARMY_FORMAT_EXIT_OUTPUT, which every entry of ours
 * records: an operator resolves one with carmyctl resolve --exit-code);
 * standard error passes through live, unrecorded.
 *
 * Exit status:
 *   0-255  COMMAND's own status, from this run or replayed
 *          (128+N if COMMAND was killed by signal N, or the call was
 *          cancelled by signal N: see Signals below)
 *   64     usage error (bad options)
 *   65     INVALID_ID: a part of the identity is empty or over 256 bytes
 *   66     INVALID_ARGUMENTS: e.g. the same --meta KEY twice
 *   69     DAEMON_UNAVAILABLE: carmyd cannot be reached; or
 *          TOO_MANY_CLIENTS: it serves all it may (--max-clients)
 *   70     any other internal or system error (PROTOCOL_ERROR,
 *          SEGMENT_LAYOUT_MISMATCH, SEGMENT_CORRUPT, DISCONNECTED, out of
 *          memory...); after COMMAND ran, its result unrecorded
 *          (DISCONNECTED, or DAEMON_UNAVAILABLE: carmyd not back from a
 *          restart within CARMY_RECONNECT_MS and STORE_RETRY_MS more;
 *          uncertain, what it did printed) or carmy-run's
 *          own output unwritten (recorded: a retry prints it); or
 *          COMMAND_LOST: carmy-run lost track of COMMAND while it ran
 *          (its watcher was killed, say), everything COMMAND started was
 *          killed, and the call is uncertain
 *   71     IDEMPOTENCY_CONFLICT: the identity was used for another call
 *   72     EXECUTION_UNCERTAIN: the identity is running or was interrupted
 *   73     IDEMPOTENCY_CAPACITY: carmyd's table is full
 *   74     RESULT_TOO_LARGE: the exit code and output exceeded carmyd's
 *          --max-result; recorded as failed, and replayed as this error
 *   75     STORE_FAILED: carmyd's durable store could not record the
 *          reservation (COMMAND did not run) or the result, sent again
 *          for STORE_RETRY_MS (it ran: the identity reports
 *          EXECUTION_UNCERTAIN, and what it did is printed)
 *   77     DAEMON_UNTRUSTED: the carmyd found, its socket's directory or
 *          its segment belongs to a user not trusted (sysexits' EX_NOPERM;
 *          the message says which path, uid or mode)
 *   124    COMMAND timed out, in this run or replayed
 *   126    COMMAND cannot be run  \  nothing ran and the reservation was
 *   127    COMMAND was not found  /  released: retrying may run it
 *   128+N  also CANCELLED: signal N came before COMMAND started
 * COMMAND did not run for 64-69, 71-73, 77, 126, 127 and CANCELLED; for 70
 * and 75 it did not run unless the error came after it started. A COMMAND
 * that exits with one of these statuses itself is told apart by --json,
 * whose errors are objects with "error".
 *
 * Signals. While COMMAND runs, SIGINT, SIGTERM and SIGHUP cancel the call:
 * COMMAND and everything it started are killed, and the call is recorded
 * as cancelled with the output so far (exit 128+N), then replayed as such,
 * as a timeout is: the effect may have committed. They are blocked from
 * before the reservation on: one that comes before COMMAND starts (or
 * during --wait) cancels the call with nothing run, the reservation given
 * back. One that carmy-run was started with ignored (nohup; SIGINT in a non-interactive shell's
 * background job) stays ignored, by carmy-run and by COMMAND: it cancels
 * nothing. Anything else that kills carmy-run (SIGKILL) closes its
 * connection, which carmyd takes as a dead owner, so the entry becomes
 * uncertain and is never freed for a second run; COMMAND's watcher
 * (supervise.c) then kills COMMAND and everything it started, so that
 * nothing of it goes on after the call was reported uncertain. Should the
 * watcher be the one killed, COMMAND dies with it, and carmy-run, a child
 * subreaper, gets and kills what COMMAND started, before it reports the
 * call uncertain (COMMAND_LOST).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>

#include "carmy.h"
#include "common/io.h"
#include "common/runfmt.h"
#include "tools/json.h"
#include "tools/supervise.h"

enum {
	EXIT_USAGE = 64,
	EXIT_INVALID_ID = 65,
	EXIT_INVALID_ARGS = 66,
	EXIT_UNAVAILABLE = 69,
	EXIT_INTERNAL = 70,
	EXIT_CONFLICT = 71,
	EXIT_UNCERTAIN = 72,
	EXIT_CAPACITY = 73,
	EXIT_TOO_LARGE = 74,
	EXIT_STORE = 75,
	EXIT_UNTRUSTED = 77,
	EXIT_TIMED_OUT = 124,
	EXIT_NOT_EXECUTABLE = 126,
	EXIT_NOT_FOUND = 127,
};

/* The big-endian exit code in front of the recorded standard output
 * (common/runfmt.h). */
#define HEAD_LEN RUNFMT_HEAD
/* A deadline this far away is a typo, and keeps the sums below in range. */
#define TIMEOUT_MAX_S 1000000000ull
/* carmy_wait() takes milliseconds in an int: 24.8 days. */
#define WAIT_MAX_S (INT32_MAX / 1000)
#define NSEC 1000000000ull
/* Largest single read, so that its count always fits an int. */
#define READ_MAX (1u << 20)
/* How long a result the durable store failed to record is sent again. */
#define STORE_RETRY_MS 10000u
/* The longest slice of a --wait, between two looks for a cancelling
 * signal (blocked while the wait may reserve). */
#define WAIT_SLICE_MS 250u

/* The signals that cancel a run (SIGINT, SIGTERM, SIGHUP, those not
 * ignored when we started), blocked and read from a signalfd, and the mask
 * COMMAND gets. */
struct cancelling {
	sigset_t set;
	sigset_t old;
	int sfd;	/* -1: none, they kill us */
};

struct opts {
	const char *socket;
	const char *principal;
	const char *session;
	const char *request_id;
	const char *tool;
	char **meta;		/* KEY=VALUE strings, pointing into argv */
	size_t n_meta;
	uint64_t timeout_ns;	/* 0: no deadline */
	uint64_t wait_ns;	/* --wait: 0, do not wait for a running one */
	bool json;
	char **cmd;		/* COMMAND and its ARGs, NULL-terminated */
};

/*
 * COMMAND's outcome. buf holds HEAD_LEN bytes for the exit code, then
 * standard output, but never more than keep bytes: one past carmyd's
 * --max-result is enough for libcarmy to see that the result is too large,
 * and a runaway COMMAND must not make carmy-run grow without bound.
 */
struct capture {
	uint8_t *buf;
	size_t len;
	size_t cap;
	size_t keep;
	int exit_code;
	int status;		/* CARMY_STATUS_* */
};

/* How COMMAND was lost (RUN_LOST). */
struct lost {
	int err;		/* what lost it; 0: the watcher ended */
	int watcher;		/* the watcher's wait status; -1: unknown */
	int left;		/* COMMAND's processes still alive after the
				 * kill; -errno: they could not be listed */
};

/* Tries of a request about the reservation, see again(). */
struct retry {
	uint64_t end_ns;	/* CLOCK_MONOTONIC; 0 before the first */
	unsigned ms;		/* the next wait */
};

enum run_outcome {
	RUN_DONE,		/* COMMAND ran and ended, or timed out */
	RUN_NOT_STARTED,	/* a system error before COMMAND could start */
	RUN_EXEC_FAILED,	/* exec failed: COMMAND provably did not run */
	RUN_LOST,		/* COMMAND started, then we lost track of it */
	RUN_CANCELLED,		/* a cancelling signal came before it started */
};

static const char usage_text[] =
	"usage: carmy-run [--socket PATH] --principal P --session S --request-id R\n"
	"                 [--tool NAME] [--meta KEY=VALUE]... [--timeout SECONDS]\n"
	"                 [--wait SECONDS] [--json] -- COMMAND [ARG]...\n"
	"Run COMMAND at most once per identity (P, S, R). A retry with the same\n"
	"identity replays the recorded standard output and exit status instead.\n"
	"\n"
	"  --socket PATH        carmyd's socket (default: $CARMY_SOCKET, else\n"
	"                       your own carmyd's, $XDG_RUNTIME_DIR/carmy/\n"
	"                       carmyd.sock or /tmp/carmy-$UID/carmyd.sock,\n"
	"                       if there, else /run/carmy/carmyd.sock)\n"
	"  --principal P        the identity of the call: who acts, in which\n"
	"  --session S          session, and the caller's id for this request;\n"
	"  --request-id R       1 to 256 bytes each\n"
	"  --tool NAME          tool name for the fingerprint (default: COMMAND's\n"
	"                       basename)\n"
	"  --meta KEY=VALUE     request metadata for the fingerprint; repeatable,\n"
	"                       in any order, each KEY at most once\n"
	"  --timeout SECONDS    at the deadline, kill COMMAND and everything it\n"
	"                       started, and record the call as timed out\n"
	"                       (decimals allowed)\n"
	"  --wait SECONDS       if the identity is running elsewhere, wait up to\n"
	"                       this long for it to finish and replay it (or run\n"
	"                       COMMAND if it was released) instead of failing\n"
	"                       with EXECUTION_UNCERTAIN at once\n"
	"  --json               print one JSON object on standard output instead\n"
	"  -h, --help           print this help and exit\n"
	"  --version            print the version and exit\n"
	"\n"
	"The fingerprint covers the tool name, the ARGs in order and the --meta\n"
	"pairs. Standard output is recorded; standard error passes through live\n"
	"and is not recorded.\n"
	"\n"
	"Exit status:\n"
	"  0-255  COMMAND's own status, from this run or replayed (128+N: killed\n"
	"         by signal N)\n"
	"  64     usage error (bad options)\n"
	"  65     INVALID_ID             a part of the identity is empty or too long\n"
	"  66     INVALID_ARGUMENTS      e.g. the same --meta KEY twice\n"
	"  69     DAEMON_UNAVAILABLE     carmyd cannot be reached (or\n"
	"         TOO_MANY_CLIENTS: it serves all its --max-clients allows)\n"
	"  70     any other internal or system error (PROTOCOL_ERROR, SEGMENT_*,\n"
	"         DISCONNECTED, out of memory...), also after COMMAND ran\n"
	"         (DISCONNECTED, DAEMON_UNAVAILABLE: its result unrecorded);\n"
	"         COMMAND_LOST: COMMAND was lost while it ran (its watcher\n"
	"         killed, say), all it started was killed, and the call is\n"
	"         uncertain\n"
	"  71     IDEMPOTENCY_CONFLICT   the identity was used for another call\n"
	"  72     EXECUTION_UNCERTAIN    the identity is running or was interrupted\n"
	"  73     IDEMPOTENCY_CAPACITY   carmyd's table is full\n"
	"  74     RESULT_TOO_LARGE       output over carmyd's --max-result (recorded)\n"
	"  75     STORE_FAILED           carmyd's durable store could not record it\n"
	"  77     DAEMON_UNTRUSTED       carmyd, its socket's directory or its\n"
	"                                segment belongs to a user not trusted\n"
	"                                (see $CARMY_TRUSTED_USERS)\n"
	"  124    COMMAND timed out, in this run or replayed\n"
	"  128+N  also: cancelled by signal N (INT, TERM, HUP) while it ran,\n"
	"         in this run or replayed\n"
	"  126    COMMAND cannot be run (nothing ran, reservation released)\n"
	"  127    COMMAND was not found (nothing ran, reservation released)\n"
	"  128+N  also CANCELLED: signal N came before COMMAND started (nothing\n"
	"         ran, reservation released)\n"
	"On an error COMMAND does not run, except for an error after it started\n"
	"(70, 75): if its result could not be recorded, the identity is\n"
	"EXECUTION_UNCERTAIN, and its output and exit code are printed for an\n"
	"operator's carmyctl resolve. COMMAND's own status may be any of these\n"
	"numbers too: --json tells them apart (an error is an object with\n"
	"\"error\").\n";

static int parse_opts(int argc, char **argv, struct opts *o);
static int set_once(const char **dst, const char *val, const char *name,
		    char *err, size_t err_len);
static int parse_timeout(const char *s, uint64_t *ns);
static int std_fds_open(void);
static bool id_ok(const char *s);
static int meta_twice(const struct opts *o, char *why, size_t len);
static int pack_args(const struct opts *o, msgpack_sbuffer *sb);
static int pack_meta(const struct opts *o, msgpack_sbuffer *sb);
static void fill_call(const struct opts *o, const msgpack_sbuffer *args,
		      const msgpack_sbuffer *meta, struct carmy_call *call);
static const char *sig_name(int sig);
static void cancel_block(struct cancelling *k);
static int cancel_pending(const struct cancelling *k);
static int wait_running(carmy_t *c, const struct carmy_call *call,
			struct carmy_reservation *r, uint64_t wait_ns,
			const struct cancelling *k, int *sig);
static int run_reserved(carmy_t *c, const struct opts *o,
			struct carmy_reservation *r,
			const struct cancelling *k);
static bool again(struct retry *t);
static int replay(const struct opts *o, const struct carmy_reservation *r);
static enum run_outcome run_command(const struct opts *o,
				    const struct cancelling *k,
				    struct capture *cap, int *err,
				    struct lost *lost);
static enum run_outcome collect(const struct opts *o, struct supervised *sv,
				int sfd, struct capture *cap, int *err);
static int capture_read(int fd, struct capture *cap, size_t max);
static bool time_left(const struct timespec *deadline, struct timespec *left);
static int print_result(const struct opts *o, const char *exec_id,
			int status, bool replayed, int exit_code,
			const void *out, size_t len);
static int report(const struct opts *o, int exit_status, const char *code,
		  const char *msg, const char *exec_id, const char *state);
static int report_code(const struct opts *o, int code,
		       const struct carmy_reservation *r, const char *why);
static int report_unrecorded(const struct opts *o, int code,
			     const struct carmy_reservation *r,
			     const struct capture *cap);
static int report_lost(const struct opts *o, const struct lost *lost,
		       const struct carmy_reservation *r);
static void name_socket(const struct opts *o, int code, char *why,
			size_t len);
static int exit_for(int code);

int main(int argc, char **argv)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	struct cancelling k = { .sfd = -1 };
	msgpack_sbuffer args, meta;
	struct carmy_call call;
	struct opts o;
	carmy_t *c = NULL;
	char why[8192] = "";	/* what to say instead of carmy_strerror() */
	int rc, status, sig = 0;

	sv_name_watchers(argc, argv);	/* before getopt reorders argv */
	status = parse_opts(argc, argv, &o);
	if (status >= 0) {
		free(o.meta);
		return status;
	}
	msgpack_sbuffer_init(&args);
	msgpack_sbuffer_init(&meta);

	/* Inherited ignored, SIGCHLD would have the kernel reap our
	 * children: COMMAND's end would be lost, and with it its result. */
	signal(SIGCHLD, SIG_DFL);
	rc = std_fds_open();
	/* Checked here too, with the documented limits, so that bad input
	 * is reported as such whether or not carmyd is up. */
	if (rc == 0 && (!id_ok(o.principal) || !id_ok(o.session) ||
			!id_ok(o.request_id)))
		rc = CARMY_EINVALID_ID;
	if (rc == 0)
		rc = meta_twice(&o, why, sizeof(why));
	if (rc == 0)
		rc = pack_args(&o, &args);
	if (rc == 0)
		rc = pack_meta(&o, &meta);
	if (rc == 0) {
		rc = carmy_connect(&c, o.socket);
		if (rc != 0)
			name_socket(&o, rc, why, sizeof(why));
	}
	/* Our results are an exit code and output: an operator's resolve
	 * of one of our calls must give one (carmyctl resolve --exit-code). */
	if (rc == 0)
		rc = carmy_set_result_format(c, CARMY_FORMAT_EXIT_OUTPUT);
	if (rc == 0) {
		fill_call(&o, &args, &meta, &call);
		/* The cancelling signals are blocked before the reservation:
		 * none can kill us between it and COMMAND's start (the call
		 * would be left uncertain though nothing ran). One that
		 * comes meanwhile is read before COMMAND starts, and the
		 * reservation given back (run_reserved()); a wait is made
		 * in slices, and one ends it. */
		cancel_block(&k);
		if (o.wait_ns > 0)
			rc = wait_running(c, &call, &r, o.wait_ns, &k, &sig);
		else
			rc = carmy_begin(c, &call, &r);
		/* carmyd gone since, or full: the handle tried to connect
		 * again, to the same socket. */
		if (rc == CARMY_EUNAVAILABLE || rc == CARMY_ETOO_MANY_CLIENTS)
			name_socket(&o, rc, why, sizeof(why));
	}

	switch (rc) {
	case CARMY_RESERVED:
		status = run_reserved(c, &o, &r, &k);
		break;
	case CARMY_EUNCERTAIN:
		if (sig == 0) {
			status = report_code(&o, rc, &r, why);
			break;
		}
		snprintf(why, sizeof(why), "Cancelled by %s while waiting "
			 "for the running execution; nothing ran here.",
			 sig_name(sig));
		status = report(&o, 128 + sig, "CANCELLED", why,
				r.execution_id, carmy_state_name(r.state));
		break;
	case CARMY_REPLAY:
		status = replay(&o, &r);
		break;
	default:
		status = report_code(&o, rc, &r, why);
		break;
	}

	carmy_reservation_clear(&r);
	carmy_close(c);
	/* Left blocked: one that came after COMMAND's end stays pending and
	 * is dropped when we exit, the call recorded as it ended. */
	if (k.sfd >= 0)
		close(k.sfd);
	msgpack_sbuffer_destroy(&args);
	msgpack_sbuffer_destroy(&meta);
	free(o.meta);
	return status;
}

/* ------------------------------------------------------------ options */

/*
 * Returns -1 to go on, or the status to exit with. Parsing goes on past the
 * first problem so that --json, wherever it is, shapes the usage error.
 */
static int parse_opts(int argc, char **argv, struct opts *o)
{
	enum {
		OPT_SOCKET = 256, OPT_PRINCIPAL, OPT_SESSION, OPT_REQUEST_ID,
		OPT_TOOL, OPT_META, OPT_TIMEOUT, OPT_JSON, OPT_VERSION,
		OPT_WAIT,
	};
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "principal", required_argument, NULL, OPT_PRINCIPAL },
		{ "session", required_argument, NULL, OPT_SESSION },
		{ "request-id", required_argument, NULL, OPT_REQUEST_ID },
		{ "tool", required_argument, NULL, OPT_TOOL },
		{ "meta", required_argument, NULL, OPT_META },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "wait", required_argument, NULL, OPT_WAIT },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	const char *timeout = NULL, *wait = NULL;
	char err[512] = "";
	bool help = false, version = false;
	int opt;

	memset(o, 0, sizeof(*o));
	/* Every --meta is an argument of its own: argc bounds their count. */
	o->meta = calloc((size_t)argc, sizeof(*o->meta));
	if (o->meta == NULL) {
		fputs("carmy-run: OUT_OF_MEMORY: Out of memory.\n", stderr);
		return EXIT_INTERNAL;
	}
	opterr = 0;
	/* '+': stop at COMMAND even without "--", so its options stay its. */
	while ((opt = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		const char *arg = optarg;

		switch (opt) {
		case OPT_SOCKET:
			set_once(&o->socket, arg, "--socket", err, sizeof(err));
			break;
		case OPT_PRINCIPAL:
			set_once(&o->principal, arg, "--principal", err,
				 sizeof(err));
			break;
		case OPT_SESSION:
			set_once(&o->session, arg, "--session", err,
				 sizeof(err));
			break;
		case OPT_REQUEST_ID:
			set_once(&o->request_id, arg, "--request-id", err,
				 sizeof(err));
			break;
		case OPT_TOOL:
			set_once(&o->tool, arg, "--tool", err, sizeof(err));
			break;
		case OPT_META:
			if (strchr(arg, '=') == NULL && err[0] == '\0')
				snprintf(err, sizeof(err),
					 "--meta needs KEY=VALUE, got '%s'",
					 arg);
			o->meta[o->n_meta++] = optarg;
			break;
		case OPT_TIMEOUT:
			if (set_once(&timeout, arg, "--timeout", err,
				     sizeof(err)) == 0 &&
			    parse_timeout(arg, &o->timeout_ns) != 0 &&
			    err[0] == '\0')
				snprintf(err, sizeof(err),
					 "--timeout needs a number of seconds "
					 "greater than 0, got '%s'", arg);
			break;
		case OPT_WAIT:
			if (set_once(&wait, arg, "--wait", err,
				     sizeof(err)) == 0 &&
			    (parse_timeout(arg, &o->wait_ns) != 0 ||
			     o->wait_ns > WAIT_MAX_S * NSEC) &&
			    err[0] == '\0')
				snprintf(err, sizeof(err),
					 "--wait needs a number of seconds "
					 "greater than 0 and at most %d, got "
					 "'%s'", WAIT_MAX_S, arg);
			break;
		case OPT_JSON:
			o->json = true;
			break;
		case 'h':
			help = true;
			break;
		case OPT_VERSION:
			version = true;
			break;
		case ':':
			if (err[0] == '\0')
				snprintf(err, sizeof(err),
					 "option '%s' needs a value",
					 argv[optind - 1]);
			break;
		default:
			if (err[0] != '\0')
				break;
			if (optopt > 0 && optopt < 256)
				snprintf(err, sizeof(err),
					 "unknown option '-%c'", optopt);
			else
				snprintf(err, sizeof(err),
					 "unknown option '%s'",
					 argv[optind - 1]);
			break;
		}
	}
	if (help) {
		fputs(usage_text, stdout);
		return fflush(stdout) == 0 ? 0 : EXIT_INTERNAL;
	}
	if (version) {
		puts("carmy-run " PACKAGE_VERSION);
		return fflush(stdout) == 0 ? 0 : EXIT_INTERNAL;
	}
	o->cmd = argv + optind;
	if (err[0] == '\0') {
		if (o->principal == NULL)
			snprintf(err, sizeof(err), "--principal is required");
		else if (o->session == NULL)
			snprintf(err, sizeof(err), "--session is required");
		else if (o->request_id == NULL)
			snprintf(err, sizeof(err), "--request-id is required");
		else if (o->cmd[0] == NULL)
			snprintf(err, sizeof(err), "COMMAND is missing");
	}
	if (err[0] == '\0')
		return -1;
	if (!o->json)
		strncat(err, " (see carmy-run --help)",
			sizeof(err) - strlen(err) - 1);
	return report(o, EXIT_USAGE, "USAGE", err, NULL, NULL);
}

/* A second --principal (or the like) is more likely a mistake in a script
 * than a wish to override, and the identity must be exactly what was
 * meant. Returns 0 if val was stored. */
static int set_once(const char **dst, const char *val, const char *name,
		    char *err, size_t err_len)
{
	if (*dst != NULL) {
		if (err[0] == '\0')
			snprintf(err, err_len, "%s given twice", name);
		return -1;
	}
	*dst = val;
	return 0;
}

/* Plain decimal seconds ("5", "0.3", ".25"): no signs, exponents, hex or
 * infinities as strtod() would allow. Digits past nanoseconds are
 * ignored. */
static int parse_timeout(const char *s, uint64_t *ns)
{
	uint64_t sec = 0, frac = 0, scale = NSEC / 10;
	size_t digits = 0;
	const char *p = s;

	for (; *p >= '0' && *p <= '9'; p++, digits++) {
		sec = sec * 10 + (uint64_t)(*p - '0');
		if (sec > TIMEOUT_MAX_S)
			return -1;
	}
	if (*p == '.') {
		for (p++; *p >= '0' && *p <= '9'; p++, digits++) {
			frac += (uint64_t)(*p - '0') * scale;
			scale /= 10;
		}
	}
	if (*p != '\0' || digits == 0)
		return -1;
	*ns = sec * NSEC + frac;
	return *ns > 0 ? 0 : -1;
}

/*
 * With one of fds 0-2 closed, pipe2() would hand out that number, and the
 * capture pipe would collide with COMMAND's standard streams. /dev/null
 * fills the gap, as a closed stream would have behaved much like it.
 */
static int std_fds_open(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		int n;

		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		n = open("/dev/null", O_RDWR);
		if (n < 0)
			return -errno;
		if (n != fd) {	/* lower fds are open, so it cannot be */
			close(n);
			return -EBADF;
		}
	}
	return 0;
}

static bool id_ok(const char *s)
{
	size_t len = strlen(s);

	return len >= 1 && len <= CARMY_ID_MAX;
}

/* ------------------------------------------------------------ the call */

static int pack_args(const struct opts *o, msgpack_sbuffer *sb)
{
	msgpack_packer pk;
	size_t n = 0;

	while (o->cmd[1 + n] != NULL)
		n++;
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	if (msgpack_pack_array(&pk, n) != 0)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const char *a = o->cmd[1 + i];
		size_t len = strlen(a);

		if (msgpack_pack_str(&pk, len) != 0 ||
		    msgpack_pack_str_body(&pk, a, len) != 0)
			return -ENOMEM;
	}
	return 0;
}

/* Order --meta pairs by KEY (the bytes before the first '='). */
static int key_cmp(const void *a, const void *b)
{
	const char *x = *(const char *const *)a, *y = *(const char *const *)b;
	size_t xl = strcspn(x, "="), yl = strcspn(y, "=");
	int d = memcmp(x, y, xl < yl ? xl : yl);

	return d != 0 ? d : (xl > yl) - (xl < yl);
}

/*
 * A --meta KEY given twice is refused as INVALID_ARGUMENTS, as libcarmy
 * would refuse the map, but named: libcarmy can only say that the bytes
 * are not one valid msgpack object. Returns 0, or CARMY_EINVALID_ARGS
 * with the sentence in why; -ENOMEM.
 */
static int meta_twice(const struct opts *o, char *why, size_t len)
{
	const char **keys;
	int rc = 0;

	if (o->n_meta < 2)
		return 0;
	keys = malloc(o->n_meta * sizeof(*keys));
	if (keys == NULL)
		return -ENOMEM;
	memcpy(keys, o->meta, o->n_meta * sizeof(*keys));
	qsort(keys, o->n_meta, sizeof(*keys), key_cmp);
	for (size_t i = 1; i < o->n_meta && rc == 0; i++) {
		if (key_cmp(&keys[i - 1], &keys[i]) != 0)
			continue;
		snprintf(why, len, "--meta KEY given twice: '%.*s'",
			 (int)strcspn(keys[i], "="), keys[i]);
		rc = CARMY_EINVALID_ARGS;
	}
	free(keys);
	return rc;
}

/* Always a map, even an empty one, so that leaving out --meta is one
 * fingerprint and not two. Its keys are unique (meta_twice()). */
static int pack_meta(const struct opts *o, msgpack_sbuffer *sb)
{
	msgpack_packer pk;

	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	if (msgpack_pack_map(&pk, o->n_meta) != 0)
		return -ENOMEM;
	for (size_t i = 0; i < o->n_meta; i++) {
		const char *kv = o->meta[i];
		const char *eq = strchr(kv, '=');
		size_t klen = (size_t)(eq - kv), vlen = strlen(eq + 1);

		if (msgpack_pack_str(&pk, klen) != 0 ||
		    msgpack_pack_str_body(&pk, kv, klen) != 0 ||
		    msgpack_pack_str(&pk, vlen) != 0 ||
		    msgpack_pack_str_body(&pk, eq + 1, vlen) != 0)
			return -ENOMEM;
	}
	return 0;
}

static void fill_call(const struct opts *o, const msgpack_sbuffer *args,
		      const msgpack_sbuffer *meta, struct carmy_call *call)
{
	const char *tool = o->tool;

	if (tool == NULL) {
		const char *slash = strrchr(o->cmd[0], '/');

		tool = slash != NULL ? slash + 1 : o->cmd[0];
	}
	memset(call, 0, sizeof(*call));
	call->principal = o->principal;
	call->principal_len = strlen(o->principal);
	call->session = o->session;
	call->session_len = strlen(o->session);
	call->request_id = o->request_id;
	call->request_id_len = strlen(o->request_id);
	call->tool = tool;
	call->tool_len = strlen(tool);
	call->args = args->data;
	call->args_len = args->size;
	call->meta = meta->data;
	call->meta_len = meta->size;
}

/* The identity is ours: run COMMAND and record what it did. */
static int run_reserved(carmy_t *c, const struct opts *o,
			struct carmy_reservation *r,
			const struct cancelling *k)
{
	struct capture cap = { 0 };
	struct lost lost = { 0 };
	enum run_outcome out;
	char msg[512], why[256];
	int err = 0, rc, status;

	cap.keep = carmy_max_result(c) + 1;
	if (cap.keep < HEAD_LEN)
		cap.keep = HEAD_LEN;
	cap.cap = cap.keep < 4096 ? cap.keep : 4096;
	cap.len = HEAD_LEN;
	cap.buf = malloc(cap.cap);
	if ((err = cancel_pending(k)) != 0) {
		out = RUN_CANCELLED;	/* err: the signal */
	} else if (cap.buf == NULL) {
		out = RUN_NOT_STARTED;
		err = ENOMEM;
	} else {
		out = run_command(o, k, &cap, &err, &lost);
	}

	switch (out) {
	case RUN_DONE:
		break;
	case RUN_NOT_STARTED:
	case RUN_EXEC_FAILED:
	case RUN_CANCELLED:
		free(cap.buf);
		if (out == RUN_CANCELLED)
			snprintf(why, sizeof(why), "cancelled by %s",
				 sig_name(err));
		else
			snprintf(why, sizeof(why), "%s", strerror(err));
		/* Given back only once carmyd has it: while carmyd restarts,
		 * asked again (the reservation stays live meanwhile). */
		rc = carmy_release(c, r);
		for (struct retry t = { 0 };
		     rc == CARMY_EUNAVAILABLE && again(&t);)
			rc = carmy_release(c, r);
		if (rc == CARMY_EUNAVAILABLE) {
			snprintf(msg, sizeof(msg),
				 "carmyd could not be reached. COMMAND did "
				 "not run (%s), but its reservation could not "
				 "be released: the call turns uncertain when "
				 "carmy-run exits (carmyctl resolve %s "
				 "--not-committed frees it).", why,
				 r->execution_id);
			return report(o, EXIT_INTERNAL, carmy_errname(rc),
				      msg, r->execution_id, NULL);
		}
		if (rc == CARMY_ESTORE) {
			snprintf(msg, sizeof(msg),
				 "COMMAND did not run (%s) and its reservation "
				 "was released on this host, but carmyd's store "
				 "did not record the release: after a reboot "
				 "the call would be uncertain.", why);
			return report(o, exit_for(rc), carmy_errname(rc), msg,
				      r->execution_id, NULL);
		}
		if (rc != 0) {
			snprintf(msg, sizeof(msg),
				 "%s COMMAND did not run (%s), but its "
				 "reservation could not be released.",
				 carmy_strerror(rc), why);
			return report(o, exit_for(rc), carmy_errname(rc), msg,
				      r->execution_id, NULL);
		}
		if (out == RUN_CANCELLED) {
			snprintf(msg, sizeof(msg), "Cancelled by %s before "
				 "COMMAND started; nothing ran and the "
				 "reservation was released.", sig_name(err));
			return report(o, 128 + err, "CANCELLED", msg, NULL,
				      NULL);
		}
		if (out == RUN_NOT_STARTED)
			return report(o, EXIT_INTERNAL, carmy_errname(-err),
				      carmy_strerror(-err), NULL, NULL);
		snprintf(msg, sizeof(msg),
			 "cannot run '%s': %s; nothing ran and the "
			 "reservation was released.", o->cmd[0], strerror(err));
		/* As a shell: 127 if there is no such file, 126 if there is
		 * one that cannot be run (mode, busy, format, size...). */
		if (err != ENOENT && err != ENOTDIR)
			return report(o, EXIT_NOT_EXECUTABLE,
				      "COMMAND_NOT_EXECUTABLE", msg, NULL,
				      NULL);
		return report(o, EXIT_NOT_FOUND, "COMMAND_NOT_FOUND", msg,
			      NULL, NULL);
	case RUN_LOST:
		free(cap.buf);
		/* Not released and not completed: closing the connection
		 * leaves the entry uncertain, which is the truth. */
		return report_lost(o, &lost, r);
	}

	runfmt_put_head(cap.buf, cap.exit_code);
	/* A durable store that failed (its database restarting, say), or a
	 * carmyd not back from a restart within CARMY_RECONNECT_MS, keeps
	 * the reservation live: the same result is sent again, and recorded
	 * once (each try may itself wait for the store, or for carmyd). */
	rc = carmy_complete(c, r, cap.status, cap.buf, cap.len);
	for (struct retry t = { 0 };
	     (rc == CARMY_ESTORE || rc == CARMY_EUNAVAILABLE) && again(&t);)
		rc = carmy_complete(c, r, cap.status, cap.buf, cap.len);
	if (rc == 0)
		status = print_result(o, r->execution_id, cap.status, false,
				      cap.exit_code, cap.buf + HEAD_LEN,
				      cap.len - HEAD_LEN);
	else
		status = report_unrecorded(o, rc, r, &cap);
	free(cap.buf);
	return status;
}

/*
 * Sending a request about the reservation again: again() waits before
 * each try, 100 ms, then twice as long each time up to 1 s, and says no
 * once STORE_RETRY_MS have passed since its first call.
 */
static bool again(struct retry *t)
{
	struct timespec now, nap;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (t->end_ns == 0) {
		t->end_ns = (uint64_t)now.tv_sec * NSEC +
			    (uint64_t)now.tv_nsec + STORE_RETRY_MS * 1000000ull;
		t->ms = 100;
	} else if ((uint64_t)now.tv_sec * NSEC + (uint64_t)now.tv_nsec >=
		   t->end_ns) {
		return false;
	}
	nap.tv_sec = 0;
	nap.tv_nsec = (long)t->ms * 1000000;
	while (nanosleep(&nap, &nap) != 0 && errno == EINTR)
		;
	t->ms = t->ms * 2 > 1000 ? 1000 : t->ms * 2;
	return true;
}

static int replay(const struct opts *o, const struct carmy_reservation *r)
{
	const uint8_t *out;
	size_t len;
	int code;

	if (r->result_code != 0)
		return report(o, exit_for(r->result_code),
			      carmy_errname(r->result_code),
			      carmy_strerror(r->result_code), r->execution_id,
			      carmy_state_name(r->state));
	if (runfmt_read(r->result, r->result_len, &code, &out, &len) == 0)
		return print_result(o, r->execution_id, r->status, true, code,
				    out, len);
	/* Another client recorded this identity with the same fingerprint
	 * but not in carmy-run's format: there is no exit code to give. */
	return report(o, EXIT_INTERNAL, carmy_errname(CARMY_EPROTOCOL),
		      "The recorded result was not written by carmy-run.",
		      r->execution_id, carmy_state_name(r->state));
}

/* ------------------------------------------------------------ COMMAND */

/*
 * Run COMMAND under a watcher (supervise.c) and capture its output. While
 * it runs, SIGINT, SIGTERM and SIGHUP (those not ignored when we started)
 * cancel it: it and everything it started are killed, and the call is
 * recorded as cancelled (exit 128+N), replayed as such, as a timeout is.
 */
static enum run_outcome run_command(const struct opts *o,
				    const struct cancelling *k,
				    struct capture *cap, int *err,
				    struct lost *lost)
{
	struct supervised sv;
	enum run_outcome out;
	int rc, ws;

	/* So that what COMMAND starts comes to us should its watcher die;
	 * what was ours before it (a shell's job, inherited with its pid
	 * when the shell exec()ed us) is not COMMAND's, and is spared. */
	rc = sv_subreaper();
	if (rc == 0 && sv_spare() != 0)
		fprintf(stderr, "carmy-run: cannot list the children it was "
			"started with: should COMMAND be lost, they are "
			"killed with what it started\n");
	if (rc == 0)
		rc = sv_start(&sv, o->cmd, &k->old);
	if (rc != 0) {
		*err = rc > 0 ? rc : -rc;
		return rc > 0 ? RUN_EXEC_FAILED : RUN_NOT_STARTED;
	}
	out = collect(o, &sv, k->sfd, cap, err);
	ws = sv_finish(&sv, out != RUN_DONE);
	if (out == RUN_LOST) {
		/* Before the call is said uncertain: a watcher that died left
		 * us what COMMAND started (COMMAND died with it), and one
		 * still there killed what it could and left us the rest. */
		lost->err = *err;
		lost->watcher = ws;
		lost->left = sv_kill_orphans(false, SV_KILL_WAIT_MS);
	}
	return out;
}

/*
 * Block the cancelling signals, to be read from k->sfd while COMMAND runs;
 * COMMAND gets the mask from before. One we were started with ignored
 * (nohup) stays so. Without a signalfd they are left as they were: they
 * kill us, and the call is left uncertain.
 */
static void cancel_block(struct cancelling *k)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };

	sigemptyset(&k->set);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(*sigs); i++) {
		struct sigaction sa;

		if (sigaction(sigs[i], NULL, &sa) == 0 &&
		    sa.sa_handler != SIG_IGN)
			sigaddset(&k->set, sigs[i]);
	}
	sigprocmask(SIG_BLOCK, &k->set, &k->old);
	k->sfd = signalfd(-1, &k->set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (k->sfd < 0)
		sigprocmask(SIG_SETMASK, &k->old, NULL);
}

/* The cancelling signal that came while they were blocked, read and
 * consumed: 0 if none (or without a signalfd, when they kill us). */
static int cancel_pending(const struct cancelling *k)
{
	struct signalfd_siginfo si;

	if (k->sfd < 0 || read(k->sfd, &si, sizeof(si)) != sizeof(si))
		return 0;
	return (int)si.ssi_signo;
}

static const char *sig_name(int sig)
{
	switch (sig) {
	case SIGINT:
		return "SIGINT";
	case SIGTERM:
		return "SIGTERM";
	case SIGHUP:
		return "SIGHUP";
	default:
		return "a signal";
	}
}

/*
 * carmy_wait() for up to wait_ns, with the cancelling signals blocked: it
 * may reserve at its end, and a signal must not kill us then. So it waits
 * in slices of WAIT_SLICE_MS, and a signal that came during one ends the
 * wait after it (*sig, nothing reserved). Returns what carmy_wait()
 * returns.
 */
static int wait_running(carmy_t *c, const struct carmy_call *call,
			struct carmy_reservation *r, uint64_t wait_ns,
			const struct cancelling *k, int *sig)
{
	struct timespec t;
	uint64_t end, now;
	int rc;

	clock_gettime(CLOCK_MONOTONIC, &t);
	now = (uint64_t)t.tv_sec * NSEC + (uint64_t)t.tv_nsec;
	end = now + wait_ns;
	for (;;) {
		/* Rounded up: --wait 0.0005 waits, for a millisecond. */
		uint64_t ms = (end - now + 999999) / 1000000;

		if (k->sfd >= 0 && ms > WAIT_SLICE_MS)
			ms = WAIT_SLICE_MS;
		rc = carmy_wait(c, call, r, (int)ms);
		if (rc != CARMY_EUNCERTAIN || r->state != CARMY_STATE_RUNNING)
			return rc;
		if ((*sig = cancel_pending(k)) != 0)
			return rc;
		clock_gettime(CLOCK_MONOTONIC, &t);
		now = (uint64_t)t.tv_sec * NSEC + (uint64_t)t.tv_nsec;
		if (now >= end)
			return rc;
	}
}

/*
 * Capture COMMAND's standard output until it closes it and COMMAND has
 * ended, until the deadline, or until a cancelling signal. COMMAND's end is
 * its watcher's word (sv_ended), which also means its pid is never ours to
 * kill after it was reaped. At a deadline or a cancellation whatever still
 * runs of COMMAND is killed; if COMMAND itself had ended already (what is
 * left only holds its standard output open), its own status stands.
 * RUN_LOST, with *err the error, or 0 if the watcher ended without a word
 * (killed).
 */
static enum run_outcome collect(const struct opts *o, struct supervised *sv,
				int sfd, struct capture *cap, int *err)
{
	bool eof = false, exited = false, timed_out = false;
	bool ended_first = false;	/* heard of COMMAND's end before a
					 * cancelling signal, not with it */
	struct timespec deadline;
	int wstatus = 0, cancel = 0, rc, avail = 0;

	if (o->timeout_ns != 0) {
		clock_gettime(CLOCK_MONOTONIC, &deadline);
		deadline.tv_sec += (time_t)(o->timeout_ns / NSEC);
		deadline.tv_nsec += (long)(o->timeout_ns % NSEC);
		if (deadline.tv_nsec >= (long)NSEC) {
			deadline.tv_sec++;
			deadline.tv_nsec -= (long)NSEC;
		}
	}
	while ((!eof || !exited) && !timed_out && cancel == 0) {
		struct timespec left, *tmo = NULL;
		struct pollfd pfd[3];
		nfds_t n = 0;

		ended_first = exited;

		if (o->timeout_ns != 0) {
			if (!time_left(&deadline, &left)) {
				timed_out = true;
				break;
			}
			tmo = &left;
		}
		if (!eof)
			pfd[n++] = (struct pollfd){ sv->out, POLLIN, 0 };
		if (!exited)
			pfd[n++] = (struct pollfd){ sv->st, POLLIN, 0 };
		if (sfd >= 0)
			pfd[n++] = (struct pollfd){ sfd, POLLIN, 0 };
		rc = ppoll(pfd, n, tmo, NULL);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0) {
			*err = errno;
			return RUN_LOST;
		}
		for (nfds_t i = 0; i < n; i++) {
			if (pfd[i].revents == 0)
				continue;
			if (pfd[i].fd == sfd) {
				struct signalfd_siginfo si;

				if (read(sfd, &si, sizeof(si)) == sizeof(si))
					cancel = (int)si.ssi_signo;
			} else if (pfd[i].fd == sv->st) {
				rc = sv_ended(sv, &wstatus);
				if (rc <= 0) {
					*err = rc < 0 ? -rc : 0;
					return RUN_LOST;
				}
				exited = true;
			} else {
				rc = capture_read(sv->out, cap, SIZE_MAX);
				if (rc == 0) {
					eof = true;
				} else if (rc < 0 && rc != -EINTR) {
					*err = -rc;
					return RUN_LOST;
				}
			}
		}
	}
	if (timed_out || cancel != 0) {
		sv_kill(sv);
		if (!exited) {
			rc = sv_ended(sv, &wstatus);
			if (rc <= 0) {
				*err = rc < 0 ? -rc : 0;
				return RUN_LOST;
			}
		}
		/* What reached the pipe before the kill is the output so
		 * far; a writer that escaped the kill must not keep us. */
		if (ioctl(sv->out, FIONREAD, &avail) == 0) {
			while (avail > 0) {
				rc = capture_read(sv->out, cap, (size_t)avail);
				if (rc == -EINTR)
					continue;
				if (rc <= 0)
					break;
				avail -= rc;
			}
		}
	}
	/* Killed, by us or by the signal that cancels (a terminal's ^C
	 * reaches COMMAND too, and we may hear of both at once), or ended
	 * on its own before the kill came: then its own status stands. */
	if (cancel != 0 && !ended_first && WIFSIGNALED(wstatus)) {
		cap->exit_code = 128 + cancel;
		cap->status = CARMY_STATUS_CANCELLED;
	} else if (!exited && cancel == 0 && WIFSIGNALED(wstatus) &&
		   WTERMSIG(wstatus) == SIGKILL) {
		cap->exit_code = EXIT_TIMED_OUT;
		cap->status = CARMY_STATUS_TIMED_OUT;
	} else {
		if (WIFSIGNALED(wstatus))
			cap->exit_code = 128 + WTERMSIG(wstatus);
		else
			cap->exit_code = WEXITSTATUS(wstatus);
		cap->status = cap->exit_code == 0 ? CARMY_STATUS_COMPLETED :
						    CARMY_STATUS_FAILED;
	}
	return RUN_DONE;
}

/*
 * One read of at most max bytes. Bytes beyond cap->keep are read and
 * dropped, so COMMAND is never blocked on a full pipe. Returns the count
 * read, 0 at end of file, or -errno.
 */
static int capture_read(int fd, struct capture *cap, size_t max)
{
	uint8_t scratch[16384];
	void *dst = scratch;
	size_t room = sizeof(scratch);
	ssize_t n;

	if (cap->len < cap->keep) {
		if (cap->len == cap->cap) {
			size_t ncap = cap->cap * 2 < cap->keep ? cap->cap * 2 :
								 cap->keep;
			uint8_t *nbuf = realloc(cap->buf, ncap);

			if (nbuf == NULL)
				return -ENOMEM;
			cap->buf = nbuf;
			cap->cap = ncap;
		}
		dst = cap->buf + cap->len;
		room = cap->cap - cap->len;
	}
	if (room > max)
		room = max;
	if (room > READ_MAX)
		room = READ_MAX;
	n = read(fd, dst, room);
	if (n < 0)
		return -errno;
	if (dst != scratch)
		cap->len += (size_t)n;
	return (int)n;
}

static bool time_left(const struct timespec *deadline, struct timespec *left)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	left->tv_sec = deadline->tv_sec - now.tv_sec;
	left->tv_nsec = deadline->tv_nsec - now.tv_nsec;
	if (left->tv_nsec < 0) {
		left->tv_sec--;
		left->tv_nsec += (long)NSEC;
	}
	return left->tv_sec > 0 || (left->tv_sec == 0 && left->tv_nsec > 0);
}

/* ------------------------------------------------------------ output */

/* COMMAND's output, recorded or replayed. Returns the status to exit with. */
static int print_result(const struct opts *o, const char *exec_id,
			int status, bool replayed, int exit_code,
			const void *out, size_t len)
{
	int rc = 0;

	/* A reader gone is a write error (EPIPE), said as such: killed by
	 * SIGPIPE we would exit as if COMMAND had been. COMMAND has ended,
	 * or never ran here: it does not inherit this. */
	signal(SIGPIPE, SIG_IGN);

	if (o->json) {
		fputs("{\"execution_id\":", stdout);
		json_put_str(stdout, exec_id);
		fputs(",\"status\":", stdout);
		json_put_str(stdout, carmy_status_name(status));
		printf(",\"replayed\":%s,\"exit_code\":%d,\"stdout\":",
		       replayed ? "true" : "false", exit_code);
		json_put_bytes(stdout, out, len);
		fputs("}\n", stdout);
		if (fflush(stdout) == 0 && !ferror(stdout))
			return exit_code;
	} else if ((rc = io_write_all(STDOUT_FILENO, out, len)) == 0) {
		return exit_code;
	}
	if (rc == 0)
		rc = -errno;	/* stdio's error */
	/* The result is recorded, so a retry will print it again. */
	fprintf(stderr, "carmy-run: %s: cannot write standard output: %s\n",
		carmy_errname(rc), strerror(-rc));
	return EXIT_INTERNAL;
}

/* Print an error, as a line on stderr or as the one JSON object on stdout,
 * and return exit_status. exec_id and state may be NULL (unknown). */
static int report(const struct opts *o, int exit_status, const char *code,
		  const char *msg, const char *exec_id, const char *state)
{
	signal(SIGPIPE, SIG_IGN);	/* as in print_result() */
	if (exec_id != NULL && exec_id[0] == '\0')
		exec_id = NULL;
	if (o->json) {
		fputs("{\"error\":{\"code\":", stdout);
		json_put_str(stdout, code);
		fputs(",\"message\":", stdout);
		json_put_str(stdout, msg);
		if (exec_id != NULL) {
			fputs(",\"execution_id\":", stdout);
			json_put_str(stdout, exec_id);
		}
		if (state != NULL) {
			fputs(",\"state\":", stdout);
			json_put_str(stdout, state);
		}
		fputs("}}\n", stdout);
		if (fflush(stdout) == 0 && !ferror(stdout))
			return exit_status;
		/* Said where it can still be read. */
		fprintf(stderr, "carmy-run: cannot write standard output: "
			"%s\n", strerror(errno));
	}
	fprintf(stderr, "carmy-run: %s: %s", code, msg);
	if (exec_id != NULL && state != NULL)
		fprintf(stderr, " (execution %s, %s)", exec_id, state);
	else if (exec_id != NULL)
		fprintf(stderr, " (execution %s)", exec_id);
	fputc('\n', stderr);
	return exit_status;
}

/* A libcarmy code, with the existing entry when begin described one;
 * why, if not "", says more than carmy_strerror(code). */
static int report_code(const struct opts *o, int code,
		       const struct carmy_reservation *r, const char *why)
{
	bool entry = code == CARMY_ECONFLICT || code == CARMY_EUNCERTAIN;
	char msg[512];

	/* Which path, uid or mode it was: libcarmy keeps it for us. */
	if (code == CARMY_EUNTRUSTED) {
		snprintf(msg, sizeof(msg), "%s (%s)", carmy_trust_detail(),
			 carmy_strerror(code));
		return report(o, EXIT_UNTRUSTED, carmy_errname(code), msg,
			      NULL, NULL);
	}
	return report(o, exit_for(code), carmy_errname(code),
		      why[0] != '\0' ? why : carmy_strerror(code),
		      entry ? r->execution_id : NULL,
		      entry ? carmy_state_name(r->state) : NULL);
}

/*
 * COMMAND ran, and its result was not recorded as it ended (code, from
 * carmy_complete()): what it did is said, with the exit code and the
 * output, for an operator to resolve the call by (carmyctl resolve). Over
 * --max-result, the call is recorded as failed with that code: its exit
 * code is said, its output, cut short, is not. A --max-result too small
 * for the exit code alone (cap->keep is never under HEAD_LEN, and is
 * HEAD_LEN only then) refuses every result, which is what to say.
 */
static int report_unrecorded(const struct opts *o, int code,
			     const struct carmy_reservation *r,
			     const struct capture *cap)
{
	bool large = code == CARMY_ERESULT_TOO_LARGE;
	const void *out = cap->buf + HEAD_LEN;
	size_t len = cap->len - HEAD_LEN;
	/* carmyd away (not back from a restart): COMMAND ran all the same,
	 * so not 69, whose COMMAND did not. */
	int status = code == CARMY_EUNAVAILABLE ? EXIT_INTERNAL :
						  exit_for(code);
	const char *why = code == CARMY_EUNAVAILABLE ?
		"carmyd could not be reached to record the result." :
		carmy_strerror(code);
	char msg[1024];

	if (large && cap->keep <= HEAD_LEN)
		snprintf(msg, sizeof(msg), "%s COMMAND ran and exited %d; "
			 "carmyd's --max-result is under %d bytes, too small "
			 "for even the exit code (%d bytes) a carmy-run "
			 "result starts with, so every result is too large "
			 "whatever the output: the call is recorded as "
			 "failed with this error, and replayed as such. Run "
			 "carmyd with a larger --max-result.",
			 carmy_strerror(code), cap->exit_code, HEAD_LEN,
			 HEAD_LEN);
	else if (large)
		snprintf(msg, sizeof(msg), "%s COMMAND ran and exited %d; "
			 "its output was over carmyd's --max-result, so the "
			 "call is recorded as failed with this error, and "
			 "replayed as such.", carmy_strerror(code),
			 cap->exit_code);
	else
		snprintf(msg, sizeof(msg), "%s COMMAND ran and exited %d, "
			 "and its result is not recorded: the identity "
			 "reports EXECUTION_UNCERTAIN until it is resolved "
			 "(carmyctl resolve %s --committed --exit-code %d "
			 "--stdout-file FILE, with the output %s, or "
			 "--not-committed).", why,
			 cap->exit_code, r->execution_id, cap->exit_code,
			 o->json ? "in \"stdout\"" : "on standard output");
	signal(SIGPIPE, SIG_IGN);
	if (!o->json) {
		if (!large && io_write_all(STDOUT_FILENO, out, len) != 0)
			fprintf(stderr, "carmy-run: cannot write standard "
				"output: %s\n", strerror(errno));
		return report(o, status, carmy_errname(code), msg,
			      r->execution_id, large ?
			      carmy_state_name(CARMY_STATE_COMPLETED) : NULL);
	}
	fputs("{\"error\":{\"code\":", stdout);
	json_put_str(stdout, carmy_errname(code));
	fputs(",\"message\":", stdout);
	json_put_str(stdout, msg);
	fputs(",\"execution_id\":", stdout);
	json_put_str(stdout, r->execution_id);
	if (large) {
		fputs(",\"state\":", stdout);
		json_put_str(stdout, carmy_state_name(CARMY_STATE_COMPLETED));
	}
	printf(",\"exit_code\":%d", cap->exit_code);
	if (!large) {
		fputs(",\"stdout\":", stdout);
		json_put_bytes(stdout, out, len);
	}
	fputs("}}\n", stdout);
	if (fflush(stdout) != 0 || ferror(stdout))
		fprintf(stderr, "carmy-run: %s: %s (cannot write standard "
			"output: %s)\n", carmy_errname(code), msg,
			strerror(errno));
	return status;
}

/*
 * COMMAND was lost (RUN_LOST): what happened, and that the call is
 * uncertain, to be resolved. What COMMAND started was killed already
 * (run_command()): the operator who finds no effect and resolves the call
 * as not run cannot be followed by one.
 */
static int report_lost(const struct opts *o, const struct lost *lost,
		       const struct carmy_reservation *r)
{
	char what[160], stopped[192], msg[1024];
	int ws = lost->watcher;

	if (lost->err != 0)
		snprintf(what, sizeof(what), "carmy-run lost track of COMMAND "
			 "(%s)", strerror(lost->err));
	else if (ws >= 0 && WIFSIGNALED(ws))
		snprintf(what, sizeof(what), "The process watching COMMAND "
			 "died (signal %d) while COMMAND ran", WTERMSIG(ws));
	else if (ws >= 0 && WIFEXITED(ws))
		snprintf(what, sizeof(what), "The process watching COMMAND "
			 "ended (status %d) while COMMAND ran",
			 WEXITSTATUS(ws));
	else
		snprintf(what, sizeof(what), "The process watching COMMAND "
			 "is gone");
	if (lost->left == 0)
		snprintf(stopped, sizeof(stopped), "COMMAND and everything "
			 "it started were stopped");
	else if (lost->left > 0)
		snprintf(stopped, sizeof(stopped), "COMMAND was stopped, but "
			 "%d of the processes it started could not be (another "
			 "user's, or stuck) and may still run", lost->left);
	else
		snprintf(stopped, sizeof(stopped), "COMMAND was stopped, but "
			 "the processes it started could not be listed (%s) "
			 "and may still run", strerror(-lost->left));
	snprintf(msg, sizeof(msg), "%s; %s. Whether its effect happened is "
		 "not known: the identity reports EXECUTION_UNCERTAIN until "
		 "it is resolved (carmyctl resolve %s --committed --exit-code "
		 "N, or --not-committed).", what, stopped, r->execution_id);
	return report(o, EXIT_INTERNAL, "COMMAND_LOST", msg, r->execution_id,
		      NULL);
}

/*
 * Name the socket a failed connection was tried on, --socket or the
 * default one ($CARMY_SOCKET...), in front of code's sentence: an operator
 * needs to know where carmy-run looked. DAEMON_UNTRUSTED's detail names
 * its path already.
 */
static void name_socket(const struct opts *o, int code, char *why,
			size_t len)
{
	char dflt[4096];
	const char *path = o->socket;

	if (code == CARMY_EUNTRUSTED)
		return;
	if (path == NULL) {
		/* Cut short, it still says where. */
		(void)carmy_default_socket(dflt, sizeof(dflt));
		path = dflt;
	}
	/* carmyd answered, and its segment could not be found. */
	if (code == -ENOENT)
		snprintf(why, len, "socket %s: the segment carmyd named is not "
			 "in /dev/shm (removed while carmyd ran? its log says): "
			 "restart carmyd", path);
	else
		snprintf(why, len, "socket %s: %s", path,
			 carmy_strerror(code));
}

static int exit_for(int code)
{
	switch (code) {
	case CARMY_EINVALID_ID:
		return EXIT_INVALID_ID;
	case CARMY_EINVALID_ARGS:
		return EXIT_INVALID_ARGS;
	case CARMY_EUNAVAILABLE:
	case CARMY_ETOO_MANY_CLIENTS:	/* nothing ran: try again later */
		return EXIT_UNAVAILABLE;
	case CARMY_ECONFLICT:
		return EXIT_CONFLICT;
	case CARMY_EUNCERTAIN:
		return EXIT_UNCERTAIN;
	case CARMY_ECAPACITY:
		return EXIT_CAPACITY;
	case CARMY_ERESULT_TOO_LARGE:
		return EXIT_TOO_LARGE;
	case CARMY_ESTORE:
		return EXIT_STORE;
	case CARMY_EUNTRUSTED:
		return EXIT_UNTRUSTED;
	default:
		return EXIT_INTERNAL;
	}
}
