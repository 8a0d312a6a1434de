/*
 * server.h - what carmyd's event loops (server.c), connection handling
 * (conn.c) and request handling (request.c) share. Private to those three;
 * the rest of carmyd sees server_run() alone (carmyd.h).
 *
 * The files call one way: server.c runs the loops and calls into
 * request.c and conn.c; request.c reads and answers requests and calls
 * into conn.c; conn.c accepts, bounds, writes to and closes connections,
 * and calls into neither.
 */
#ifndef CARMY_DAEMON_SERVER_H
#define CARMY_DAEMON_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/carmyd.h"
#include "libclient/wire.h"

/* Refused operator commands: the users last logged are remembered this
 * many at a time (request.c's may_operate()). */
#define DENY_UIDS 8
/* conn_greet_del(): was the connection shed meanwhile? */
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
	/* This loop's requests the store has yet to answer whose answers it
	 * polls for (request.c: awaited()), and until when (CLOCK_MONOTONIC
	 * ns) it polls rather than sleep: AWAIT_SPIN times --spin-us after
	 * the last was sent. The loop's alone. */
	unsigned awaiting;
	uint64_t await_until;
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
	/* Set by its loop, read by the store's thread too (request.c). */
	atomic_bool closing;
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
	unsigned status_ticks;	/* first loop only: ticks since STATUS= */
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

/* ------------------------------------------------------------ conn.c */

/* Accept what is waiting on the listening socket, up to --max-clients.
 * First loop only. */
void conn_accept(struct server *sv);
/* The first loop's tick: close connections silent since they were
 * accepted, log the connections failed since the last tick, and end a
 * quiet episode of refusals. */
void conn_tick(struct server *sv);
/* wake_fd rang: the shed connections are closed, listening may resume.
 * First loop only. */
void conn_on_wake(struct server *sv);
/* c said HELLO: off the greeting list. GREET_SHED if it was shed first.
 * c's loop only. */
int conn_greet_del(struct conn *c);
/* c's client may post requests in its ack slot. c's loop only. */
void conn_posting_add(struct conn *c);
/* Write c's pending replies. Returns 0, or -1 if c was dropped. */
int conn_flush(struct conn *c);
/* Tell epoll what c waits for now. */
void conn_arm(struct conn *c);
/* Tell c's client why (code), then drop it; why is a string constant. */
void conn_fail(struct conn *c, int code, const char *why);
/* c is gone: its owner is dead, its tickets settled. c's loop only; c is
 * freed (or, with a store request in flight, once it is answered). */
void conn_drop(struct conn *c, const char *why);
/* Free the connections of l still open when carmyd stops. */
void conn_close_all(struct loop *l);
/* A free ack slot, its generation in *gen; UINT32_MAX if none. */
uint32_t conn_ack_take(struct server *sv, uint32_t *gen);
/* The store's answer to a request (or a waiter let go): to its
 * connection's loop. Any thread. */
void conn_store_done(struct carmy_store_req *req, int rc);
/* Let go the waiters whose execution stopped running (all, or those on
 * entry) or whose deadline passed; with rc < 0 and all, every one. Returns
 * how many. Any loop. */
unsigned conn_wake_waiters(struct server *sv, bool all, uint32_t entry,
			   int rc);

/* ------------------------------------------------------------ request.c */

/* c is readable (events from epoll): read and handle its requests. c's
 * loop only. */
void req_read(struct conn *c, uint32_t events);
/* Take the requests posted in the segment by l's connections' clients.
 * Returns how many were ready. Between batches of events only. */
unsigned req_take_posts(struct loop *l);
/* Reply to the requests the store has answered for l, oldest first. */
void req_answered(struct loop *l);

#endif
