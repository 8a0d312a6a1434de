/*
 * main.c - carmy-gateway: options, listening sockets, start and stop.
 *
 *   carmy-gateway --tools FILE [--socket PATH] [--listen ADDR:PORT |
 *                 --listen unix:PATH]... [--tokens FILE] [--foreground]
 *                 [--threads N] [--max-running N] [--request-timeout S]
 *                 [--log-level LEVEL]
 *
 * Every option and both files are checked before anything is served; a
 * mistake stops the gateway with one line naming it (exit 64: a wrong
 * option, --listen ADDR:PORT without --tokens, a file that is wrong or
 * that others may write; 1 when a socket cannot be opened). SIGTERM and
 * SIGINT stop it: it stops accepting connections, answers any further
 * request on those open 503 (http.c), waits for the executions running
 * (each ends by its tool's timeout at the latest) and for every answer to
 * be sent, and exits 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <curl/curl.h>

#include "common/daemonize.h"
#include "common/log.h"
#include "common/service.h"
#include "gateway/gateway.h"
#include "tools/supervise.h"

#define EXIT_USAGE 64
#define LISTEN_MAX 16
#define THREADS_MAX 256

extern char **environ;

struct opts {
	const char *socket;
	const char *tools;
	const char *tokens;
	const char *listen[LISTEN_MAX];
	size_t n_listen;
	bool listen_given;
	bool foreground;
	unsigned threads;
	unsigned max_running;
	unsigned request_timeout;	/* seconds */
};

static const char usage_text[] =
	"usage: carmy-gateway --tools FILE [--socket PATH]\n"
	"                     [--listen ADDR:PORT | --listen unix:PATH]...\n"
	"                     [--tokens FILE] [--foreground] [--threads N]\n"
	"                     [--max-running N] [--request-timeout S]\n"
	"                     [--log-level LEVEL]\n"
	"Serve Carmy's HTTP contract (carmy/1): POST /agent/execute runs a\n"
	"tool of FILE at most once per (principal, session, request_id).\n"
	"\n"
	"  --tools FILE       the tools, JSON: {\"tools\": {\"NAME\": {\n"
	"                     \"command\": [\"/path/prog\", \"arg\"] or\n"
	"                     \"url\": \"http://host:port/path\",\n"
	"                     \"timeout\": SECONDS, \"description\": \"...\",\n"
	"                     \"input_schema\": {...},\n"
	"                     \"fingerprint_headers\": [\"X-Header\"]}}},\n"
	"                     in a file owned by the gateway's user or root\n"
	"                     that only its owner may write\n"
	"  --socket PATH      carmyd's socket (default: $CARMY_SOCKET, else\n"
	"                     $XDG_RUNTIME_DIR/carmy/carmyd.sock, else\n"
	"                     /tmp/carmy-$UID/carmyd.sock)\n"
	"  --listen ADDR:PORT a TCP address to serve (default 127.0.0.1:8080;\n"
	"                     port 0: any free port); needs --tokens\n"
	"  --listen unix:PATH a Unix socket to serve (mode 0600); without\n"
	"                     --tokens a peer's principal is its uid,\n"
	"                     \"uid:N\". --listen may be given up to 16\n"
	"                     times; sockets from systemd (LISTEN_FDS)\n"
	"                     are served instead\n"
	"  --tokens FILE      bearer tokens, JSON {\"tokens\": {\"TOKEN\":\n"
	"                     \"PRINCIPAL\"}}, in such a file that only its\n"
	"                     owner may read\n"
	"  --foreground       stay in the foreground; print one line\n"
	"                     \"carmy-gateway ready listen=... pid=...\" once\n"
	"                     requests are accepted\n"
	"  --threads N        polling threads per listener (default: CPUs, at\n"
	"                     most 8); tools run on threads of their own\n"
	"  --max-running N    calls given a thread of their own at once (a\n"
	"                     tool running, a begin waiting for carmyd, a\n"
	"                     Prefer: wait); past it a call is refused 503\n"
	"                     OVERLOADED with nothing reserved (default 128,\n"
	"                     at most 4096)\n"
	"  --request-timeout S  close a connection idle for S seconds, or\n"
	"                     whose body takes longer than S (default 60)\n"
	"  --log-level LEVEL  error, warn, info (default) or debug\n"
	"  -h, --help         print this help and exit\n"
	"  --version          print the version and exit\n";

static int usage_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "carmy-gateway: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see carmy-gateway --help)\n");
	return EXIT_USAGE;
}

/* A decimal 1..max into *out, given once (*seen): 0, or -1. */
static int count(const char *s, long max, bool *seen, unsigned *out)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(s, &end, 10);
	if (*seen || errno != 0 || end == s || *end != '\0' || n < 1 ||
	    n > max)
		return -1;
	*seen = true;
	*out = (unsigned)n;
	return 0;
}

/* -1 to go on, or the status to exit with. */
static int parse_opts(int argc, char **argv, struct opts *o)
{
	enum { O_SOCKET = 256, O_LISTEN, O_TOOLS, O_TOKENS, O_FOREGROUND,
	       O_THREADS, O_LOG_LEVEL, O_VERSION, O_REQUEST_TIMEOUT,
	       O_MAX_RUNNING };
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "listen", required_argument, NULL, O_LISTEN },
		{ "tools", required_argument, NULL, O_TOOLS },
		{ "tokens", required_argument, NULL, O_TOKENS },
		{ "foreground", no_argument, NULL, O_FOREGROUND },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "max-running", required_argument, NULL, O_MAX_RUNNING },
		{ "request-timeout", required_argument, NULL,
		  O_REQUEST_TIMEOUT },
		{ "log-level", required_argument, NULL, O_LOG_LEVEL },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, O_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	const char **once[] = { [O_SOCKET - 256] = &o->socket,
				[O_TOOLS - 256] = &o->tools,
				[O_TOKENS - 256] = &o->tokens };
	static const char *const names[] = { [O_SOCKET - 256] = "--socket",
					     [O_TOOLS - 256] = "--tools",
					     [O_TOKENS - 256] = "--tokens" };
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	bool threads_set = false, timeout_set = false, running_set = false;
	int opt;

	memset(o, 0, sizeof(*o));
	o->threads = cpus < 1 ? 1 : cpus > 8 ? 8 : (unsigned)cpus;
	o->request_timeout = 60;
	o->max_running = GW_MAX_RUNNING_DEFAULT;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (opt) {
		case O_SOCKET:
		case O_TOOLS:
		case O_TOKENS:
			if (*once[opt - 256] != NULL)
				return usage_error("%s given twice",
						   names[opt - 256]);
			if (optarg[0] == '\0')
				return usage_error("%s needs a path",
						   names[opt - 256]);
			*once[opt - 256] = optarg;
			break;
		case O_LISTEN:
			if (o->n_listen == LISTEN_MAX)
				return usage_error("--listen given more than "
						   "%d times", LISTEN_MAX);
			o->listen[o->n_listen++] = optarg;
			break;
		case O_FOREGROUND:
			o->foreground = true;
			break;
		case O_THREADS:
			if (count(optarg, THREADS_MAX, &threads_set,
				  &o->threads) != 0)
				return usage_error("--threads needs a number "
						   "from 1 to %d, once, got "
						   "'%s'", THREADS_MAX, optarg);
			break;
		case O_MAX_RUNNING:
			if (count(optarg, GW_MAX_RUNNING_MAX, &running_set,
				  &o->max_running) != 0)
				return usage_error("--max-running needs a "
						   "number from 1 to %u, once, "
						   "got '%s'",
						   GW_MAX_RUNNING_MAX, optarg);
			break;
		case O_REQUEST_TIMEOUT:
			if (count(optarg, 3600, &timeout_set,
				  &o->request_timeout) != 0)
				return usage_error("--request-timeout needs a "
						   "number of seconds from 1 to "
						   "3600, once, got '%s'",
						   optarg);
			break;
		case O_LOG_LEVEL:
			if (log_parse_level(optarg) < 0)
				return usage_error("--log-level needs error, "
						   "warn, info or debug, got "
						   "'%s'", optarg);
			log_level = log_parse_level(optarg);
			break;
		case 'h':
			fputs(usage_text, stdout);
			return fflush(stdout) == 0 ? 0 : 1;
		case O_VERSION:
			puts("carmy-gateway " PACKAGE_VERSION);
			return fflush(stdout) == 0 ? 0 : 1;
		case ':':
			return usage_error("option '%s' needs a value",
					   argv[optind - 1]);
		default:
			return usage_error("unknown option '%s'",
					   argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (o->tools == NULL)
		return usage_error("%s", "--tools FILE is required");
	o->listen_given = o->n_listen > 0;
	if (o->n_listen == 0)
		o->listen[o->n_listen++] = "127.0.0.1:8080";
	return -1;
}

/* ------------------------------------------------------------ sockets */

/* A socket that cannot be opened: 1, the status to exit with. */
static int fail_errno(const char *what, const char *where)
{
	fprintf(stderr, "carmy-gateway: %s %s: %s\n", what, where,
		strerror(errno));
	return 1;
}

/* A Unix socket at path, after removing a stale one nobody listens on.
 * 0, or the status to exit with. */
static int listen_unix(const char *path, struct gw_listener *l)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd;

	if (path[0] != '/' || strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "carmy-gateway: --listen unix:%s: needs an "
			"absolute path shorter than %zu bytes\n", path,
			sizeof(sa.sun_path));
		return EXIT_USAGE;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return fail_errno("socket for", path);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			fprintf(stderr, "carmy-gateway: %s exists and is not a "
				"socket\n", path);
			close(fd);
			return 1;
		}
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			fprintf(stderr, "carmy-gateway: something already "
				"listens on %s\n", path);
			close(fd);
			return 1;
		}
		unlink(path);
		close(fd);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return fail_errno("socket for", path);
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    chmod(path, 0600) != 0 || listen(fd, SOMAXCONN) != 0) {
		fail_errno("cannot listen on", path);
		close(fd);
		return 1;
	}
	l->fd = fd;
	l->is_unix = true;
	l->owned = true;
	snprintf(l->name, sizeof(l->name), "unix:%s", path);
	return 0;
}

/* l->name and l->is_unix from the socket's own address ss. */
static void name_of(struct gw_listener *l, const struct sockaddr_storage *ss)
{
	char addr[INET6_ADDRSTRLEN] = "?";

	if (ss->ss_family == AF_UNIX) {
		const struct sockaddr_un *su = (const struct sockaddr_un *)ss;

		l->is_unix = true;
		snprintf(l->name, sizeof(l->name), "unix:%.*s",
			 (int)sizeof(su->sun_path), su->sun_path);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)ss;

		inet_ntop(AF_INET6, &s6->sin6_addr, addr, sizeof(addr));
		snprintf(l->name, sizeof(l->name), "[%s]:%u", addr,
			 ntohs(s6->sin6_port));
	} else {
		const struct sockaddr_in *s4 = (const void *)ss;

		inet_ntop(AF_INET, &s4->sin_addr, addr, sizeof(addr));
		snprintf(l->name, sizeof(l->name), "%s:%u", addr,
			 ntohs(s4->sin_port));
	}
}

/* "127.0.0.1:8080", "[::1]:8080", "localhost:0": 0, or the status to
 * exit with (a spec that is not one: EXIT_USAGE). */
static int listen_tcp(const char *spec, struct gw_listener *l)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[128], port[8];
	const char *colon = strrchr(spec, ':');
	struct addrinfo *ai;
	size_t hl;
	int fd, one = 1, rc;
	char *end;
	long p;

	if (colon == NULL || colon == spec || strlen(colon + 1) == 0 ||
	    strlen(colon + 1) > 5)
		goto bad;
	errno = 0;
	p = strtol(colon + 1, &end, 10);
	if (*end != '\0' || p < 0 || p > 65535 || colon[1] == '+' ||
	    colon[1] == '-')
		goto bad;
	hl = (size_t)(colon - spec);
	if (spec[0] == '[' && hl >= 2 && spec[hl - 1] == ']') {
		spec++;
		hl -= 2;
	}
	if (hl == 0 || hl >= sizeof(host))
		goto bad;
	memcpy(host, spec, hl);
	host[hl] = '\0';
	snprintf(port, sizeof(port), "%ld", p);
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0) {
		fprintf(stderr, "carmy-gateway: --listen %s: %s\n", spec,
			gai_strerror(rc));
		return 1;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
	    listen(fd, SOMAXCONN) != 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
		fail_errno("cannot listen on", spec);
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return 1;
	}
	freeaddrinfo(ai);
	l->fd = fd;
	name_of(l, &ss);
	return 0;
bad:
	fprintf(stderr, "carmy-gateway: --listen needs ADDR:PORT (port "
		"0-65535) or unix:PATH, got '%s'\n", spec);
	return EXIT_USAGE;
}

/*
 * Listening sockets handed over by systemd (or systemd-socket-activate):
 * $LISTEN_FDS of them from descriptor 3 on, when $LISTEN_PID is ours.
 * Returns how many (0: none were handed over), or -1 with *status the
 * status to exit with.
 */
static int inherited(struct gw_listener *ls, bool have_tokens, int *status)
{
	char why[128];
	int n = service_listen_fds(LISTEN_MAX, why, sizeof(why));

	*status = 1;
	if (n < 0) {
		fprintf(stderr, "carmy-gateway: %s\n", why);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = SERVICE_FDS_START + i, acc = 0, type = 0;
		socklen_t il = sizeof(int);

		ls[i].fd = fd;
		if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &il) != 0 ||
		    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &il) != 0 ||
		    acc == 0 || type != SOCK_STREAM ||
		    getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
			fprintf(stderr, "carmy-gateway: LISTEN_FDS: descriptor "
				"%d is not a listening stream socket\n", fd);
			return -1;
		}
		name_of(&ls[i], &ss);
		if (!ls[i].is_unix && !have_tokens) {
			fprintf(stderr, "carmy-gateway: the socket %s from "
				"systemd needs --tokens: a TCP peer has no uid "
				"to be its principal\n", ls[i].name);
			*status = EXIT_USAGE;
			return -1;
		}
	}
	return n;
}

/* 0, or the status to exit with: EXIT_USAGE for a mistake in the
 * options (a spec that is not one, TCP without --tokens), 1 for a socket
 * that cannot be opened. */
static int open_listeners(struct opts *o, struct gw_listener *ls,
			  bool have_tokens)
{
	int status, n = inherited(ls, have_tokens, &status);

	if (n != 0) {
		if (n > 0 && o->listen_given)
			fprintf(stderr, "carmy-gateway: serving the sockets "
				"systemd handed over; --listen is ignored\n");
		o->n_listen = n < 0 ? 0 : (size_t)n;
		return n < 0 ? status : 0;
	}
	for (size_t i = 0; i < o->n_listen; i++) {
		const char *s = o->listen[i];

		ls[i].fd = -1;
		if (strncmp(s, "unix:", 5) == 0) {
			status = listen_unix(s + 5, &ls[i]);
		} else if (!have_tokens) {
			fprintf(stderr, "carmy-gateway: --listen %s needs "
				"--tokens: a TCP peer has no uid to be its "
				"principal (or listen on unix:PATH)\n", s);
			status = EXIT_USAGE;
		} else {
			status = listen_tcp(s, &ls[i]);
		}
		if (status != 0)
			return status;
	}
	return 0;
}

static void close_listeners(const struct opts *o, struct gw_listener *ls)
{
	for (size_t i = 0; i < o->n_listen; i++) {
		if (ls[i].fd >= 0)
			close(ls[i].fd);
		if (ls[i].owned)
			unlink(ls[i].name + 5);
	}
}

/* ------------------------------------------------------------ start */

/*
 * How many connections each of n listeners keeps open at once. The soft
 * RLIMIT_NOFILE is raised to the hard one; GW_FD_RESERVE descriptors are
 * left for carmyd and the gateway's own, GW_FDS_PER_RUN for each of the
 * running calls (their tools' pipes, their upstreams), and the rest is
 * shared by the listeners, at most GW_CONNECTIONS_MAX each. Past it,
 * libmicrohttpd closes a new connection at once, without reading from it.
 */
static unsigned connection_limit(size_t n, unsigned running)
{
	rlim_t reserve = GW_FD_RESERVE + (rlim_t)GW_FDS_PER_RUN * running;
	struct rlimit rl;
	rlim_t fds;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	fds = rl.rlim_cur == RLIM_INFINITY ? (rlim_t)1 << 20 : rl.rlim_cur;
	fds = fds > reserve + 16 * n ? (fds - reserve) / n : 16;
	return fds < GW_CONNECTIONS_MAX ? (unsigned)fds : GW_CONNECTIONS_MAX;
}

/* Commands get the gateway's environment but for what it sets itself. */
static int snapshot_env(struct gateway *gw)
{
	static const char *const drop[] = {
		"CARMY_EXECUTION_ID=", "CARMY_PRINCIPAL=", "CARMY_SESSION=",
		"CARMY_REQUEST_ID=", "LISTEN_FDS=", "LISTEN_PID=",
		"LISTEN_FDNAMES=", "NOTIFY_SOCKET=",
	};
	size_t n = 0;

	for (char **e = environ; *e != NULL; e++)
		n++;
	gw->env = calloc(n + 1, sizeof(*gw->env));
	if (gw->env == NULL)
		return -1;
	for (char **e = environ; *e != NULL; e++) {
		bool keep = true;

		for (size_t i = 0; i < sizeof(drop) / sizeof(*drop); i++)
			keep &= strncmp(*e, drop[i], strlen(drop[i])) != 0;
		if (keep)
			gw->env[gw->n_env++] = *e;
	}
	return 0;
}

/* With fd 0, 1 or 2 closed, a pipe would take its number, and a tool's
 * standard streams would be mixed up with it. */
static int std_fds_open(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		int n;

		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		n = open("/dev/null", O_RDWR);
		if (n != fd) {
			if (n >= 0)
				close(n);
			return -1;
		}
	}
	return 0;
}

static void announce(const struct opts *o, const struct gw_listener *ls,
		     int ready_fd)
{
	char names[LISTEN_MAX * 170] = "";

	for (size_t i = 0; i < o->n_listen; i++) {
		if (i > 0)
			strcat(names, ",");
		strcat(names, ls[i].name);
	}
	log_info("ready: listen=%s, %zu tools, %u threads per listener, "
		 "at most %u calls running", names, ls[0].gw->tools.n,
		 o->threads, o->max_running);
	if (service_notify("READY=1") < 0)
		log_warn("cannot tell the service manager we are ready");
	if (o->foreground) {
		printf("carmy-gateway ready listen=%s pid=%d\n", names,
		       (int)getpid());
		fflush(stdout);
	} else if (write(ready_fd, "R", 1) != 1) {
		log_warn("cannot tell the parent we are ready");
	}
	if (ready_fd >= 0)
		close(ready_fd);
}

/* Until SIGTERM or SIGINT, which it returns; SIGHUP is logged and
 * ignored; SIGCHLD reaps what came to the gateway (command.c). */
static int serve(struct gateway *gw, const sigset_t *sigs)
{
	int sig = 0;

	for (;;) {
		if (sigwait(sigs, &sig) != 0)
			continue;
		if (sig == SIGTERM || sig == SIGINT)
			break;
		if (sig == SIGCHLD)
			gw_command_reap(gw);
		if (sig == SIGHUP)
			log_info("SIGHUP: nothing to reload; restart to read "
				 "the files again");
	}
	if (service_notify("STOPPING=1") < 0)
		log_debug("cannot tell the service manager we stop");
	return sig;
}

int main(int argc, char **argv)
{
	static struct gw_listener ls[LISTEN_MAX];
	static struct gateway gw;
	char err[512];
	int status, ready_fd = -1, rc, sig = 0;
	unsigned limit;
	sigset_t sigs;
	struct opts o;
	size_t i;

	log_ident = "carmy-gateway";
	sv_name_watchers(argc, argv);	/* before getopt reorders argv */
	status = parse_opts(argc, argv, &o);
	if (status >= 0)
		return status;
	log_detect_journal();
	if (gw_tools_load(o.tools, &gw.tools, err, sizeof(err)) != 0 ||
	    (o.tokens != NULL &&
	     gw_tokens_load(o.tokens, &gw.tokens, err, sizeof(err)) != 0)) {
		fprintf(stderr, "carmy-gateway: %s\n", err);
		return EXIT_USAGE;
	}
	gw.have_tokens = o.tokens != NULL;
	if (std_fds_open() != 0 || snapshot_env(&gw) != 0) {
		fprintf(stderr, "carmy-gateway: cannot set up: %s\n",
			strerror(errno));
		return 1;
	}
	/* Every thread inherits this mask: the signals are read here, with
	 * sigwait(), and a write to a tool that closed its input fails with
	 * EPIPE instead of killing the gateway. SIGCHLD too: a child that
	 * ends is reaped by the thread that started it, but an orphan (what
	 * a dying watcher left) or a watcher let go is reaped here. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGCHLD);
	sigaddset(&sigs, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	sigdelset(&sigs, SIGPIPE);
	signal(SIGCHLD, SIG_DFL);

	/* Every slot: systemd may hand over more sockets than --listen
	 * named, and open_listeners() then serves those instead. */
	for (i = 0; i < LISTEN_MAX; i++)
		ls[i].gw = &gw;
	status = open_listeners(&o, ls, gw.have_tokens);
	if (status != 0) {
		close_listeners(&o, ls);
		return status;
	}
	if (!o.foreground && daemonize("carmy-gateway", &ready_fd) != 0)
		return 1;
	/* After the fork: it is not inherited. */
	rc = gw_command_init(&gw);
	if (rc != 0) {
		log_error("cannot become a child subreaper, so the commands' "
			  "processes could outlive their calls: %s",
			  strerror(-rc));
		return 1;
	}
	/* libcurl's global state, before any thread (url tools). */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		log_error("cannot set up libcurl");
		return 1;
	}
	gw_run_init(&gw);
	gw.max_running = o.max_running;
	gw_http_init(&gw);
	gw_carmyd_init(&gw.carmyd, o.socket);
	gw_handle_put(&gw.carmyd, gw_handle_get(&gw.carmyd, true, &rc));

	limit = connection_limit(o.n_listen, o.max_running);
	log_info("at most %u connections per listener", limit);
	for (i = 0; i < o.n_listen; i++) {
		if (gw_listener_start(&ls[i], o.threads, o.request_timeout,
				      limit) != 0) {
			log_error("cannot serve %s (libmicrohttpd refused)",
				  ls[i].name);
			break;
		}
	}
	if (i == o.n_listen) {
		announce(&o, ls, ready_fd);
		sig = serve(&gw, &sigs);
		status = 0;
	} else {
		status = 1;
	}
	gw_stop(&gw);
	for (size_t k = 0; k < i; k++)
		gw_listener_quiesce(&ls[k]);
	if (sig != 0)
		log_info("stopping (signal %d): no new connections, further "
			 "requests refused 503; waiting for the running calls",
			 sig);
	gw_flight_stop(&gw.health);
	gw_flight_stop(&gw.scrape);
	gw_wait_idle(&gw);
	for (size_t k = 0; k < i; k++)
		gw_listener_stop(&ls[k]);
	close_listeners(&o, ls);
	gw_carmyd_close(&gw.carmyd);
	gw_tools_free(&gw.tools);
	gw_tokens_free(&gw.tokens);
	free(gw.env);
	free(gw.lingering);
	curl_global_cleanup();
	return status;
}
