/*
 * metrics.c - GET /metrics: carmyd's own metrics (the Prometheus text of
 * `carmyctl metrics`, run as a child process, so that the two always say
 * the same), then the gateway's: requests by route and status code, the
 * executions running, and a histogram of how long requests took.
 *
 * The counters are atomics, written by every polling thread as it
 * answers; a scrape reads them without a lock, so one scrape may see a
 * request counted in one series and not yet in another.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gateway/gateway.h"

extern char **environ;

static const char *const route_names[GW_ROUTES] = {
	"execute", "healthz", "tools", "well_known", "metrics", "other",
};

static const unsigned codes[GW_CODES - 1] = {
	200, 400, 401, 404, 405, 408, 409, 413, 500, 503, 504,
};

/* Upper bounds of the histogram's buckets, in seconds (then +Inf). */
static const double bounds[GW_BUCKETS - 1] = {
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30,
};

void gw_metrics_count(struct gw_stats *s, int route, unsigned status,
		      uint64_t ns)
{
	size_t c = 0, b = 0;
	double sec = (double)ns / 1e9;

	while (c < GW_CODES - 1 && codes[c] != status)
		c++;
	while (b < GW_BUCKETS - 1 && sec > bounds[b])
		b++;
	__atomic_add_fetch(&s->requests[route][c], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&s->buckets[b], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&s->ns_sum, ns, __ATOMIC_RELAXED);
}

/* argv's standard output, at most 1 MiB, within 5 s; 0, or -1. */
static int run_capture(char *const argv[], char **out, size_t *len)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none;
	size_t cap = 0;
	int p[2], rc, ws;
	pid_t pid;
	uint64_t deadline;
	struct timespec ts;

	if (pipe2(p, O_CLOEXEC) != 0)
		return -1;
	sigemptyset(&none);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO);
	posix_spawnattr_init(&at);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK);
	rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(p[1]);
	if (rc != 0) {
		close(p[0]);
		return -1;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	deadline = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000
		   + 5000;
	for (;;) {
		struct pollfd pfd = { p[0], POLLIN, 0 };
		char buf[4096];
		uint64_t now;
		ssize_t n;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		now = (uint64_t)ts.tv_sec * 1000 +
		      (uint64_t)ts.tv_nsec / 1000000;
		if (now >= deadline ||
		    poll(&pfd, 1, (int)(deadline - now)) == 0)
			break;
		n = read(p[0], buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || *len + (size_t)n > (1u << 20) ||
		    gw_append(out, len, &cap, buf, (size_t)n) != 0)
			break;
	}
	close(p[0]);
	kill(pid, SIGKILL);	/* gone already, unless it hung */
	while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
		;
	return 0;
}

/* `carmyctl --socket S metrics`: $CARMYCTL if set (as the Python
 * binding's operator functions take it), else from $PATH, else from
 * where Carmy's programs are installed. */
static void carmyd_metrics(const struct gateway *gw, char **out,
			   size_t *len)
{
	const char *ctl = getenv("CARMYCTL");
	char *argv[6], bin[512];
	int n = 0;

	argv[n++] = ctl != NULL && ctl[0] != '\0' ? (char *)ctl : "carmyctl";
	if (gw->carmyd.socket != NULL) {
		argv[n++] = "--socket";
		argv[n++] = (char *)gw->carmyd.socket;
	}
	argv[n++] = "metrics";
	argv[n] = NULL;
	if ((run_capture(argv, out, len) == 0 && *len > 0) || argv[0] == ctl)
		return;
	snprintf(bin, sizeof(bin), "%s/carmyctl", CARMY_BINDIR);
	argv[0] = bin;
	run_capture(argv, out, len);
}

static int add(char **out, size_t *len, size_t *cap, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int add(char **out, size_t *len, size_t *cap, const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(line))
		return -1;
	return gw_append(out, len, cap, line, (size_t)n);
}

int gw_metrics_text(struct gateway *gw, char **out, size_t *len)
{
	struct gw_stats *s = &gw->stats;
	size_t cap, l = 0;
	uint64_t cum = 0;
	char *t = NULL;
	int rc = 0;

	carmyd_metrics(gw, &t, &l);
	cap = l + 1;
	if (l == 0)
		rc |= add(&t, &l, &cap, "# carmyctl metrics gave nothing: "
			  "carmyctl not found, or carmyd's segment "
			  "unreadable\n");
	rc |= add(&t, &l, &cap, "# HELP carmy_gateway_requests_total "
		  "Requests answered, by route and status code.\n"
		  "# TYPE carmy_gateway_requests_total counter\n");
	for (int r = 0; r < GW_ROUTES; r++) {
		for (int c = 0; c < GW_CODES; c++) {
			uint64_t v = __atomic_load_n(&s->requests[r][c],
						     __ATOMIC_RELAXED);
			char code[8] = "other";

			if (c < GW_CODES - 1)
				snprintf(code, sizeof(code), "%u", codes[c]);
			if (v > 0)
				rc |= add(&t, &l, &cap,
					  "carmy_gateway_requests_total{route="
					  "\"%s\",code=\"%s\"} %llu\n",
					  route_names[r], code,
					  (unsigned long long)v);
		}
	}
	pthread_mutex_lock(&gw->run_lock);
	rc |= add(&t, &l, &cap, "# HELP carmy_gateway_executions_running "
		  "Tools running now.\n# TYPE carmy_gateway_executions_running"
		  " gauge\ncarmy_gateway_executions_running %u\n",
		  gw->executions);
	pthread_mutex_unlock(&gw->run_lock);
	rc |= add(&t, &l, &cap, "# HELP carmy_gateway_max_running Calls "
		  "that may hold a thread at once (--max-running).\n"
		  "# TYPE carmy_gateway_max_running gauge\n"
		  "carmy_gateway_max_running %u\n", gw->max_running);
	rc |= add(&t, &l, &cap, "# HELP carmy_gateway_overloaded_total Calls "
		  "refused OVERLOADED, nothing reserved.\n"
		  "# TYPE carmy_gateway_overloaded_total counter\n"
		  "carmy_gateway_overloaded_total %llu\n", (unsigned long long)
		  __atomic_load_n(&s->overloaded, __ATOMIC_RELAXED));
	rc |= add(&t, &l, &cap, "# HELP carmy_gateway_request_duration_"
		  "seconds Time from a request's headers to its answer.\n"
		  "# TYPE carmy_gateway_request_duration_seconds histogram\n");
	for (int b = 0; b < GW_BUCKETS; b++) {
		char le[16] = "+Inf";

		cum += __atomic_load_n(&s->buckets[b], __ATOMIC_RELAXED);
		if (b < GW_BUCKETS - 1)
			snprintf(le, sizeof(le), "%g", bounds[b]);
		rc |= add(&t, &l, &cap, "carmy_gateway_request_duration_"
			  "seconds_bucket{le=\"%s\"} %llu\n", le,
			  (unsigned long long)cum);
	}
	rc |= add(&t, &l, &cap, "carmy_gateway_request_duration_seconds_sum "
		  "%.6f\ncarmy_gateway_request_duration_seconds_count %llu\n",
		  (double)__atomic_load_n(&s->ns_sum, __ATOMIC_RELAXED) / 1e9,
		  (unsigned long long)cum);
	if (rc != 0) {
		free(t);
		return -1;
	}
	*out = t;
	*len = l;
	return 0;
}
