/*
 * bench_floor.c - the floors: a bare CAS insert, a bare lookup and a bare
 * msgpack round trip over a Unix socket. See bench_floor.h.
 *
 * They are deliberately the least a shared-memory table and a socket
 * protocol can do, built from the same pieces Carmy uses (XXH3, liburcu's
 * uatomic, msgpack-c, an epoll loop), so that a carmyd figure divided by its
 * floor says how much Carmy adds on top.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <msgpack.h>
#include <urcu/uatomic.h>
#include <xxhash.h>

#include "bench/bench_floor.h"
#include "common/io.h"

/* The payload of a round trip: together with the header of a COMPLETE-like
 * array ([type, entry, exec(bin 16), status, code, payload]) about 150
 * bytes, the size of a COMPLETE carrying a 100-byte result. */
#define RT_PAYLOAD 120
#define ECHO_MAX_CONNS 256
#define ECHO_READ 4096

/* Key i of worker w in the insert figure, and key j of the lookup set:
 * never zero (zero is the empty word), never equal to each other. */
#define INSERT_KEY(w, i) ((((uint64_t)(w) + 1) << 40) | ((uint64_t)(i) + 1))
#define LOOKUP_KEY(j) ((UINT64_C(1) << 63) | ((uint64_t)(j) + 1))

struct table_worker {
	bool ok;
};

struct rt_worker {
	int fd;
	bool ok;
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_unpacker up;
	msgpack_unpacked reply;
	uint8_t exec[16];
	uint8_t payload[RT_PAYLOAD];
};

static int table_setup(struct bench_worker *w);
static void insert_op(struct bench_worker *w, uint64_t i);
static void lookup_op(struct bench_worker *w, uint64_t i);
static int table_check(struct bench_worker *w, uint64_t i);
static int table_teardown(struct bench_worker *w, uint64_t done);
static int rt_setup(struct bench_worker *w);
static void rt_op(struct bench_worker *w, uint64_t i);
static int rt_check(struct bench_worker *w, uint64_t i);
static int rt_teardown(struct bench_worker *w, uint64_t done);
static void echo_serve(int lfd, int stop_fd) __attribute__((noreturn));

/* ---------------------------------------------------------------- API */

int floor_table_new(struct floor_table *t, uint64_t keys, uint64_t min_words)
{
	uint64_t n = 64;
	void *p;

	while (n < 2 * keys || n < min_words)
		n <<= 1;
	t->bytes = n * sizeof(uint64_t);
	p = mmap(NULL, t->bytes, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	memset(p, 0, t->bytes);
	t->words = p;
	t->mask = n - 1;
	t->lookup_keys = 0;
	return 0;
}

int floor_table_fill(struct floor_table *t, uint32_t n)
{
	for (uint32_t j = 0; j < n; j++) {
		uint64_t key = LOOKUP_KEY(j);
		uint64_t b = XXH3_64bits(&key, sizeof(key)) & t->mask;
		uint64_t probes = 0;

		while (t->words[b] != 0) {
			if (++probes > t->mask)
				return -ENOSPC;
			b = (b + 1) & t->mask;
		}
		t->words[b] = key;
	}
	t->lookup_keys = n;
	return 0;
}

void floor_table_free(struct floor_table *t)
{
	if (t->words != NULL)
		munmap(t->words, t->bytes);
	t->words = NULL;
}

void floor_insert_figure(struct bench_figure *f, struct floor_table *t)
{
	*f = (struct bench_figure){
		.name = "cas-insert", .arg = t, .setup = table_setup,
		.op = insert_op, .check = table_check,
		.teardown = table_teardown,
	};
}

void floor_lookup_figure(struct bench_figure *f, struct floor_table *t)
{
	*f = (struct bench_figure){
		.name = "lookup", .arg = t, .setup = table_setup,
		.op = lookup_op, .check = table_check,
		.teardown = table_teardown,
	};
}

/*
 * The listening socket is bound before the fork, so a client may connect as
 * soon as this returns. The server runs until the read end of a pipe it
 * shares with the parent reports EOF: the parent closing stop_fd, or dying.
 */
int floor_echo_start(struct floor_echo *e, int cpu)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *tmp = getenv("TMPDIR");
	int lfd = -1, pfd[2] = { -1, -1 }, err;

	memset(e, 0, sizeof(*e));
	e->stop_fd = -1;
	if (tmp == NULL || tmp[0] != '/' ||
	    strlen(tmp) + sizeof("/carmy-bench.XXXXXX/echo.sock") >
		    sizeof(sa.sun_path))
		tmp = "/tmp";
	snprintf(e->dir, sizeof(e->dir), "%s/carmy-bench.XXXXXX", tmp);
	if (mkdtemp(e->dir) == NULL)
		return -errno;
	snprintf(e->path, sizeof(e->path), "%s/echo.sock", e->dir);
	strcpy(sa.sun_path, e->path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(lfd, BENCH_MAX_PROCS) != 0 || pipe2(pfd, O_CLOEXEC) != 0)
		goto fail;
	fflush(NULL);
	e->pid = fork();
	if (e->pid < 0)
		goto fail;
	if (e->pid == 0) {
		close(pfd[1]);
		if (cpu >= 0) {
			cpu_set_t set;

			CPU_ZERO(&set);
			CPU_SET(cpu, &set);
			if (sched_setaffinity(0, sizeof(set), &set) != 0)
				_exit(1);
		}
		echo_serve(lfd, pfd[0]);
	}
	close(lfd);
	close(pfd[0]);
	e->stop_fd = pfd[1];
	return 0;
fail:
	err = errno;
	if (lfd >= 0)
		close(lfd);
	if (pfd[0] >= 0) {
		close(pfd[0]);
		close(pfd[1]);
	}
	unlink(e->path);
	rmdir(e->dir);
	e->dir[0] = '\0';
	return -err;
}

void floor_echo_stop(struct floor_echo *e)
{
	if (e->stop_fd >= 0) {
		close(e->stop_fd);
		e->stop_fd = -1;
		waitpid(e->pid, NULL, 0);
	}
	if (e->dir[0] != '\0') {
		unlink(e->path);
		rmdir(e->dir);
		e->dir[0] = '\0';
	}
}

void floor_rt_figure(struct bench_figure *f, struct floor_echo *e)
{
	*f = (struct bench_figure){
		.name = "msgpack-rt", .arg = e, .setup = rt_setup, .op = rt_op,
		.check = rt_check, .teardown = rt_teardown,
	};
}

/* ------------------------------------------------------------ table */

static int table_setup(struct bench_worker *w)
{
	struct floor_table *t = w->arg;

	w->state = calloc(1, sizeof(struct table_worker));
	if (w->state == NULL)
		return bench_failf(w, BENCH_FAIL, "out of memory");
	/* A fork does not copy a shared mapping's page tables: take this
	 * process's faults now, not in the timed loop. */
	bench_prefault(t->words, t->bytes);
	return BENCH_OK;
}

/* Every uatomic_cmpxchg() is a full barrier (lock cmpxchg), as in Carmy's
 * publish; the probe's loads are plain CMM_LOAD_SHARED reads. */
static void insert_op(struct bench_worker *w, uint64_t i)
{
	struct floor_table *t = w->arg;
	struct table_worker *s = w->state;
	uint64_t key = INSERT_KEY(w->index, i);
	uint64_t b = XXH3_64bits(&key, sizeof(key)) & t->mask;

	for (uint64_t n = 0; n <= t->mask; n++, b = (b + 1) & t->mask) {
		if (uatomic_read(&t->words[b]) == 0 &&
		    uatomic_cmpxchg(&t->words[b], 0, key) == 0) {
			s->ok = true;
			return;
		}
	}
	s->ok = false;
}

static void lookup_op(struct bench_worker *w, uint64_t i)
{
	struct floor_table *t = w->arg;
	struct table_worker *s = w->state;
	/* Workers start at different points of the set, like replays. */
	uint64_t j = (i + (uint64_t)w->index * t->lookup_keys / w->procs) %
		     t->lookup_keys;
	uint64_t key = LOOKUP_KEY(j);
	uint64_t b = XXH3_64bits(&key, sizeof(key)) & t->mask;

	for (uint64_t n = 0; n <= t->mask; n++, b = (b + 1) & t->mask) {
		uint64_t v = uatomic_read(&t->words[b]);

		if (v == key || v == 0) {
			s->ok = v == key;
			return;
		}
	}
	s->ok = false;
}

static int table_check(struct bench_worker *w, uint64_t i)
{
	struct table_worker *s = w->state;

	if (!s->ok)
		return bench_failf(w, BENCH_FAIL, "op %llu: %s",
				   (unsigned long long)i,
				   "key not inserted / not found in the CAS table");
	return BENCH_OK;
}

static int table_teardown(struct bench_worker *w, uint64_t done)
{
	(void)done;
	free(w->state);
	w->state = NULL;
	return BENCH_OK;
}

/* ------------------------------------------------------------ round trip */

static int rt_setup(struct bench_worker *w)
{
	struct floor_echo *e = w->arg;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct rt_worker *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return bench_failf(w, BENCH_FAIL, "out of memory");
	w->state = s;
	s->fd = -1;
	msgpack_sbuffer_init(&s->sb);
	msgpack_packer_init(&s->pk, &s->sb, msgpack_sbuffer_write);
	msgpack_unpacked_init(&s->reply);
	if (!msgpack_unpacker_init(&s->up, ECHO_READ)) {
		free(s);
		w->state = NULL;
		return bench_failf(w, BENCH_FAIL, "out of memory");
	}
	memset(s->exec, 0xe5, sizeof(s->exec));
	for (size_t k = 0; k < sizeof(s->payload); k++)
		s->payload[k] = (uint8_t)('a' + k % 26);
	strcpy(sa.sun_path, e->path);
	s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->fd < 0 || connect(s->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		return bench_failf(w, BENCH_FAIL, "connect %s: %s", e->path,
				   strerror(errno));
	return BENCH_OK;
}

/* One round trip: pack, write, wait until one whole reply is unpacked. */
static void rt_op(struct bench_worker *w, uint64_t i)
{
	struct rt_worker *s = w->state;
	msgpack_packer *pk = &s->pk;

	s->ok = false;
	msgpack_sbuffer_clear(&s->sb);
	if (msgpack_pack_array(pk, 6) || msgpack_pack_uint8(pk, 2) ||
	    msgpack_pack_uint32(pk, (uint32_t)i) || msgpack_pack_bin(pk, 16) ||
	    msgpack_pack_bin_body(pk, s->exec, 16) ||
	    msgpack_pack_int32(pk, 1) || msgpack_pack_int32(pk, 0) ||
	    msgpack_pack_bin(pk, RT_PAYLOAD) ||
	    msgpack_pack_bin_body(pk, s->payload, RT_PAYLOAD))
		return;
	if (io_send_all(s->fd, s->sb.data, s->sb.size) != 0)
		return;
	for (;;) {
		msgpack_unpack_return r = msgpack_unpacker_next(&s->up, &s->reply);
		ssize_t n;

		if (r == MSGPACK_UNPACK_SUCCESS)
			break;
		if (r != MSGPACK_UNPACK_CONTINUE ||
		    !msgpack_unpacker_reserve_buffer(&s->up, ECHO_READ))
			return;
		/* Wait as libcarmy does, in poll(): a reader asleep in
		 * read() is also woken when the server reads the request. */
		n = recv(s->fd, msgpack_unpacker_buffer(&s->up),
			 msgpack_unpacker_buffer_capacity(&s->up),
			 MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			struct pollfd pfd = { .fd = s->fd, .events = POLLIN };

			if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
				return;
			continue;
		}
		if (n <= 0)
			return;
		msgpack_unpacker_buffer_consumed(&s->up, (size_t)n);
	}
	s->ok = s->reply.data.type == MSGPACK_OBJECT_ARRAY &&
		s->reply.data.via.array.size == 2;
}

static int rt_check(struct bench_worker *w, uint64_t i)
{
	struct rt_worker *s = w->state;

	if (!s->ok)
		return bench_failf(w, BENCH_FAIL,
				   "op %llu: msgpack round trip failed",
				   (unsigned long long)i);
	return BENCH_OK;
}

static int rt_teardown(struct bench_worker *w, uint64_t done)
{
	struct rt_worker *s = w->state;

	(void)done;
	if (s == NULL)
		return BENCH_OK;
	if (s->fd >= 0)
		close(s->fd);
	msgpack_unpacked_destroy(&s->reply);
	msgpack_unpacker_destroy(&s->up);
	msgpack_sbuffer_destroy(&s->sb);
	free(s);
	w->state = NULL;
	return BENCH_OK;
}

/* ------------------------------------------------------------ echo server */

/*
 * One thread, level-triggered epoll, one read per readiness event (a short
 * read means the socket is drained; epoll says so again if it is not), a
 * msgpack_unpacker per connection, and for every whole message a [2, 0]
 * reply packed with msgpack_packer: the least a msgpack server does.
 */
static void echo_serve(int lfd, int stop_fd)
{
	msgpack_unpacker *ups[ECHO_MAX_CONNS] = { 0 };
	struct epoll_event ev = { .events = EPOLLIN }, evs[64];
	msgpack_unpacked msg;
	msgpack_sbuffer out;
	msgpack_packer pk;
	int ep = epoll_create1(EPOLL_CLOEXEC);

	signal(SIGPIPE, SIG_IGN);
	msgpack_unpacked_init(&msg);
	msgpack_sbuffer_init(&out);
	msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
	if (ep < 0)
		_exit(1);
	ev.data.fd = lfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	ev.data.fd = stop_fd;
	epoll_ctl(ep, EPOLL_CTL_ADD, stop_fd, &ev);
	for (;;) {
		int n = epoll_wait(ep, evs, 64, -1);

		for (int k = 0; k < n; k++) {
			int fd = evs[k].data.fd;
			msgpack_unpacker *up;
			ssize_t got;

			if (fd == stop_fd)
				_exit(0);
			if (fd == lfd) {
				int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

				if (c < 0)
					continue;
				if (c >= ECHO_MAX_CONNS ||
				    (ups[c] = msgpack_unpacker_new(ECHO_READ)) ==
					    NULL) {
					close(c);
					continue;
				}
				ev.data.fd = c;
				epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
				continue;
			}
			up = ups[fd];
			if (!msgpack_unpacker_reserve_buffer(up, ECHO_READ))
				got = -1;
			else
				got = read(fd, msgpack_unpacker_buffer(up),
					   msgpack_unpacker_buffer_capacity(up));
			if (got <= 0) {
				epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
				close(fd);
				msgpack_unpacker_free(up);
				ups[fd] = NULL;
				continue;
			}
			msgpack_unpacker_buffer_consumed(up, (size_t)got);
			msgpack_sbuffer_clear(&out);
			while (msgpack_unpacker_next(up, &msg) ==
			       MSGPACK_UNPACK_SUCCESS) {
				msgpack_pack_array(&pk, 2);
				msgpack_pack_uint8(&pk, 2);
				msgpack_pack_int32(&pk, 0);
			}
			if (out.size > 0)
				io_send_all(fd, out.data, out.size);
		}
	}
}

