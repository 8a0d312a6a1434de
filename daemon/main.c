/*
 * main.c - carmyd: options, start-up and shutdown.
 *
 * Start-up is race-free for scripts: `carmyd` returns (or, with
 * --foreground, prints its ready line) only once the listening socket
 * exists, so a client started right after it can connect.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <urcu.h>
#include <xxhash.h>

#include "common/age.h"
#include "common/daemonize.h"
#include "common/log.h"
#include "common/service.h"
#include "common/sockpath.h"
#include "daemon/carmyd.h"

#define EXIT_USAGE 64
/* A macro's value as a string literal. */
#define STR_(x) #x
#define STR(x) STR_(x)

static const char usage[] =
	"usage: carmyd [OPTION]...\n"
	"Carmy's daemon: owns the shared reservation table and records results.\n"
	"\n"
	"  --socket PATH        listen here (default: $CARMY_SOCKET, else\n"
	"                       $XDG_RUNTIME_DIR/carmy/carmyd.sock, else\n"
	"                       /tmp/carmy-$UID/carmyd.sock); a socket\n"
	"                       systemd hands over (LISTEN_FDS) is served\n"
	"                       instead, and PATH must be its path\n"
	"  --capacity N         entries the table holds (default 10000)\n"
	"  --max-result BYTES   largest recorded result, K/M suffixes allowed\n"
	"                       (default 16K); memory is reserved up front:\n"
	"                       about capacity x (max-result + 1.25K)\n"
	"  --segment NAME       shared memory name (default derived from socket)\n"
	"  --store SPEC         where executions are recorded (default memory):\n"
	"                         memory            the segment only; survives\n"
	"                                           carmyd, not a reboot\n"
	"                         journal:DIR       durable: a checksummed journal\n"
	"                                           in DIR, group-committed\n"
	"                         plugin:PATH[:ARGS] a store plugin (carmy_store.h)\n"
	"  --retain AGE         forget a completed execution this long after it\n"
	"                       finished, like 90s, 200ms, 15m, 24h or 7d; never\n"
	"                       (or 0) keeps every one (default 24h: an agent's\n"
	"                       retries come within its session, minutes to\n"
	"                       hours apart, and a day still covers a job run\n"
	"                       again the next morning). Running and interrupted\n"
	"                       executions are never forgotten\n"
	"  --grace SECONDS      after a restart, a client of the previous carmyd\n"
	"                       whose process still runs keeps its running\n"
	"                       reservations, to come back with their results,\n"
	"                       for this long at most (default 600; 0: none);\n"
	"                       those of a process gone turn uncertain at once\n"
	"  --threads N          event loops serving connections, 1..64\n"
	"                       (default: one per two online CPUs, at most 8)\n"
	"  --spin-us N          after an event, a loop polls for the next one\n"
	"                       this long before it sleeps, 0..10000 (default\n"
	"                       50, with the journal 0): a reply sooner than a\n"
	"                       wake-up, for a CPU while requests keep coming;\n"
	"                       0 never polls. Awaiting the journal's answer,\n"
	"                       up to 20 times as long after the request\n"
	"  --max-clients N      connections served at once; one more takes the\n"
	"                       place of the oldest that has not said HELLO, or\n"
	"                       is refused with TOO_MANY_CLIENTS (default: the\n"
	"                       descriptor limit, raised to its hard limit, less\n"
	"                       what carmyd keeps for itself: "
	STR(CARMYD_FDS_FIXED) " + " STR(CARMYD_FDS_PER_LOOP) " per event\n"
	"                       loop + " STR(CARMYD_FDS_RESERVE) ")\n"
	"  --group NAME         share socket and segment with this group: its\n"
	"                       members can write the segment, so they can forge\n"
	"                       or destroy anyone's entries: trust them fully\n"
	"                       (default: owner only)\n"
	"  --admin-group NAME   its members may resolve, release and purge too\n"
	"                       (default: only carmyd's own user and root)\n"
	"  --foreground         stay in the foreground; print a ready line\n"
	"  --transient          remove the segment on clean exit (tests)\n"
	"  --log-level LEVEL    error, warn, info (default) or debug\n"
	"  --log-file PATH      append the log here instead of stderr\n"
	"  --help, --version\n";

static int parse_args(int argc, char **argv, struct carmyd_config *cfg);
static int handed_socket(struct carmyd_config *cfg, const char *sock);
static int parse_u32(const char *opt, const char *s, uint32_t min,
		     uint32_t max, bool suffixes, uint32_t *out);
static int size_clients(struct carmyd_config *cfg);
static bool only_ours(int fd, const char *base);
static int make_dirs(const struct carmyd_config *cfg);
static int take_lock(const struct carmyd_config *cfg);
static int pick_segment(struct carmyd_config *cfg, int lock_fd);
static int path_segment(struct carmyd_config *cfg, int lock_fd,
			const char *left);
static bool ours_segment(const char *name);
static void note_segment(const struct carmyd_config *cfg, int lock_fd);
static int listen_on(const struct carmyd_config *cfg);
static int clear_socket_path(const char *path);
static int open_log(const char *path);

int main(int argc, char **argv)
{
	struct carmyd_config cfg;
	struct store store;
	struct retain retain;
	sigset_t sigs;
	int rc, lock_fd, lfd, ready_fd = -1;
	char age[AGE_TEXT_MAX], shown[1024];

	rc = parse_args(argc, argv, &cfg);
	if (rc != 0)
		return rc > 0 ? 0 : EXIT_USAGE;
	if (size_clients(&cfg) != 0)
		return EXIT_USAGE;
	umask(077);
	signal(SIGPIPE, SIG_IGN);
	/* Blocked from the start and read through a signalfd in the loop, so
	 * SIGTERM always means a clean shutdown. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &sigs, NULL);

	if (cfg.log_file != NULL && open_log(cfg.log_file) != 0)
		return 1;
	log_detect_journal();
	/* Daemonize before liburcu starts any thread: fork() after call_rcu
	 * threads exist can hang the child. */
	if (!cfg.foreground && daemonize("carmyd", &ready_fd) != 0)
		return 1;

	if (make_dirs(&cfg) != 0)
		return 1;
	lock_fd = take_lock(&cfg);
	if (lock_fd < 0 || pick_segment(&cfg, lock_fd) != 0)
		return 1;
	rcu_register_thread();
	if (owners_init() != 0) {
		log_error("cannot create the owner registry");
		return 1;
	}
	/* What is at the socket's path is looked at before a segment is
	 * made for a carmyd that could not listen there. */
	if (cfg.listen_fd < 0 && clear_socket_path(cfg.socket_path) != 0)
		return 1;
	if (store_open(&store, &cfg) != 0)
		return 1;
	lfd = listen_on(&cfg);
	if (lfd < 0) {
		store_close(&store, &cfg, cfg.transient);
		return 1;
	}

	if (retain_start(&retain, &store, &cfg) != 0) {
		close(lfd);
		if (cfg.listen_fd < 0)
			unlink(cfg.socket_path);
		store_close(&store, &cfg, false);
		return 1;
	}
	/* Only now: a start that failed served nothing, and must not send
	 * the next one to its segment (pick_segment()). */
	note_segment(&cfg, lock_fd);
	log_info("ready: socket %s, segment %s, capacity %u, max-result %u, "
		 "epoch %u, %u event loop%s, spin-us %u, store %s, "
		 "max-clients %u, retain %s", cfg.socket_path, cfg.shm_name,
		 store.view.geo.capacity, store.view.geo.max_result,
		 store.epoch, cfg.threads, cfg.threads == 1 ? "" : "s",
		 cfg.spin_us, store_spec_shown(cfg.store ? cfg.store : "memory",
					  shown, sizeof(shown)), cfg.max_clients,
		 cfg.retain_ns == 0 ? "never" : age_format(age, cfg.retain_ns));
	/* The socket listens: a client connecting from now on is served. */
	server_notify_status(&store, "READY=1\n");
	if (cfg.foreground) {
		printf("carmyd ready socket=%s segment=%s pid=%d\n",
		       cfg.socket_path, cfg.shm_name, (int)getpid());
		fflush(stdout);
	} else {
		if (write(ready_fd, "R", 1) != 1)
			log_warn("cannot tell the parent we are ready");
		close(ready_fd);
	}

	rc = server_run(&store, &cfg, lfd);

	retain_stop(&retain);
	close(lfd);
	/* A handed socket stays the service manager's, bound and listening:
	 * clients queue on it until the next carmyd. */
	if (cfg.listen_fd < 0)
		unlink(cfg.socket_path);
	store_close(&store, &cfg, cfg.transient);
	owners_fini();
	rcu_unregister_thread();
	close(lock_fd);
	log_info("stopped");
	return rc == 0 ? 0 : 1;
}

/* ------------------------------------------------------------ options */

/* Returns 0 to run, 1 after --help/--version, -1 on a usage error. */
static int parse_args(int argc, char **argv, struct carmyd_config *cfg)
{
	enum { O_SOCKET = 256, O_CAPACITY, O_MAX_RESULT, O_SEGMENT, O_GROUP,
	       O_FOREGROUND, O_TRANSIENT, O_LOG_LEVEL, O_LOG_FILE, O_HELP,
	       O_VERSION, O_THREADS, O_STORE, O_GRACE, O_SPIN, O_MAX_CLIENTS,
	       O_ADMIN_GROUP, O_RETAIN };
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "capacity", required_argument, NULL, O_CAPACITY },
		{ "max-result", required_argument, NULL, O_MAX_RESULT },
		{ "segment", required_argument, NULL, O_SEGMENT },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "spin-us", required_argument, NULL, O_SPIN },
		{ "store", required_argument, NULL, O_STORE },
		{ "grace", required_argument, NULL, O_GRACE },
		{ "retain", required_argument, NULL, O_RETAIN },
		{ "group", required_argument, NULL, O_GROUP },
		{ "max-clients", required_argument, NULL, O_MAX_CLIENTS },
		{ "admin-group", required_argument, NULL, O_ADMIN_GROUP },
		{ "foreground", no_argument, NULL, O_FOREGROUND },
		{ "transient", no_argument, NULL, O_TRANSIENT },
		{ "log-level", required_argument, NULL, O_LOG_LEVEL },
		{ "log-file", required_argument, NULL, O_LOG_FILE },
		{ "help", no_argument, NULL, O_HELP },
		{ "version", no_argument, NULL, O_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	const char *sock = NULL, *seg = NULL;
	int o;

	memset(cfg, 0, sizeof(*cfg));
	cfg->listen_fd = -1;
	cfg->capacity = CARMYD_DEFAULT_CAPACITY;
	cfg->max_result = CARMYD_DEFAULT_MAX_RESULT;
	cfg->grace_ms = CARMYD_DEFAULT_GRACE_S * 1000;
	cfg->retain_ns = CARMYD_DEFAULT_RETAIN_S * 1000000000ull;
	cfg->spin_us = UINT32_MAX;	/* not given: the store's default */
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case O_SOCKET:
			sock = optarg;
			break;
		case O_CAPACITY:
			if (parse_u32("--capacity", optarg, 1, SHM_CAPACITY_MAX,
				      false, &cfg->capacity) != 0)
				return -1;
			cfg->capacity_set = true;
			break;
		case O_MAX_RESULT:
			if (parse_u32("--max-result", optarg, 0,
				      SHM_MAX_RESULT_MAX, true,
				      &cfg->max_result) != 0)
				return -1;
			cfg->max_result_set = true;
			break;
		case O_SEGMENT:
			seg = optarg;
			break;
		case O_GRACE: {
			uint32_t secs;

			if (parse_u32("--grace", optarg, 0, 86400, false,
				      &secs) != 0)
				return -1;
			cfg->grace_ms = secs * 1000;
			break;
		}
		case O_RETAIN:
			if (strcmp(optarg, "never") == 0) {
				cfg->retain_ns = 0;
			} else if (age_parse(optarg, &cfg->retain_ns) != 0) {
				fprintf(stderr, "carmyd: --retain: expected an age "
					"like 90s, 200ms, 15m, 24h or 7d, or "
					"never, not '%s'\n", optarg);
				return -1;
			}
			break;
		case O_STORE:
			if (strcmp(optarg, "memory") != 0 &&
			    store_journal_dir(optarg) == NULL &&
			    strncmp(optarg, "plugin:", 7) != 0) {
				fprintf(stderr, "carmyd: --store: expected memory, "
					"journal:DIR or plugin:PATH[:ARGS], not "
					"'%s'\n", optarg);
				return -1;
			}
			cfg->store = optarg;
			break;
		case O_THREADS:
			if (parse_u32("--threads", optarg, 1, CARMYD_THREADS_MAX,
				      false, &cfg->threads) != 0)
				return -1;
			break;
		case O_SPIN:
			if (parse_u32("--spin-us", optarg, 0, CARMYD_SPIN_US_MAX,
				      false, &cfg->spin_us) != 0)
				return -1;
			break;
		case O_GROUP: {
			struct group *g = getgrnam(optarg);

			if (g == NULL) {
				fprintf(stderr, "carmyd: --group: no group named '%s'\n",
					optarg);
				return -1;
			}
			cfg->use_group = true;
			cfg->gid = g->gr_gid;
			break;
		}
		case O_ADMIN_GROUP: {
			struct group *g = getgrnam(optarg);

			if (g == NULL) {
				fprintf(stderr, "carmyd: --admin-group: no group "
					"named '%s'\n", optarg);
				return -1;
			}
			cfg->use_admin_group = true;
			cfg->admin_gid = g->gr_gid;
			break;
		}
		case O_MAX_CLIENTS:
			if (parse_u32("--max-clients", optarg, 1,
				      CARMYD_MAX_CLIENTS_MAX, false,
				      &cfg->max_clients) != 0)
				return -1;
			break;
		case O_FOREGROUND:
			cfg->foreground = true;
			break;
		case O_TRANSIENT:
			cfg->transient = true;
			break;
		case O_LOG_LEVEL:
			log_level = log_parse_level(optarg);
			if (log_level < 0) {
				fprintf(stderr, "carmyd: --log-level: expected error, "
					"warn, info or debug, not '%s'\n", optarg);
				return -1;
			}
			break;
		case O_LOG_FILE:
			cfg->log_file = optarg;
			break;
		case O_HELP:
			fputs(usage, stdout);
			return 1;
		case O_VERSION:
			printf("carmyd %s\n", PACKAGE_VERSION);
			return 1;
		default:
			fputs(usage, stderr);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "carmyd: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	if (cfg->spin_us == UINT32_MAX)
		cfg->spin_us = store_journal_dir(cfg->store) != NULL ?
			       CARMYD_JOURNAL_SPIN_US : CARMYD_DEFAULT_SPIN_US;
	if (cfg->threads == 0) {
		long n = (sysconf(_SC_NPROCESSORS_ONLN) + 1) / 2;

		cfg->threads = n < 1 ? 1 :
			       n > CARMYD_DEFAULT_THREADS_MAX ?
			       CARMYD_DEFAULT_THREADS_MAX : (uint32_t)n;
	}
	if (handed_socket(cfg, sock) != 0)
		return -1;
	/* A handed socket has set socket_path already. */
	if (cfg->listen_fd < 0 && sock != NULL) {
		if (strlen(sock) == 0 || strlen(sock) >= sizeof(cfg->socket_path)) {
			fprintf(stderr, "carmyd: --socket: path must be 1..%zu bytes\n",
				sizeof(cfg->socket_path) - 1);
			return -1;
		}
		strcpy(cfg->socket_path, sock);
	} else if (cfg->listen_fd < 0 &&
		   sockpath_own(cfg->socket_path,
				sizeof(cfg->socket_path)) < 0) {
		fprintf(stderr, "carmyd: the default socket path is too long\n");
		return -1;
	}
	if (seg != NULL) {
		if (seg[0] != '/' || strchr(seg + 1, '/') != NULL ||
		    strlen(seg) < 2 || strlen(seg) >= sizeof(cfg->shm_name)) {
			fprintf(stderr, "carmyd: --segment: expected /NAME with no "
				"other '/', at most %zu bytes\n",
				sizeof(cfg->shm_name) - 1);
			return -1;
		}
		strcpy(cfg->shm_name, seg);
		cfg->shm_named = true;
	} else {
		/* One segment per socket path and user. */
		snprintf(cfg->shm_name, sizeof(cfg->shm_name),
			 "/carmy.%u.%016llx", (unsigned)getuid(),
			 (unsigned long long)XXH3_64bits(cfg->socket_path,
							 strlen(cfg->socket_path)));
	}
	return 0;
}

/*
 * The socket systemd (or systemd-socket-activate) handed over, if any:
 * exactly one, a listening Unix stream socket bound to a path, which
 * becomes socket_path (the segment's name derives from it, as when
 * carmyd binds). --socket, if given, must name the same path, so that
 * the unit's command line says where clients find carmyd. Returns 0
 * (cfg->listen_fd set, or -1 when none was handed over) or -1 after
 * saying why.
 */
static int handed_socket(struct carmyd_config *cfg, const char *sock)
{
	char why[256];
	int n;

	n = service_listen_fds(1, why, sizeof(why));
	if (n == 0)
		return 0;
	if (n < 0 || service_unix_listener(SERVICE_FDS_START,
					   cfg->socket_path,
					   sizeof(cfg->socket_path), why,
					   sizeof(why)) != 0) {
		fprintf(stderr, "carmyd: refusing the socket systemd handed "
			"over: %s (carmyd serves one listening Unix stream "
			"socket bound to a path: ListenStream=/PATH)\n", why);
		return -1;
	}
	if (sock != NULL && strcmp(sock, cfg->socket_path) != 0) {
		fprintf(stderr, "carmyd: --socket %s, but the socket systemd "
			"handed over is %s: make them agree\n", sock,
			cfg->socket_path);
		return -1;
	}
	cfg->listen_fd = SERVICE_FDS_START;
	return 0;
}

static int parse_u32(const char *opt, const char *s, uint32_t min,
		     uint32_t max, bool suffixes, uint32_t *out)
{
	unsigned long long v, mul = 1;
	char *end;

	errno = 0;
	if (s[0] < '0' || s[0] > '9')
		goto bad;
	v = strtoull(s, &end, 10);
	if (errno != 0)
		goto bad;
	if (suffixes && (*end == 'k' || *end == 'K'))
		mul = 1024, end++;
	else if (suffixes && (*end == 'm' || *end == 'M'))
		mul = 1024 * 1024, end++;
	if (*end != '\0' || v > max / mul || v * mul < min)
		goto bad;
	*out = (uint32_t)(v * mul);
	return 0;
bad:
	fprintf(stderr, "carmyd: %s: expected an integer from %u to %u%s, not '%s'\n",
		opt, min, max, suffixes ? " (K and M suffixes allowed)" : "", s);
	return -1;
}

/* ------------------------------------------------------------ start-up */

/*
 * Every connection is a descriptor: --max-clients must leave carmyd the
 * ones it needs for itself, or accept() would fail with EMFILE before the
 * cap is reached (conn.c copes, but refuses more than it must). The soft
 * limit is raised to the hard one first: carmyd uses epoll, never
 * select(). Returns 0, or -1 after a usage error.
 */
static int size_clients(struct carmyd_config *cfg)
{
	uint64_t own = CARMYD_FDS_FIXED +
		       (uint64_t)CARMYD_FDS_PER_LOOP * cfg->threads +
		       CARMYD_FDS_RESERVE;
	struct rlimit rl;
	uint64_t limit;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
		/* Not capped by what we cannot see (conn.c copes). */
		if (cfg->max_clients == 0)
			cfg->max_clients = CARMYD_MAX_CLIENTS_MAX;
		return 0;
	}
	if (rl.rlim_cur < rl.rlim_max) {
		struct rlimit up = { rl.rlim_max, rl.rlim_max };

		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			rl = up;
	}
	limit = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : rl.rlim_cur;
	if (limit <= own) {
		fprintf(stderr, "carmyd: the descriptor limit (RLIMIT_NOFILE "
			"%llu) leaves no room for connections: carmyd keeps "
			"%llu for itself with %u event loop%s; raise it "
			"(ulimit -n, LimitNOFILE=)\n", (unsigned long long)limit,
			(unsigned long long)own, cfg->threads,
			cfg->threads == 1 ? "" : "s");
		return -1;
	}
	if (cfg->max_clients == 0) {
		cfg->max_clients = limit - own > CARMYD_MAX_CLIENTS_MAX ?
					   CARMYD_MAX_CLIENTS_MAX :
					   (uint32_t)(limit - own);
	} else if (cfg->max_clients > limit - own) {
		fprintf(stderr, "carmyd: --max-clients %u: the descriptor "
			"limit (RLIMIT_NOFILE %llu) allows at most %llu, since "
			"carmyd keeps %llu for itself with %u event loop%s; "
			"raise the limit (ulimit -n, LimitNOFILE=) or ask for "
			"fewer\n", cfg->max_clients, (unsigned long long)limit,
			(unsigned long long)(limit - own),
			(unsigned long long)own, cfg->threads,
			cfg->threads == 1 ? "" : "s");
		return -1;
	}
	return 0;
}

/*
 * Does the directory open on fd hold nothing but our socket and its lock
 * file (base, base.lock)? Only such a directory is carmyd's to repair:
 * any other (a working directory, a home, a team's directory) is someone's
 * whose mode is theirs to choose. Read through a duplicate of fd, so what
 * is read is the directory that was checked, wherever its name now leads.
 */
static bool only_ours(int fd, const char *base)
{
	size_t len = strlen(base);
	struct dirent *e;
	bool only = true;
	DIR *d;
	int dfd;

	dfd = dup(fd);
	if (dfd < 0)
		return false;
	d = fdopendir(dfd);
	if (d == NULL) {
		close(dfd);
		return false;
	}
	while (only && (e = readdir(d)) != NULL) {
		const char *n = e->d_name;

		if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0 ||
		    strcmp(n, base) == 0 ||
		    (strncmp(n, base, len) == 0 && strcmp(n + len, ".lock") == 0))
			continue;
		only = false;
	}
	closedir(d);
	return only;
}

/*
 * The socket's directory, created if it is missing: owner-only, or 0750
 * and --group's group. One that exists must be a real directory, never a
 * symbolic link (opened with O_NOFOLLOW, and looked at and repaired
 * through that descriptor), and ours or root's: a directory someone else
 * planted (in /tmp, say) could let them replace our socket. So could one
 * that others can write; and with --group, one the group cannot enter
 * keeps its members out. Ours, not sticky, and holding nothing but our
 * socket and lock file, it is made 0700 (0750 and the group's) and the log
 * says so; any other is refused with what to do, and left as it was.
 */
static int make_dirs(const struct carmyd_config *cfg)
{
	const mode_t want = cfg->use_group ? 0750 : 0700;
	char dir[sizeof(cfg->socket_path)];
	const char *base;
	bool open_to_others, closed_to_group;
	struct stat st;
	char *slash;
	int fd;

	/* A directory given for the socket: its parent is not what to judge
	 * (nor what a user meant), and the bind would fail anyway. */
	if (stat(cfg->socket_path, &st) == 0 && S_ISDIR(st.st_mode)) {
		size_t n = strlen(cfg->socket_path);

		while (n > 0 && cfg->socket_path[n - 1] == '/')
			n--;
		log_error("the socket path %s is a directory: --socket (or "
			  "$CARMY_SOCKET) takes the path of the socket "
			  "itself, a file carmyd creates, such as "
			  "%.*s/carmyd.sock", cfg->socket_path, (int)n,
			  cfg->socket_path);
		return -1;
	}
	strcpy(dir, cfg->socket_path);
	slash = strrchr(dir, '/');
	base = slash == NULL ? cfg->socket_path :
			       cfg->socket_path + (slash - dir) + 1;
	if (slash == NULL)
		strcpy(dir, ".");
	else if (slash == dir)
		strcpy(dir, "/");
	else
		*slash = '\0';
	if (mkdir(dir, want) == 0) {
		if (cfg->use_group && (chown(dir, (uid_t)-1, cfg->gid) != 0 ||
				       chmod(dir, want) != 0)) {
			log_error("cannot share %s with the group: %s", dir,
				  strerror(errno));
			return -1;
		}
		return 0;
	}
	if (errno != EEXIST) {
		log_error("cannot create %s: %s", dir, strerror(errno));
		return -1;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int err = errno;

		if (lstat(dir, &st) == 0 && S_ISLNK(st.st_mode))
			log_error("refusing %s: it is a symbolic link, which "
				  "whoever can change it could point at "
				  "another directory", dir);
		else if (err == ENOTDIR)
			log_error("%s is not a directory", dir);
		else
			log_error("cannot open %s: %s", dir, strerror(err));
		return -1;
	}
	if (fstat(fd, &st) != 0) {
		log_error("cannot stat %s: %s", dir, strerror(errno));
		goto refuse;
	}
	if (st.st_uid != geteuid() && st.st_uid != 0) {
		log_error("refusing %s: it belongs to uid %u, not to us",
			  dir, (unsigned)st.st_uid);
		goto refuse;
	}
	open_to_others = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
	/* Members reach the socket through the group's search bit, or
	 * everyone's. */
	closed_to_group = cfg->use_group && (st.st_mode & S_IXOTH) == 0 &&
			  (st.st_gid != cfg->gid ||
			   (st.st_mode & S_IXGRP) == 0);
	if (!open_to_others && !closed_to_group)
		goto done;
	if (st.st_uid != geteuid() || (st.st_mode & S_ISVTX) != 0) {
		if (open_to_others)
			log_error("refusing %s: it has mode %04o, and others "
				  "could replace our socket in it; give "
				  "--socket a path in a directory of our own",
				  dir, (unsigned)(st.st_mode & 07777));
		else
			log_error("refusing %s: its mode %04o and group %u keep "
				  "the members of group %u out; give --socket "
				  "a path in a directory of our own", dir,
				  (unsigned)(st.st_mode & 07777),
				  (unsigned)st.st_gid, (unsigned)cfg->gid);
		goto refuse;
	}
	if (!only_ours(fd, base)) {
		if (open_to_others)
			log_error("refusing %s: it has mode %04o, and others "
				  "could replace our socket in it; it holds "
				  "more than our socket, so it is not ours to "
				  "change: run chmod go-w %s, or give --socket "
				  "a path in a directory of its own", dir,
				  (unsigned)(st.st_mode & 07777), dir);
		else
			log_error("refusing %s: its mode %04o and group %u keep "
				  "the members of group %u out; it holds more "
				  "than our socket, so it is not ours to "
				  "change: run chgrp %u %s and chmod 0750 %s, "
				  "or give --socket a path in a directory of "
				  "its own", dir,
				  (unsigned)(st.st_mode & 07777),
				  (unsigned)st.st_gid, (unsigned)cfg->gid,
				  (unsigned)cfg->gid, dir, dir);
		goto refuse;
	}
	if ((cfg->use_group && fchown(fd, (uid_t)-1, cfg->gid) != 0) ||
	    fchmod(fd, want) != 0) {
		log_error("cannot make %s (mode %04o, group %u) %04o%s: %s",
			  dir, (unsigned)(st.st_mode & 07777),
			  (unsigned)st.st_gid, (unsigned)want,
			  cfg->use_group ? " and the group's" : "",
			  strerror(errno));
		goto refuse;
	}
	if (open_to_others)
		log_warn("%s had mode %04o, which let others replace our "
			 "socket: made it %04o%s", dir,
			 (unsigned)(st.st_mode & 07777), (unsigned)want,
			 cfg->use_group ? " and the group's" : "");
	else
		log_warn("%s had mode %04o and group %u, which kept the "
			 "group's members out: made it %04o and the group's",
			 dir, (unsigned)(st.st_mode & 07777),
			 (unsigned)st.st_gid, (unsigned)want);
done:
	close(fd);
	return 0;
refuse:
	close(fd);
	return -1;
}

/* One carmyd per socket: an flock on PATH.lock, which the kernel releases
 * when carmyd dies, however it dies. */
static int take_lock(const struct carmyd_config *cfg)
{
	char path[sizeof(cfg->socket_path) + 8];
	int fd;

	snprintf(path, sizeof(path), "%s.lock", cfg->socket_path);
	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		log_error("cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		log_error("another carmyd is already serving %s (%s is locked)",
			  cfg->socket_path, path);
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * The lock file's second line: the segment this carmyd serves, noted once
 * it started (a start that failed served nothing), for the next start to
 * serve (pick_segment()) and for carmyctl to read once it is gone
 * (tools/carmyctl.c: left_segment()). The first line stays
 * path_segment()'s (a kept name, or empty). Best effort: a carmyd that
 * cannot write it serves all the same.
 */
static void note_segment(const struct carmyd_config *cfg, int lock_fd)
{
	char buf[2 * sizeof(cfg->shm_name) + 4];
	ssize_t n = pread(lock_fd, buf, sizeof(cfg->shm_name), 0);
	size_t kept = 0;

	if (n > 0) {
		buf[n] = '\0';
		kept = strcspn(buf, "\n");
		if (kept >= sizeof(cfg->shm_name))
			kept = 0;
	}
	n = snprintf(buf + kept, sizeof(buf) - kept, "\n%s\n", cfg->shm_name);
	/* Written over, then cut to length: never a moment without the
	 * kept name of the first line. */
	if (n <= 0 || (size_t)n >= sizeof(buf) - kept ||
	    pwrite(lock_fd, buf, kept + (size_t)n, 0) != (ssize_t)kept + n ||
	    ftruncate(lock_fd, (off_t)kept + n) != 0)
		log_warn("cannot note segment %s in the lock file: %s",
			 cfg->shm_name, strerror(errno));
}

/*
 * The segment the last carmyd at this socket served, as note_segment()
 * left it in the lock file's second line, into name (size bytes): true if
 * the lock file is carmyd's user's (not one another user left in a
 * directory that was open) and names a segment that is there and is
 * carmyd's user's (only such a segment holds entries of this socket that
 * carmyd can serve).
 */
static bool left_segment(int lock_fd, char *name, size_t size)
{
	struct stat st;

	if (fstat(lock_fd, &st) != 0 || st.st_uid != geteuid())
		return false;
	return sockpath_noted_segment(lock_fd, name, size) &&
	       ours_segment(name);
}

/* Whether a segment of that name is there and is carmyd's user's. */
static bool ours_segment(const char *name)
{
	struct stat st;
	bool ours;
	int fd;

	fd = shm_open(name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0);
	if (fd < 0)
		return false;
	ours = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	       st.st_uid == geteuid();
	close(fd);
	return ours;
}

/*
 * The segment's name. --segment gives it. Else it is the one the last
 * carmyd at this socket served, if that is still there: the lock file
 * sits beside the socket, so every spelling of the socket's path (a
 * relative one, "//" or "/./", a directory reached through a symbolic
 * link) finds it, and a restart under another spelling, or without the
 * --segment the last start had, serves the same entries rather than an
 * empty table that would run their calls again. Else the path's own
 * name (path_segment()). Where both are there and differ (made for this
 * socket by carmyds of before this rule, or one of them with --segment):
 * with a durable store, whose records both segments were loaded from,
 * the last served is the one that is not behind; with the memory store
 * each is the only record of its calls, carmyd cannot tell which ones
 * clients will retry, and does not start. 0, or -1 after saying why.
 */
static int pick_segment(struct carmyd_config *cfg, int lock_fd)
{
	char left[sizeof(cfg->shm_name)];
	bool is_left = left_segment(lock_fd, left, sizeof(left));

	if (cfg->shm_named) {
		if (is_left && strcmp(left, cfg->shm_name) != 0)
			log_warn("serving segment %s, as --segment says; the "
				 "last carmyd at %s served %s, which is still "
				 "there: its entries are not served now",
				 cfg->shm_name, cfg->socket_path, left);
		return 0;
	}
	/* Read before: path_segment() may write the lock file afresh. */
	if (path_segment(cfg, lock_fd, is_left ? left : NULL) != 0)
		return -1;
	if (!is_left || strcmp(left, cfg->shm_name) == 0)
		return 0;
	if (!ours_segment(cfg->shm_name))
		log_info("serving segment %s, which the last carmyd at %s "
			 "served (under another spelling of the path, or named "
			 "with --segment); this path's own name would be %s",
			 left, cfg->socket_path, cfg->shm_name);
	else if (cfg->store != NULL && strcmp(cfg->store, "memory") != 0)
		log_warn("serving segment %s, which the last carmyd at %s "
			 "served; %s, the one this spelling of the path names, "
			 "was served before it and is behind the store: remove "
			 "it", left, cfg->socket_path, cfg->shm_name);
	else {
		log_error("two segments hold entries of %s: %s, which the last "
			  "carmyd here served, and %s, the one this spelling "
			  "of the path names; with the memory store each is "
			  "the only record of its calls, and carmyd cannot "
			  "tell which ones clients will retry. Start with "
			  "--segment NAME to serve one; remove the other only "
			  "once none of its calls will be retried",
			  cfg->socket_path, left, cfg->shm_name);
		return -1;
	}
	memcpy(cfg->shm_name, left, sizeof(left));
	return 0;
}

/*
 * The segment's name from the socket's path: /carmy.UID.HASH of the path
 * as given. Anyone can make a file of that name in /dev/shm first,
 * and its sticky bit keeps carmyd from removing another user's: carmyd
 * would never start. So a name held by a file that is not carmyd's user's
 * is passed over for one with a random part, kept in the lock file (in
 * the socket's directory, carmyd's own), where the next start finds it
 * and with it the same segment, with left (the last served, or NULL) on
 * the line after it. Clients learn the name from carmyd. 0, or -1 after
 * saying why.
 */
static int path_segment(struct carmyd_config *cfg, int lock_fd,
			const char *left)
{
	char kept[sizeof(cfg->shm_name) + 1], name[sizeof(cfg->shm_name)];
	char lines[2 * sizeof(cfg->shm_name) + 4];
	size_t base = strlen(cfg->shm_name), len;
	uint8_t r[8];
	struct stat st;
	ssize_t n;
	int fd;

	snprintf(name, sizeof(name), "%s", cfg->shm_name);
	n = pread(lock_fd, kept, sizeof(kept) - 1, 0);
	if (n > 0) {
		kept[n] = '\0';
		kept[strcspn(kept, "\n")] = '\0';
		/* Ours, written below: the default name, a dot, 16 hex. */
		if (strlen(kept) == base + 17 &&
		    strncmp(kept, cfg->shm_name, base) == 0 &&
		    kept[base] == '.' &&
		    strspn(kept + base + 1, "0123456789abcdef") == 16)
			memcpy(name, kept, base + 18);
	}
	/* The name, kept or default, if it is free or carmyd's user's. A
	 * kept one can be taken too, once its segment is gone (a reboot,
	 * an rm): the name is no secret, only hard to guess first. */
	fd = shm_open(name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0);
	if (fd < 0 && errno == ENOENT) {
		memcpy(cfg->shm_name, name, sizeof(name));
		return 0;
	}
	if (fd >= 0 && fstat(fd, &st) == 0 && st.st_uid == geteuid()) {
		close(fd);
		memcpy(cfg->shm_name, name, sizeof(name));
		return 0;
	}
	if (fd >= 0)
		close(fd);
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
		log_error("segment %s is another user's, and no name can be "
			  "drawn to replace it: %s", name, strerror(errno));
		return -1;
	}
	n = snprintf(kept, sizeof(kept), "%s.%02x%02x%02x%02x%02x%02x%02x"
		     "%02x\n", cfg->shm_name, r[0], r[1], r[2], r[3], r[4], r[5],
		     r[6], r[7]);
	/* The second line (note_segment()) stays until a start succeeds. */
	len = snprintf(lines, sizeof(lines), "%s%s%s", kept, left ? left : "",
		       left ? "\n" : "");
	if (len >= sizeof(lines) || ftruncate(lock_fd, 0) != 0 ||
	    pwrite(lock_fd, lines, len, 0) != (ssize_t)len ||
	    fsync(lock_fd) != 0) {
		log_error("cannot keep a segment name in the lock file: %s",
			  strerror(errno));
		return -1;
	}
	log_warn("segment %s is held by a file carmyd's user does not own "
		 "(another user made it first, or it is left from carmyd run "
		 "as another user): using %.*s instead. Root can remove "
		 "/dev/shm%s", name, (int)(n - 1), kept, name);
	memcpy(cfg->shm_name, kept, (size_t)n - 1);
	cfg->shm_name[n - 1] = '\0';
	return 0;
}

/*
 * carmyd's listening socket, non-blocking: the handed one as it is (its
 * mode and group are the socket unit's, SocketMode= and SocketGroup=;
 * connections queued on it before carmyd started are accepted first), or
 * a new one bound to socket_path.
 */
/*
 * What is at the socket's path before carmyd binds there. We hold the
 * lock, so a socket nobody answers at is a dead carmyd's, and is replaced.
 * Anything else stays as it is and carmyd does not start: a file of any
 * other kind (a --socket mistyped to name a file, a journal, a FIFO), or
 * a socket something listens at (another program's: it holds no lock of
 * ours). 0, or -1 after saying why.
 */
static int clear_socket_path(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int probe, rc;

	if (lstat(path, &st) != 0)
		return 0;	/* nothing there (or nothing we may see) */
	if (!S_ISSOCK(st.st_mode)) {
		log_error("%s is there already and is not a socket (%s): "
			  "carmyd replaces only a socket a carmyd left; give "
			  "--socket a path of its own", path,
			  S_ISREG(st.st_mode) ? "a regular file" :
			  S_ISLNK(st.st_mode) ? "a symbolic link" :
			  S_ISFIFO(st.st_mode) ? "a FIFO" : "not a file");
		return -1;
	}
	strcpy(sa.sun_path, path);
	probe = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (probe < 0) {
		log_error("socket: %s", strerror(errno));
		return -1;
	}
	/* Only a refused connection says nobody listens: anything else
	 * (accepted, a full queue, no permission) leaves it be. */
	rc = connect(probe, (struct sockaddr *)&sa, sizeof(sa));
	if (rc == 0 || errno != ECONNREFUSED) {
		close(probe);
		log_error("something listens at %s already (%s), and it is no "
			  "carmyd of this socket (that would hold %s.lock): "
			  "give --socket a path of its own", path,
			  rc == 0 ? "it accepted a connection" :
				    strerror(errno), path);
		return -1;
	}
	close(probe);
	if (unlink(path) != 0 && errno != ENOENT) {
		log_error("cannot remove the dead socket %s: %s", path,
			  strerror(errno));
		return -1;
	}
	return 0;
}

static int listen_on(const struct carmyd_config *cfg)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, fl;

	if (cfg->listen_fd >= 0) {
		fl = fcntl(cfg->listen_fd, F_GETFL);
		if (fl < 0 || fcntl(cfg->listen_fd, F_SETFL,
				    fl | O_NONBLOCK) != 0) {
			log_error("cannot use the socket systemd handed over: "
				  "%s", strerror(errno));
			return -1;
		}
		return cfg->listen_fd;
	}

	strcpy(sa.sun_path, cfg->socket_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		log_error("socket: %s", strerror(errno));
		return -1;
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    chmod(cfg->socket_path, cfg->use_group ? 0660 : 0600) != 0 ||
	    (cfg->use_group && chown(cfg->socket_path, (uid_t)-1, cfg->gid) != 0) ||
	    listen(fd, SOMAXCONN) != 0) {
		log_error("cannot listen on %s: %s", cfg->socket_path,
			  strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * --log-file: appended to, never through a symbolic link, and only if it
 * is a regular file of carmyd's own user: in a shared directory, another
 * user could otherwise have carmyd write its log (which names principals,
 * sessions and requests) into a file of theirs, or into one it may write
 * but should not. Becomes standard error. 0, or 1 with a line said.
 */
static int open_log(const char *path)
{
	/* O_NONBLOCK: a FIFO planted there would block the open until
	 * someone read it; without a reader it fails (ENXIO) instead. */
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC |
			    O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, 0600);
	struct stat st;

	if (fd < 0) {
		fprintf(stderr, "carmyd: cannot open log file %s: %s%s\n",
			path, strerror(errno), errno == ELOOP ?
			" (a symbolic link: give the file itself)" : "");
		return 1;
	}
	if (fstat(fd, &st) != 0) {
		fprintf(stderr, "carmyd: cannot open log file %s: %s\n", path,
			strerror(errno));
		close(fd);
		return 1;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
		fprintf(stderr, "carmyd: refusing log file %s: %s\n", path,
			!S_ISREG(st.st_mode) ? "not a regular file" :
			"it belongs to another user (give a file of carmyd's "
			"own user)");
		close(fd);
		return 1;
	}
	if (fcntl(fd, F_SETFL, O_APPEND) != 0) {
		fprintf(stderr, "carmyd: cannot open log file %s: %s\n", path,
			strerror(errno));
		close(fd);
		return 1;
	}
	if (dup2(fd, STDERR_FILENO) < 0) {
		fprintf(stderr, "carmyd: cannot open log file %s: %s\n", path,
			strerror(errno));
		close(fd);
		return 1;
	}
	close(fd);
	return 0;
}
