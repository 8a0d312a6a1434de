/*
 * server.c - carmyd's event loop: accept connections, register each as an
 * owner, record completions, and turn a closed connection's running entries
 * uncertain at once.
 *
 * One thread does everything that writes the segment, so carmyd's own table
 * operations never race each other. A dead owner is a fact the kernel tells
 * us: the connection's socket reports EOF or an error the moment the client
 * process dies (its descriptors are closed) or closes it. No timer is
 * involved; the 100 ms tick only reclaims tombstones and, every second,
 * re-checks the segment header and settles tickets held by ids that are not
 * connected (a client that scribbled, or raced a sweep).
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <urcu.h>

#include "daemon/carmyd.h"
#include "daemon/log.h"
#include "libclient/wire.h"

#define MAX_EVENTS 64
#define READ_CHUNK (64 * 1024)
#define WBUF_MAX (1024 * 1024)	/* a client that never reads its replies */
#define TICK_NS (100 * 1000 * 1000)

struct conn {
	int fd;
	uint32_t owner;		/* 0 until HELLO */
	pid_t pid;
	uid_t uid;
	uint8_t *rbuf;
	size_t rlen, rcap;
	msgpack_sbuffer out;	/* replies not yet written */
	size_t out_off;
	bool want_out;		/* EPOLLOUT armed */
};

struct server {
	struct store *store;
	const struct carmyd_config *cfg;
	int ep;
	int lfd;
	size_t msg_cap;		/* largest message a client may send */
	bool stop;
};

static void on_accept(struct server *sv);
static void on_readable(struct server *sv, struct conn *c);
static int on_message(struct server *sv, struct conn *c, const uint8_t *buf,
		      size_t len);
static int flush_out(struct server *sv, struct conn *c);
static void drop(struct server *sv, struct conn *c, const char *why);
static void fail_conn(struct server *sv, struct conn *c, int code,
		      const char *why);
static uint64_t now_ns(void);

/* ------------------------------------------------------------ loop */

int server_run(struct store *s, const struct carmyd_config *cfg, int lfd)
{
	struct server sv = { .store = s, .cfg = cfg, .lfd = lfd };
	struct itimerspec tick = { { 0, TICK_NS }, { 0, TICK_NS } };
	struct epoll_event ev, evs[MAX_EVENTS];
	sigset_t sigs;
	int sfd, tfd;

	sv.msg_cap = (size_t)s->view.geo.max_result + WIRE_OVERHEAD;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	sv.ep = epoll_create1(EPOLL_CLOEXEC);
	if (sfd < 0 || tfd < 0 || sv.ep < 0 ||
	    timerfd_settime(tfd, 0, &tick, NULL) != 0) {
		log_error("cannot set up the event loop: %s", strerror(errno));
		return -1;
	}
	ev.events = EPOLLIN;
	ev.data.ptr = &sv.lfd;
	epoll_ctl(sv.ep, EPOLL_CTL_ADD, lfd, &ev);
	ev.data.ptr = &sfd;
	epoll_ctl(sv.ep, EPOLL_CTL_ADD, sfd, &ev);
	ev.data.ptr = &tfd;
	epoll_ctl(sv.ep, EPOLL_CTL_ADD, tfd, &ev);

	while (!sv.stop) {
		int n = epoll_wait(sv.ep, evs, MAX_EVENTS, -1);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			log_error("epoll_wait: %s", strerror(errno));
			return -1;
		}
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;

			if (p == &sv.lfd) {
				on_accept(&sv);
			} else if (p == &sfd) {
				struct signalfd_siginfo si;

				while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
					if (si.ssi_signo == SIGHUP)
						continue;
					log_info("signal %u: shutting down",
						 si.ssi_signo);
					sv.stop = true;
				}
			} else if (p == &tfd) {
				uint64_t ticks;

				if (read(tfd, &ticks, sizeof(ticks)) < 0) {
					/* spurious wake-up */
				}
				store_tick(s);
			} else {
				struct conn *c = p;

				if (evs[i].events & EPOLLOUT) {
					if (flush_out(&sv, c) != 0)
						continue;
				}
				if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
					on_readable(&sv, c);
			}
		}
	}
	close(sfd);
	close(tfd);
	close(sv.ep);
	return 0;
}

/* ------------------------------------------------------------ connections */

static void on_accept(struct server *sv)
{
	for (;;) {
		struct epoll_event ev = { .events = EPOLLIN };
		struct ucred cred;
		socklen_t cl = sizeof(cred);
		struct conn *c;
		int fd = accept4(sv->lfd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR)
				log_warn("accept: %s", strerror(errno));
			return;
		}
		c = calloc(1, sizeof(*c));
		if (c == NULL) {
			log_error("out of memory accepting a connection");
			close(fd);
			continue;
		}
		c->fd = fd;
		msgpack_sbuffer_init(&c->out);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) {
			c->pid = cred.pid;
			c->uid = cred.uid;
		}
		ev.data.ptr = c;
		if (epoll_ctl(sv->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
			log_error("epoll_ctl: %s", strerror(errno));
			close(fd);
			msgpack_sbuffer_destroy(&c->out);
			free(c);
			continue;
		}
		log_debug("connection from pid %d uid %u", (int)c->pid,
			  (unsigned)c->uid);
	}
}

static void on_readable(struct server *sv, struct conn *c)
{
	for (;;) {
		ssize_t got;
		long n;

		if (c->rcap - c->rlen < READ_CHUNK && c->rcap < sv->msg_cap) {
			size_t ncap = c->rlen + READ_CHUNK;
			uint8_t *nb;

			if (ncap > sv->msg_cap)
				ncap = sv->msg_cap;
			nb = realloc(c->rbuf, ncap);
			if (nb == NULL) {
				drop(sv, c, "out of memory");
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
			drop(sv, c, strerror(errno));
			return;
		}
		if (got == 0) {
			drop(sv, c, "closed");
			return;
		}
		c->rlen += (size_t)got;

		/* Handle every whole message now in the buffer. */
		while (c->rlen > 0) {
			n = wire_scan(c->rbuf, c->rlen, sv->msg_cap);
			if (n < 0) {
				fail_conn(sv, c, CARMY_EPROTOCOL,
					  "malformed or oversized message");
				return;
			}
			if (n == 0)
				break;
			if (on_message(sv, c, c->rbuf, (size_t)n) != 0)
				return;	/* c is gone */
			memmove(c->rbuf, c->rbuf + n, c->rlen - (size_t)n);
			c->rlen -= (size_t)n;
		}
		/* A short read drained the socket: epoll (level-triggered)
		 * wakes us for more, so skip the recv that would say EAGAIN. */
		if ((size_t)got < room)
			return;
	}
}

/* Handle one message. Returns 0, or -1 if the connection was dropped. */
static int on_message(struct server *sv, struct conn *c, const uint8_t *buf,
		      size_t len)
{
	struct store *s = sv->store;
	struct wire_msg m;
	int rc;

	if (wire_decode(buf, len, 1, &m) != 0) {
		fail_conn(sv, c, CARMY_EPROTOCOL, "undecodable message");
		return -1;
	}
	switch (m.type) {
	case WIRE_HELLO:
		if (c->owner != 0) {
			fail_conn(sv, c, CARMY_EPROTOCOL, "second HELLO");
			return -1;
		}
		if (m.u.hello.version != WIRE_VERSION ||
		    m.u.hello.layout != shm_layout_signature()) {
			fail_conn(sv, c, CARMY_ELAYOUT,
				  "client built with another protocol or layout");
			return -1;
		}
		if (store_new_owner(s, &c->owner) != 0 ||
		    owners_add(c->owner, c) != 0) {
			c->owner = 0;
			fail_conn(sv, c, -ENOMEM, "cannot register owner");
			return -1;
		}
		log_debug("owner %u is pid %d", c->owner, (int)c->pid);
		rc = wire_put_hello_ok(&c->out, c->owner, sv->cfg->shm_name,
				       s->view.geo.max_result, s->epoch);
		break;
	case WIRE_COMPLETE: {
		int status = m.u.complete.status;
		int code = m.u.complete.result_code;
		const uint8_t *data = m.u.complete.result;
		size_t dlen = m.u.complete.result_len;

		if (c->owner == 0) {
			fail_conn(sv, c, CARMY_EPROTOCOL, "COMPLETE before HELLO");
			return -1;
		}
		if (status < CARMY_STATUS_COMPLETED ||
		    status > CARMY_STATUS_CANCELLED ||
		    (code != 0 && code != CARMY_ERESULT_TOO_LARGE)) {
			rc = wire_put_reply(&c->out, WIRE_COMPLETE,
					    CARMY_EINVALID_STATUS);
			break;
		}
		if (dlen > s->view.geo.max_result) {
			/* Recorded, not dropped. */
			status = CARMY_STATUS_FAILED;
			code = CARMY_ERESULT_TOO_LARGE;
			dlen = 0;
		}
		rc = shm_record_result(&s->view, m.u.complete.entry, c->owner,
				       m.u.complete.exec, status, code, data,
				       dlen, now_ns());
		if (rc != 0)
			log_debug("owner %u: completion of entry %u refused: %s",
				  c->owner, m.u.complete.entry,
				  carmy_errname(rc));
		rc = wire_put_reply(&c->out, WIRE_COMPLETE, rc);
		break;
	}
	case WIRE_RECLAIM:
		if (c->owner == 0) {
			fail_conn(sv, c, CARMY_EPROTOCOL, "RECLAIM before HELLO");
			return -1;
		}
		store_reclaim(s);
		rc = wire_put_reply(&c->out, WIRE_RECLAIM, 0);
		break;
	default:
		fail_conn(sv, c, CARMY_EPROTOCOL, "unknown message type");
		return -1;
	}
	if (rc != 0) {
		drop(sv, c, "out of memory");
		return -1;
	}
	return flush_out(sv, c);
}

/* Write pending replies; arm EPOLLOUT only while some are left. Returns 0,
 * or -1 if the connection was dropped. */
static int flush_out(struct server *sv, struct conn *c)
{
	struct epoll_event ev = { .data.ptr = c };

	while (c->out_off < c->out.size) {
		ssize_t n = send(c->fd, c->out.data + c->out_off,
				 c->out.size - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN) {
				drop(sv, c, strerror(errno));
				return -1;
			}
			if (c->out.size > WBUF_MAX) {
				drop(sv, c, "does not read its replies");
				return -1;
			}
			if (!c->want_out) {
				ev.events = EPOLLIN | EPOLLOUT;
				epoll_ctl(sv->ep, EPOLL_CTL_MOD, c->fd, &ev);
				c->want_out = true;
			}
			return 0;
		}
		c->out_off += (size_t)n;
	}
	c->out.size = 0;
	c->out_off = 0;
	if (c->want_out) {
		ev.events = EPOLLIN;
		epoll_ctl(sv->ep, EPOLL_CTL_MOD, c->fd, &ev);
		c->want_out = false;
	}
	return 0;
}

/* Tell the peer why, then drop it. */
static void fail_conn(struct server *sv, struct conn *c, int code,
		      const char *why)
{
	log_warn("pid %d owner %u: %s (%s): disconnecting", (int)c->pid,
		 c->owner, why, carmy_errname(code));
	c->out.size = 0;
	c->out_off = 0;
	if (wire_put_reply(&c->out, WIRE_ERROR, code) == 0 &&
	    send(c->fd, c->out.data, c->out.size, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		/* The peer is leaving anyway. */
	}
	drop(sv, c, why);
}

/*
 * The connection is gone: its owner is dead. Unregister it and settle its
 * tickets right away, so a retry sees EXECUTION_UNCERTAIN (interrupted) as
 * soon as the client's process is.
 */
static void drop(struct server *sv, struct conn *c, const char *why)
{
	epoll_ctl(sv->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	if (c->owner != 0) {
		char what[96];

		owners_del(c->owner);
		snprintf(what, sizeof(what), "owner %u (pid %d) %s", c->owner,
			 (int)c->pid, why);
		store_sweep_dead(sv->store, what);
		log_debug("%s", what);
	}
	msgpack_sbuffer_destroy(&c->out);
	free(c->rbuf);
	free(c);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
