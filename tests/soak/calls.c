/*
 * calls.c - the soak's identity space, its tool results and the little
 * helpers every soak process shares (random numbers, hashing, log lines).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/soak/soak.h"

/* One identity in ten carries a map this big in variant 0: canonical
 * fingerprinting sorts its keys, which keeps carmy_begin busy for tens of
 * microseconds, a window the driver's kills can hit. */
#define BIG_KEYS 1500

/* The argument maps, one per variant, plain and big; a call patches its
 * identity number into a copy (ID_AT) rather than building the map anew,
 * so that the time a begin takes is the library's, not ours. */
#define ID_AT 7

struct soak_args {
	uint8_t *bytes;
	size_t len;
};

struct soak_space {
	struct soak_args args[2][SOAK_VARIANTS];	/* [big][var] */
	char principal[24];
	char session[16];
	char request[16];
};

const char *const soak_phase_names[SOAK_P_COUNT] = {
	"connect", "idle", "begin", "reserved", "tool", "after-tool",
	"complete", "acked", "release", "abandon",
};

static void put_u8(uint8_t **p, unsigned v)
{
	*(*p)++ = (uint8_t)v;
}

static void put_be(uint8_t **p, uint64_t v, int bytes)
{
	while (bytes-- > 0)
		put_u8(p, (unsigned)(v >> (8 * bytes)));
}

static void put_str(uint8_t **p, const char *s)
{
	size_t n = strlen(s);

	put_u8(p, 0xa0 | (unsigned)n);	/* fixstr: n < 32 here */
	memcpy(*p, s, n);
	*p += n;
}

/*
 * The msgpack map {"id": 0, "v": var, "k....": n...} ("id" patched per
 * call). Keys are written in descending order so that the canonical form
 * has to reorder them; variant 2 also differs in its tool (see
 * soak_space_call), so that the tool's place in the fingerprint counts too.
 */
static void make_args(struct soak_args *a, bool big, unsigned var)
{
	unsigned extra = big ? BIG_KEYS : var;
	uint8_t *p;

	a->bytes = malloc(16 + (size_t)extra * 10);
	if (a->bytes == NULL)
		abort();
	p = a->bytes;
	put_u8(&p, 0xde);		/* map16 */
	put_be(&p, 2 + extra, 2);
	put_str(&p, "id");
	put_u8(&p, 0xce);		/* uint32, at ID_AT - 1 */
	put_be(&p, 0, 4);
	put_str(&p, "v");
	put_u8(&p, var);		/* positive fixint */
	for (unsigned k = extra; k-- > 0;) {
		char key[16];

		snprintf(key, sizeof(key), "k%04u", k);
		put_str(&p, key);
		put_u8(&p, 0xcd);	/* uint16 */
		put_be(&p, (k * 7919u + var) & 0xffff, 2);
	}
	a->len = (size_t)(p - a->bytes);
}

struct soak_space *soak_space_new(void)
{
	struct soak_space *s = calloc(1, sizeof(*s));

	if (s == NULL)
		abort();
	for (unsigned v = 0; v < SOAK_VARIANTS; v++) {
		make_args(&s->args[0][v], false, v);
		make_args(&s->args[1][v], v == 0, v);
	}
	return s;
}

void soak_space_free(struct soak_space *s)
{
	if (s == NULL)
		return;
	for (unsigned v = 0; v < SOAK_VARIANTS; v++) {
		free(s->args[0][v].bytes);
		free(s->args[1][v].bytes);
	}
	free(s);
}

void soak_space_principal(struct soak_space *s, const char *principal)
{
	snprintf(s->principal, sizeof(s->principal), "%s", principal);
}

void soak_space_call(struct soak_space *s, unsigned id, unsigned var,
		     struct carmy_call *out)
{
	struct soak_args *a = &s->args[id % 10 == 3][var];
	uint8_t *p = a->bytes + ID_AT;

	snprintf(s->session, sizeof(s->session), "s%u", id % 7);
	snprintf(s->request, sizeof(s->request), "r%u", id);
	put_be(&p, id, 4);
	memset(out, 0, sizeof(*out));
	out->principal = s->principal[0] ? s->principal : "soak";
	out->principal_len = strlen(out->principal);
	out->session = s->session;
	out->session_len = strlen(s->session);
	out->request_id = s->request;
	out->request_id_len = strlen(s->request);
	out->tool = var == 2 ? "soak.write2" : "soak.write";
	out->tool_len = strlen(out->tool);
	out->args = a->bytes;
	out->args_len = a->len;
}

/* ------------------------------------------------------------ results */

/*
 * Sizes are drawn to hit the interesting ones often: empty, small, the
 * edge of carmyd's --max-result from both sides, and a few past it (those
 * are recorded as failed with RESULT_TOO_LARGE and no bytes).
 */
void soak_result_pick(uint64_t *rng, size_t max_result, struct soak_result *r)
{
	uint64_t k = soak_below(rng, 100);

	r->seed = soak_rand(rng);
	r->status = CARMY_STATUS_COMPLETED + (int)soak_below(rng, 4);
	if (k < 5)
		r->len = 0;
	else if (k < 45)
		r->len = 1 + soak_below(rng, 64);
	else if (k < 70)
		r->len = soak_below(rng, max_result + 1);
	else if (k < 85)
		r->len = max_result - soak_below(rng, 17 < max_result ? 17 : 1);
	else if (k < 95)
		r->len = max_result;
	else
		r->len = max_result + 1 + soak_below(rng, 64);
}

void soak_result_bytes(const struct soak_result *r, uint8_t *buf)
{
	uint64_t st = r->seed;

	for (size_t i = 0; i < r->len; i += 8) {
		uint64_t w = soak_rand(&st);
		size_t n = r->len - i < 8 ? r->len - i : 8;

		memcpy(buf + i, &w, n);
	}
}

void soak_result_expect(const struct soak_result *r, size_t max_result,
			struct soak_expect *e)
{
	uint8_t *buf;

	if (r->len > max_result) {
		e->status = CARMY_STATUS_FAILED;
		e->code = CARMY_ERESULT_TOO_LARGE;
		e->len = 0;
		e->hash = soak_hash(NULL, 0);
		return;
	}
	buf = malloc(r->len + 1);
	if (buf == NULL)
		abort();
	soak_result_bytes(r, buf);
	e->status = r->status;
	e->code = 0;
	e->len = r->len;
	e->hash = soak_hash(buf, r->len);
	free(buf);
}

/* FNV-1a: the checker compares hashes, not bytes, to keep the logs small. */
uint64_t soak_hash(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

uint64_t soak_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t soak_below(uint64_t *state, uint64_t n)
{
	return soak_rand(state) % n;
}

void soak_write_line(int fd, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(line))
		abort();
	/* One write: with O_APPEND the line lands whole or, if a SIGKILL
	 * cuts it, as the last (unterminated) line of its file. */
	while (write(fd, line, (size_t)n) < 0 && errno == EINTR)
		;
}
