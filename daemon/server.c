/*
 * server.c - carmyd's event loops: accept connections, register each as an
 * owner, record completions, and turn a closed connection's running entries
 * uncertain at once.
 *
 * There are --threads event loops (one per CPU by default). A completion is
 * a round trip, and on these machines the round trip is mostly system calls
 * and wake-ups; one loop serves them one after another, however many
 * clients there are. So the first loop accepts every connection and hands
 * it to the loop with the fewest (adding its descriptor to that loop's
 * epoll set, which is safe from any thread); from then on that loop alone
 * reads, decodes, answers and finally drops it. What the loops share is
 * the store, whose writes to the segment are serialised by its own lock
 * (store.c), and the owner registry, an RCU hash table.
 *
 * A dead owner is a fact the kernel tells us: the connection's socket
 * reports EOF or an error the moment the client process dies (its
 * descriptors are closed) or closes it. No timer is involved; the first
 * loop's 100 ms tick only reclaims tombstones and, every second, re-checks
 * the segment header and settles tickets held by ids that are not connected
 * (a client that scribbled, or raced a sweep).
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
 * an error (fail_conn) is logged once as it begins and once as it ends:
 * whoever may connect cannot fill the log.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <urcu.h>

#include "common/clock.h"
#include "common/log.h"
#include "daemon/carmyd.h"
#include "libclient/wire.h"

#define MAX_EVENTS 64
#define READ_CHUNK (64 * 1024)
#define WBUF_MAX (1024 * 1024)	/* a client that never reads its replies */
#define TICK_NS (100 * 1000 * 1000)
#define HELLO_TIMEOUT_NS (CARMYD_HELLO_TIMEOUT_S * 1000000000ull)
/* An episode of refused, shed and silent connections ends when none was
 * for this long: past the HELLO timeout, so that the connections of one
 * flood timing out belong to the episode they began. */
#define CROWD_QUIET_NS (HELLO_TIMEOUT_NS + 1000000000ull)
/* Shed connections not yet closed by their loops, at most: each holds a
 * descriptor until then (CARMYD_FDS_RESERVE has room for them). */
#define SHED_AHEAD 16
/* Refused operator commands are logged at most once a second a user, and
 * the users last logged are remembered this many at a time. */
#define DENY_LOG_NS 1000000000ull
#define DENY_UIDS 8
/* greet_del(): was the connection shed meanwhile? */
enum { GREET_OK, GREET_SHED };

struct server;

/* One event loop: its epoll set, the eventfd that tells it to stop, and how
 * many connections it serves (written by it and by the accepting loop). */
struct loop {
	struct server *sv;
	pthread_t thread;
	int ep;
	int stop_fd;
	atomic_ulong conns;
	/* Every connection it serves, so that those still open when carmyd
	 * stops are freed (the accepting loop adds, this one removes). */
	pthread_mutex_t list_lock;
	struct conn *list;
	/* Store requests answered (by the store's thread), for this loop to
	 * reply to: a list under done_lock, and an eventfd to wake it. */
	int done_fd;
	pthread_mutex_t done_lock;
	struct store_op *done;
	/* Events of the current epoll batch still to be handled after this
	 * one: a request submitted then is marked CARMY_STORE_MORE. */
	bool more;
	/* Its bell in the segment (shm_post), or UINT32_MAX: none, and the
	 * connections whose clients may post, this loop's alone. */
	uint32_t bell;
	struct conn **posting;
	unsigned nposting, posting_cap;
};

struct conn {
	struct loop *loop;	/* the one loop that handles it */
	struct conn *prev, *next;	/* in loop->list */
	int fd;
	uint32_t owner;		/* 0 until HELLO */
	pid_t pid;
	uid_t uid;
	gid_t gid;
	int operator;		/* may resolve and purge: 1, 0; -1 not known yet */
	bool denied;		/* an operator command was refused (logged) */
	/* Until HELLO, on the server's greeting list; these are under
	 * its greet_lock. shed: the first loop shut it down (no HELLO in
	 * time, or its place went to a newer connection). */
	struct conn *gprev, *gnext;
	uint64_t accepted_ns;
	bool greeting;
	bool shed;
	uint8_t *rbuf;
	size_t rlen, rcap;
	struct wire_scanner scan;	/* of the message at rbuf's start */
	msgpack_sbuffer out;	/* replies not yet written */
	size_t out_off;
	bool want_out;		/* EPOLLOUT wanted */
	/* A request is with the store: its reply comes first, so nothing
	 * more is read until it is answered; a drop meanwhile waits too. */
	unsigned pending;
	bool in_paused;		/* input came while pending: EPOLLIN is off */
	uint32_t armed;		/* the events epoll has for fd */
	bool closing;
	char why[64];
	struct store_op *waiting;	/* its WAIT, while registered */
	uint32_t ack_slot;	/* its word in the segment, or UINT32_MAX */
	uint32_t ack_gen;	/* the slot's generation, for its posts */
	unsigned post_ix;	/* in loop->posting, or UINT_MAX */
};

struct server {
	struct store *store;
	const struct carmyd_config *cfg;
	int lfd, sfd, tfd;
	int wfd;		/* timer: the nearest waiter's deadline */
	size_t msg_cap;		/* largest message a client may send */
	struct loop *loops;
	unsigned nloops;
	bool stop;		/* first loop only */
	/* Store requests submitted and not yet answered. */
	pthread_mutex_t idle_lock;
	pthread_cond_t idle;
	unsigned inflight;
	/* Ack slots handed to connections (shm_ack), a bit each. */
	pthread_mutex_t ack_lock;
	uint64_t ack_used[SHM_ACK_SLOTS / 64];
	uint32_t ack_gen;	/* slots handed out, for their marks */
	uint32_t ack_next;	/* where the search for a free one starts */
	/* Connections waiting for an execution to stop running (WAIT). */
	pthread_mutex_t wait_lock;
	struct store_op *waiters;
	uint64_t wfd_at;	/* deadline wfd is armed for, 0 none */
	/* Connections counted against --max-clients (open and not shed:
	 * shedding one takes it off), and shed ones not yet closed. One
	 * count each, so that what is served is never a difference of two
	 * read apart. */
	atomic_ulong nconns;
	atomic_ulong nshed;
	/* Rung (by the loop closing it) when the shed connections not yet
	 * closed fall below SHED_AHEAD: listening may resume. */
	int wake_fd;
	/* Connections that have not said HELLO, oldest first; and those
	 * closed after an error since the last tick, with the first one's
	 * particulars. */
	pthread_mutex_t greet_lock;
	struct conn *greet_head, *greet_tail;
	unsigned long failed_new;
	pid_t failed_pid;
	uid_t failed_uid;
	uint32_t failed_owner;
	int failed_code;
	const char *failed_why;
	/* The first loop's: the spare descriptor (/dev/null, or -1 while it
	 * is given up), whether listening is paused (and until the tick
	 * alone, or until the shed ones are closed too), and the episode of
	 * refusals under way. */
	int spare;
	bool paused;
	bool pause_tick;
	bool crowded;
	uint64_t crowd_since_ns, crowd_last_ns;
	unsigned long refused, shed, silent, failed;
	/* The TOO_MANY_CLIENTS error, encoded once. */
	msgpack_sbuffer too_many;
	/* Refused operator commands: the users last logged and when, and
	 * how many refusals were not logged since the last line. */
	pthread_mutex_t deny_lock;
	struct {
		uid_t uid;
		uint64_t at_ns;
	} denied[DENY_UIDS];
	unsigned long deny_quiet;
};

static int loop_init(struct server *sv, struct loop *l);
static void *loop_thread(void *arg);
static int loop_run(struct loop *l);
static void on_accept(struct server *sv);
static void on_readable(struct conn *c, uint32_t events);
static int process(struct conn *c);
static int on_message(struct conn *c, const uint8_t *buf, size_t len);
static int on_request(struct conn *c, const struct wire_msg *m);
static unsigned take_posts(struct loop *l);
static void posting_add(struct conn *c);
static void posting_del(struct conn *c);
static int to_store(struct conn *c, int type, enum carmy_store_op op,
		    const struct wire_msg *m, int status, int code,
		    const uint8_t *data, size_t dlen);
static void hold(struct conn *c, struct store_op *op);
static void store_done(struct carmy_store_req *req, int rc);
static void on_done(struct loop *l);
static void finish(struct store_op *op);
static int answer(struct conn *c, int type, const uint8_t *exec, int rc);
static void arm(struct conn *c);
static int on_resolve(struct conn *c, const struct wire_msg *m);
static int on_wait(struct conn *c, const struct wire_msg *m);
static unsigned wake_waiters(struct server *sv, bool all, uint32_t entry,
			     int rc);
static void arm_deadline(struct server *sv, uint64_t at_ns);
static void told_of_release(struct server *sv, uint32_t entry);
static int flush_out(struct conn *c);
static void drop(struct conn *c, const char *why);
static uint32_t ack_take(struct server *sv, uint32_t *gen);
static void ack_give(struct server *sv, uint32_t slot);
static bool ack(struct conn *c, const uint8_t *exec, bool done);
static void unlist(struct conn *c);
static void fail_conn(struct conn *c, int code, const char *why);
static void admit(struct server *sv, int fd);
static bool out_of_fds(struct server *sv, int err);
static void refuse(struct server *sv, int fd);
static struct conn *shed_oldest(struct server *sv);
static bool shed_one(struct server *sv);
static void greet_expire(struct server *sv, uint64_t now);
static int greet_del(struct conn *c);
static void crowd_note(struct server *sv, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void crowd_tick(struct server *sv, uint64_t now);
static void listen_pause(struct server *sv, bool pause, bool until_tick);
static void failed_tick(struct server *sv);
static bool may_operate(struct conn *c, const char *what);
static bool peer_in_group(int fd, gid_t gid);

/* ------------------------------------------------------------ loops */

int server_run(struct store *s, const struct carmyd_config *cfg, int lfd)
{
	struct server sv = { .store = s, .cfg = cfg, .lfd = lfd,
			     .sfd = -1, .tfd = -1, .wfd = -1, .wake_fd = -1,
			     .spare = -1 };
	struct itimerspec tick = { { 0, TICK_NS }, { 0, TICK_NS } };
	struct epoll_event ev = { .events = EPOLLIN };
	unsigned started = 1;
	sigset_t sigs;
	int rc = -1;

	sv.msg_cap = (size_t)s->view.geo.max_result + WIRE_OVERHEAD;
	pthread_mutex_init(&sv.idle_lock, NULL);
	pthread_cond_init(&sv.idle, NULL);
	pthread_mutex_init(&sv.wait_lock, NULL);
	pthread_mutex_init(&sv.ack_lock, NULL);
	pthread_mutex_init(&sv.greet_lock, NULL);
	pthread_mutex_init(&sv.deny_lock, NULL);
	msgpack_sbuffer_init(&sv.too_many);
	sv.nloops = cfg->threads ? cfg->threads : 1;
	sv.loops = calloc(sv.nloops, sizeof(*sv.loops));
	if (sv.loops == NULL ||
	    wire_put_reply(&sv.too_many, WIRE_ERROR,
			   CARMY_ETOO_MANY_CLIENTS) != 0) {
		log_error("out of memory for %u event loops", sv.nloops);
		free(sv.loops);
		msgpack_sbuffer_destroy(&sv.too_many);
		return -1;
	}
	/* Kept for the moment carmyd runs out of descriptors: given up, it
	 * lets one more connection be accepted and told why it is refused. */
	sv.spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	/* A bell a carmyd before us left ringing would have clients post to
	 * loops that are asleep. */
	for (uint32_t i = 0; i < SHM_BELLS; i++)
		shm_bell_set(&s->view, i, false);
	/* Slot generations start anywhere: a client of a carmyd before us
	 * cannot post into a slot we hand out. */
	if (getrandom(&sv.ack_gen, sizeof(sv.ack_gen), 0) !=
	    (ssize_t)sizeof(sv.ack_gen))
		sv.ack_gen = (uint32_t)clock_mono_ns();
	for (unsigned i = 0; i < sv.nloops; i++) {
		sv.loops[i].bell = i < SHM_BELLS ? i : UINT32_MAX;
		sv.loops[i].ep = sv.loops[i].stop_fd = sv.loops[i].done_fd = -1;
		pthread_mutex_init(&sv.loops[i].done_lock, NULL);
		pthread_mutex_init(&sv.loops[i].list_lock, NULL);
	}
	/* main() blocked these before any thread started, so every loop
	 * inherits the mask and only the signalfd sees them. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	sv.sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	sv.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	sv.wfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	sv.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (sv.sfd < 0 || sv.tfd < 0 || sv.wfd < 0 || sv.wake_fd < 0 ||
	    timerfd_settime(sv.tfd, 0, &tick, NULL) != 0)
		goto setup_failed;
	for (unsigned i = 0; i < sv.nloops; i++)
		if (loop_init(&sv, &sv.loops[i]) != 0)
			goto setup_failed;
	/* The first loop also owns the listening socket, the signals, the
	 * tick, the waiters' timer and the shed connections' eventfd; its epoll data
	 * for them are the server's own fields. */
	ev.data.ptr = &sv.lfd;
	epoll_ctl(sv.loops[0].ep, EPOLL_CTL_ADD, lfd, &ev);
	ev.data.ptr = &sv.sfd;
	epoll_ctl(sv.loops[0].ep, EPOLL_CTL_ADD, sv.sfd, &ev);
	ev.data.ptr = &sv.tfd;
	epoll_ctl(sv.loops[0].ep, EPOLL_CTL_ADD, sv.tfd, &ev);
	ev.data.ptr = &sv.wfd;
	epoll_ctl(sv.loops[0].ep, EPOLL_CTL_ADD, sv.wfd, &ev);
	ev.data.ptr = &sv.wake_fd;
	epoll_ctl(sv.loops[0].ep, EPOLL_CTL_ADD, sv.wake_fd, &ev);
	for (; started < sv.nloops; started++) {
		int err = pthread_create(&sv.loops[started].thread, NULL,
					 loop_thread, &sv.loops[started]);

		if (err != 0) {
			log_error("cannot start event loop %u: %s", started,
				  strerror(err));
			break;
		}
	}
	if (started == sv.nloops) {
		log_debug("%u event loops", sv.nloops);
		rc = loop_run(&sv.loops[0]);
		shm_bell_set(&s->view, sv.loops[0].bell, false);
	}
	/* Stop the others: each sees its eventfd readable and returns. */
	for (unsigned i = 1; i < started; i++) {
		uint64_t one = 1;

		if (write(sv.loops[i].stop_fd, &one, sizeof(one)) < 0)
			log_error("cannot stop event loop %u: %s", i,
				  strerror(errno));
	}
	for (unsigned i = 1; i < started; i++)
		pthread_join(sv.loops[i].thread, NULL);
	/* Waiters are let go; the store may still be answering: both go to
	 * the loops' lists, which must outlive them. */
	wake_waiters(&sv, true, 0, -ECANCELED);
	pthread_mutex_lock(&sv.idle_lock);
	while (sv.inflight > 0)
		pthread_cond_wait(&sv.idle, &sv.idle_lock);
	pthread_mutex_unlock(&sv.idle_lock);
	goto out;

setup_failed:
	log_error("cannot set up the event loops: %s", strerror(errno));
out:
	for (unsigned i = 0; i < sv.nloops; i++) {
		struct loop *l = &sv.loops[i];

		while (l->done != NULL) {
			struct store_op *op = l->done;

			l->done = op->next;
			free(op->result);
			free((void *)op->standing.result);
			free(op);
		}
		/* Connections still open: the loops and the store are done
		 * with them. Their owners' entries are left for the next
		 * carmyd's start-up sweep, as the process's end would. */
		while (l->list != NULL) {
			struct conn *c = l->list;

			l->list = c->next;
			close(c->fd);
			ack_give(&sv, c->ack_slot);
			msgpack_sbuffer_destroy(&c->out);
			free(c->rbuf);
			free(c);
		}
		free(l->posting);
		shm_bell_set(&s->view, l->bell, false);
		pthread_mutex_destroy(&l->list_lock);
		if (l->ep >= 0)
			close(l->ep);
		if (l->stop_fd >= 0)
			close(l->stop_fd);
		if (l->done_fd >= 0)
			close(l->done_fd);
		pthread_mutex_destroy(&l->done_lock);
	}
	pthread_cond_destroy(&sv.idle);
	pthread_mutex_destroy(&sv.idle_lock);
	pthread_mutex_destroy(&sv.wait_lock);
	pthread_mutex_destroy(&sv.ack_lock);
	pthread_mutex_destroy(&sv.greet_lock);
	pthread_mutex_destroy(&sv.deny_lock);
	msgpack_sbuffer_destroy(&sv.too_many);
	if (sv.spare >= 0)
		close(sv.spare);
	if (sv.sfd >= 0)
		close(sv.sfd);
	if (sv.tfd >= 0)
		close(sv.tfd);
	if (sv.wfd >= 0)
		close(sv.wfd);
	if (sv.wake_fd >= 0)
		close(sv.wake_fd);
	free(sv.loops);
	return rc;
}

static int loop_init(struct server *sv, struct loop *l)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = l };

	struct epoll_event dev = { .events = EPOLLIN, .data.ptr = &l->done };

	l->sv = sv;
	l->ep = epoll_create1(EPOLL_CLOEXEC);
	l->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	l->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->ep < 0 || l->stop_fd < 0 || l->done_fd < 0)
		return -1;
	/* data.ptr == the loop itself marks its stop eventfd, &l->done the
	 * store's answers. */
	if (epoll_ctl(l->ep, EPOLL_CTL_ADD, l->done_fd, &dev) != 0)
		return -1;
	return epoll_ctl(l->ep, EPOLL_CTL_ADD, l->stop_fd, &ev);
}

static void *loop_thread(void *arg)
{
	struct loop *l = arg;

	rcu_register_thread();	/* the owner registry is RCU */
	loop_run(l);
	/* Stopped: a post now would wait for nobody. */
	shm_bell_set(&l->sv->store->view, l->bell, false);
	rcu_unregister_thread();
	return NULL;
}

/*
 * Serve l's connections until told to stop. Connections still open then are
 * closed and freed by server_run() once every loop and the store are done
 * with them; their owners are not swept: carmyd is going away, and the
 * next carmyd's start-up sweep turns their running entries uncertain (or
 * gives them back to owners that return within the grace period).
 */
static int loop_run(struct loop *l)
{
	struct server *sv = l->sv;
	struct epoll_event evs[MAX_EVENTS];
	const uint64_t spin = sv->cfg->spin_us * 1000ull;
	uint64_t spin_until = 0;

	for (;;) {
		/* Spin, then block (--spin-us): while requests keep coming,
		 * poll for the next rather than sleep, so that its reply
		 * goes out without a wake-up; idle, sleep. */
		int wait = spin && clock_mono_ns() < spin_until ? 0 : -1;
		int n;

		/* Asleep, we look at no slot: clients send instead of
		 * posting. Say so, then look once more (see shm/post.c). */
		if (wait < 0 && l->bell < SHM_BELLS) {
			shm_bell_set(&sv->store->view, l->bell, false);
			if (take_posts(l) > 0) {
				shm_bell_set(&sv->store->view, l->bell, true);
				spin_until = clock_mono_ns() + spin;
				continue;
			}
		}
		n = epoll_wait(l->ep, evs, MAX_EVENTS, wait);
		if (wait < 0)
			shm_bell_set(&sv->store->view, l->bell, true);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			log_error("epoll_wait: %s", strerror(errno));
			return -1;
		}
		if (n == 0) {
			if (take_posts(l) > 0) {
				spin_until = clock_mono_ns() + spin;
				continue;
			}
			/* A client on this CPU, say, goes first: polling
			 * must not delay the request it polls for. */
			sched_yield();
			continue;
		}
		if (spin)
			spin_until = clock_mono_ns() + spin;
		bool done = false;

		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;

			if (p == l) {
				return 0;	/* stop_fd */
			} else if (p == &l->done) {
				/* After the batch: answering may drop any of
				 * this loop's connections, and a later event
				 * of this batch may be one of them. */
				done = true;
			} else if (p == &sv->lfd) {
				on_accept(sv);
			} else if (p == &sv->sfd) {
				struct signalfd_siginfo si;

				while (read(sv->sfd, &si, sizeof(si)) ==
				       sizeof(si)) {
					if (si.ssi_signo == SIGHUP)
						continue;
					log_info("signal %u: shutting down",
						 si.ssi_signo);
					sv->stop = true;
				}
			} else if (p == &sv->tfd) {
				uint64_t ticks;
				unsigned woken;

				if (read(sv->tfd, &ticks, sizeof(ticks)) < 0) {
					/* spurious wake-up */
				}
				store_tick(sv->store);
				greet_expire(sv, clock_mono_ns());
				failed_tick(sv);
				crowd_tick(sv, clock_mono_ns());
				/* Releases and sweeps end executions
				 * without telling us. */
				woken = wake_waiters(sv, true, 0, 0);
				if (woken > 0)
					log_debug("%u waiter%s told at the tick",
						  woken, woken == 1 ? "" : "s");
			} else if (p == &sv->wfd) {
				uint64_t ticks;

				if (read(sv->wfd, &ticks, sizeof(ticks)) < 0) {
					/* spurious wake-up */
				}
				/* A waiter's deadline came. */
				wake_waiters(sv, true, 0, 0);
			} else if (p == &sv->wake_fd) {
				uint64_t rung;

				if (read(sv->wake_fd, &rung, sizeof(rung)) < 0) {
					/* spurious wake-up */
				}
				/* Read after the ring: a backlog back at
				 * SHED_AHEAD since keeps listening paused. */
				if (sv->paused && !sv->pause_tick &&
				    atomic_load_explicit(&sv->nshed,
							 memory_order_relaxed) <
					    SHED_AHEAD)
					listen_pause(sv, false, false);
			} else {
				struct conn *c = p;

				if (evs[i].events & EPOLLOUT) {
					if (flush_out(c) != 0)
						continue;
				}
				l->more = i + 1 < n;
				if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
					on_readable(c, evs[i].events);
			}
		}
		l->more = false;
		if (done)
			on_done(l);
		/* After the batch, as on_done(): a post may drop its
		 * connection, which a later event of the batch may name. */
		take_posts(l);
		if (l == sv->loops && sv->stop)
			return 0;
	}
}

/* ------------------------------------------------------------ connections */

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
 * Accept what is waiting and give each connection to a loop, up to
 * --max-clients: one more takes the place of the oldest that has not said
 * HELLO, or is refused. Once its descriptor is in that loop's epoll set the
 * connection is the loop's: we do not touch it again (but to shed it,
 * under greet_lock).
 */
static void on_accept(struct server *sv)
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
	/* Listed before l can see it, so l's drop() finds it. */
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
		greet_del(c);
		unlist(c);
		atomic_fetch_sub_explicit(&l->conns, 1, memory_order_relaxed);
		atomic_fetch_sub_explicit(&sv->nconns, 1, memory_order_relaxed);
		close(fd);
		msgpack_sbuffer_destroy(&c->out);
		free(c);
	}
}

/* Take c off the greeting list (its HELLO came, or it is dropped). Returns
 * GREET_SHED if the first loop shed it meanwhile, else GREET_OK. Its own
 * loop's to call (or the first's, before that loop can see it): the first
 * loop never touches a connection that is off the list. */
static int greet_del(struct conn *c)
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

/* The connections closed after an error since the last tick (fail_conn):
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

static void on_readable(struct conn *c, uint32_t events)
{
	struct server *sv = c->loop->sv;

	for (;;) {
		ssize_t got;

		if (c->pending > 0) {
			/* Reading is paused until the store answers; only
			 * a hang-up gets through, and waits for it too.
			 * More input (a client that does not wait for its
			 * reply) takes EPOLLIN out until then. */
			if (events & (EPOLLHUP | EPOLLERR)) {
				drop(c, "closed");
			} else if (c->armed & EPOLLIN) {
				/* (Again if epoll_ctl() failed last time.) */
				c->in_paused = true;
				arm(c);
			}
			return;
		}

		if (c->rcap - c->rlen < READ_CHUNK && c->rcap < sv->msg_cap) {
			size_t ncap = c->rlen + READ_CHUNK;
			uint8_t *nb;

			if (ncap > sv->msg_cap)
				ncap = sv->msg_cap;
			nb = realloc(c->rbuf, ncap);
			if (nb == NULL) {
				drop(c, "out of memory");
				return;
			}
			c->rbuf = nb;
			c->rcap = ncap;
		}
		size_t room = c->rcap - c->rlen;

		got = recv(c->fd, c->rbuf + c->rlen, room, 0);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return;
			drop(c, strerror(errno));
			return;
		}
		if (got == 0) {
			drop(c, "closed");
			return;
		}
		c->rlen += (size_t)got;
		if (process(c) != 0)
			return;	/* c is gone */
		/* A short read drained the socket: epoll (level-triggered)
		 * wakes us for more, so skip the recv that would say EAGAIN. */
		if ((size_t)got < room)
			return;
	}
}

/* Handle every whole message in the buffer, until one waits for the store.
 * Returns 0, or -1 if the connection was dropped. */
static int process(struct conn *c)
{
	struct server *sv = c->loop->sv;

	while (c->rlen > 0 && c->pending == 0) {
		long n = wire_scan_more(&c->scan, c->rbuf, c->rlen,
					sv->msg_cap);

		if (n < 0) {
			fail_conn(c, CARMY_EPROTOCOL,
				  "malformed or oversized message");
			return -1;
		}
		if (n == 0)
			break;
		if (on_message(c, c->rbuf, (size_t)n) != 0)
			return -1;
		memmove(c->rbuf, c->rbuf + n, c->rlen - (size_t)n);
		c->rlen -= (size_t)n;
		c->scan.off = 0;	/* the next message, afresh */
		c->scan.depth = 0;
	}
	return 0;
}

/* Handle one message. Returns 0, or -1 if the connection was dropped. */
static int on_message(struct conn *c, const uint8_t *buf, size_t len)
{
	struct wire_msg m;

	if (wire_decode(buf, len, 1, &m) != 0) {
		fail_conn(c, CARMY_EPROTOCOL, "undecodable message");
		return -1;
	}
	return on_request(c, &m);
}

/* Handle one request, sent or posted. Returns 0, or -1 if the connection
 * was dropped. */
static int on_request(struct conn *c, const struct wire_msg *m)
{
	struct server *sv = c->loop->sv;
	struct store *s = sv->store;
	uint32_t flags;
	int rc;

	switch (m->type) {
	case WIRE_HELLO:
		if (c->owner != 0) {
			fail_conn(c, CARMY_EPROTOCOL, "second HELLO");
			return -1;
		}
		/* Too late: told TOO_MANY_CLIENTS, and shut down. */
		if (greet_del(c) == GREET_SHED) {
			drop(c, "shed");
			return -1;
		}
		if (m->u.hello.version != WIRE_VERSION ||
		    m->u.hello.layout != shm_layout_signature()) {
			fail_conn(c, CARMY_ELAYOUT,
				  "client built with another protocol or layout");
			return -1;
		}
		if (!store_peer_pid_usable(c->pid)) {
			fail_conn(c, -EPERM, "a client in another PID "
				  "namespace (its pids name other processes "
				  "here): run clients in carmyd's");
			return -1;
		}
		flags = (s->durable ? WIRE_F_DURABLE : 0) |
			(s->shared ? WIRE_F_SHARED : 0);
		/* A client of the previous carmyd, back for its owner id
		 * (and the reservations it holds); else a new id. */
		if (m->u.hello.owner != 0 &&
		    store_resume(s, m->u.hello.owner, c->pid, c) == 0) {
			c->owner = m->u.hello.owner;
			flags |= WIRE_F_RESUMED;
			log_info("owner %u (pid %d) is back from epoch %u",
				 c->owner, (int)c->pid, m->u.hello.epoch);
		} else if (store_new_owner(s, &c->owner) != 0 ||
			   owners_add(c->owner, c) != 0) {
			c->owner = 0;
			fail_conn(c, -ENOMEM, "cannot register owner");
			return -1;
		}
		log_debug("owner %u is pid %d", c->owner, (int)c->pid);
		if (s->durable)
			c->ack_slot = ack_take(sv, &c->ack_gen);
		if (c->ack_slot < SHM_ACK_SLOTS && c->loop->bell < SHM_BELLS)
			posting_add(c);
		rc = wire_put_hello_ok(&c->out, c->owner, sv->cfg->shm_name,
				       s->view.geo.max_result, s->epoch, flags,
				       c->ack_slot,
				       c->post_ix != UINT_MAX ? c->loop->bell :
								UINT32_MAX);
		break;
	case WIRE_COMPLETE: {
		int status = m->u.complete.status;
		int code = m->u.complete.result_code;
		const uint8_t *data = m->u.complete.result;
		size_t dlen = m->u.complete.result_len;

		if (c->owner == 0) {
			fail_conn(c, CARMY_EPROTOCOL, "COMPLETE before HELLO");
			return -1;
		}
		if (status < CARMY_STATUS_COMPLETED ||
		    status > CARMY_STATUS_CANCELLED ||
		    (code != 0 && code != CARMY_ERESULT_TOO_LARGE)) {
			rc = answer(c, WIRE_COMPLETE, m->u.complete.exec,
				    CARMY_EINVALID_STATUS);
			break;
		}
		if (dlen > s->view.geo.max_result) {
			/* Recorded, not dropped. */
			status = CARMY_STATUS_FAILED;
			code = CARMY_ERESULT_TOO_LARGE;
			dlen = 0;
		}
		if (s->durable) {
			rc = to_store(c, WIRE_COMPLETE, CARMY_STORE_COMPLETE,
				      m, status, code, data, dlen);
			break;
		}
		rc = store_complete(s, m->u.complete.entry, c->owner,
				    m->u.complete.exec, status, code, data,
				    dlen);
		if (rc == 0)
			wake_waiters(sv, false, m->u.complete.entry, 0);
		if (rc != 0)
			log_debug("owner %u: completion of entry %u refused: %s",
				  c->owner, m->u.complete.entry,
				  carmy_errname(rc));
		rc = wire_put_reply(&c->out, WIRE_COMPLETE, rc);
		break;
	}
	case WIRE_RECLAIM:
		if (c->owner == 0) {
			fail_conn(c, CARMY_EPROTOCOL, "RECLAIM before HELLO");
			return -1;
		}
		store_reclaim(s);
		rc = wire_put_reply(&c->out, WIRE_RECLAIM, 0);
		break;
	case WIRE_RESOLVE:
	case WIRE_WAIT:
		if (c->owner == 0) {
			fail_conn(c, CARMY_EPROTOCOL, "request before HELLO");
			return -1;
		}
		if (m->type == WIRE_RESOLVE && !may_operate(c, "resolve"))
			rc = wire_put_reply(&c->out, WIRE_RESOLVE,
					    CARMY_ENOT_PERMITTED);
		else
			rc = m->type == WIRE_RESOLVE ? on_resolve(c, m) :
						       on_wait(c, m);
		break;
	case WIRE_PURGE:
		if (c->owner == 0) {
			fail_conn(c, CARMY_EPROTOCOL, "PURGE before HELLO");
			return -1;
		}
		if (!may_operate(c, "purge")) {
			rc = wire_put_reply(&c->out, WIRE_PURGE,
					    CARMY_ENOT_PERMITTED);
			break;
		}
		rc = wire_put_reply(&c->out, WIRE_PURGE,
				    store_purge(s, m->u.purge.older_than_ms,
						c->uid, c->pid));
		break;
	case WIRE_RESERVE:
	case WIRE_RELEASE:
		if (c->owner == 0) {
			fail_conn(c, CARMY_EPROTOCOL, "RESERVE before HELLO");
			return -1;
		}
		/* The segment is the record of a store that is not durable:
		 * there is nothing to confirm. A release was made in the
		 * table before it was sent: its waiters can have the
		 * identity now rather than at the next tick (any entry
		 * number is harmless here; a waiter whose entry still runs
		 * waits on). */
		if (!s->durable) {
			if (m->type == WIRE_RELEASE)
				told_of_release(sv, m->u.reserve.entry);
			rc = wire_put_reply(&c->out, m->type, 0);
			break;
		}
		rc = to_store(c, m->type, m->type == WIRE_RESERVE ?
				      CARMY_STORE_RESERVE : CARMY_STORE_RELEASE,
			      m, 0, 0, NULL, 0);
		break;
	default:
		fail_conn(c, CARMY_EPROTOCOL, "unknown message type");
		return -1;
	}
	if (rc != 0) {
		drop(c, "out of memory");
		return -1;
	}
	return flush_out(c);
}

/* ------------------------------------------------------------ posts */

/*
 * Take the requests posted in the slots of this loop's connections
 * (shm_post) and handle each as if it had come on its socket: answered the
 * same way, in the slot or there. A connection with a request in hand
 * (sent or posted) is left until it is answered, as its socket is.
 * Called between batches of events only: a post may drop its connection.
 *
 * A post is taken only if it is a RESERVE and its connection's ack word
 * awaits the answer to it, as an honest client's is and does: any other
 * (written by another process) is dropped unanswered. A post that is not
 * whole (torn by a late writer, such as a client stalled since its
 * connection was dropped and its slot handed on) is not this client's
 * fault: carmyd tells it to send the request instead (RESEND).
 *
 * Returns how many were ready: if any, the loop must look again before it
 * sleeps (one call takes up to 64).
 */
static unsigned take_posts(struct loop *l)
{
	const struct shm_view *v = &l->sv->store->view;
	struct conn *ready[64];
	unsigned n = 0;

	/* Those that have one first, so that each submission but the
	 * batch's last is marked "more" (the store may wait for it). */
	for (unsigned i = 0; i < l->nposting && n < 64; i++) {
		struct conn *c = l->posting[i];

		if (c->pending == 0 && !c->closing &&
		    shm_post_ready(v, c->ack_slot, c->ack_gen))
			ready[n++] = c;
	}
	for (unsigned i = 0; i < n; i++) {
		struct conn *c = ready[i];
		struct shm_post p;
		struct wire_msg m;
		int rc = shm_post_take(v, c->ack_slot, c->ack_gen, &p);

		if (rc == 0)
			continue;	/* taken back: it comes on the socket */
		if (rc < 0) {
			int told = shm_ack_any(v, c->ack_slot);

			log_warn("owner %u: a request posted in the segment "
				 "was not whole%s", c->owner,
				 told == SHM_ACK_MISSED ? " (and nobody waits "
				 "for it): dropped" : ": asked to send it");
			if (told == SHM_ACK_MISSED)
				continue;
			if (told == SHM_ACK_TOLD_ASLEEP)
				shm_ack_wake(v, c->ack_slot);
			if (wire_put_reply(&c->out, WIRE_RESEND, 0) != 0) {
				drop(c, "out of memory");
				continue;
			}
			flush_out(c);
			continue;
		}
		/* Whole, but not what an honest client posts: another
		 * writer's. Answered, it would be read as the answer to
		 * the client's next request; left alone, it harms none. */
		if (p.type != WIRE_RESERVE ||
		    !shm_ack_awaits(v, c->ack_slot, p.exec)) {
			log_warn("owner %u: a request posted in the segment "
				 "that its client does not wait for: dropped",
				 c->owner);
			continue;
		}
		memset(&m, 0, sizeof(m));
		m.type = WIRE_RESERVE;
		m.u.reserve.entry = p.entry;
		memcpy(m.u.reserve.exec, p.exec, sizeof(p.exec));
		l->more = i + 1 < n;
		(void)on_request(c, &m);	/* c may be gone after */
	}
	l->more = false;
	return n;
}

/* c's client may post: look at its slot (c's loop only). */
static void posting_add(struct conn *c)
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

/*
 * Hand a reservation, completion or release to a durable store. The reply
 * is written when the store answers (finish()); until then nothing more is
 * read from c, so replies keep their order. A request the entry does not
 * back (not ours, not running, another exec id) is answered at once and
 * never reaches the store. Returns 0 or -ENOMEM, like the encoders.
 */
static int to_store(struct conn *c, int type, enum carmy_store_op sop,
		    const struct wire_msg *m, int status, int code,
		    const uint8_t *data, size_t dlen)
{
	struct server *sv = c->loop->sv;
	const uint8_t *exec = type == WIRE_COMPLETE ? m->u.complete.exec :
						      m->u.reserve.exec;
	struct store_op *op = calloc(1, sizeof(*op));
	int rc;

	if (op == NULL)
		return -ENOMEM;
	op->type = type;
	op->req.op = sop;
	op->entry = type == WIRE_COMPLETE ? m->u.complete.entry :
					    m->u.reserve.entry;
	rc = store_prepare(sv->store, op, c->owner, exec);
	/* Sent again after a reconnect, the first one recorded: that is the
	 * answer, as in the memory store's path. */
	if (rc != 0 && type == WIRE_COMPLETE &&
	    store_completed_as(sv->store, op->entry, exec, status, code, data,
			       dlen)) {
		free(op);
		return answer(c, type, exec, 0);
	}
	if (rc == 0 && type == WIRE_COMPLETE) {
		if (dlen > 0) {
			op->result = malloc(dlen);
			if (op->result == NULL) {
				free(op);
				return -ENOMEM;
			}
			memcpy(op->result, data, dlen);
		}
		op->rec.status = status;
		op->rec.result_code = code;
		op->rec.result = op->result;
		op->rec.result_len = (uint32_t)dlen;
		op->rec.finished_ns = clock_real_ns();
	}
	if (rc != 0) {
		log_debug("owner %u: %s of entry %u refused: %s", c->owner,
			  type == WIRE_COMPLETE ? "completion" :
			  type == WIRE_RESERVE ? "reservation" : "release",
			  op->entry, carmy_errname(rc));
		free(op);
		return answer(c, type, exec, rc);
	}
	hold(c, op);
	store_submit(sv->store, op, c->loop->more);
	return 0;
}

/*
 * Answer a RESERVE or COMPLETE at once, without the store. A durable
 * store's client awaits these in its ack slot (shm_ack): a success is told
 * there alone, anything else on the socket, and the slot says so. Other
 * requests, and every request to a store that is not durable, are answered
 * on the socket. Returns 0 or -ENOMEM, like the encoders.
 */
static int answer(struct conn *c, int type, const uint8_t *exec, int rc)
{
	struct store *s = c->loop->sv->store;
	bool quiet = s->durable &&
		     (type == WIRE_RESERVE || type == WIRE_COMPLETE);

	if (quiet && rc == 0 && ack(c, exec, true))
		return 0;
	rc = wire_put_reply(&c->out, type, rc);
	if (quiet)
		(void)ack(c, exec, false);
	return rc;
}

/* Tell c's client in its slot that the answer to its request naming exec
 * is done, or on the socket. Returns false if the slot did not await it:
 * then the answer, success included, goes on the socket. */
static bool ack(struct conn *c, const uint8_t *exec, bool done)
{
	const struct shm_view *v = &c->loop->sv->store->view;
	int told = shm_ack(v, c->ack_slot, exec, done);

	if (told == SHM_ACK_TOLD_ASLEEP)
		shm_ack_wake(v, c->ack_slot);
	return told != SHM_ACK_MISSED;
}

/* op is on its way (to the store, or waiting): its answer comes back to
 * c's loop through store_done(). Until then c reads nothing more, and
 * shutdown waits for it. */
static void hold(struct conn *c, struct store_op *op)
{
	struct server *sv = c->loop->sv;

	op->conn = c;
	op->req.done = store_done;
	op->req.cookie = op;
	c->pending++;
	arm(c);
	pthread_mutex_lock(&sv->idle_lock);
	sv->inflight++;
	pthread_mutex_unlock(&sv->idle_lock);
}

/*
 * The store's answer, on whatever thread the store calls it: queue it for
 * the connection's loop and wake that loop. Only the answer that finds the
 * queue empty writes the eventfd: the others join a queue the loop has
 * been told of and has not taken yet (on_done() reads the eventfd before
 * it takes the queue), so a batch of a group commit costs a loop one
 * wake-up, not one per client.
 */
static void store_done(struct carmy_store_req *req, int rc)
{
	struct store_op *op = req->cookie;
	struct conn *c = op->conn;
	struct loop *l = c->loop;
	struct server *sv = l->sv;
	uint64_t one = 1;
	bool first;

	op->rc = rc;
	pthread_mutex_lock(&l->done_lock);
	first = l->done == NULL;
	op->next = l->done;
	l->done = op;
	pthread_mutex_unlock(&l->done_lock);
	if (first && write(l->done_fd, &one, sizeof(one)) < 0) {
		/* Only at the counter's limit: the loop is woken. */
	}
	pthread_mutex_lock(&sv->idle_lock);
	if (--sv->inflight == 0)
		pthread_cond_broadcast(&sv->idle);
	pthread_mutex_unlock(&sv->idle_lock);
}

/* Reply to every answered request, oldest first. */
static void on_done(struct loop *l)
{
	struct store_op *list, *fifo = NULL;
	uint64_t n;

	if (read(l->done_fd, &n, sizeof(n)) < 0) {
		/* spurious wake-up */
	}
	pthread_mutex_lock(&l->done_lock);
	list = l->done;
	l->done = NULL;
	pthread_mutex_unlock(&l->done_lock);
	while (list != NULL) {
		struct store_op *next = list->next;

		list->next = fifo;
		fifo = list;
		list = next;
	}
	while (fifo != NULL) {
		struct store_op *next = fifo->next;

		/* finish() may submit a request the connection had sent
		 * ahead: the answers still to send are more in hand. */
		l->more = next != NULL;
		finish(fifo);
		fifo = next;
	}
	l->more = false;
}

/*
 * The store has answered op. A completion it made durable is now recorded
 * in the segment too, so replays see it; only then is the client told.
 * Then the connection reads again, or, if it closed meanwhile, is dropped
 * now that nothing of its is in flight.
 */
static void finish(struct store_op *op)
{
	struct conn *c = op->conn;
	struct store *s = c->loop->sv->store;
	int type = op->type, rc = op->rc;
	uint8_t exec[SHM_EXEC_LEN], asked[SHM_EXEC_LEN];
	uint32_t state = 0;
	bool told = false;	/* in the client's slot alone (shm_ack) */

	memcpy(asked, op->rec.exec, sizeof(asked));

	if (type == WIRE_WAIT) {
		/* 0, -ETIMEDOUT or -ECANCELED: the waiter looks again. */
		c->waiting = NULL;
	} else if (rc == 0 && type == WIRE_COMPLETE) {
		rc = store_complete(s, op->entry, c->owner, op->rec.exec,
				    op->rec.status, op->rec.result_code,
				    op->result, op->rec.result_len);
		if (rc == 0)
			wake_waiters(c->loop->sv, false, op->entry, 0);
		told = rc == 0 && ack(c, op->rec.exec, true);
	} else if (rc == 0 && type == WIRE_RESERVE && !op->taken) {
		store_settle(s, op);	/* it stands: callers may name it */
		told = ack(c, op->rec.exec, true);
	} else if (rc == 0 && type == WIRE_RESERVE && op->taken) {
		/* Done even if the client has gone: its entry must not turn
		 * uncertain on a call another execution holds. */
		rc = store_taken(s, op, c->owner, c->pid, exec, &state);
		if (rc != CARMY_EUNCERTAIN && rc != CARMY_ECONFLICT)
			state = 0;
		log_debug("owner %u: entry %u is held in the store by another "
			  "execution: %s", c->owner, op->entry,
			  carmy_errname(rc));
	} else if (rc == 0 && type == WIRE_RELEASE) {
		if (s->shared)
			rc = store_release_shared(s, op, c->owner);
		told_of_release(c->loop->sv, op->entry);
	} else if (rc == 0 && type == WIRE_RESOLVE) {
		rc = store_resolve(s, op);
		store_resolve_done(s, op->entry);
		if (rc == 0)
			wake_waiters(c->loop->sv, false, op->entry, 0);
	} else if (rc != 0) {
		if (type == WIRE_RESOLVE)
			store_resolve_done(s, op->entry);
		log_warn("owner %u: the store failed a %s: %s", c->owner,
			 type == WIRE_RESERVE ? "reservation" :
			 type == WIRE_COMPLETE ? "completion" :
			 type == WIRE_RESOLVE ? "resolution" : "release",
			 strerror(-rc));
		rc = CARMY_ESTORE;
	}
	free(op->result);
	free((void *)op->standing.result);
	free(op);
	c->pending--;
	if (c->closing) {
		if (c->pending == 0)
			drop(c, c->why);
		return;
	}
	if (!told && (state != 0 ? wire_put_taken(&c->out, rc, exec, state) :
				   wire_put_reply(&c->out, type, rc)) != 0) {
		drop(c, "out of memory");
		return;
	}
	if (!told && (type == WIRE_RESERVE || type == WIRE_COMPLETE))
		(void)ack(c, asked, false);	/* read the socket */
	if (c->pending == 0) {
		arm(c);
		if (process(c) != 0)
			return;	/* c is gone */
	}
	flush_out(c);
}

/*
 * Tell epoll what c waits for: input, unless more came while a store
 * request was pending (on_readable() then pauses it until the answer);
 * output while replies are left. Input stays armed while a request is
 * pending: a client of libcarmy sends nothing more until its reply, and
 * two epoll_ctl() calls per request were a fifth of carmyd's system calls
 * under a journal's load. Nothing changed, no call.
 */
static void arm(struct conn *c)
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

/*
 * May c's peer change entries that are not its own (RESOLVE, PURGE)? Its
 * --group membership lets it write the segment, but what carmyd changes on
 * request is for carmyd's own user, root, and members of --admin-group:
 * as the peer's credentials were when it connected (SO_PEERCRED's
 * effective ids, SO_PEERGROUPS), never a name looked up now. A refusal is
 * logged with the peer's uid and pid, once per connection and at most once
 * a second a user (so that a second user refused meanwhile is named too),
 * with how many went unlogged.
 */
static bool may_operate(struct conn *c, const char *what)
{
	struct server *sv = c->loop->sv;
	const struct carmyd_config *cfg = sv->cfg;
	unsigned long quiet = 0;
	bool logged = false;

	if (c->operator < 0) {
		c->operator = c->uid == 0 || c->uid == geteuid();
		if (!c->operator && cfg->use_admin_group)
			c->operator = c->gid == cfg->admin_gid ||
				      peer_in_group(c->fd, cfg->admin_gid);
	}
	if (c->operator)
		return true;
	pthread_mutex_lock(&sv->deny_lock);
	if (!c->denied) {
		uint64_t now = clock_mono_ns();
		unsigned i, oldest = 0;

		/* The user's entry, else the one logged longest ago (an
		 * entry never used has at_ns 0). */
		for (i = 0; i < DENY_UIDS; i++) {
			if (sv->denied[i].at_ns != 0 &&
			    sv->denied[i].uid == c->uid)
				break;
			if (sv->denied[i].at_ns < sv->denied[oldest].at_ns)
				oldest = i;
		}
		if (i == DENY_UIDS || now - sv->denied[i].at_ns >= DENY_LOG_NS) {
			i = i == DENY_UIDS ? oldest : i;
			sv->denied[i].uid = c->uid;
			sv->denied[i].at_ns = now;
			quiet = sv->deny_quiet;
			sv->deny_quiet = 0;
			logged = true;
		}
	}
	if (!logged)
		sv->deny_quiet++;
	pthread_mutex_unlock(&sv->deny_lock);
	if (!logged)
		return false;
	c->denied = true;
	log_warn("pid %d uid %u: %s refused (NOT_PERMITTED): only uid %u, "
		 "root%s may (--admin-group); %lu more refused since the "
		 "last such line", (int)c->pid, (unsigned)c->uid, what,
		 (unsigned)geteuid(),
		 cfg->use_admin_group ? " and members of the admin group" : "",
		 quiet);
	return false;
}

/* Was gid among the peer's supplementary groups when it connected? */
static bool peer_in_group(int fd, gid_t gid)
{
	gid_t some[64], *groups = some;
	socklen_t len = sizeof(some);
	bool in = false;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) {
		if (errno != ERANGE)
			return false;
		groups = malloc(len);
		if (groups == NULL ||
		    getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) {
			free(groups);
			return false;
		}
	}
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		in |= groups[i] == gid;
	if (groups != some)
		free(groups);
	return in;
}

/*
 * RESOLVE: an operator settles an interrupted execution, as committed (it
 * happened: record this result, replayed from now on) or not (the identity
 * is free again). Who (the peer's uid and pid) and when are recorded with
 * it, and logged. With a durable store the record goes there first, like
 * a completion. Returns 0 or -ENOMEM, like the encoders.
 */
static int on_resolve(struct conn *c, const struct wire_msg *m)
{
	struct server *sv = c->loop->sv;
	struct store *s = sv->store;
	struct store_op *op;
	struct shm_key k;
	int rc = shm_key_init(&k, s->view.seed, m->u.settle.part[0],
			      m->u.settle.len[0], m->u.settle.part[1],
			      m->u.settle.len[1], m->u.settle.part[2],
			      m->u.settle.len[2]);
	bool committed = m->u.settle.committed != 0;
	int status = m->u.settle.status;

	if (rc == 0 && committed &&
	    (status < CARMY_STATUS_COMPLETED || status > CARMY_STATUS_CANCELLED))
		rc = CARMY_EINVALID_STATUS;
	if (rc == 0 && committed && m->u.settle.result_len > s->view.geo.max_result)
		rc = CARMY_ERESULT_TOO_LARGE;
	if (rc != 0)
		return wire_put_reply(&c->out, WIRE_RESOLVE, rc);
	op = calloc(1, sizeof(*op));
	if (op == NULL)
		return -ENOMEM;
	op->type = WIRE_RESOLVE;
	op->req.op = CARMY_STORE_RESOLVE;
	rc = store_find_uncertain(s, op, &k, m->u.settle.fp, m->u.settle.exec);
	if (rc != 0) {
		free(op);
		return wire_put_reply(&c->out, WIRE_RESOLVE, rc);
	}
	if (committed && m->u.settle.result_len > 0) {
		op->result = malloc(m->u.settle.result_len);
		if (op->result == NULL) {
			store_resolve_done(s, op->entry);
			free(op);
			return -ENOMEM;
		}
		memcpy(op->result, m->u.settle.result, m->u.settle.result_len);
	}
	op->rec.state = committed ? CARMY_STORE_COMPLETED : 0;
	op->rec.status = committed ? status : 0;
	op->rec.result = op->result;
	op->rec.result_len = committed ? (uint32_t)m->u.settle.result_len : 0;
	op->rec.finished_ns = op->rec.resolved_ns = clock_real_ns();
	op->rec.resolved_uid = (uint32_t)c->uid;
	op->rec.resolved_pid = (uint32_t)c->pid;
	if (log_level >= LOG_INFO) {
		char id[3][200];

		for (int i = 0; i < 3; i++)
			log_bytes(id[i], sizeof(id[i]), m->u.settle.part[i],
				  m->u.settle.len[i]);
		log_info("pid %d uid %u resolves entry %u (%s/%s/%s) as %s",
			 (int)c->pid, (unsigned)c->uid, op->entry, id[0],
			 id[1], id[2],
			 committed ? "committed" : "not committed");
	}
	if (!s->durable) {
		rc = store_resolve(s, op);
		store_resolve_done(s, op->entry);
		if (rc == 0)
			wake_waiters(sv, false, op->entry, 0);
		free(op->result);
		free(op);
		return wire_put_reply(&c->out, WIRE_RESOLVE, rc);
	}
	hold(c, op);
	store_submit(s, op, c->loop->more);
	return 0;
}

/*
 * A client released entry in the table, then told us (a RELEASE): its
 * waiters can have the identity now rather than at the next tick. The
 * entry number is the client's word: out of range it is ignored, and a
 * waiter whose entry still runs waits on.
 */
static void told_of_release(struct server *sv, uint32_t entry)
{
	unsigned n;

	if (entry >= sv->store->view.geo.capacity)
		return;
	n = wake_waiters(sv, false, entry, 0);
	if (n > 0)
		log_debug("entry %u released: %u waiter%s told at once", entry,
			  n, n == 1 ? "" : "s");
}

/*
 * WAIT: answer once the execution stops running (completed, uncertain,
 * released, resolved) or timeout_ms pass, whichever is first; the waiter
 * then asks the table again. Nothing more is read from c meanwhile. The
 * end is seen at once for completions, resolutions and releases that
 * reach carmyd (libcarmy sends a RELEASE after freeing the entry) and for
 * sweeps; within the 100 ms tick for a release whose word was lost; the
 * deadline on time, by a timer armed for the nearest one.
 */
static int on_wait(struct conn *c, const struct wire_msg *m)
{
	struct server *sv = c->loop->sv;
	struct store *s = sv->store;
	struct store_op *op;
	struct shm_key k;
	uint32_t entry;
	int rc = shm_key_init(&k, s->view.seed, m->u.settle.part[0],
			      m->u.settle.len[0], m->u.settle.part[1],
			      m->u.settle.len[1], m->u.settle.part[2],
			      m->u.settle.len[2]);

	if (rc == 0)
		rc = store_find_running(s, &k, m->u.settle.exec, &entry);
	if (rc == CARMY_ENOT_RESERVED)
		return wire_put_reply(&c->out, WIRE_WAIT, 0);	/* not running */
	if (rc != 0)
		return wire_put_reply(&c->out, WIRE_WAIT, rc);
	if (m->u.settle.timeout_ms == 0)
		return wire_put_reply(&c->out, WIRE_WAIT, -ETIMEDOUT);
	op = calloc(1, sizeof(*op));
	if (op == NULL)
		return -ENOMEM;
	op->type = WIRE_WAIT;
	op->entry = entry;
	memcpy(op->rec.exec, m->u.settle.exec, SHM_EXEC_LEN);
	op->deadline_ns = clock_mono_ns() +
			  (uint64_t)m->u.settle.timeout_ms * 1000000u;
	c->waiting = op;
	hold(c, op);
	pthread_mutex_lock(&sv->wait_lock);
	op->wnext = sv->waiters;
	sv->waiters = op;
	pthread_mutex_unlock(&sv->wait_lock);
	log_debug("entry %u: a wait of up to %u ms begins", entry,
		  m->u.settle.timeout_ms);
	/* It may have ended between the look and the registration. */
	wake_waiters(sv, false, entry, 0);
	return 0;
}

/*
 * Let go the waiters whose execution stopped running (all, or those on
 * entry), or whose deadline passed, or, with rc < 0 and all, every one.
 * Each answer goes to its connection's loop like a store's. Called from
 * any loop.
 */
static unsigned wake_waiters(struct server *sv, bool all, uint32_t entry,
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

		/* The connection's loop clears c->waiting in finish(). */
		store_done(&go->req, go->rc);
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


/* Write pending replies; arm EPOLLOUT only while some are left. Returns 0,
 * or -1 if the connection was dropped. */
static int flush_out(struct conn *c)
{
	while (c->out_off < c->out.size) {
		ssize_t n = send(c->fd, c->out.data + c->out_off,
				 c->out.size - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN) {
				drop(c, strerror(errno));
				return -1;
			}
			if (c->out.size > WBUF_MAX) {
				drop(c, "does not read its replies");
				return -1;
			}
			if (!c->want_out) {
				c->want_out = true;
				arm(c);
			}
			return 0;
		}
		c->out_off += (size_t)n;
	}
	c->out.size = 0;
	c->out_off = 0;
	if (c->want_out) {
		c->want_out = false;
		arm(c);
	}
	return 0;
}

/* Tell the peer why, then drop it. why is a string constant. Anyone who
 * may connect can fail as often as they like (before HELLO or after): the
 * first loop logs these by the episode (failed_tick), not one a
 * connection. */
static void fail_conn(struct conn *c, int code, const char *why)
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
	drop(c, why);
}

/*
 * The connection is gone: its owner is dead. Unregister it and settle its
 * tickets right away, so a retry sees EXECUTION_UNCERTAIN (interrupted) as
 * soon as the client's process is. why may be c->why.
 */
static void drop(struct conn *c, const char *why)
{
	struct loop *l = c->loop;
	/* Off the greeting list before its descriptor can be closed: the
	 * first loop sheds only what is on it. */
	bool shed = greet_del(c) == GREET_SHED;

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
			store_done(&w->req, -ECANCELED);
	}
	if (c->pending > 0) {
		/* Its owner stays registered until the store has answered,
		 * so a completion on its way is recorded before the sweep
		 * looks at the entry. finish() comes back here. */
		if (!c->closing)
			snprintf(c->why, sizeof(c->why), "%s", why);
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
		wake_waiters(l->sv, true, 0, 0);
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

/* A free ack slot for a connection, or UINT32_MAX when all are taken (its
 * answers then all come on its socket). */
static uint32_t ack_take(struct server *sv, uint32_t *gen)
{
	uint32_t slot = UINT32_MAX;

	/* From past the last one handed out: a slot given back rests while
	 * the others are used, so that a late write of its last client (see
	 * take_posts) is unlikely to meet the next one's request. */
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
