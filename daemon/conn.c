/*
 * conn.c - carmyd's connections: accepting them and giving each to a loop,
 * bounding them, writing their replies, closing them (and sweeping their
 * owners), the waiters on executions, and the ack slots in the segment.
 *
 * Connections are bounded (--max-clients, sized to the descriptor limit).
 * Until its HELLO a connection is on the greeting list, oldest first: the
 * tick closes those that said nothing for CARMYD_HELLO_TIMEOUT_S, and a
 * connection beyond the cap takes the place of the oldest one there (shed:
 * told TOO_MANY_CLIENTS and shut down; its loop then closes it). With none
 * to shed it is refused: TOO_MANY_CLIENTS, then closed. Out of descriptors
 * all the same (a lowered limit, a store holding more than reserved),
 * accept() would fail at once for ever: a spare descriptor, given up for
 * the moment, lets the first loop accept and refuse each one waiting, and
 * shed the oldest silent one so that the next finds room; without it, or
 * when accept() fails for any other lasting reason, listening pauses until
 * the tick. It pauses too while SHED_AHEAD shed connections wait for their
 * loops to close them, until the last of those wakes the first loop. Each
 * episode of refusals, sheds, HELLO timeouts and connections closed after
 * an error (conn_fail) is logged once as it begins and once as it ends:
 * whoever may connect cannot fill the log.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "daemon/carmyd.h"
#include "daemon/server.h"
#include "libclient/wire.h"

#define WBUF_MAX (1024 * 1024)	/* a client that never reads its replies */
#define HELLO_TIMEOUT_NS (CARMYD_HELLO_TIMEOUT_S * 1000000000ull)
/* An episode of refused, shed and silent connections ends when none was
 * for this long: past the HELLO timeout, so that the connections of one
 * flood timing out belong to the episode they began. */
#define CROWD_QUIET_NS (HELLO_TIMEOUT_NS + 1000000000ull)
/* Shed connections not yet closed by their loops, at most: each holds a
 * descriptor until then (CARMYD_FDS_RESERVE has room for them). */
#define SHED_AHEAD 16

static struct loop *least_busy(struct server *sv);
static bool out_of_fds(struct server *sv, int err);
static void refuse(struct server *sv, int fd);
static bool shed_one(struct server *sv);
static struct conn *shed_oldest(struct server *sv);
static void admit(struct server *sv, int fd);
static void unlist(struct conn *c);
static void greet_expire(struct server *sv, uint64_t now);
static void failed_tick(struct server *sv);
static void crowd_note(struct server *sv, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void crowd_tick(struct server *sv, uint64_t now);
static void listen_pause(struct server *sv, bool pause, bool until_tick);
static void posting_del(struct conn *c);
static void arm_deadline(struct server *sv, uint64_t at_ns);
static void ack_give(struct server *sv, uint32_t slot);

/* ------------------------------------------------------------ accepting */

/*
 * Accept what is waiting and give each connection to a loop, up to
 * --max-clients: one more takes the place of the oldest that has not said
 * HELLO, or is refused. Once its descriptor is in that loop's epoll set the
 * connection is the loop's: we do not touch it again (but to shed it,
 * under greet_lock).
 */
void conn_accept(struct server *sv)
{
	for (;;) {
		unsigned long served;
		int fd;

		/* Let the loops close those shed first: accepting on would
		 * use up the descriptors they hold. The listening socket
		 * stays readable meanwhile: it must not wake this loop
		 * until the last of them rings (wake_fd), or the tick. */
		if (atomic_load_explicit(&sv->nshed, memory_order_relaxed) >=
		    SHED_AHEAD) {
			listen_pause(sv, true, false);
			return;
		}
		if (sv->spare < 0)
			sv->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
		fd = accept4(sv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			int err = errno;

			if (err == EAGAIN || err == EINTR)
				return;
			if (err == ECONNABORTED || err == EPROTO)
				continue;	/* gone before we took it */
			if (err == EMFILE || err == ENFILE) {
				if (out_of_fds(sv, err))
					continue;
				return;
			}
			/* No memory, an LSM's veto...: it would fail again
			 * at once, and the connection waits. */
			served = atomic_load_explicit(&sv->nconns,
						      memory_order_relaxed);
			crowd_note(sv, "accept: %s with %lu connections served",
				   strerror(err), served);
			listen_pause(sv, true, true);
			return;
		}
		served = atomic_load_explicit(&sv->nconns, memory_order_relaxed);
		if (served >= sv->cfg->max_clients && !shed_one(sv)) {
			crowd_note(sv, "%lu connections, the most --max-clients "
				   "allows", served);
			refuse(sv, fd);
			continue;
		}
		admit(sv, fd);
	}
}

/* The loop serving the fewest connections (the first of equals). */
static struct loop *least_busy(struct server *sv)
{
	struct loop *best = &sv->loops[0];
	unsigned long min = atomic_load_explicit(&best->conns,
						 memory_order_relaxed);

	for (unsigned i = 1; i < sv->nloops; i++) {
		unsigned long n = atomic_load_explicit(&sv->loops[i].conns,
						       memory_order_relaxed);

		if (n < min) {
			min = n;
			best = &sv->loops[i];
		}
	}
	return best;
}

/*
 * accept() failed for want of a descriptor (err) with connections waiting,
 * and would again at once: with the spare given up, take one and refuse it
 * (TOO_MANY_CLIENTS), and shed the oldest connection that has not said
 * HELLO so that the next finds room. Returns true to go on accepting;
 * false with nothing left waiting, or with listening paused until the tick
 * (no spare, or accept() failed all the same: the freed descriptor went to
 * another thread, say).
 */
static bool out_of_fds(struct server *sv, int err)
{
	int fd;

	crowd_note(sv, "accept: %s with %lu connections served", strerror(err),
		   (unsigned long)atomic_load_explicit(&sv->nconns,
						      memory_order_relaxed));
	if (sv->spare < 0) {
		listen_pause(sv, true, true);
		return false;
	}
	close(sv->spare);
	sv->spare = -1;
	fd = accept4(sv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		/* The spare is taken again on the next try. */
		if (errno != EAGAIN && errno != EINTR)
			listen_pause(sv, true, true);
		return false;
	}
	(void)shed_one(sv);
	refuse(sv, fd);
	return true;
}

/* Tell fd's peer TOO_MANY_CLIENTS and close it. */
static void refuse(struct server *sv, int fd)
{
	if (send(fd, sv->too_many.data, sv->too_many.size,
		 MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		/* It learns from the close instead. */
	}
	close(fd);
	sv->refused++;
}

/*
 * Shed the oldest connection that has not said HELLO: tell it
 * TOO_MANY_CLIENTS and shut it down, so that its loop sees the end and
 * closes it. Returns false if there is none. First loop only.
 */
static bool shed_one(struct server *sv)
{
	struct conn *c;

	pthread_mutex_lock(&sv->greet_lock);
	c = sv->greet_head;
	if (c != NULL) {
		shed_oldest(sv);
		if (send(c->fd, sv->too_many.data, sv->too_many.size,
			 MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
			/* It learns from the shutdown instead. */
		}
		shutdown(c->fd, SHUT_RDWR);
	}
	pthread_mutex_unlock(&sv->greet_lock);
	if (c == NULL)
		return false;
	sv->shed++;
	crowd_note(sv, "%lu connections, the most --max-clients allows",
		   (unsigned long)sv->cfg->max_clients);
	return true;
}

/*
 * Take the oldest connection that has not said HELLO (there is one) off
 * the list, and count it shed instead of served: its loop closes it once
 * it is shut down. greet_lock held.
 */
static struct conn *shed_oldest(struct server *sv)
{
	struct conn *c = sv->greet_head;

	sv->greet_head = c->gnext;
	if (c->gnext != NULL)
		c->gnext->gprev = NULL;
	else
		sv->greet_tail = NULL;
	c->greeting = false;
	c->shed = true;
	atomic_fetch_sub_explicit(&sv->nconns, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&sv->nshed, 1, memory_order_relaxed);
	return c;
}

/* Register a new connection, on the greeting list until its HELLO, and
 * give it to the least busy loop. */
static void admit(struct server *sv, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	struct conn *c;
	struct loop *l;

	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		log_error("out of memory accepting a connection");
		close(fd);
		return;
	}
	l = least_busy(sv);
	c->loop = l;
	c->fd = fd;
	c->ack_slot = UINT32_MAX;
	c->post_ix = UINT_MAX;
	c->operator = -1;
	msgpack_sbuffer_init(&c->out);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) {
		c->pid = cred.pid;
		c->uid = cred.uid;
		c->gid = cred.gid;
	} else {
		c->uid = (uid_t)-1;	/* nobody: not an operator */
		c->gid = (gid_t)-1;
	}
	log_debug("connection from pid %d uid %u, loop %u", (int)c->pid,
		  (unsigned)c->uid, (unsigned)(l - sv->loops));
	atomic_fetch_add_explicit(&l->conns, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&sv->nconns, 1, memory_order_relaxed);
	ev.data.ptr = c;
	c->armed = ev.events;
	/* Listed before l can see it, so l's conn_drop() finds it. */
	pthread_mutex_lock(&l->list_lock);
	c->next = l->list;
	if (l->list != NULL)
		l->list->prev = c;
	l->list = c;
	pthread_mutex_unlock(&l->list_lock);
	pthread_mutex_lock(&sv->greet_lock);
	c->accepted_ns = clock_mono_ns();
	c->greeting = true;
	c->gprev = sv->greet_tail;
	if (sv->greet_tail != NULL)
		sv->greet_tail->gnext = c;
	else
		sv->greet_head = c;
	sv->greet_tail = c;
	pthread_mutex_unlock(&sv->greet_lock);
	if (epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
		log_error("epoll_ctl: %s", strerror(errno));
		conn_greet_del(c);
		unlist(c);
		atomic_fetch_sub_explicit(&l->conns, 1, memory_order_relaxed);
		atomic_fetch_sub_explicit(&sv->nconns, 1, memory_order_relaxed);
		close(fd);
		msgpack_sbuffer_destroy(&c->out);
		free(c);
	}
}

static void unlist(struct conn *c)
{
	struct loop *l = c->loop;

	pthread_mutex_lock(&l->list_lock);
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		l->list = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	pthread_mutex_unlock(&l->list_lock);
}

/* ------------------------------------------------------------ greeting list */

/* Take c off the greeting list (its HELLO came, or it is dropped). Returns
 * GREET_SHED if the first loop shed it meanwhile, else GREET_OK. Its own
 * loop's to call (or the first's, before that loop can see it): the first
 * loop never touches a connection that is off the list. */
int conn_greet_del(struct conn *c)
{
	struct server *sv = c->loop->sv;
	bool shed;

	pthread_mutex_lock(&sv->greet_lock);
	if (c->greeting) {
		if (c->gprev != NULL)
			c->gprev->gnext = c->gnext;
		else
			sv->greet_head = c->gnext;
		if (c->gnext != NULL)
			c->gnext->gprev = c->gprev;
		else
			sv->greet_tail = c->gprev;
		c->greeting = false;
	}
	shed = c->shed;
	pthread_mutex_unlock(&sv->greet_lock);
	return shed ? GREET_SHED : GREET_OK;
}

/* The first loop's tick: close the connections silent for
 * CARMYD_HELLO_TIMEOUT_S, log those failed since the last tick, listen
 * again, and end an episode that has been quiet. */
void conn_tick(struct server *sv)
{
	greet_expire(sv, clock_mono_ns());
	failed_tick(sv);
	crowd_tick(sv, clock_mono_ns());
}

/* wake_fd rang: the shed connections not yet closed fell below SHED_AHEAD,
 * and listening, paused for them, resumes. First loop only. */
void conn_on_wake(struct server *sv)
{
	uint64_t rung;

	if (read(sv->wake_fd, &rung, sizeof(rung)) < 0) {
		/* spurious wake-up */
	}
	/* Read after the ring: a backlog back at SHED_AHEAD since keeps
	 * listening paused. */
	if (sv->paused && !sv->pause_tick &&
	    atomic_load_explicit(&sv->nshed, memory_order_relaxed) <
		    SHED_AHEAD)
		listen_pause(sv, false, false);
}

/* Close (shut down, for their loops to close) the connections that have
 * not said HELLO within CARMYD_HELLO_TIMEOUT_S. First loop, at the tick. */
static void greet_expire(struct server *sv, uint64_t now)
{
	unsigned long n = 0;
	pid_t pid = 0;
	uid_t uid = 0;

	pthread_mutex_lock(&sv->greet_lock);
	while (sv->greet_head != NULL &&
	       now - sv->greet_head->accepted_ns >= HELLO_TIMEOUT_NS) {
		struct conn *c = shed_oldest(sv);

		shutdown(c->fd, SHUT_RDWR);
		if (n++ == 0) {
			pid = c->pid;
			uid = c->uid;
		}
	}
	pthread_mutex_unlock(&sv->greet_lock);
	if (n == 0)
		return;
	sv->silent += n;
	crowd_note(sv, "pid %d uid %u said no HELLO within %d s", (int)pid,
		   (unsigned)uid, CARMYD_HELLO_TIMEOUT_S);
}

/* The connections closed after an error since the last tick (conn_fail):
 * they belong to the episode, the first named if it begins it. First
 * loop, at the tick. */
static void failed_tick(struct server *sv)
{
	unsigned long n;
	pid_t pid;
	uid_t uid;
	uint32_t owner;
	int code;
	const char *why;

	pthread_mutex_lock(&sv->greet_lock);
	n = sv->failed_new;
	pid = sv->failed_pid;
	uid = sv->failed_uid;
	owner = sv->failed_owner;
	code = sv->failed_code;
	why = sv->failed_why;
	sv->failed_new = 0;
	pthread_mutex_unlock(&sv->greet_lock);
	if (n == 0)
		return;
	sv->failed += n;
	crowd_note(sv, "pid %d uid %u owner %u: %s (%s): disconnected",
		   (int)pid, (unsigned)uid, owner, why, carmy_errname(code));
}

/* Something was refused, shed or closed for silence: an episode begins
 * (one line, saying what began it) or goes on (nothing). First loop. */
static void crowd_note(struct server *sv, const char *fmt, ...)
{
	char what[160];
	va_list ap;

	sv->crowd_last_ns = clock_mono_ns();
	if (sv->crowded)
		return;
	sv->crowded = true;
	sv->crowd_since_ns = sv->crowd_last_ns;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	log_warn("connections: %s: until this passes, those that say no "
		 "HELLO within %d s are closed, and one beyond what carmyd "
		 "can serve takes the place of the oldest of those or is "
		 "refused with TOO_MANY_CLIENTS (one line now, one with the "
		 "counts at the end)", what, CARMYD_HELLO_TIMEOUT_S);
}

/* At the tick: take the spare back and listen again if paused; end an
 * episode that has been quiet for CROWD_QUIET_NS, with its counts. */
static void crowd_tick(struct server *sv, uint64_t now)
{
	if (sv->spare < 0)
		sv->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (sv->paused)
		listen_pause(sv, false, false);
	if (!sv->crowded || now - sv->crowd_last_ns < CROWD_QUIET_NS)
		return;
	log_warn("connections: back to normal after %.1f s: %lu refused "
		 "(TOO_MANY_CLIENTS), %lu shed before their HELLO, %lu closed "
		 "for saying no HELLO within %d s, %lu closed after an error; "
		 "%lu served",
		 (double)(sv->crowd_last_ns - sv->crowd_since_ns) / 1e9,
		 sv->refused, sv->shed, sv->silent, CARMYD_HELLO_TIMEOUT_S,
		 sv->failed,
		 (unsigned long)atomic_load_explicit(&sv->nconns,
						    memory_order_relaxed));
	sv->crowded = false;
	sv->refused = sv->shed = sv->silent = sv->failed = 0;
}

/* Stop waking up for connections to accept: until the tick (until_tick),
 * or until the shed connections are closed as well; or start again. */
static void listen_pause(struct server *sv, bool pause, bool until_tick)
{
	struct epoll_event ev = { .events = pause ? 0 : EPOLLIN,
				  .data.ptr = &sv->lfd };

	sv->pause_tick = pause && (until_tick || sv->pause_tick);
	if (pause != sv->paused &&
	    epoll_ctl(sv->loops[0].ep, EPOLL_CTL_MOD, sv->lfd, &ev) == 0)
		sv->paused = pause;
}

/* ------------------------------------------------------------ closing */

/* Write pending replies; arm EPOLLOUT only while some are left. Returns 0,
 * or -1 if the connection was dropped. */
int conn_flush(struct conn *c)
{
	while (c->out_off < c->out.size) {
		ssize_t n = send(c->fd, c->out.data + c->out_off,
				 c->out.size - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN) {
				conn_drop(c, strerror(errno));
				return -1;
			}
			if (c->out.size > WBUF_MAX) {
				conn_drop(c, "does not read its replies");
				return -1;
			}
			if (!c->want_out) {
				c->want_out = true;
				conn_arm(c);
			}
			return 0;
		}
		c->out_off += (size_t)n;
	}
	c->out.size = 0;
	c->out_off = 0;
	if (c->want_out) {
		c->want_out = false;
		conn_arm(c);
	}
	return 0;
}

/*
 * Tell epoll what c waits for: input, unless more came while a store
 * request was pending (req_read() then pauses it until the answer);
 * output while replies are left. Input stays armed while a request is
 * pending: a client of libcarmy sends nothing more until its reply, and
 * two epoll_ctl() calls per request would be a fifth of carmyd's system
 * calls under a journal's load. Nothing changed, no call.
 */
void conn_arm(struct conn *c)
{
	struct epoll_event ev = { .data.ptr = c };

	if (c->pending == 0)
		c->in_paused = false;
	ev.events = (c->in_paused ? 0 : EPOLLIN) |
		    (c->want_out ? EPOLLOUT : 0);
	if (ev.events != c->armed &&
	    epoll_ctl(c->loop->ep, EPOLL_CTL_MOD, c->fd, &ev) == 0)
		c->armed = ev.events;
}

/* Tell the peer why, then drop it. why is a string constant. Anyone who
 * may connect can fail as often as they like (before HELLO or after): the
 * first loop logs these by the episode (failed_tick), not one a
 * connection. */
void conn_fail(struct conn *c, int code, const char *why)
{
	struct server *sv = c->loop->sv;

	log_debug("pid %d uid %u owner %u: %s (%s): disconnecting",
		  (int)c->pid, (unsigned)c->uid, c->owner, why,
		  carmy_errname(code));
	pthread_mutex_lock(&sv->greet_lock);
	if (sv->failed_new++ == 0) {
		sv->failed_pid = c->pid;
		sv->failed_uid = c->uid;
		sv->failed_owner = c->owner;
		sv->failed_code = code;
		sv->failed_why = why;
	}
	pthread_mutex_unlock(&sv->greet_lock);
	c->out.size = 0;
	c->out_off = 0;
	if (wire_put_reply(&c->out, WIRE_ERROR, code) == 0 &&
	    send(c->fd, c->out.data, c->out.size, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		/* The peer is leaving anyway. */
	}
	conn_drop(c, why);
}

/*
 * The connection is gone: its owner is dead. Unregister it and settle its
 * tickets right away, so a retry sees EXECUTION_UNCERTAIN (interrupted) as
 * soon as the client's process is. why may be c->why.
 */
void conn_drop(struct conn *c, const char *why)
{
	struct loop *l = c->loop;
	/* Off the greeting list before its descriptor can be closed: the
	 * first loop sheds only what is on it. */
	bool shed = conn_greet_del(c) == GREET_SHED;

	epoll_ctl(l->ep, EPOLL_CTL_DEL, c->fd, NULL);
	if (c->waiting != NULL) {
		/* Nobody to tell any more: let the WAIT go at once. */
		struct store_op *w = NULL, **pp;

		pthread_mutex_lock(&l->sv->wait_lock);
		for (pp = &l->sv->waiters; *pp != NULL; pp = &(*pp)->wnext) {
			if (*pp == c->waiting) {
				w = *pp;
				*pp = w->wnext;
				break;
			}
		}
		pthread_mutex_unlock(&l->sv->wait_lock);
		c->waiting = NULL;
		if (w != NULL)
			conn_store_done(&w->req, -ECANCELED);
	}
	if (c->pending > 0) {
		/* Its owner stays registered until the store has answered,
		 * so a completion on its way is recorded before the sweep
		 * looks at the entry. request.c's finish() comes back here. */
		if (!c->closing) {
			snprintf(c->why, sizeof(c->why), "%s", why);
			log_info("owner %u (pid %d) %s with a request at the "
				 "store: dropped once it is answered",
				 c->owner, (int)c->pid, why);
		}
		c->closing = true;
		return;
	}
	close(c->fd);
	if (c->owner != 0) {
		char what[96];

		owners_del(c->owner);
		snprintf(what, sizeof(what), "owner %u (pid %d) %s", c->owner,
			 (int)c->pid, why);
		store_sweep_dead(l->sv->store, what);
		log_debug("%s", what);
		conn_wake_waiters(l->sv, true, 0, 0);
	}
	unlist(c);
	posting_del(c);
	/* Closed: its client reads nothing more from the slot but what the
	 * next connection's answers say of other executions. */
	ack_give(l->sv, c->ack_slot);
	msgpack_sbuffer_destroy(&c->out);
	free(c->rbuf);
	free(c);
	atomic_fetch_sub_explicit(&l->conns, 1, memory_order_relaxed);
	if (!shed) {
		atomic_fetch_sub_explicit(&l->sv->nconns, 1,
					  memory_order_relaxed);
	} else if (atomic_fetch_sub_explicit(&l->sv->nshed, 1,
					     memory_order_relaxed) ==
		   SHED_AHEAD) {
		uint64_t one = 1;

		/* The first loop may have paused listening for us. */
		if (write(l->sv->wake_fd, &one, sizeof(one)) < 0) {
			/* Full: it is rung already. */
		}
	}
}

/*
 * Free the connections of l still open when carmyd stops, once the loops
 * and the store are done with them. Their owners' entries are left for the
 * next carmyd's start-up sweep, as the process's end would.
 */
void conn_close_all(struct loop *l)
{
	while (l->list != NULL) {
		struct conn *c = l->list;

		l->list = c->next;
		close(c->fd);
		ack_give(l->sv, c->ack_slot);
		msgpack_sbuffer_destroy(&c->out);
		free(c->rbuf);
		free(c);
	}
}

/* c's client may post: look at its slot (c's loop only). */
void conn_posting_add(struct conn *c)
{
	struct loop *l = c->loop;

	if (l->nposting == l->posting_cap) {
		unsigned cap = l->posting_cap ? 2 * l->posting_cap : 16;
		struct conn **p = realloc(l->posting, cap * sizeof(*p));

		if (p == NULL)
			return;	/* then it sends: bell UINT32_MAX */
		l->posting = p;
		l->posting_cap = cap;
	}
	c->post_ix = l->nposting;
	l->posting[l->nposting++] = c;
}

static void posting_del(struct conn *c)
{
	struct loop *l = c->loop;
	unsigned i = c->post_ix;

	if (i == UINT_MAX)
		return;
	l->posting[i] = l->posting[--l->nposting];
	l->posting[i]->post_ix = i;
	c->post_ix = UINT_MAX;
}

/* ------------------------------------------------------------ waiters */

/* Loops owed a wake-up by this thread's answers that said more follow
 * (CARMY_STORE_ANSWERS_FOLLOW): at most one each, so --threads bounds it. */
#define TO_WAKE_MAX 64
static __thread struct loop *to_wake[TO_WAKE_MAX];
static __thread unsigned nto_wake;

static void wake_loop(struct loop *l)
{
	uint64_t one = 1;

	if (write(l->done_fd, &one, sizeof(one)) < 0) {
		/* Only at the counter's limit: the loop is woken. */
	}
}

/*
 * The store's answer, on whatever thread the store calls it (through
 * request.c's store_done() for a request a connection holds): queue it for
 * the connection's loop and wake that loop. Only the answer that finds the
 * queue empty owes the eventfd a write: the others join a queue the loop
 * has been told of and has not taken yet (req_answered() reads the eventfd
 * before it takes the queue). An answer the store says more follow after
 * holds its write until the last of them on this thread, which writes for
 * every loop owed one: a run of a group commit costs a loop one wake-up,
 * not one per client, even while the loop takes its queue as it fills.
 */
void conn_store_done(struct carmy_store_req *req, int rc)
{
	struct store_op *op = req->cookie;
	struct conn *c = op->conn;
	struct loop *l = c->loop;
	struct server *sv = l->sv;
	bool first, later = req->flags & CARMY_STORE_ANSWERS_FOLLOW;

	op->rc = rc;
	pthread_mutex_lock(&l->done_lock);
	first = l->done == NULL;
	op->next = l->done;
	l->done = op;
	pthread_mutex_unlock(&l->done_lock);
	if (first) {
		unsigned i = 0;

		while (i < nto_wake && to_wake[i] != l)
			i++;
		if (i == nto_wake && later && nto_wake < TO_WAKE_MAX)
			to_wake[nto_wake++] = l;
		else if (i == nto_wake)
			wake_loop(l);
	}
	if (!later) {
		while (nto_wake > 0)
			wake_loop(to_wake[--nto_wake]);
	}
	pthread_mutex_lock(&sv->idle_lock);
	if (--sv->inflight == 0)
		pthread_cond_broadcast(&sv->idle);
	pthread_mutex_unlock(&sv->idle_lock);
}

/*
 * Let go the waiters whose execution stopped running (all, or those on
 * entry), or whose deadline passed, or, with rc < 0 and all, every one.
 * Each answer goes to its connection's loop like a store's. Called from
 * any loop.
 */
unsigned conn_wake_waiters(struct server *sv, bool all, uint32_t entry,
			   int rc)
{
	struct store_op *go = NULL, **pp;
	uint64_t now = clock_mono_ns(), nearest = 0;
	unsigned woken = 0;

	pthread_mutex_lock(&sv->wait_lock);
	for (pp = &sv->waiters; *pp != NULL;) {
		struct store_op *w = *pp;
		int why = 1;

		if (rc < 0)
			why = rc;
		else if (!all && w->entry != entry)
			why = 1;
		else if (!store_running(sv->store, w->entry, w->rec.exec))
			why = 0;
		else if (now >= w->deadline_ns)
			why = -ETIMEDOUT;
		if (why == 1) {
			if (nearest == 0 || w->deadline_ns < nearest)
				nearest = w->deadline_ns;
			pp = &w->wnext;
			continue;
		}
		*pp = w->wnext;
		w->rc = why;
		w->wnext = go;
		go = w;
	}
	/* Every waiter left was looked at: the timer follows the nearest. */
	if (nearest != sv->wfd_at)
		arm_deadline(sv, nearest);
	pthread_mutex_unlock(&sv->wait_lock);
	while (go != NULL) {
		struct store_op *next = go->wnext;

		/* The connection's loop clears c->waiting (request.c's
		 * finish()). */
		conn_store_done(&go->req, go->rc);
		go = next;
		woken++;
	}
	return woken;
}

/* Arm wfd for the monotonic time at_ns (0: disarm). With wait_lock. */
static void arm_deadline(struct server *sv, uint64_t at_ns)
{
	struct itimerspec it = { { 0, 0 }, { 0, 0 } };

	if (at_ns != 0) {
		it.it_value.tv_sec = (time_t)(at_ns / 1000000000u);
		it.it_value.tv_nsec = (long)(at_ns % 1000000000u);
	}
	if (timerfd_settime(sv->wfd, TFD_TIMER_ABSTIME, &it, NULL) == 0)
		sv->wfd_at = at_ns;
	else
		log_warn("cannot arm the waiters' timer: %s (deadlines are "
			 "seen at the next tick)", strerror(errno));
}

/* ------------------------------------------------------------ ack slots */

/* A free ack slot for a connection, or UINT32_MAX when all are taken (its
 * answers then all come on its socket). */
uint32_t conn_ack_take(struct server *sv, uint32_t *gen)
{
	uint32_t slot = UINT32_MAX;

	/* From past the last one handed out: a slot given back rests while
	 * the others are used, so that a late write of its last client (see
	 * req_take_posts) is unlikely to meet the next one's request. */
	pthread_mutex_lock(&sv->ack_lock);
	for (uint32_t n = 0; n < SHM_ACK_SLOTS; n++) {
		uint32_t i = (sv->ack_next + n) % SHM_ACK_SLOTS;

		if (!(sv->ack_used[i / 64] & UINT64_C(1) << (i % 64))) {
			sv->ack_used[i / 64] |= UINT64_C(1) << (i % 64);
			sv->ack_next = i + 1;
			slot = i;
			/* Whatever the slot's last client still writes
			 * there cannot land now (shm_ack_expect, and
			 * shm_post for its posts). */
			*gen = shm_ack_mark(&sv->store->view, slot,
					    ++sv->ack_gen) >> 2;
			shm_post_reset(&sv->store->view, slot, *gen);
			break;
		}
	}
	pthread_mutex_unlock(&sv->ack_lock);
	return slot;
}

static void ack_give(struct server *sv, uint32_t slot)
{
	if (slot >= SHM_ACK_SLOTS)
		return;
	pthread_mutex_lock(&sv->ack_lock);
	sv->ack_used[slot / 64] &= ~(UINT64_C(1) << (slot % 64));
	pthread_mutex_unlock(&sv->ack_lock);
}

