/*
 * retain.c - carmyd's watch over the table's room, on a thread of its own
 * so that neither the event loops nor a client's request ever wait for it.
 *
 * Retention (--retain AGE, a day by default): completed executions that
 * finished more than AGE ago are forgotten, each as an operator's purge
 * forgets one (forget.c: recorded by a durable store first, so a restart
 * does not bring it back). Running and uncertain executions never are:
 * those only their owner, a sweep or an operator settles. A pass comes
 * every AGE/10, at most a minute and at least a second apart, and
 * forgets at most RETAIN_PASS_MAX entries; one that reached it is followed
 * by another a second later.
 *
 * The capacity watch, every second: the table's fill (tickets in use over
 * capacity) is counted, a warning logged as it passes 80% and 95% (once
 * per crossing: each comes again only after the fill fell back below 75%
 * and 90%), and the first refusal for capacity after a quiet minute is
 * logged with what to do. Clients reserve and are refused in the segment,
 * out of carmyd's sight; they count refusals in its stats stripes, which
 * are read here. A look costs a read of every ticket word: 80 KB at the
 * default --capacity.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/age.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/thread.h"
#include "daemon/carmyd.h"

#define WATCH_NS (1000ull * 1000 * 1000)
#define PERIOD_MAX_NS (60 * WATCH_NS)
#define QUIET_NS (60 * WATCH_NS)	/* refusals logged again after */
#define RETAIN_PASS_MAX 10000u

static void *retain_thread(void *arg);
static bool pass(struct retain *r);
static void watch(struct retain *r);
static void watch_refusals(struct retain *r, uint64_t refused);
static void watch_fill(struct retain *r, uint32_t used);
static const char *retain_text(const struct retain *r, char *buf);

int retain_start(struct retain *r, struct store *s,
		 const struct carmyd_config *cfg)
{
	pthread_condattr_t ca;
	uint32_t used;
	int err;

	memset(r, 0, sizeof(*r));
	r->s = s;
	r->age_ns = cfg->retain_ns;
	r->period_ns = r->age_ns / 10;
	if (r->period_ns > PERIOD_MAX_NS)
		r->period_ns = PERIOD_MAX_NS;
	if (r->period_ns < WATCH_NS)
		r->period_ns = WATCH_NS;
	/* Refusals counted before we started are a past carmyd's. */
	store_fill(s, &used, &r->refused);
	pthread_mutex_init(&r->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->cond, &ca);
	pthread_condattr_destroy(&ca);
	err = pthread_create(&r->thread, NULL, retain_thread, r);
	if (err != 0) {
		log_error("cannot start the retention thread: %s",
			  strerror(err));
		pthread_cond_destroy(&r->cond);
		pthread_mutex_destroy(&r->lock);
		return -err;
	}
	r->started = true;
	return 0;
}

void retain_stop(struct retain *r)
{
	if (!r->started)
		return;
	pthread_mutex_lock(&r->lock);
	r->stop = true;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL);
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->lock);
	r->started = false;
}

/* Watch every second; pass when one is due. The first pass comes at once:
 * a store loaded at start may hold executions long past the age. */
static void *retain_thread(void *arg)
{
	struct retain *r = arg;
	uint64_t due = clock_mono_ns();

	thread_name("carmyd-retain");
	pthread_mutex_lock(&r->lock);
	while (!r->stop) {
		uint64_t now, wake;
		struct timespec ts;

		pthread_mutex_unlock(&r->lock);
		watch(r);
		now = clock_mono_ns();
		if (r->age_ns != 0 && now >= due)
			due = now + (pass(r) ? WATCH_NS : r->period_ns);
		wake = clock_mono_ns() + WATCH_NS;
		if (r->age_ns != 0 && due < wake)
			wake = due;
		ts.tv_sec = (time_t)(wake / 1000000000u);
		ts.tv_nsec = (long)(wake % 1000000000u);
		pthread_mutex_lock(&r->lock);
		while (!r->stop && pthread_cond_timedwait(&r->cond, &r->lock,
							  &ts) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

/*
 * The time a pass measures ages against: the wall clock (entries carry
 * wall-clock finish times, which outlive carmyd), held back by a step
 * forward (date -s, a first NTP sync on a machine that booted with a
 * wrong time) for --retain of boot time (clock_real_held()): a step would
 * otherwise make every completed entry old at once, and the pass forget
 * them all, so that their retries ran again. Entries are kept longer
 * instead, by at most the step. Suspend is no step: the boot clock counts
 * it.
 */
static uint64_t retention_now(struct retain *r)
{
	uint64_t stepped, now;

	now = clock_real_held(&r->clock, clock_real_ns(), clock_boot_ns(),
			      r->age_ns, &stepped);
	if (stepped != 0)
		log_warn("retention: the wall clock stepped %llu s forward: "
			 "for the next %s ages are counted as if it had not, "
			 "so that no completed entry is forgotten early",
			 (unsigned long long)(stepped / 1000000000ull),
			 "--retain");
	return now;
}

/* One retention pass. Returns whether it stopped at RETAIN_PASS_MAX with
 * more to forget. */
static bool pass(struct retain *r)
{
	uint64_t now = retention_now(r);
	struct store_forgot f;
	char age[AGE_TEXT_MAX];

	if (now <= r->age_ns)
		return false;
	if (store_forget_older(r->s, now - r->age_ns, RETAIN_PASS_MAX,
			       &f) != 0) {
		log_warn("retention: out of memory for a pass; the next one "
			 "tries again");
		return false;
	}
	if (f.forgotten > 0)
		log_info("retention forgot %zu completed entr%s older than %s",
			 f.forgotten, f.forgotten == 1 ? "y" : "ies",
			 retain_text(r, age));
	if (f.refused > 0)
		log_warn("retention: the store failed to record the purge of "
			 "%zu completed entr%s: kept, and tried again at the "
			 "next pass", f.refused, f.refused == 1 ? "y" : "ies");
	log_debug("retention pass: %zu forgotten, %zu refused by the "
		  "store%s", f.forgotten, f.refused,
		  f.more ? ", more to come" : "");
	/* A store that refuses is not asked again at once. */
	return f.more && f.refused == 0;
}

static void watch(struct retain *r)
{
	uint32_t used;
	uint64_t refused;

	store_fill(r->s, &used, &refused);
	/* Refusals first: a fill line logged below then follows them. */
	watch_refusals(r, refused);
	watch_fill(r, used);
}

/* Calls refused for capacity since the last look: the first after a quiet
 * minute is logged, with what to do. The counts are the clients' (any
 * of them may write over them): one that went down is taken as it is. */
static void watch_refusals(struct retain *r, uint64_t refused)
{
	uint64_t now = clock_mono_ns(), n = refused - r->refused;
	char age[AGE_TEXT_MAX];

	if (refused <= r->refused) {
		r->refused = refused;
		return;
	}
	r->refused = refused;
	if (r->refused_ns == 0 || now - r->refused_ns >= QUIET_NS)
		log_warn("%llu call%s refused: the table is full (capacity "
			 "%u); raise --capacity, set a shorter --retain (now "
			 "%s), or run carmyctl purge --older-than AGE",
			 (unsigned long long)n, n == 1 ? "" : "s",
			 r->s->view.geo.capacity, retain_text(r, age));
	r->refused_ns = now;
}

/* The fill passing 80% or 95% (once each, until it falls back below 75%
 * or 90%). */
static void watch_fill(struct retain *r, uint32_t used)
{
	static const unsigned warn_at[3] = { 0, 80, 95 };
	static const unsigned rearm_at[3] = { 0, 75, 90 };
	uint64_t cap = r->s->view.geo.capacity, pct100 = (uint64_t)used * 100;
	char age[AGE_TEXT_MAX];

	while (r->level < 2 && pct100 >= warn_at[r->level + 1] * cap) {
		r->level++;
		log_warn("the table is %llu%% full (%u of %llu entries in "
			 "use), past %u%%: at 100%% new calls are refused "
			 "(IDEMPOTENCY_CAPACITY); set a shorter --retain (now "
			 "%s), raise --capacity, or run carmyctl purge "
			 "--older-than AGE", (unsigned long long)(pct100 / cap),
			 used, (unsigned long long)cap, warn_at[r->level],
			 retain_text(r, age));
	}
	while (r->level > 0 && pct100 < rearm_at[r->level] * cap) {
		log_info("the table is %llu%% full (%u of %llu entries in "
			 "use), back below %u%%: the %u%% warning may come again",
			 (unsigned long long)(pct100 / cap), used,
			 (unsigned long long)cap, rearm_at[r->level],
			 warn_at[r->level]);
		r->level--;
	}
}

static const char *retain_text(const struct retain *r, char *buf)
{
	return r->age_ns == 0 ? "never" : age_format(buf, r->age_ns);
}
