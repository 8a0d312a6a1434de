/*
 * command.c - a command tool, run once per new execution.
 *
 * The command runs under tools/supervise.c's watcher, as carmy-run's does:
 * the watcher is a subreaper, so at the tool's timeout the command and
 * everything it started are killed, whatever process group they moved
 * to; and if carmy-gateway dies (kill -9), the watcher reads end of file
 * on its control socket and kills them too, while carmyd, seeing the
 * gateway's connection close, turns the execution uncertain. If the
 * watcher is the one killed, the command dies with it, and what it
 * started comes to the gateway, a subreaper too, which kills all of it
 * before it makes the call uncertain (the orphans, below).
 *
 * The arguments go on the command's standard input as one line of JSON,
 * and CARMY_EXECUTION_ID, CARMY_PRINCIPAL, CARMY_SESSION and
 * CARMY_REQUEST_ID (when there is one) into its environment. Exit 0 with
 * one JSON value on standard output: completed, with it as data. Any other
 * end: failed, with the last line of standard error as the message. At the
 * timeout: timed_out. The answer's body is what carmyd records.
 *
 * This runs on the execution's own thread (execute.c): it blocks in poll()
 * while the tool runs, holding nothing any other request needs.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "gateway/gateway.h"
#include "tools/json.h"
#include "tools/supervise.h"

/* The end of standard error kept for the message, and the longest
 * message made of it. */
#define ERR_KEEP 4096
#define MSG_MAX 1024
/* Standard output kept without a reservation (with one: --max-result). */
#define OUT_KEEP_FREE (16u * 1024 * 1024)

struct run {
	struct supervised sv;
	int in;			/* to the tool's stdin; -1 once closed */
	int err;		/* from its stderr; -1 at end of file */
	const char *in_buf;
	size_t in_len, in_off;
	char *out;		/* its standard output, at most keep bytes */
	size_t out_len, out_cap, keep;
	bool out_over;		/* it wrote more than keep */
	char err_buf[2 * ERR_KEEP];
	size_t err_len;
	bool exited, out_eof, timed_out, lost;
	int lost_err;		/* what lost it; 0: the watcher ended */
	int wstatus;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* "NAME=value", malloc'd; NULL when out of memory. */
static char *var(const char *name, const char *value)
{
	size_t n = strlen(name), v = strlen(value);
	char *s = malloc(n + v + 2);

	if (s != NULL) {
		memcpy(s, name, n);
		s[n] = '=';
		memcpy(s + n + 1, value, v + 1);
	}
	return s;
}

/* The gateway's environment, then the execution's own variables. */
static char **environment(const struct gw_exec *x)
{
	const struct gw_call *c = &x->call;
	size_t n = x->gw->n_env;
	char **env = calloc(n + 5, sizeof(*env));

	if (env == NULL)
		return NULL;
	memcpy(env, x->gw->env, n * sizeof(*env));
	env[n] = var("CARMY_EXECUTION_ID", x->execution_id);
	env[n + 1] = var("CARMY_PRINCIPAL", c->principal);
	env[n + 2] = var("CARMY_SESSION", c->session);
	if (c->request_id_len > 0)
		env[n + 3] = var("CARMY_REQUEST_ID", c->request_id);
	if (env[n] != NULL && env[n + 1] != NULL && env[n + 2] != NULL &&
	    (c->request_id_len == 0 || env[n + 3] != NULL))
		return env;
	for (size_t i = n; i < n + 4; i++)
		free(env[i]);
	free(env);
	return NULL;
}

static void environment_free(const struct gw_exec *x, char **env)
{
	if (env == NULL)
		return;
	for (size_t i = x->gw->n_env; env[i] != NULL; i++)
		free(env[i]);
	free(env);
}

/* ------------------------------------------------------------ the run */

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* read(2) through EINTR. */
static ssize_t read_some(int fd, void *buf, size_t n)
{
	ssize_t got;

	do
		got = read(fd, buf, n);
	while (got < 0 && errno == EINTR);
	return got;
}

static void write_input(struct run *r)
{
	while (r->in_off < r->in_len) {
		ssize_t n = write(r->in, r->in_buf + r->in_off,
				  r->in_len - r->in_off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n < 0)	/* EPIPE: it does not read its input */
			break;
		r->in_off += (size_t)n;
	}
	close(r->in);
	r->in = -1;
}

/* Read what is there; returns 0 at end of file, 1 otherwise, -errno on
 * an error. */
static int read_output(struct run *r)
{
	char scratch[16384];

	for (;;) {
		char *dst = scratch;
		size_t room = sizeof(scratch);
		ssize_t n;

		if (r->out_len < r->keep) {
			if (r->out_len == r->out_cap) {
				size_t cap = r->out_cap * 2;
				char *b;

				if (cap > r->keep)
					cap = r->keep;
				b = realloc(r->out, cap);
				if (b == NULL)
					return -ENOMEM;
				r->out = b;
				r->out_cap = cap;
			}
			dst = r->out + r->out_len;
			room = r->out_cap - r->out_len;
		}
		n = read_some(r->sv.out, dst, room);
		if (n < 0)
			return errno == EAGAIN ? 1 : -errno;
		if (n == 0)
			return 0;
		if (dst == scratch)
			r->out_over = true;
		else
			r->out_len += (size_t)n;
	}
}

/* Keep the last ERR_KEEP bytes of standard error. 0 at end of file. */
static int read_error(struct run *r)
{
	for (;;) {
		ssize_t n = read_some(r->err, r->err_buf + r->err_len,
				      sizeof(r->err_buf) - r->err_len);

		if (n < 0)
			return errno == EAGAIN ? 1 : -1;
		if (n == 0)
			return 0;
		r->err_len += (size_t)n;
		if (r->err_len > ERR_KEEP) {
			memmove(r->err_buf, r->err_buf + r->err_len - ERR_KEEP,
				ERR_KEEP);
			r->err_len = ERR_KEEP;
		}
	}
}

/*
 * Feed the input and collect the output until the command has ended and
 * closed its standard output, or until the deadline: then everything it
 * started is killed. Its end is the watcher's word (sv_ended). A command
 * that ended before the deadline keeps its own status even if something
 * it left behind held its output open until then.
 */
static void collect(struct run *r, uint32_t timeout_ms)
{
	uint64_t deadline = now_ms() + timeout_ms;
	int rc;

	while (!r->out_eof || !r->exited) {
		struct pollfd pfd[4];
		uint64_t now = now_ms();
		nfds_t n = 0;

		if (now >= deadline) {
			r->timed_out = !r->exited;
			break;
		}
		if (r->in >= 0)
			pfd[n++] = (struct pollfd){ r->in, POLLOUT, 0 };
		if (!r->out_eof)
			pfd[n++] = (struct pollfd){ r->sv.out, POLLIN, 0 };
		if (r->err >= 0)
			pfd[n++] = (struct pollfd){ r->err, POLLIN, 0 };
		if (!r->exited)
			pfd[n++] = (struct pollfd){ r->sv.st, POLLIN, 0 };
		rc = poll(pfd, n, (int)(deadline - now));
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0) {
			r->lost = true;
			r->lost_err = errno;
			return;
		}
		for (nfds_t i = 0; i < n; i++) {
			int fd = pfd[i].fd;

			if (pfd[i].revents == 0)
				continue;
			if (fd == r->in) {
				write_input(r);
			} else if (fd == r->sv.out) {
				rc = read_output(r);
				if (rc < 0) {
					r->lost = true;
					r->lost_err = -rc;
					return;
				}
				r->out_eof = rc == 0;
			} else if (fd == r->err) {
				if (read_error(r) <= 0) {
					close(r->err);
					r->err = -1;
				}
			} else {
				rc = sv_ended(&r->sv, &r->wstatus);
				if (rc <= 0) {
					r->lost = true;
					r->lost_err = -rc;
					return;
				}
				r->exited = true;
			}
		}
	}
	if (r->timed_out || !r->out_eof) {
		sv_kill(&r->sv);
		if (!r->exited && (rc = sv_ended(&r->sv, &r->wstatus)) <= 0) {
			r->lost = true;
			r->lost_err = -rc;
		}
		r->exited = true;
	}
}

/* ------------------------------------------------------------ orphans */

/*
 * The gateway is a child subreaper: should a watcher die (kill -9), its
 * command dies with it, and what the command started comes to the
 * gateway, which kills all of it (sweep()) before it answers the call.
 * With many commands running, an orphan cannot be told to be one call's
 * or another's, so none ever comes to the gateway but from a watcher that
 * died, or that gave up a kill (a process stuck in the kernel, another
 * user's): a watcher whose command ended is let go (sv_let_go()) and
 * stays, the reaper of what the command left running, until that has
 * ended too. So every orphan is one to kill. Commands run in sessions of
 * their own, which nothing they start can leave for the gateway's: the
 * gateway's own children (the watchers, GET /metrics' carmyctl) are the
 * ones in its session, and sv_kill_orphans() leaves them be.
 */
int gw_command_init(struct gateway *gw)
{
	pthread_mutex_init(&gw->orphan_lock, NULL);
	gw->lingering = NULL;
	gw->n_lingering = gw->cap_lingering = 0;
	gw->orphans = false;
	return sv_subreaper();
}

/* Under orphan_lock: kill the orphans, waiting up to wait_ms for them to
 * die. What is left is killed again on each SIGCHLD (gw_command_reap()),
 * which the death of each of them brings. Returns how many are left
 * (sv_kill_orphans()). */
static int sweep(struct gateway *gw, int wait_ms)
{
	int left = sv_kill_orphans(true, wait_ms);

	gw->orphans = left != 0;
	return left;
}

/* A watcher that ended other than by exit(0) was killed: what it reaped
 * for its command came to us. */
static bool ended_clean(int ws)
{
	return ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
}

/* Under orphan_lock: reap the watchers let go that have ended. */
static void reap_lingering(struct gateway *gw)
{
	for (size_t i = 0; i < gw->n_lingering;) {
		int ws = -1;
		pid_t p = waitpid(gw->lingering[i], &ws, WNOHANG);

		if (p == 0) {
			i++;
			continue;
		}
		if (p < 0 || !ended_clean(ws))
			gw->orphans = true;
		gw->lingering[i] = gw->lingering[--gw->n_lingering];
	}
}

void gw_command_reap(struct gateway *gw)
{
	pthread_mutex_lock(&gw->orphan_lock);
	reap_lingering(gw);
	if (gw->orphans)
		sweep(gw, 0);
	pthread_mutex_unlock(&gw->orphan_lock);
}

/* Let the watcher of a command that ended go, leaving what the command
 * left running alone: a watcher that stays is reaped once it ends (it
 * may have already: its SIGCHLD may have come before it was listed). */
static void let_go(struct gateway *gw, struct supervised *sv)
{
	int ws = -1;
	pid_t w = sv_let_go(sv, &ws);

	pthread_mutex_lock(&gw->orphan_lock);
	if (w > 0 && gw->n_lingering == gw->cap_lingering) {
		size_t cap = gw->cap_lingering ? 2 * gw->cap_lingering : 16;
		pid_t *p = realloc(gw->lingering, cap * sizeof(*p));

		if (p != NULL) {
			gw->lingering = p;
			gw->cap_lingering = cap;
		}
	}
	if (w > 0 && gw->n_lingering < gw->cap_lingering) {
		gw->lingering[gw->n_lingering++] = w;
		reap_lingering(gw);
	} else if (w > 0) {
		log_warn("no memory to list watcher %d: it stays a zombie "
			 "once it ends", (int)w);
	} else if (!ended_clean(ws)) {
		sweep(gw, 0);
	}
	pthread_mutex_unlock(&gw->orphan_lock);
}

/* How a lost run was lost (ws: its watcher's wait status), and what was
 * left of it (left: sweep()'s). */
static void lost_what(const struct run *r, int ws, int left, char *what,
		      size_t len)
{
	char how[96];

	if (r->lost_err != 0)
		snprintf(how, sizeof(how), "the gateway could not follow it: "
			 "%s", strerror(r->lost_err));
	else if (ws >= 0 && WIFSIGNALED(ws))
		snprintf(how, sizeof(how), "the process that watched it died "
			 "of signal %d", WTERMSIG(ws));
	else if (ws >= 0 && WIFEXITED(ws))
		snprintf(how, sizeof(how), "the process that watched it ended "
			 "with status %d", WEXITSTATUS(ws));
	else
		snprintf(how, sizeof(how), "the process that watched it is "
			 "gone");
	if (left == 0)
		snprintf(what, len, "%s; it and every process it started "
			 "were killed", how);
	else if (left > 0)
		snprintf(what, len, "%s; %d of the processes it started could "
			 "not be killed", how, left);
	else
		snprintf(what, len, "%s; the processes it started could not "
			 "be listed", how);
}

/* ------------------------------------------------------------ answers */

/* The last non-empty line of standard error, as valid UTF-8 (a byte that
 * is not becomes U+FFFD), at most MSG_MAX bytes; "" if there is none. */
static void last_line(struct run *r, char *msg)
{
	const char *b = r->err_buf;
	size_t end = r->err_len, start, o = 0;

	while (end > 0 && (b[end - 1] == '\n' || b[end - 1] == '\r' ||
			   b[end - 1] == ' ' || b[end - 1] == '\t'))
		end--;
	start = end;
	while (start > 0 && b[start - 1] != '\n')
		start--;
	for (size_t i = start; i < end && o + 4 < MSG_MAX;) {
		unsigned char ch = (unsigned char)b[i];
		size_t n = ch < 0x80 ? 1 : json_utf8_len(b + i, end - i);

		if (n == 0) {
			memcpy(msg + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
			continue;
		}
		if (o + n + 1 >= MSG_MAX)
			break;
		memcpy(msg + o, b + i, n);
		o += n;
		i += n;
	}
	msg[o] = '\0';
}

/* What the run became, as x's answer. */
static int answer(struct gw_exec *x, struct run *r, int *status)
{
	char msg[MSG_MAX + 128], line[MSG_MAX];

	last_line(r, line);
	if (r->timed_out) {
		*status = CARMY_STATUS_TIMED_OUT;
		snprintf(msg, sizeof(msg), "The tool did not finish within "
			 "%.3f s: it and every process it started were "
			 "killed. Its effect may or may not have happened.",
			 x->call.tool->timeout_ms / 1000.0);
		return gw_answer_execution(x->answer, x->execution_id,
					   *status, NULL, "TOOL_TIMEOUT", msg);
	}
	*status = CARMY_STATUS_FAILED;
	if (WIFSIGNALED(r->wstatus) || WEXITSTATUS(r->wstatus) != 0) {
		if (line[0] != '\0')
			snprintf(msg, sizeof(msg), "%s", line);
		else if (WIFSIGNALED(r->wstatus))
			snprintf(msg, sizeof(msg), "The tool was killed by "
				 "signal %d.", WTERMSIG(r->wstatus));
		else
			snprintf(msg, sizeof(msg), "The tool exited with "
				 "status %d.", WEXITSTATUS(r->wstatus));
		return gw_answer_execution(x->answer, x->execution_id,
					   *status, NULL, "TOOL_FAILED", msg);
	}
	if (r->out_over) {
		gw_answer_too_large(x->answer, x->execution_id);
		return 0;
	}
	return gw_answer_output(x->answer, x->execution_id, r->out, r->out_len,
				"The tool exited 0, but its standard output",
				status);
}

void gw_command_run(struct gw_exec *x)
{
	struct run r = { .in = -1, .err = -1 };
	struct sv_io io = { -1, -1, NULL, true, true };
	int in[2] = { -1, -1 }, err[2] = { -1, -1 }, rc, status;
	int ws = -1, left = 0;
	char **env = environment(x), what[192];
	sigset_t none;

	sigemptyset(&none);
	if (env == NULL || pipe2(in, O_CLOEXEC) != 0 ||
	    pipe2(err, O_CLOEXEC) != 0) {
		rc = env == NULL ? -ENOMEM : -errno;
		goto fail;
	}
	io = (struct sv_io){ in[0], err[1], env, true, true };
	rc = sv_start_io(&r.sv, x->call.tool->argv, &none, &io);
	close(in[0]);
	close(err[1]);
	in[0] = err[1] = -1;
	if (rc != 0)
		goto fail;
	r.in = in[1];
	r.err = err[0];
	r.in_buf = x->call.args_json;
	r.in_len = x->call.args_json_len;
	r.keep = x->h != NULL ? carmy_max_result(x->h->c) + 1 : OUT_KEEP_FREE;
	r.out_cap = r.keep < 4096 ? r.keep : 4096;
	r.out = malloc(r.out_cap);
	r.lost = r.out == NULL;
	r.lost_err = r.lost ? ENOMEM : 0;
	set_nonblock(r.in);
	set_nonblock(r.err);
	set_nonblock(r.sv.out);
	if (!r.lost)
		collect(&r, x->call.tool->timeout_ms);
	if (r.err >= 0) {
		read_error(&r);
		close(r.err);
	}
	if (r.in >= 0)
		close(r.in);
	if (r.timed_out || r.lost) {
		ws = sv_finish(&r.sv, true);
		/* Before the call is answered: once it is said uncertain
		 * (lost), nothing of the tool may run on. */
		pthread_mutex_lock(&x->gw->orphan_lock);
		left = sweep(x->gw, r.lost ? SV_KILL_WAIT_MS : 0);
		pthread_mutex_unlock(&x->gw->orphan_lock);
		if (left != 0)
			log_warn("execution %s: %s; they are killed again as "
				 "the gateway's children end", x->execution_id,
				 left > 0 ? "processes its tool started could "
				 "not be killed" : "the gateway's children "
				 "could not be listed");
	} else {
		let_go(x->gw, &r.sv);
	}
	environment_free(x, env);
	if (r.lost) {
		lost_what(&r, ws, left, what, sizeof(what));
		gw_exec_lost(x, what);
	} else if (answer(x, &r, &status) != 0) {
		gw_exec_lost(x, "no memory for its answer");
	} else {
		gw_exec_record(x, status);
	}
	free(r.out);
	return;
fail:
	for (int i = 0; i < 2; i++) {
		if (in[i] >= 0)
			close(in[i]);
		if (err[i] >= 0)
			close(err[i]);
	}
	environment_free(x, env);
	log_error("tool %s: cannot run %s: %s", x->call.tool->name,
		  x->call.tool->argv[0], strerror(rc > 0 ? rc : -rc));
	gw_exec_not_started(x, strerror(rc > 0 ? rc : -rc));
}
