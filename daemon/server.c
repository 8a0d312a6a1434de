/*
 * server.c - carmyd's event loops: set up, run and stopped here; their
 * connections are conn.c's, the requests on them request.c's.
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
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <urcu.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/service.h"
#include "common/thread.h"
#include "daemon/carmyd.h"
#include "daemon/server.h"
#include "libclient/wire.h"

#define MAX_EVENTS 64
#define TICK_NS (100 * 1000 * 1000)
/* Ticks between STATUS= updates to the service manager: 10 s. */
#define STATUS_TICKS 100

static int server_init(struct server *sv);
static int server_open(struct server *sv);
static unsigned loops_start(struct server *sv);
static void loops_stop(struct server *sv, unsigned started);
static void server_fini(struct server *sv);
static int loop_init(struct server *sv, struct loop *l);
static void loop_fini(struct server *sv, struct loop *l);
static void *loop_thread(void *arg);
static int loop_run(struct loop *l);
static void on_signal(struct server *sv);
static void on_tick(struct server *sv);

/* ------------------------------------------------------------ set-up */

/*
 * Serve on lfd until a signal says stop: the first loop runs on this
 * thread, the others on threads of their own. Returns 0 after a clean
 * stop, -1 if the loops could not be set up or one failed.
 */
int server_run(struct store *s, const struct carmyd_config *cfg, int lfd)
{
	struct server sv = { .store = s, .cfg = cfg, .lfd = lfd,
			     .sfd = -1, .tfd = -1, .wfd = -1, .wake_fd = -1,
			     .spare = -1 };
	unsigned started;
	int rc = -1;

	if (server_init(&sv) != 0)
		return -1;
	if (server_open(&sv) != 0) {
		log_error("cannot set up the event loops: %s", strerror(errno));
	} else {
		started = loops_start(&sv);
		if (started == sv.nloops) {
			log_debug("%u event loops", sv.nloops);
			rc = loop_run(&sv.loops[0]);
			shm_bell_set(&s->view, sv.loops[0].bell, false);
		}
		store_let_go_alive(s);
		loops_stop(&sv, started);
	}
	server_fini(&sv);
	return rc;
}

/* What the server holds but descriptors: its locks, the loops, the
 * TOO_MANY_CLIENTS reply. Returns 0, or -1 (logged) with nothing held. */
static int server_init(struct server *sv)
{
	struct store *s = sv->store;

	sv->msg_cap = (size_t)s->view.geo.max_result + WIRE_OVERHEAD;
	pthread_mutex_init(&sv->idle_lock, NULL);
	pthread_cond_init(&sv->idle, NULL);
	pthread_mutex_init(&sv->wait_lock, NULL);
	pthread_mutex_init(&sv->ack_lock, NULL);
	pthread_mutex_init(&sv->greet_lock, NULL);
	pthread_mutex_init(&sv->deny_lock, NULL);
	msgpack_sbuffer_init(&sv->too_many);
	sv->nloops = sv->cfg->threads ? sv->cfg->threads : 1;
	sv->loops = calloc(sv->nloops, sizeof(*sv->loops));
	if (sv->loops == NULL ||
	    wire_put_reply(&sv->too_many, WIRE_ERROR,
			   CARMY_ETOO_MANY_CLIENTS) != 0) {
		log_error("out of memory for %u event loops", sv->nloops);
		free(sv->loops);
		msgpack_sbuffer_destroy(&sv->too_many);
		return -1;
	}
	/* Kept for the moment carmyd runs out of descriptors: given up, it
	 * lets one more connection be accepted and told why it is refused. */
	sv->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	/* A bell a carmyd before us left ringing would have clients post to
	 * loops that are asleep. */
	for (uint32_t i = 0; i < SHM_BELLS; i++)
		shm_bell_set(&s->view, i, false);
	/* Slot generations start anywhere: a client of a carmyd before us
	 * cannot post into a slot we hand out. */
	if (getrandom(&sv->ack_gen, sizeof(sv->ack_gen), 0) !=
	    (ssize_t)sizeof(sv->ack_gen))
		sv->ack_gen = (uint32_t)clock_mono_ns();
	for (unsigned i = 0; i < sv->nloops; i++) {
		sv->loops[i].bell = i < SHM_BELLS ? i : UINT32_MAX;
		sv->loops[i].ep = sv->loops[i].stop_fd = -1;
		sv->loops[i].done_fd = -1;
		pthread_mutex_init(&sv->loops[i].done_lock, NULL);
		pthread_mutex_init(&sv->loops[i].list_lock, NULL);
	}
	return 0;
}

/*
 * The descriptors: the signalfd, the tick, the waiters' timer, the shed
 * connections' eventfd, and each loop's epoll set and eventfds. The first
 * loop also owns the listening socket and the first four; its epoll data
 * for them are the server's own fields. Returns 0, or -1 with errno set
 * (server_fini() closes what was opened).
 */
static int server_open(struct server *sv)
{
	struct itimerspec tick = { { 0, TICK_NS }, { 0, TICK_NS } };
	struct epoll_event ev = { .events = EPOLLIN };
	int ep;
	sigset_t sigs;

	/* main() blocked these before any thread started, so every loop
	 * inherits the mask and only the signalfd sees them. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	sv->sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	sv->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	sv->wfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	sv->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (sv->sfd < 0 || sv->tfd < 0 || sv->wfd < 0 || sv->wake_fd < 0 ||
	    timerfd_settime(sv->tfd, 0, &tick, NULL) != 0)
		return -1;
	for (unsigned i = 0; i < sv->nloops; i++)
		if (loop_init(sv, &sv->loops[i]) != 0)
			return -1;
	ep = sv->loops[0].ep;
	ev.data.ptr = &sv->lfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, sv->lfd, &ev);
	ev.data.ptr = &sv->sfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, sv->sfd, &ev);
	ev.data.ptr = &sv->tfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, sv->tfd, &ev);
	ev.data.ptr = &sv->wfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, sv->wfd, &ev);
	ev.data.ptr = &sv->wake_fd;
	epoll_ctl(ep, EPOLL_CTL_ADD, sv->wake_fd, &ev);
	return 0;
}

/* Start every loop but the first, each on a thread of its own. Returns
 * how many loops run, the first counted: sv->nloops unless one could not
 * start (logged). */
static unsigned loops_start(struct server *sv)
{
	unsigned started = 1;

	for (; started < sv->nloops; started++) {
		int err = pthread_create(&sv->loops[started].thread, NULL,
					 loop_thread, &sv->loops[started]);

		if (err != 0) {
			log_error("cannot start event loop %u: %s", started,
				  strerror(err));
			break;
		}
	}
	return started;
}

/* Stop the loops started on threads of their own (the first has returned)
 * and wait for them, then for the store's answers still due. */
static void loops_stop(struct server *sv, unsigned started)
{
	/* Each sees its eventfd readable and returns. */
	for (unsigned i = 1; i < started; i++) {
		uint64_t one = 1;

		if (write(sv->loops[i].stop_fd, &one, sizeof(one)) < 0)
			log_error("cannot stop event loop %u: %s", i,
				  strerror(errno));
	}
	for (unsigned i = 1; i < started; i++)
		pthread_join(sv->loops[i].thread, NULL);
	/* Waiters are let go; the store may still be answering: both go to
	 * the loops' lists, which must outlive them. */
	conn_wake_waiters(sv, true, 0, -ECANCELED);
	pthread_mutex_lock(&sv->idle_lock);
	while (sv->inflight > 0)
		pthread_cond_wait(&sv->idle, &sv->idle_lock);
	pthread_mutex_unlock(&sv->idle_lock);
}

/* Undo server_init() and server_open(), once no loop runs and the store
 * has nothing of ours in flight. */
static void server_fini(struct server *sv)
{
	for (unsigned i = 0; i < sv->nloops; i++)
		loop_fini(sv, &sv->loops[i]);
	pthread_cond_destroy(&sv->idle);
	pthread_mutex_destroy(&sv->idle_lock);
	pthread_mutex_destroy(&sv->wait_lock);
	pthread_mutex_destroy(&sv->ack_lock);
	pthread_mutex_destroy(&sv->greet_lock);
	pthread_mutex_destroy(&sv->deny_lock);
	msgpack_sbuffer_destroy(&sv->too_many);
	if (sv->spare >= 0)
		close(sv->spare);
	if (sv->sfd >= 0)
		close(sv->sfd);
	if (sv->tfd >= 0)
		close(sv->tfd);
	if (sv->wfd >= 0)
		close(sv->wfd);
	if (sv->wake_fd >= 0)
		close(sv->wake_fd);
	free(sv->loops);
}

/* ------------------------------------------------------------ loops */

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

/* Free what l still holds: answers it never took, connections still open
 * (the loops and the store are done with them), its descriptors. */
static void loop_fini(struct server *sv, struct loop *l)
{
	while (l->done != NULL) {
		struct store_op *op = l->done;

		l->done = op->next;
		free(op->result);
		free((void *)op->standing.result);
		free(op);
	}
	conn_close_all(l);
	free(l->posting);
	shm_bell_set(&sv->store->view, l->bell, false);
	pthread_mutex_destroy(&l->list_lock);
	if (l->ep >= 0)
		close(l->ep);
	if (l->stop_fd >= 0)
		close(l->stop_fd);
	if (l->done_fd >= 0)
		close(l->done_fd);
	pthread_mutex_destroy(&l->done_lock);
}

static void *loop_thread(void *arg)
{
	struct loop *l = arg;

	thread_name("carmyd-loop%u", (unsigned)(l - l->sv->loops));
	rcu_register_thread();	/* the owner registry is RCU */
	loop_run(l);
	/* Stopped: a post now would wait for nobody. */
	shm_bell_set(&l->sv->store->view, l->bell, false);
	rcu_unregister_thread();
	return NULL;
}

/*
 * Serve l's connections until told to stop. Connections still open then are
 * closed and freed by server_fini() once every loop and the store are done
 * with them; their owners are not swept: carmyd is going away, and the
 * next carmyd's start-up sweep turns their running entries uncertain (or
 * holds them for owners whose process still runs, to come back).
 */
static int loop_run(struct loop *l)
{
	struct server *sv = l->sv;
	struct epoll_event evs[MAX_EVENTS];
	const uint64_t spin = sv->cfg->spin_us * 1000ull;
	uint64_t spin_until = 0;

	for (;;) {
		/* Spin, then block (--spin-us): while requests keep coming,
		 * or the store's answers to this loop's are awaited (up to
		 * AWAIT_SPIN times as long), poll for the next rather than
		 * sleep, so that its reply goes out without a wake-up; idle,
		 * sleep. */
		uint64_t now = spin ? clock_mono_ns() : 0;
		int wait = spin && (now < spin_until || (l->awaiting > 0 &&
				    now < l->await_until)) ? 0 : -1;
		int n;

		/* Asleep, we look at no slot: clients send instead of
		 * posting. Say so, then look once more (see shm/post.c). */
		if (wait < 0 && l->bell < SHM_BELLS) {
			shm_bell_set(&sv->store->view, l->bell, false);
			if (req_take_posts(l) > 0) {
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
			if (req_take_posts(l) > 0) {
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
				conn_accept(sv);
			} else if (p == &sv->sfd) {
				on_signal(sv);
			} else if (p == &sv->tfd) {
				on_tick(sv);
			} else if (p == &sv->wfd) {
				uint64_t ticks;

				if (read(sv->wfd, &ticks, sizeof(ticks)) < 0) {
					/* spurious wake-up */
				}
				/* A waiter's deadline came. */
				conn_wake_waiters(sv, true, 0, 0);
			} else if (p == &sv->wake_fd) {
				conn_on_wake(sv);
			} else {
				struct conn *c = p;

				if (evs[i].events & EPOLLOUT) {
					if (conn_flush(c) != 0)
						continue;
				}
				l->more = i + 1 < n;
				if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
					req_read(c, evs[i].events);
			}
		}
		l->more = false;
		if (done)
			req_answered(l);
		/* After the batch, as req_answered(): a post may drop its
		 * connection, which a later event of the batch may name. */
		req_take_posts(l);
		if (l == sv->loops && sv->stop)
			return 0;
	}
}

/* The first loop's signalfd: SIGTERM or SIGINT stops carmyd (once the
 * batch is handled); SIGHUP is taken and ignored. */
static void on_signal(struct server *sv)
{
	struct signalfd_siginfo si;

	while (read(sv->sfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGHUP)
			continue;
		log_info("signal %u: shutting down", si.ssi_signo);
		if (!sv->stop && service_notify("STOPPING=1") < 0)
			log_debug("cannot tell the service manager we stop");
		sv->stop = true;
	}
}

void server_notify_status(struct store *s, const char *prefix)
{
	unsigned long clients;
	char msg[256];
	uint32_t used;
	uint64_t refused;

	if (!service_notify_wanted())
		return;
	store_fill(s, &used, &refused);
	clients = owners_count();
	snprintf(msg, sizeof(msg), "%sSTATUS=%u of %u entries in use, %lu "
		 "client%s, %llu call%s refused for capacity", prefix, used,
		 s->view.geo.capacity, clients, clients == 1 ? "" : "s",
		 (unsigned long long)refused, refused == 1 ? "" : "s");
	if (service_notify(msg) < 0)
		log_debug("cannot tell the service manager our status");
}

/* The first loop's 100 ms tick: the store's upkeep, the connections'
 * (conn_tick()), and the waiters whose execution ended unseen. */
static void on_tick(struct server *sv)
{
	uint64_t ticks;
	unsigned woken;

	if (read(sv->tfd, &ticks, sizeof(ticks)) < 0) {
		/* spurious wake-up */
	}
	store_tick(sv->store);
	conn_tick(sv);
	if (++sv->status_ticks >= STATUS_TICKS) {
		sv->status_ticks = 0;
		server_notify_status(sv->store, "");
	}
	/* Releases and sweeps end executions without telling us. */
	woken = conn_wake_waiters(sv, true, 0, 0);
	if (woken > 0)
		log_debug("%u waiter%s told at the tick", woken,
			  woken == 1 ? "" : "s");
}
