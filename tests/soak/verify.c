/*
 * verify.c - the final pass: once every worker is dead and carmyd runs,
 * ask every identity with every variant what Carmy says now. The checker
 * holds these answers against the logs.
 */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "tests/harness.h"
#include "tests/soak/soak.h"

/* How long, from the start of a pass, entries of dead owners may still
 * show as running: carmyd learns of the deaths from the closed sockets,
 * asynchronously. One deadline for the pass, not one per entry: an entry
 * that stays running for good (a bug the checker reports) then costs one
 * question, not a wait each. */
#define SETTLE_MS 10000
/* How long one question may go on being answered STORE_FAILED (the
 * database back from a crash, the store not yet reconnected). */
#define STORE_MS 30000

/* One question of the pass: its call, and the log its attempts go to. */
struct question {
	int fd;
	unsigned id, var;
	struct carmy_call call;
};

static int ask(carmy_t *c, const struct question *q,
	       struct carmy_reservation *r, uint64_t settle);
static int verify_one(const struct soak_cfg *cfg, struct soak_space *sp,
		      unsigned inst);

int soak_verify(const struct soak_cfg *cfg, struct soak_space *sp)
{
	for (unsigned i = 0; i < cfg->ninst; i++)
		if (verify_one(cfg, sp, i) != 0)
			return -1;
	return 0;
}

static int verify_one(const struct soak_cfg *cfg, struct soak_space *sp,
		      unsigned inst)
{
	struct carmy_reservation r = CARMY_RESERVATION_INIT;
	char path[512];
	carmy_t *c = NULL;
	int fd, rc;

	if (inst == 0)
		snprintf(path, sizeof(path), "%s/final.log", cfg->dir);
	else
		snprintf(path, sizeof(path), "%s/final%u.log", cfg->dir, inst);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	rc = carmy_connect(&c, cfg->socket[inst]);
	if (rc != 0) {
		printf("# final pass: carmy_connect: %s\n", carmy_errname(rc));
		close(fd);
		return -1;
	}
	uint32_t used = __atomic_load_n(cfg->fresh, __ATOMIC_ACQUIRE);
	uint64_t settle = harness_now_ns() + SETTLE_MS * 1000000ull;

	if (used > cfg->max_ids)
		used = cfg->max_ids;
	for (unsigned id = 0; id < used; id++) {
		for (unsigned var = 0; var < SOAK_VARIANTS; var++) {
			struct question q = { .fd = fd, .id = id, .var = var };

			soak_space_call(sp, id, var, &q.call);
			rc = ask(c, &q, &r, settle);
			soak_write_line(fd,
				"F %u %u %d %d %s %d %d %zu %016llx\n",
				id, var, rc, r.state,
				r.execution_id[0] ? r.execution_id : "-",
				rc == CARMY_REPLAY ? r.status : 0,
				rc == CARMY_REPLAY ? r.result_code : 0,
				rc == CARMY_REPLAY ? r.result_len : 0,
				(unsigned long long)(rc == CARMY_REPLAY ?
					soak_hash(r.result, r.result_len) : 0));
			/* Free: nobody held it. Give it back so that the
			 * other variants see the same free identity. */
			if (rc == CARMY_RESERVED)
				carmy_release(c, &r);
		}
	}
	carmy_reservation_clear(&r);
	carmy_close(c);
	close(fd);
	return 0;
}

/* Begin, waiting (bounded) while the entry still shows a dead owner as
 * running, or the store (a database back from a crash) fails: its answer
 * then is the one to judge. Each attempt is logged, for a trace to show
 * when the pass asked and what it heard each time. */
static int ask(carmy_t *c, const struct question *q,
	       struct carmy_reservation *r, uint64_t settle)
{
	uint64_t store = harness_now_ns() + STORE_MS * 1000000ull;
	unsigned us = 10;

	for (;;) {
		int rc = carmy_begin(c, &q->call, r);
		uint64_t now = harness_now_ns();

		soak_write_line(q->fd, "Q %llu %u %u %d %d %s\n",
				(unsigned long long)now, q->id, q->var, rc,
				r->state,
				r->execution_id[0] ? r->execution_id : "-");

		if (!((rc == CARMY_EUNCERTAIN || rc == CARMY_ECONFLICT) &&
		      r->state == CARMY_STATE_RUNNING && now < settle) &&
		    !(rc == CARMY_ESTORE && now < store))
			return rc;
		usleep(us);
		if (us < 5000)
			us *= 2;
	}
}
