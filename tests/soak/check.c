/*
 * check.c - the soak's checker: from the effect log, the answer logs and
 * the final pass, prove that
 *
 *   once       no identity's effect happened twice, and no identity was
 *              reserved while another reservation of it was live;
 *   replay     every replay returned the execution id and the result of
 *              the one execution that happened;
 *   acked      every acknowledged completion replays afterwards (during
 *              the run, after the ack, and in the final pass);
 *   uncertain  every identity whose worker died (or disconnected) holding
 *              it answers EXECUTION_UNCERTAIN (interrupted) and never runs
 *              again, unless its completion landed, when it replays; one
 *              its worker abandoned (carmy_abandon) answers so from then
 *              on, and never replays;
 *   answers    no answer falls outside the contract (a conflict names the
 *              entry of the other fingerprint, no capacity refusal with
 *              room to spare, fail-closed answers only while carmyd was
 *              away, STORE_FAILED only where the store may fail...).
 *
 * With two carmyds on one database (--pg) each answer file names the
 * carmyd its worker called through, the final pass asks through both, and
 * an acknowledged completion must replay through both. Each violation is
 * also of a kind (soak.h), finer than its property: a trace of the first
 * identity of each kind (every line the logs hold about it, in time
 * order, each with the carmyd that answered) follows the run's violations,
 * for whoever has to find the bug.
 *
 * Pass 1 reads the answer logs for what was reserved, released, attempted
 * and acknowledged, then the effects and the final pass; pass 2 reads the
 * answer logs again and judges every other answer against that; the last
 * step judges each identity's final state. Only what a worker logged
 * counts as known: a reservation whose worker died before logging it is a
 * "phantom", and must be explained by a begin cut short by a kill.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/soak/soak.h"

#define SHOW_MAX 8		/* violations printed per property */
#define EXEC_SZ (CARMY_EXECUTION_ID_LEN + 1)
#define REL_UNKNOWN 1		/* no "l" line: the release may have happened */

const char *const soak_prop_names[SOAK_PROP_COUNT] = {
	"once", "replay", "acked", "uncertain", "answers",
};

const char *const soak_kind_names[SOAK_KIND_COUNT] = {
	"double", "split", "orphan", "wrong", "lost", "stale", "lagging",
	"uncertain", "answers",
};

const enum soak_prop soak_kind_prop[SOAK_KIND_COUNT] = {
	SOAK_ONCE, SOAK_ONCE, SOAK_ONCE, SOAK_REPLAY, SOAK_ACKED,
	SOAK_ACKED, SOAK_ACKED, SOAK_UNCERTAIN, SOAK_ANSWERS,
};

struct resv {			/* one RESERVED answer a worker logged */
	char exec[EXEC_SZ];
	unsigned var;
	uint64_t t0, t1;
	char where[32];
	unsigned inst;		/* the carmyd that reserved it */
	bool intent;		/* L: about to release, the tool did not run */
	int rel_rc;		/* l: what release returned, or REL_UNKNOWN */
	bool attempted;		/* A: the tool ran, complete was called */
	bool abandoned;		/* G: about to give it up as uncertain */
	int ab_rc;		/* g: what abandon returned, or REL_UNKNOWN */
	uint64_t ab_t1;		/* g: when it returned */
	bool completed;		/* C logged */
	int c_rc;
	uint64_t c_t1;
	int effect;		/* index in ident.ef, or -1 */
};

struct effect {
	char exec[EXEC_SZ];
	unsigned var;
	struct soak_result res;
	unsigned inc;
};

struct phantom {		/* an entry nobody logged reserving */
	char exec[EXEC_SZ];
	uint64_t first_seen;
};

struct answer {			/* one line of final.log */
	int rc, state, status, code;
	char exec[EXEC_SZ];
	size_t len;
	uint64_t hash;
};

struct ident {
	struct resv *rv;
	size_t nrv;
	struct effect *ef;
	size_t nef;
	struct phantom *ph;
	size_t nph;
	unsigned torn;		/* effect lines cut short by a kill */
	bool died_in_begin[SOAK_VARIANTS];
	bool begin_cut_off[SOAK_VARIANTS];	/* begin said DISCONNECTED */
	bool begin_store_failed[SOAK_VARIANTS];	/* begin said STORE_FAILED */
	struct answer fin[SOAK_MAX_INST][SOAK_VARIANTS];
	bool have_fin[SOAK_MAX_INST][SOAK_VARIANTS];
};

struct checker {
	const struct soak_cfg *cfg;
	struct ident *ids;
	struct soak_figures *f;
	char **files;
	size_t nfiles;
	int example[SOAK_KIND_COUNT];	/* identity to trace, or -1 */
	/* Judging the final pass through a second carmyd: what the logs
	 * alone say (an identity ran twice, was held twice) is counted once,
	 * in the first carmyd's judgement. */
	bool quiet_double;
};

/* The execution the final pass through carmyd inst found holding id, or
 * NULL if it found the identity free. */
static const char *final_exec(const struct ident *d, unsigned inst)
{
	for (unsigned v = 0; v < SOAK_VARIANTS; v++)
		if (d->have_fin[inst][v] &&
		    d->fin[inst][v].rc != CARMY_RESERVED)
			return d->fin[inst][v].exec;
	return NULL;
}

/* The reservation whose completion was acknowledged, or NULL. */
static const struct resv *acked_resv(const struct ident *d)
{
	for (size_t i = 0; i < d->nrv; i++)
		if (d->rv[i].completed && (d->rv[i].c_rc == 0 ||
		    d->rv[i].c_rc == CARMY_ERESULT_TOO_LARGE))
			return &d->rv[i];
	return NULL;
}

static int list_files(struct checker *ck);
static int read_answers(struct checker *ck, int pass);
static void pass1_line(struct checker *ck, const char *line, const char *where,
		       unsigned inst, int *cur_id, int *cur_rv, int pend[2]);
static void pass2_line(struct checker *ck, const char *line, const char *where,
		       unsigned inst);
static int read_effects(struct checker *ck);
static int read_final(struct checker *ck, unsigned inst);
static void judge_ident(struct checker *ck, unsigned id, unsigned inst);
static void trace(struct checker *ck, enum soak_kind k, unsigned id);
static struct resv *find_resv(struct ident *d, const char *exec);
static bool is_live(const struct resv *r);
static bool replay_matches(struct checker *ck, struct ident *d,
			   const struct resv *r, int status, int code,
			   size_t len, uint64_t hash, char *why, size_t n);
static void note_phantom(struct ident *d, const char *exec, uint64_t t);
static void violate(struct checker *ck, enum soak_kind k, unsigned id,
		    const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void *grow(void *p, size_t n, size_t size);

static unsigned used_ids(const struct soak_cfg *cfg)
{
	uint32_t n = __atomic_load_n(cfg->fresh, __ATOMIC_ACQUIRE);

	return n < cfg->max_ids ? n : cfg->max_ids;
}

int soak_check(const struct soak_cfg *cfg, struct soak_figures *f)
{
	struct checker ck = { .cfg = cfg, .f = f };
	int rc = -1;

	for (int k = 0; k < SOAK_KIND_COUNT; k++)
		ck.example[k] = -1;
	ck.ids = calloc(cfg->max_ids, sizeof(*ck.ids));
	if (ck.ids == NULL || list_files(&ck) != 0)
		goto out;
	if (read_answers(&ck, 1) != 0 || read_effects(&ck) != 0)
		goto out;
	for (unsigned i = 0; i < cfg->ninst; i++)
		if (read_final(&ck, i) != 0)
			goto out;
	if (read_answers(&ck, 2) != 0)
		goto out;
	/* Identities above *fresh were never used. */
	for (unsigned id = 0; id < used_ids(cfg); id++) {
		const struct ident *d = &ck.ids[id];
		const char *e0 = final_exec(d, 0), *e1;
		bool split = false;

		/* Two carmyds naming different executions, none of them
		 * acknowledged (an acknowledged one not replaying is judged
		 * lost or stale, below). */
		if (cfg->ninst > 1 && acked_resv(d) == NULL) {
			e1 = final_exec(d, 1);
			split = (e0 == NULL) != (e1 == NULL) ||
				(e0 != NULL && strcmp(e0, e1) != 0);
			if (split)
				violate(&ck, SOAK_K_SPLIT, id, "identity %u: "
					"carmyd 0 finds %s, carmyd 1 finds %s",
					id, e0 ? e0 : "it free",
					e1 ? e1 : "it free");
		}
		for (unsigned i = 0; i < cfg->ninst; i++) {
			ck.quiet_double = i > 0 || split;
			judge_ident(&ck, id, i);
		}
	}
	ck.quiet_double = false;
	for (int k = 0; k < SOAK_KIND_COUNT; k++)
		if (ck.example[k] >= 0)
			trace(&ck, (enum soak_kind)k, (unsigned)ck.example[k]);
	rc = 0;
out:
	for (unsigned id = 0; ck.ids != NULL && id < cfg->max_ids; id++) {
		free(ck.ids[id].rv);
		free(ck.ids[id].ef);
		free(ck.ids[id].ph);
	}
	free(ck.ids);
	for (size_t i = 0; i < ck.nfiles; i++)
		free(ck.files[i]);
	free(ck.files);
	return rc;
}

/* ------------------------------------------------------------ reading */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list_files(struct checker *ck)
{
	char path[512];
	struct dirent *e;
	DIR *dir;

	snprintf(path, sizeof(path), "%s/answers", ck->cfg->dir);
	dir = opendir(path);
	if (dir == NULL)
		return -1;
	while ((e = readdir(dir)) != NULL) {
		if (e->d_name[0] != 'a')
			continue;
		ck->files = grow(ck->files, ck->nfiles + 1, sizeof(char *));
		ck->files[ck->nfiles] = strdup(e->d_name);
		if (ck->files[ck->nfiles++] == NULL)
			abort();
	}
	closedir(dir);
	qsort(ck->files, ck->nfiles, sizeof(char *), cmp_str);
	return 0;
}

static int read_answers(struct checker *ck, int pass)
{
	char path[600], where[32], *line = NULL;
	size_t cap = 0;

	for (size_t i = 0; i < ck->nfiles; i++) {
		int cur_id = -1, cur_rv = -1, pend[2] = { -1, -1 };
		unsigned no = 0, inst = 0;
		ssize_t n;
		FILE *fp;

		snprintf(path, sizeof(path), "%s/answers/%s", ck->cfg->dir,
			 ck->files[i]);
		fp = fopen(path, "r");
		if (fp == NULL) {
			free(line);
			return -1;
		}
		while ((n = getline(&line, &cap, fp)) > 0) {
			no++;
			/* An unterminated line was cut by the kill. */
			if (line[n - 1] != '\n')
				break;
			snprintf(where, sizeof(where), "%.12s:%u",
				 ck->files[i], no);
			if (line[0] == 'I') {
				if (sscanf(line, "I %u", &inst) != 1 ||
				    inst >= ck->cfg->ninst)
					inst = 0;
			} else if (pass == 1) {
				pass1_line(ck, line, where, inst, &cur_id,
					   &cur_rv, pend);
			} else {
				pass2_line(ck, line, where, inst);
			}
		}
		fclose(fp);
		/* The worker died between logging "b" and logging the
		 * answer: that begin may have reserved without telling. */
		if (pass == 1 && pend[0] >= 0)
			ck->ids[pend[0]].died_in_begin[pend[1]] = true;
	}
	free(line);
	return 0;
}

static void pass1_line(struct checker *ck, const char *line, const char *where,
		       unsigned inst, int *cur_id, int *cur_rv, int pend[2])
{
	unsigned long long t0, t1;
	char exec[EXEC_SZ];
	unsigned id, var;
	int rc, state;
	struct resv *r;
	struct ident *d;

	switch (line[0]) {
	case 'b':
		if (sscanf(line, "b %llu %u %u", &t0, &id, &var) == 3 &&
		    id < ck->cfg->max_ids && var < SOAK_VARIANTS) {
			pend[0] = (int)id;
			pend[1] = (int)var;
		}
		return;
	case 'B':
		if (sscanf(line, "B %llu %llu %u %u %d %d %37s", &t0, &t1, &id,
			   &var, &rc, &state, exec) != 7 ||
		    id >= ck->cfg->max_ids || var >= SOAK_VARIANTS) {
			violate(ck, SOAK_K_ANSWERS, 0, "%s: unreadable line",
				where);
			return;
		}
		pend[0] = -1;
		d = &ck->ids[id];
		if (rc == CARMY_EDISCONNECTED || rc == CARMY_EUNAVAILABLE)
			d->begin_cut_off[var] = true;
		if (rc == CARMY_ESTORE)
			d->begin_store_failed[var] = true;
		if (rc != CARMY_RESERVED)
			return;
		d->rv = grow(d->rv, d->nrv + 1, sizeof(*d->rv));
		r = &d->rv[d->nrv];
		memset(r, 0, sizeof(*r));
		snprintf(r->exec, sizeof(r->exec), "%s", exec);
		r->var = var;
		r->inst = inst;
		r->t0 = t0;
		r->t1 = t1;
		r->rel_rc = REL_UNKNOWN;
		r->ab_rc = REL_UNKNOWN;
		r->effect = -1;
		snprintf(r->where, sizeof(r->where), "%s", where);
		*cur_id = (int)id;
		*cur_rv = (int)d->nrv++;
		return;
	case 'L':
	case 'l':
	case 'A':
	case 'C':
	case 'G':
	case 'g':
		break;
	default:
		return;
	}
	/* These follow the reservation they are about, in the same file. */
	if (*cur_id < 0) {
		violate(ck, SOAK_K_ANSWERS, 0, "%s: no reservation before it",
			where);
		return;
	}
	r = &ck->ids[*cur_id].rv[*cur_rv];
	if (line[0] == 'L') {
		r->intent = true;
	} else if (line[0] == 'l') {
		if (sscanf(line, "l %llu %u %37s %d", &t0, &id, exec, &rc) != 4)
			return;
		r->rel_rc = rc;
		if (rc != 0 && !ck->cfg->carmyd_kills)
			violate(ck, SOAK_K_ANSWERS, (unsigned)*cur_id,
				"%s: release of %s failed: %s", where, r->exec,
				carmy_errname(rc));
	} else if (line[0] == 'A') {
		r->attempted = true;
	} else if (line[0] == 'G') {
		r->abandoned = true;
	} else if (line[0] == 'g') {
		if (sscanf(line, "g %llu %u %37s %d", &t0, &id, exec, &rc) != 4)
			return;
		r->ab_rc = rc;
		r->ab_t1 = t0;
		if (rc != 0 && !ck->cfg->carmyd_kills)
			violate(ck, SOAK_K_ANSWERS, (unsigned)*cur_id,
				"%s: abandon of %s failed: %s", where, r->exec,
				carmy_errname(rc));
	} else if (sscanf(line, "C %llu %llu %u %37s %d", &t0, &t1, &id, exec,
			  &rc) == 5) {
		r->completed = true;
		r->c_rc = rc;
		r->c_t1 = t1;
	}
}

static int read_effects(struct checker *ck)
{
	char path[512], *line = NULL;
	unsigned long long t, seed;
	size_t cap = 0, len;
	unsigned id, var, inc;
	char exec[EXEC_SZ];
	int status;
	ssize_t n;
	FILE *fp;

	snprintf(path, sizeof(path), "%s/effects.log", ck->cfg->dir);
	fp = fopen(path, "r");
	if (fp == NULL)
		return -1;
	while ((n = getline(&line, &cap, fp)) > 0) {
		struct ident *d;
		struct effect *e;
		struct resv *r;

		if (line[0] == '\n')
			continue;
		if (sscanf(line, "E %llu %u %u %37s %llu %d %zu %u", &t, &id,
			   &var, exec, &seed, &status, &len, &inc) != 8 ||
		    id >= ck->cfg->max_ids || var >= SOAK_VARIANTS) {
			/* Torn by a kill mid-write: that tool was running
			 * when it died, and no completion can follow. It
			 * still counts as the identity's effect if it got as
			 * far as naming it. */
			printf("# effects.log: torn line: %.60s\n", line);
			/* (var read too: only then was id whole) */
			if (sscanf(line, "E %llu %u %u", &t, &id, &var) == 3 &&
			    id < ck->cfg->max_ids &&
			    ck->ids[id].torn++ + ck->ids[id].nef > 0)
				violate(ck, SOAK_K_DOUBLE, id, "identity %u "
					"ran twice (one effect line torn)", id);
			continue;
		}
		ck->f->effects++;
		d = &ck->ids[id];
		d->ef = grow(d->ef, d->nef + 1, sizeof(*d->ef));
		e = &d->ef[d->nef++];
		snprintf(e->exec, sizeof(e->exec), "%s", exec);
		e->var = var;
		e->res.seed = seed;
		e->res.status = status;
		e->res.len = len;
		e->inc = inc;
		if (d->nef + d->torn > 1)
			violate(ck, SOAK_K_DOUBLE, id,
				"identity %u ran twice: %s (worker %u) and %s "
				"(worker %u)", id, d->ef[0].exec, d->ef[0].inc,
				exec, inc);
		r = find_resv(d, exec);
		if (r == NULL || r->var != var) {
			violate(ck, SOAK_K_DOUBLE, id, "identity %u: effect "
				"of %s, which no worker reserved with variant "
				"%u", id, exec, var);
			continue;
		}
		if (r->intent)
			violate(ck, SOAK_K_DOUBLE, id, "identity %u: effect "
				"of %s, which its worker released (%s)", id,
				exec, r->where);
		r->effect = (int)(d->nef - 1);
	}
	free(line);
	fclose(fp);
	return 0;
}

/* The final pass's log through carmyd inst. */
static void final_path(const struct checker *ck, unsigned inst, char *path,
		       size_t size)
{
	if (inst == 0)
		snprintf(path, size, "%s/final.log", ck->cfg->dir);
	else
		snprintf(path, size, "%s/final%u.log", ck->cfg->dir, inst);
}

static int read_final(struct checker *ck, unsigned inst)
{
	char path[512], *line = NULL;
	unsigned id, var;
	size_t cap = 0;
	FILE *fp;

	final_path(ck, inst, path, sizeof(path));
	fp = fopen(path, "r");
	if (fp == NULL)
		return -1;
	while (getline(&line, &cap, fp) > 0) {
		struct answer a;
		unsigned long long h;

		if (sscanf(line, "F %u %u %d %d %37s %d %d %zu %llx", &id, &var,
			   &a.rc, &a.state, a.exec, &a.status, &a.code, &a.len,
			   &h) != 9 || id >= ck->cfg->max_ids ||
		    var >= SOAK_VARIANTS)
			continue;
		a.hash = h;
		ck->ids[id].fin[inst][var] = a;
		ck->ids[id].have_fin[inst][var] = true;
	}
	free(line);
	fclose(fp);
	return 0;
}

/* ------------------------------------------------------------ answers */

static void pass2_line(struct checker *ck, const char *line, const char *where,
		       unsigned inst)
{
	unsigned long long t0, t1, h;
	int rc, state, status, code;
	char exec[EXEC_SZ], why[160];
	unsigned id, var;
	struct resv *r, *acked = NULL;
	struct ident *d;
	size_t len;

	if (line[0] == 'D')
		ck->f->disconnects++;
	if (line[0] == 'L')
		ck->f->releases++;
	if (line[0] == 'G')
		ck->f->abandons++;
	if (line[0] == 'C' && sscanf(line, "C %llu %llu %u %37s %d", &t0, &t1,
				     &id, exec, &rc) == 5) {
		r = id < ck->cfg->max_ids ? find_resv(&ck->ids[id], exec) :
					    NULL;
		if (rc == 0 || rc == CARMY_ERESULT_TOO_LARGE)
			ck->f->acked++;
		else if (rc == CARMY_ESTORE && ck->cfg->store_faults)
			ck->f->store_failed++;
		else if (!ck->cfg->carmyd_kills)
			violate(ck, SOAK_K_ANSWERS, id, "%s: complete of %s "
				"with carmyd up: %s", where, exec,
				carmy_errname(rc));
		if (r != NULL && r->effect >= 0 &&
		    (rc == 0 || rc == CARMY_ERESULT_TOO_LARGE) &&
		    (rc != 0) != (ck->ids[id].ef[r->effect].res.len >
				  ck->cfg->max_result))
			violate(ck, SOAK_K_ANSWERS, id, "%s: complete of %s "
				"with %zu bytes (max %zu) returned %s", where,
				exec,
				ck->ids[id].ef[r->effect].res.len,
				ck->cfg->max_result, carmy_errname(rc));
		return;
	}
	if (line[0] != 'B')
		return;
	if (sscanf(line, "B %llu %llu %u %u %d %d %37s %d %d %zu %llx", &t0,
		   &t1, &id, &var, &rc, &state, exec, &status, &code, &len,
		   &h) != 11 || id >= ck->cfg->max_ids || var >= SOAK_VARIANTS)
		return;		/* reported in pass 1 */
	d = &ck->ids[id];
	ck->f->calls++;
	r = find_resv(d, exec);
	for (size_t i = 0; i < d->nrv; i++)
		if (d->rv[i].completed && (d->rv[i].c_rc == 0 ||
		    d->rv[i].c_rc == CARMY_ERESULT_TOO_LARGE))
			acked = &d->rv[i];

	switch (rc) {
	case CARMY_RESERVED:
		ck->f->reserved++;
		break;
	case CARMY_REPLAY:
		ck->f->replays++;
		if (r == NULL || r->var != var) {
			violate(ck, SOAK_K_WRONG, id, "%s: identity %u "
				"variant %u replayed %s, which no worker "
				"reserved with it", where, id, var, exec);
			break;
		}
		if (!replay_matches(ck, d, r, status, code, len, h, why,
				    sizeof(why)))
			violate(ck, SOAK_K_WRONG, id, "%s: identity %u "
				"replayed %s (reserved %s): %s", where, id,
				exec, r->where, why);
		break;
	case CARMY_ECONFLICT:
	case CARMY_EUNCERTAIN:
		if (rc == CARMY_ECONFLICT)
			ck->f->conflicts++;
		else
			ck->f->uncertain++;
		if (r == NULL) {
			note_phantom(d, exec, t1);
			break;
		}
		if ((rc == CARMY_ECONFLICT) != (r->var != var))
			violate(ck, SOAK_K_ANSWERS, id, "%s: identity %u "
				"variant %u got %s about %s, reserved with "
				"variant %u (%s)",
				where, id, var, carmy_errname(rc), exec, r->var,
				r->where);
		/* Abandoned before this begin: interrupted, but through
		 * another carmyd of a shared store, which may know it only
		 * as running (its row says so). */
		if (rc == CARMY_EUNCERTAIN && r->ab_rc == 0 &&
		    t0 > r->ab_t1 && state != CARMY_STATE_INTERRUPTED &&
		    !(inst != r->inst && state == CARMY_STATE_RUNNING))
			violate(ck, SOAK_K_UNCERTAIN, id, "%s: identity %u: "
				"%s, abandoned (%s), answers %s", where, id,
				exec, r->where, carmy_state_name(state));
		if (state == CARMY_STATE_COMPLETED &&
		    (r->effect < 0 || !r->attempted))
			violate(ck, SOAK_K_WRONG, id, "%s: identity %u: %s is "
				"completed, but its tool never finished (%s)",
				where, id, exec, r->where);
		break;
	case CARMY_ECAPACITY:
		ck->f->capacity++;
		/* Each identity holds at most one entry, each worker at most
		 * one ticket more while it claims. */
		if (ck->cfg->capacity >= ck->cfg->max_ids + ck->cfg->nworkers)
			violate(ck, SOAK_K_ANSWERS, id, "%s: identity %u "
				"refused for capacity with %u entries for %u "
				"identities", where, id, ck->cfg->capacity,
				used_ids(ck->cfg));
		break;
	case CARMY_EUNAVAILABLE:
	case CARMY_EDISCONNECTED:
		ck->f->unavailable++;
		if (!ck->cfg->carmyd_kills)
			violate(ck, SOAK_K_ANSWERS, id, "%s: %s with carmyd "
				"up", where, carmy_errname(rc));
		break;
	case CARMY_ESTORE:
		ck->f->store_failed++;
		if (!ck->cfg->store_faults)
			violate(ck, SOAK_K_ANSWERS, id, "%s: %s with a store "
				"that cannot fail", where, carmy_errname(rc));
		break;
	default:
		violate(ck, SOAK_K_ANSWERS, id, "%s: identity %u: unexpected "
			"%s", where, id, carmy_errname(rc));
		break;
	}

	/* After an acknowledged completion, the identity replays: nothing
	 * else but a fail-closed answer while carmyd is away. */
	if (acked != NULL && t0 > acked->c_t1) {
		bool ok = (rc == CARMY_REPLAY && var == acked->var &&
			   strcmp(exec, acked->exec) == 0) ||
			  (rc == CARMY_ECONFLICT && var != acked->var &&
			   state == CARMY_STATE_COMPLETED &&
			   strcmp(exec, acked->exec) == 0) ||
			  (ck->cfg->carmyd_kills &&
			   (rc == CARMY_EUNAVAILABLE ||
			    rc == CARMY_EDISCONNECTED)) ||
			  (ck->cfg->store_faults && rc == CARMY_ESTORE);

		if (!ok)
			violate(ck, inst == acked->inst ? SOAK_K_LOST :
				SOAK_K_LAGGING, id, "%s: identity %u variant "
				"%u answered %s (%s, %s) through carmyd %u, "
				"%.1f ms after %s was acknowledged (%s, carmyd "
				"%u)", where, id, var, carmy_errname(rc),
				carmy_state_name(state), exec, inst,
				(double)(t0 - acked->c_t1) / 1e6, acked->exec,
				acked->where, acked->inst);
	}
}

/* ------------------------------------------------------------ identities */

static void judge_ident(struct checker *ck, unsigned id, unsigned inst)
{
	struct ident *d = &ck->ids[id];
	const struct answer *same = NULL;
	const char *fexec = NULL;
	struct resv *live = NULL, *fr;
	const struct resv *ack;
	unsigned fvar = 0;
	char why[160];

	for (size_t i = 0; i < d->nrv; i++) {
		if (!is_live(&d->rv[i]))
			continue;
		if (live != NULL)
			violate(ck, SOAK_K_DOUBLE, id, "identity %u reserved "
				"twice: %s (%s) and %s (%s), neither released",
				id, live->exec, live->where, d->rv[i].exec,
				d->rv[i].where);
		live = &d->rv[i];
	}

	/* What the final pass found: one entry (all variants agree on its
	 * execution id, one of them is its own), or none. */
	for (unsigned v = 0; v < SOAK_VARIANTS; v++) {
		const struct answer *a = &d->fin[inst][v];

		if (!d->have_fin[inst][v]) {
			violate(ck, SOAK_K_ANSWERS, id, "identity %u variant "
				"%u: no final answer", id, v);
			return;
		}
		if (a->rc == CARMY_RESERVED)
			continue;
		if (a->rc != CARMY_REPLAY && a->rc != CARMY_EUNCERTAIN &&
		    a->rc != CARMY_ECONFLICT) {
			violate(ck, SOAK_K_ANSWERS, id, "identity %u variant "
				"%u: final answer %s", id, v,
				carmy_errname(a->rc));
			return;
		}
		if (fexec != NULL && strcmp(fexec, a->exec) != 0) {
			violate(ck, SOAK_K_ANSWERS, id, "identity %u: final "
				"answers name both %s and %s", id, fexec,
				a->exec);
			return;
		}
		fexec = a->exec;
		if (a->rc != CARMY_ECONFLICT) {
			if (same != NULL)
				violate(ck, SOAK_K_ANSWERS, id, "identity %u: "
					"two variants match entry %s", id,
					fexec);
			same = a;
			fvar = v;
		}
	}
	for (unsigned v = 0; fexec != NULL && v < SOAK_VARIANTS; v++)
		if (d->fin[inst][v].rc == CARMY_RESERVED)
			violate(ck, SOAK_K_ANSWERS, id, "identity %u: final "
				"pass both reserved it and found %s", id,
				fexec);
	if (fexec != NULL && same == NULL) {
		violate(ck, SOAK_K_ANSWERS, id, "identity %u: entry %s "
			"conflicts with every variant", id, fexec);
		return;
	}

	/* An acknowledged completion replays, through every carmyd. */
	ack = acked_resv(d);
	if (ack != NULL && (fexec == NULL || same->rc != CARMY_REPLAY ||
			    strcmp(fexec, ack->exec) != 0)) {
		violate(ck, inst == ack->inst ? SOAK_K_LOST : SOAK_K_STALE, id,
			"identity %u: %s was acknowledged (%s, carmyd %u), the "
			"final pass through carmyd %u got %s (%s, %s)", id,
			ack->exec, ack->where, ack->inst, inst,
			fexec ? carmy_errname(same->rc) : "it free",
			fexec ? carmy_state_name(same->state) : "-",
			fexec ? fexec : "-");
		return;
	}

	if (fexec == NULL) {
		/* Free now: nobody may have been holding it. */
		if (live != NULL)
			violate(ck, SOAK_K_UNCERTAIN, id, "identity %u: %s "
				"(%s) was never released, yet the identity is "
				"free again (it would run twice)", id,
				live->exec, live->where);
		return;
	}

	fr = find_resv(d, fexec);
	if (fr == NULL) {
		/* A phantom: reserved by a worker killed before it could
		 * log the answer, or withdrawn by one cut off mid-begin. */
		const struct phantom *p = NULL;

		for (size_t i = 0; i < d->nph; i++)
			if (strcmp(d->ph[i].exec, fexec) == 0)
				p = &d->ph[i];
		if (!d->died_in_begin[fvar] && !d->begin_cut_off[fvar] &&
		    d->begin_store_failed[fvar])
			violate(ck, SOAK_K_ORPHAN, id, "identity %u: entry %s "
				"(variant %u) was reserved by no begin the "
				"logs know of, but begins answered "
				"STORE_FAILED", id, fexec, fvar);
		else if (!d->died_in_begin[fvar] && !d->begin_cut_off[fvar])
			violate(ck, SOAK_K_DOUBLE, id, "identity %u: entry %s "
				"(variant %u) was reserved by no begin the "
				"logs know of", id, fexec, fvar);
		if (live != NULL)
			violate(ck, SOAK_K_DOUBLE, id, "identity %u: entry %s "
				"holds it, yet %s (%s) was reserved and never "
				"released", id, fexec, live->exec, live->where);
		for (size_t i = 0; p != NULL && i < d->nrv; i++)
			if (d->rv[i].t0 > p->first_seen)
				violate(ck, SOAK_K_DOUBLE, id, "identity %u "
					"reserved again as %s (%s) while %s "
					"held it", id, d->rv[i].exec,
					d->rv[i].where, fexec);
		if (same->rc != CARMY_EUNCERTAIN ||
		    (same->state != CARMY_STATE_INTERRUPTED &&
		     !(ck->cfg->ninst > 1 &&
		       same->state == CARMY_STATE_RUNNING)))
			violate(ck, SOAK_K_UNCERTAIN, id, "identity %u: entry "
				"%s of a dead begin answers %s (%s)", id,
				fexec, carmy_errname(same->rc),
				carmy_state_name(same->state));
		else
			ck->f->interrupted_final++;
		return;
	}

	/* Killed between announcing a release and making it: the entry
	 * stayed, uncertain, which is as good as live. So is a release the
	 * journal never heard of (STORE_FAILED), once a reboot brought the
	 * execution back from the journal. */
	if (fr != live && live == NULL && fr->intent &&
	    (fr->rel_rc == REL_UNKNOWN || fr->rel_rc == CARMY_ESTORE))
		live = fr;
	if (fr != live) {
		if (live != NULL)
			violate(ck, SOAK_K_DOUBLE, id, "identity %u: entry %s "
				"(%s) answers %s, yet %s (%s) was reserved "
				"after it", id, fexec, fr->where,
				carmy_errname(same->rc), live->exec,
				live->where);
		else
			violate(ck, SOAK_K_DOUBLE, id, "identity %u: entry %s "
				"(%s) answers %s, yet it was released", id,
				fexec, fr->where, carmy_errname(same->rc));
		return;
	}
	if (fvar != fr->var)
		violate(ck, SOAK_K_ANSWERS, id, "identity %u: entry %s "
			"answers its own to variant %u, reserved with %u", id,
			fexec, fvar, fr->var);
	for (size_t i = 0; i < d->nrv; i++)
		if (&d->rv[i] != fr && d->rv[i].t0 > fr->t1)
			violate(ck, SOAK_K_DOUBLE, id, "identity %u reserved "
				"again as %s (%s) after %s (%s), which holds "
				"it", id, d->rv[i].exec, d->rv[i].where, fexec,
				fr->where);

	if (same->rc == CARMY_REPLAY) {
		if (!replay_matches(ck, d, fr, same->status, same->code,
				    same->len, same->hash, why, sizeof(why)))
			violate(ck, SOAK_K_WRONG, id, "identity %u: final "
				"replay of %s (%s): %s", id, fexec, fr->where,
				why);
		return;
	}
	/* Not replayable: it must be uncertain, and that is only right if
	 * no completion was acknowledged. */
	if (fr->completed && (fr->c_rc == 0 ||
			      fr->c_rc == CARMY_ERESULT_TOO_LARGE)) {
		violate(ck, inst == fr->inst ? SOAK_K_LOST : SOAK_K_STALE, id,
			"identity %u: %s was acknowledged (%s, carmyd %u), the "
			"final pass through carmyd %u got %s (%s)", id, fexec,
			fr->where, fr->inst, inst, carmy_errname(same->rc),
			carmy_state_name(same->state));
		return;
	}
	if (same->rc != CARMY_EUNCERTAIN ||
	    (same->state != CARMY_STATE_INTERRUPTED &&
	     !(fr->inst != inst && same->state == CARMY_STATE_RUNNING)))
		violate(ck, SOAK_K_UNCERTAIN, id, "identity %u: %s (%s), whose "
			"worker is gone, answers %s (%s)", id, fexec, fr->where,
			carmy_errname(same->rc), carmy_state_name(same->state));
	else
		ck->f->interrupted_final++;
}

/* ------------------------------------------------------------ helpers */

static struct resv *find_resv(struct ident *d, const char *exec)
{
	for (size_t i = 0; i < d->nrv; i++)
		if (strcmp(d->rv[i].exec, exec) == 0)
			return &d->rv[i];
	return NULL;
}

/* A reservation given back cannot hold the identity; one whose release
 * was not confirmed may have been given back too, and STORE_FAILED says it
 * was given back on this host (only the journal missed it), so only
 * another failed release keeps it live. */
static bool is_live(const struct resv *r)
{
	return !r->intent || (r->rel_rc != 0 && r->rel_rc != REL_UNKNOWN &&
			      r->rel_rc != CARMY_ESTORE);
}

/* Is what a replay showed the one execution's result? It needs the tool
 * to have run (an effect) and its worker to have called complete. */
static bool replay_matches(struct checker *ck, struct ident *d,
			   const struct resv *r, int status, int code,
			   size_t len, uint64_t hash, char *why, size_t n)
{
	struct soak_expect e;

	if (r->effect < 0) {
		snprintf(why, n, "its tool never ran (no effect)");
		return false;
	}
	if (!r->attempted) {
		snprintf(why, n, "its worker never called complete");
		return false;
	}
	soak_result_expect(&d->ef[r->effect].res, ck->cfg->max_result, &e);
	if (e.status == status && e.code == code && e.len == len &&
	    e.hash == hash)
		return true;
	snprintf(why, n, "got %s/%s/%zu bytes/%016llx, the tool made "
		 "%s/%s/%zu bytes/%016llx", carmy_status_name(status),
		 carmy_errname(code), len, (unsigned long long)hash,
		 carmy_status_name(e.status), carmy_errname(e.code), e.len,
		 (unsigned long long)e.hash);
	return false;
}

static void note_phantom(struct ident *d, const char *exec, uint64_t t)
{
	for (size_t i = 0; i < d->nph; i++) {
		if (strcmp(d->ph[i].exec, exec) == 0) {
			if (t < d->ph[i].first_seen)
				d->ph[i].first_seen = t;
			return;
		}
	}
	d->ph = grow(d->ph, d->nph + 1, sizeof(*d->ph));
	snprintf(d->ph[d->nph].exec, EXEC_SZ, "%s", exec);
	d->ph[d->nph++].first_seen = t;
}

static void violate(struct checker *ck, enum soak_kind k, unsigned id,
		    const char *fmt, ...)
{
	enum soak_prop p = soak_kind_prop[k];
	va_list ap;

	if (ck->quiet_double &&
	    (k == SOAK_K_DOUBLE || k == SOAK_K_ORPHAN))
		return;
	ck->f->violations[p]++;
	if (ck->example[k] < 0 && ck->f->kinds[k] == 0)
		ck->example[k] = (int)id;
	if (ck->f->kinds[k]++ >= SHOW_MAX)
		return;
	printf("# VIOLATION %s/%s%s: ", soak_prop_names[p], soak_kind_names[k],
	       ck->cfg->todo & (1u << k) ? " (todo)" : "");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

int soak_kinds_parse(const char *list, unsigned *mask)
{
	const char *p = list;

	*mask = 0;
	while (*p != '\0') {
		size_t n = strcspn(p, ",");
		int k;

		for (k = 0; k < SOAK_KIND_COUNT; k++)
			if (strlen(soak_kind_names[k]) == n &&
			    strncmp(p, soak_kind_names[k], n) == 0)
				break;
		if (k == SOAK_KIND_COUNT)
			return -1;
		*mask |= 1u << k;
		p += n;
		if (*p == ',')
			p++;
	}
	return 0;
}

uint64_t soak_hard_violations(const struct soak_figures *f, unsigned todo)
{
	uint64_t n = 0;

	for (int k = 0; k < SOAK_KIND_COUNT; k++)
		if (!(todo & (1u << k)))
			n += f->kinds[k];
	return n;
}

/* One line of the logs about an identity, for a trace. */
struct tline {
	uint64_t t;
	char text[200];
};

static int cmp_tline(const void *a, const void *b)
{
	const struct tline *x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

static void add_tline(struct tline **v, size_t *n, uint64_t t,
		      const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void add_tline(struct tline **v, size_t *n, uint64_t t,
		      const char *fmt, ...)
{
	va_list ap;

	*v = grow(*v, *n + 1, sizeof(**v));
	(*v)[*n].t = t;
	va_start(ap, fmt);
	vsnprintf((*v)[*n].text, sizeof((*v)[*n].text), fmt, ap);
	va_end(ap);
	(*n)++;
}

/* Add line (of answer file file, calling through carmyd inst) to v if it
 * is about identity id. */
static void trace_line(const char *file, unsigned inst, const char *line,
		       unsigned id, struct tline **v, size_t *n)
{
	unsigned long long t0, t1;
	char exec[EXEC_SZ];
	unsigned lid, var;
	int rc, state;

	if (line[0] == 'b' &&
	    sscanf(line, "b %llu %u %u", &t0, &lid, &var) == 3 && lid == id)
		add_tline(v, n, t0, "%.8s carmyd %u: begin var %u called", file,
			  inst, var);
	else if (line[0] == 'B' &&
	    sscanf(line, "B %llu %llu %u %u %d %d %37s", &t0, &t1, &lid, &var,
		   &rc, &state, exec) == 7 && lid == id)
		add_tline(v, n, t0, "%.8s carmyd %u: begin var %u -> %s (%s, "
			  "%s) in %.2f ms", file, inst, var, carmy_errname(rc),
			  carmy_state_name(state), exec,
			  (double)(t1 - t0) / 1e6);
	else if (line[0] == 'C' &&
		 sscanf(line, "C %llu %llu %u %37s %d", &t0, &t1, &lid, exec,
			&rc) == 5 && lid == id)
		add_tline(v, n, t1, "%.8s carmyd %u: complete %s -> %s", file,
			  inst, exec, carmy_errname(rc));
	else if ((line[0] == 'L' || line[0] == 'l' || line[0] == 'A' ||
		  line[0] == 'G' || line[0] == 'g') &&
		 sscanf(line + 1, " %llu %u", &t0, &lid) == 2 && lid == id)
		add_tline(v, n, t0, "%.8s carmyd %u: %s", file, inst, line);
}

/*
 * Print every line the logs hold about identity id, in time order: each
 * worker's lines (with the carmyd it called through), the effects, and
 * the final passes' questions (each carmy_begin() they made, retries
 * included) and answers. Answer codes are named.
 */
static void trace(struct checker *ck, enum soak_kind k, unsigned id)
{
	char path[600], *line = NULL;
	unsigned long long t0;
	unsigned lid, inst;
	struct tline *v = NULL;
	size_t cap = 0, n = 0;
	FILE *fp;

	for (size_t i = 0; i < ck->nfiles; i++) {
		snprintf(path, sizeof(path), "%s/answers/%s", ck->cfg->dir,
			 ck->files[i]);
		fp = fopen(path, "r");
		if (fp == NULL)
			continue;
		inst = 0;
		while (getline(&line, &cap, fp) > 0) {
			line[strcspn(line, "\n")] = '\0';
			if (sscanf(line, "I %u", &inst) == 1)
				continue;
			trace_line(ck->files[i], inst, line, id, &v, &n);
		}
		fclose(fp);
	}
	snprintf(path, sizeof(path), "%s/effects.log", ck->cfg->dir);
	fp = fopen(path, "r");
	while (fp != NULL && getline(&line, &cap, fp) > 0) {
		line[strcspn(line, "\n")] = '\0';
		if (sscanf(line, "E %llu %u", &t0, &lid) == 2 && lid == id)
			add_tline(&v, &n, t0, "effect: %s", line);
	}
	if (fp != NULL)
		fclose(fp);
	for (unsigned i = 0; i < ck->cfg->ninst; i++) {
		final_path(ck, i, path, sizeof(path));
		fp = fopen(path, "r");
		while (fp != NULL && getline(&line, &cap, fp) > 0) {
			char exec[EXEC_SZ];
			unsigned var;
			int rc, state;

			if (sscanf(line, "Q %llu %u %u %d %d %37s", &t0, &lid,
				   &var, &rc, &state, exec) == 6 && lid == id)
				add_tline(&v, &n, t0, "final pass, carmyd %u: "
					  "var %u -> %s (%s, %s)", i, var,
					  carmy_errname(rc),
					  carmy_state_name(state), exec);
		}
		if (fp != NULL)
			fclose(fp);
	}
	qsort(v, n, sizeof(*v), cmp_tline);
	printf("# trace of the first %s: identity %u (times in ms from its "
	       "first line)\n", soak_kind_names[k], id);
	for (size_t i = 0; i < n; i++)
		printf("#   %9.3f %s\n", (double)(v[i].t - v[0].t) / 1e6,
		       v[i].text);
	for (unsigned i = 0; i < ck->cfg->ninst; i++) {
		for (unsigned w = 0; w < SOAK_VARIANTS; w++) {
			const struct answer *a = &ck->ids[id].fin[i][w];

			if (ck->ids[id].have_fin[i][w])
				printf("#   final  carmyd %u: var %u -> %s "
				       "(%s, %s)\n", i, w,
				       carmy_errname(a->rc),
				       carmy_state_name(a->state), a->exec);
		}
	}
	free(v);
	free(line);
}

/* Room for n elements (growing by doubling at powers of two). */
static void *grow(void *p, size_t n, size_t size)
{
	if (n & (n - 1))
		return p;
	p = realloc(p, (n ? n * 2 : 1) * size);
	if (p == NULL)
		abort();
	return p;
}
