/*
 * carmy.pml - a Promela model of Carmy's shared-segment slot protocol
 * (docs/segment.md), checked with spin: `make model`. docs/model.md says
 * what it covers, what it leaves out, and what it found.
 *
 * The model: a ring of NB = 4 buckets and CAP = 2 tickets/entries in shared
 * memory; two client processes, client 1 reserving identity X and client 2
 * X too or Y, which collides with X (same home bucket, another tag);
 * client 1 may be SIGKILLed at any point, and may abandon its reservation
 * (carmy_abandon) and go on calling on it; carmyd (one thread) completes,
 * abandons on request, sweeps dead owners, compacts and reclaims
 * tombstones while the clients run. The table starts empty, with a
 * tombstone at the home bucket, full of tombstones around a completed Z,
 * or with every ticket in use (X completed past a tombstone, Z): chosen
 * nondeterministically (INIT).
 *
 * Granularity: every shm_cas() is one atomic step; every shm_load(), every
 * shm_store() and every plain store to the segment is a step of its own.
 * An atomic{} below touches at most one shared word (a load, a store or a
 * CAS) besides process-local variables and ghost variables (occ, execs,
 * done_*, creq_id, was_done and the named booleans the assertions test),
 * which exist only for the checks. Two scans of carmyd are one step each,
 * with the argument written next to them (d_findfree, d_walk). The model
 * is sequentially consistent: the full barriers of docs/segment.md
 * ("Memory ordering") are what let the C code be read that way.
 *
 * Bucket words are packed like SHM_W_* (state, entry, tag, version) with a
 * version that never wraps, so a CAS with a stale word fails exactly as in
 * C (the 13-bit wrap-around is not modelled). The tag is the identity
 * itself. Ticket words are what | pid << 5 like SHM_T_WHAT / SHM_T_PID;
 * client c's owner id is 15 + c and its pid is c.
 *
 * Map from the model to the C code, as file:`function` and the step in
 * it. OLD_* build two unsafe variants the search must reject (A: the
 * sweep, B: FULL without the sequence re-check), to show that it finds
 * what it is there to find:
 *
 *  proctype Client        a client process (libclient/client.c)
 *    c_op                 libclient/client.c:`carmy_begin`, and the loop
 *                         in it that calls shm_reserve and switches on its
 *                         outcome
 *    c_again              a new shm/table.c:`shm_reserve` call of that
 *                         loop: after NOFREE's RECLAIM request, or after
 *                         `shm_read_result` said -EAGAIN
 *    r_restart            shm/table.c:`shm_reserve`, its `restart:` label:
 *                         the even sh_move_seq load before the probe
 *                         (spinning on odd is blocking here; the
 *                         SHM_BUSY_NS give-up is not modelled)
 *    r_probe              the linear probe from the home bucket, one
 *                         bucket word load a step
 *    r_claim              shm/table.c:`ticket_claim`, called at a FREE
 *                         bucket while no ticket is held: the search from
 *                         the owner's cursor and the cursor stored past
 *                         the ticket taken; each ticket's load and CAS
 *                         FREE -> owner|pid as one CAS (the load is a fast
 *                         path only). No ticket: back in `shm_reserve`,
 *                         the re-check of the move sequence before
 *                         SHM_OUT_FULL (OLD_FULL removes it: variant B),
 *                         and SHM_OUT_FULL. (The NEED_FP and NODAEMON
 *                         returns before the claim are not modelled: the
 *                         fingerprint is always there, carmyd always up.)
 *    r_fill               shm/table.c:`entry_fill`: the identity, then the
 *                         exec id (make_exec) and the result fields
 *    r_enbucket           in `shm_reserve`, the plain store en_bucket = b
 *                         after filling
 *    r_recheck            the re-check of the move sequence after filling,
 *                         before publishing (MUTATE_NO_SEQ_RECHECK removes
 *                         it)
 *    r_publish            the CAS FREE -> RUNNING of the bucket word (lost:
 *                         restart)
 *    r_reread             the ticket load after publishing, compared with
 *                         our owner|pid (MUTATE_NO_TICKET_REREAD removes
 *                         it)
 *    r_withdraw           the ticket changed: the CAS RUNNING -> TOMB on
 *                         the word we published, and SHM_OUT_DEAD
 *                         (`shm_withdraw_pending` before it, the durable
 *                         store's futex word, is not modelled)
 *    r_reserved           SHM_OUT_RESERVED
 *    r_blocked            a BLOCKED bucket: spin and restart
 *                         (MUTATE_NO_BLOCKED: steps over it instead)
 *    r_match              a live bucket with our tag:
 *                         shm/table.c:`entry_matches` (its en_bucket == b
 *                         check and the identity compare), the re-read of
 *                         the bucket word after reading the entry
 *                         (MUTATE_NO_WORD_RECHECK removes it), the ticket
 *                         given back if one is held (CAS -> FREE), and
 *                         SHM_OUT_FOUND
 *    r_nofree             the probe's end with no FREE bucket: the
 *                         re-check of the move sequence, the ticket given
 *                         back, SHM_OUT_NOFREE; then, in `carmy_begin`'s
 *                         SHM_OUT_NOFREE case, one RECLAIM request
 *                         (`request`) and a second probe
 *    r_end                `carmy_begin`'s answer for the outcome
 *    r_replay             a COMPLETED entry found:
 *                         shm/table.c:`shm_read_result` (the copy of the
 *                         result and exec id, then the re-read of the
 *                         probed bucket's word after it; the check before
 *                         the copy only saves work); -EAGAIN:
 *                         `carmy_begin` probes again
 *    c_release            libclient/client.c:`carmy_release` (a store not
 *                         shared) -> shm/table.c:`shm_release` ->
 *                         `shm_release_as` with no exec id (the `owned`
 *                         pre-check before it and the RELEASE message
 *                         after it are left out)
 *      o_owns             shm/table.c:`shm_owns`: the even sh_move_seq
 *                         load, the en_bucket load, the bucket word load,
 *                         the re-check of the move sequence (changed: look
 *                         again), then the ticket load
 *      c_rel_cas          `shm_release_as`'s CAS RUNNING -> TOMB on the
 *                         word `shm_owns` saw (lost: back to `shm_owns`)
 *      c_rel_ticket       the ticket load and, still ours, its CAS -> FREE
 *                         (the sh_tombs hint after it is left out)
 *    c_complete           libclient/client.c:`carmy_complete`: its
 *                         COMPLETE message (`complete_msg`, through
 *                         `exchange`) and the wait for its reply (its
 *                         `owned` pre-check, which asks `shm_owns`, is left
 *                         out: carmyd checks everything again)
 *    c_abandon            client 1 only: libclient/client.c:`carmy_abandon`:
 *                         its ABANDON message (`confirm`) with the entry
 *                         and the execution id the client made, and the
 *                         wait for the reply (`running_exec`'s `owned`
 *                         pre-check is left out, as for complete)
 *      c_abandoned        the reply, and the check of it (misanswered)
 *    c_use                what a RESERVED caller does with r: release,
 *                         complete, abandon (client 1) or keep it running.
 *                         After an abandon client 1 may call release,
 *                         complete or abandon on r once more, and after a
 *                         release or a completion abandon (late): the
 *                         retry of `carmy_abandon` after a reconnect, an r
 *                         left live by CARMY_EDISCONNECTED, or a caller
 *                         that ignores the answer; libcarmy refuses most
 *                         of these itself (`resv_done`, `owned`), the
 *                         model leaves that out so that carmyd's and
 *                         `shm_owns`'s checks must refuse them
 *    DIE, c_died          SIGKILL of client 1: a DIE point sits before each
 *                         of its writes to the segment or its socket;
 *                         c_died is the process gone and its socket closed
 *                         (what pid_gone and owner_dead then say)
 *    c_exit               the process's end (after its last call, or
 *                         killed)
 *
 *  proctype Killer        only with -DRESTART: carmyd declares client 1's
 *                         owner dead while its process keeps running, as a
 *                         carmyd restart does (daemon/store.c:`recover`:
 *                         its start-up sweep, `sweep_dead`, of every owner
 *                         of the earlier carmyd) or a connection carmyd
 *                         drops (daemon/conn.c:`conn_fail` -> `conn_drop`,
 *                         which sweeps the owner through
 *                         `store_sweep_dead`)
 *
 *  proctype Daemon        carmyd (its loops in daemon/server.c, requests in
 *                         daemon/request.c, connections in daemon/conn.c;
 *                         every write to the segment from daemon/store.c,
 *                         under the store lock: one sequential writer)
 *    d_loop               one thing to do: a COMPLETE request
 *                         (daemon/request.c:`on_complete` ->
 *                         daemon/store.c:`store_complete`; with a durable
 *                         store, from daemon/request.c:`finish` once the
 *                         store answered), a
 *                         RECLAIM request (daemon/request.c:`on_reclaim` ->
 *                         daemon/store.c:`store_reclaim`), a sweep after
 *                         EOF (daemon/request.c:`req_read` ->
 *                         daemon/conn.c:`conn_drop` ->
 *                         daemon/store.c:`store_sweep_dead`) or on the tick
 *                         (daemon/store.c:`store_tick`'s sweep of orphaned
 *                         tickets, from daemon/server.c:`on_tick`), an
 *                         unprompted reclaim (`store_tick`'s `reclaim`),
 *                         an ABANDON request (daemon/request.c:`on_abandon`
 *                         -> daemon/store.c:`store_abandon`)
 *    d_complete           shm/sweep.c:`shm_record_result`: the ticket load
 *                         and owner check, `published_at` (the en_bucket
 *                         load, the bucket word load: RUNNING, naming e),
 *                         the exec id check, the result stores, the CAS
 *                         RUNNING -> COMPLETED (lost: released meanwhile),
 *                         the ticket's CAS -> LIVE
 *    d_complete_done      the COMPLETE reply (`on_complete`'s
 *                         `wire_put_reply`)
 *    d_abandon            shm/sweep.c:`shm_abandon`: the ticket load; LIVE:
 *                         `published_at` (the en_bucket load, the bucket
 *                         word load) UNCERTAIN and the exec id equal: 0 at
 *                         once (sent again, the first one through, or swept
 *                         meanwhile); the owner check (ENOT_OWNER);
 *                         `published_at` RUNNING and the exec id check
 *                         (ENOT_RESERVED); the CAS RUNNING -> UNCERTAIN on
 *                         the word read (lost: ENOT_RESERVED); the
 *                         ticket's CAS from the owner's word -> LIVE.
 *                         `shm_withdraw_pending` after it and
 *                         `conn_wake_waiters` are not modelled (no store,
 *                         no waiters). MUTATE_ABANDON_NO_TICKET drops the
 *                         ticket's CAS, MUTATE_ABANDON_TOMB CASes to TOMB
 *                         (an abandon taken for a release),
 *                         MUTATE_ABANDON_ANY_STATE drops the RUNNING check,
 *                         MUTATE_ABANDON_NO_OWNER the owner check,
 *                         MUTATE_ABANDON_NO_EXEC the exec id check,
 *                         MUTATE_ABANDON_NO_CHECKS both
 *    d_abandon_done       the ABANDON reply (`on_abandon`'s
 *                         `wire_put_reply`)
 *    d_sweep              shm/sweep.c:`shm_sweep`: each ticket's load;
 *                         SWEEPING or a dead owner's (owner_dead:
 *                         daemon/store.c:`dead_owner`) -> `sweep_ticket`;
 *                         an ORPHAN whose process is gone (pid_gone:
 *                         daemon/store.c:`pid_gone`) -> `settle_orphan`
 *      d_sweep_ticket     shm/sweep.c:`sweep_ticket`: the CAS owner ->
 *                         SWEEPING|pid (unless SWEEPING already), pid_gone
 *                         asked before looking (with OLD_PID_ORDER after:
 *                         variant A), `published_at`; not published: the
 *                         store of FREE (gone) or ORPHAN|pid; published
 *                         final: the store of LIVE; RUNNING: the CAS ->
 *                         UNCERTAIN, then the store of LIVE (lost: look
 *                         again)
 *      d_settle_orphan    shm/sweep.c:`settle_orphan`: the CAS ORPHAN ->
 *                         SWEEPING; published final: the store of LIVE;
 *                         not published, or published and the CAS ->
 *                         TOMB: the store of FREE (lost: look again).
 *                         OLD_ORPHAN_FREE: one CAS -> FREE instead
 *                         (variant A)
 *    d_reclaim            shm/sweep.c:`shm_reclaim`, `shm_reclaim_some`
 *      d_findfree         `shm_reclaim_some`'s scan for a FREE bucket to
 *                         start after: C's is the last at or before its
 *                         cursor (anywhere: the ticks'; a RECLAIM's is 0),
 *                         the model's the first after any bucket, so any
 *                         FREE bucket
 *      d_walk             its walk of the ring from there, cluster by
 *                         cluster; it may stop after any cluster (the
 *                         budget of a tick's stretch)
 *      d_compact          shm/sweep.c:`compact` of a cluster that holds a
 *                         tombstone, before its `reclaim_cluster`: each
 *                         bucket word's load;
 *                         the home through `shm_entry_home` (here: the
 *                         entry's identity against the word's tag); the
 *                         walk from home to the first TOMB or FREE;
 *                         `seq_open`; the CAS TOMB -> the copy of the
 *                         word; the CAS of en_bucket from the old bucket
 *                         to the copy; the CAS of the old bucket -> TOMB;
 *                         dropping the copy (en_bucket back, the copy's
 *                         CAS -> TOMB) if either failed; `seq_close`.
 *                         C opens and closes the sequence around each
 *                         move, and skips an entry with no TOMB before it
 *                         in its cluster on its word alone; the model
 *                         opens it before the cluster's first move and
 *                         closes it after the cluster, so a probe that
 *                         starts between two moves in one cluster is not
 *                         explored
 *      d_cluster          shm/sweep.c:`reclaim_cluster`: the load of the
 *                         end word (not FREE: return), the CAS FREE ->
 *                         BLOCKED (lost: return), `seq_open`, the backward
 *                         walk with the CAS TOMB -> FREE of each uncrossed
 *                         tombstone and the homes of the live entries,
 *                         `seq_close`, the store that unblocks the end
 *                         (MUTATE_NO_BLOCKED drops the BLOCKED CAS and the
 *                         unblocking store)
 *    d_cluster_done       `reclaim_cluster`'s return
 *      d_nofree           shm/sweep.c:`reclaim_without_free`: `seq_open`,
 *                         for each TOMB the scan for a live entry whose
 *                         path crosses it, the CAS TOMB -> FREE of the
 *                         first one crossed by none, `seq_close`; one
 *                         freed, `shm_reclaim_some` looks for a FREE
 *                         bucket again and walks from it
 *    d_reclaim_done       `shm_reclaim`'s return; the RECLAIM reply
 *                         (`on_reclaim`'s `wire_put_reply`)
 *      seq = seq | 1      shm/sweep.c:`seq_open`; seq = seq + 1 is
 *                         `seq_close` (the model's seq is sh_move_seq,
 *                         always equal to carmyd's copy, move_seq)
 *    d_end, d_check       not C: every client has exited, carmyd sweeps
 *                         once more, and the final state is checked
 *
 *  proctype Monitor       not C: checks P2, P4 and P5 in every state
 *    end_monitor          (a valid end state: it waits for a violation)
 *
 * The properties (assertions; docs/model.md lists every assertion text):
 *  P1 at most one execution per identity: no RESERVED answer for an
 *     identity that has one not followed by a successful release
 *     (execs[id] == 0 at r_reserved), and such an identity is still found
 *     at the end (lost_identity).
 *  P2 a completed entry is never lost or overwritten: a carmy_begin that
 *     starts after the identity's COMPLETED CAS replays that result and
 *     execution id, and gets no other answer (r_end); nothing completes it
 *     twice (d_complete); its entry, result, ticket and bucket stay put
 *     (Monitor, record_lost) and a probe from its home finds it at the end
 *     (record_changed).
 *  P3 a dead owner's entry never becomes free without an explicit
 *     release: when carmyd gives back a dead owner's ticket no bucket
 *     names its entry (freed_but_published); at the end every owner is
 *     dead and swept, and no bucket is RUNNING (running_left) and every
 *     live bucket's ticket is LIVE (live_without_ticket).
 *  P4 capacity: a claimer takes only a ticket whose entry holds no
 *     reservation or record (occ at r_claim and r_reserved), and an entry
 *     that holds one never has a FREE ticket (Monitor, ticket_lost): the
 *     identities held never outnumber the tickets.
 *  P5 an abandoned execution stays uncertain: the CAS to UNCERTAIN hits
 *     only the execution the ABANDON names, of the client that sent it,
 *     never a completed one (d_abandon, misabandoned); it is never
 *     completed (d_complete), released (c_rel_cas) or reserved again
 *     (r_reserved); a carmy_begin that starts after it answers uncertain,
 *     never a replay or absent (r_end); ABANDON answers 0 exactly when the
 *     execution is uncertain (c_abandoned, misanswered); its entry,
 *     ticket and UNCERTAIN bucket stay put, and once carmyd answered 0 the
 *     ticket is LIVE, nobody's (Monitor, abandon_lost); a probe from its
 *     home finds it uncertain at the end (uncertain_changed).
 *
 * Options (spin -D...; make model MODEL_FLAGS='-D...'):
 *  INIT=0|1|2|3   one starting table only (default: all four);
 *  NO_INITn       leave starting table n out
 *  NOPS2=n        carmy_begin calls of client 2 (default 1; the second
 *                 and later only look)
 *  MAXRECL=n      unprompted reclaim passes of carmyd (default 1)
 *  MAXSWEEP=n     sweeps after client 1's owner is dead (default 1, 2
 *                 with RESTART)
 *  SAME_ID_ONLY   client 2 reserves X only
 *  RESTART        carmyd declares client 1's owner dead while it runs
 *  NO_KILL        client 1 is never killed (its owner dies only with
 *                 RESTART)
 *  OLD_SWEEP      the sweep's unsafe variant A: OLD_PID_ORDER
 *                 (pid_gone asked after looking) and OLD_ORPHAN_FREE
 *                 (an ORPHAN freed without looking)
 *  OLD_FULL       SHM_OUT_FULL without the sequence re-check (variant B)
 *  NO_ABANDON     client 1 never abandons (the model as it was before
 *                 carmy_abandon: the same states)
 *  MUTATE_*       remove one protocol step (see the labels above)
 */

#define NB	4		/* buckets (a power of two, as in C) */
#ifndef CAP
#define CAP	2		/* tickets = entries = the capacity (<= 4) */
#endif
#define NONE	255		/* UINT32_MAX: no ticket / no entry */

#ifndef NOPS2
#define NOPS2	1
#endif
#ifndef MAXRECL
#define MAXRECL	1
#endif
#ifdef MUTATE_ABANDON_NO_CHECKS	/* both of shm_abandon's checks */
#define MUTATE_ABANDON_NO_OWNER
#define MUTATE_ABANDON_NO_EXEC
#endif
#ifdef OLD_SWEEP		/* both halves of variant A */
#define OLD_PID_ORDER
#define OLD_ORPHAN_FREE
#endif
#ifndef MAXSWEEP
#ifdef RESTART
#define MAXSWEEP 2
#else
#define MAXSWEEP 1
#endif
#endif

/* identities: X and Y collide (same home bucket), Z is a pre-existing
 * completed entry used to fill the ring */
#define IDX	1
#define IDY	2
#define IDZ	3
#define HOME(id)	((id) == IDZ -> 1 : 0)

/* enum shm_state, shm/shm.h */
#define FREE		0
#define RUNNING		1
#define COMPLETED	2
#define UNCERTAIN	3
#define TOMB		4
#define BLOCKED		5
#define LIVEST(s)	((s) == RUNNING || (s) == COMPLETED || (s) == UNCERTAIN)

/* shm_word / SHM_W_*: state 3 bits, entry 2 bits, tag 2 bits, version */
#define W(st, ver, tag, ent)	((st) | ((ent) << 3) | ((tag) << 5) | ((ver) << 7))
#define ST(w)		((w) & 7)
#define ENT(w)		(((w) >> 3) & 3)
#define TAG(w)		(((w) >> 5) & 3)
#define VER(w)		((w) >> 7)
/* shm_next: FREE/TOMB/BLOCKED name no entry (NEXT0), the live states keep
 * tag and entry (NEXTL) */
#define NEXT0(w, s)	W(s, VER(w) + 1, 0, 0)
#define NEXTL(w, s)	W(s, VER(w) + 1, TAG(w), ENT(w))

/* ticket words, shm/shm.h: SHM_TICKET_*, shm_ticket() */
#define T_FREE		0
#define T_LIVE		1
#define T_SWEEPING	2
#define T_ORPHAN	3
#define OWNER(c)	(15 + (c))
#define TK(what, pid)	((what) | ((pid) << 5))
#define WHAT(t)		((t) & 31)
#define PID(t)		((t) >> 5)
#define HELD(c)		TK(OWNER(c), c)

/* shm_abandon's answers: 0, CARMY_ENOT_OWNER, CARMY_ENOT_RESERVED */
#define A_OK		0
#define A_NOT_OWNER	1
#define A_NOT_RESERVED	2
#ifndef NO_ABANDON
#define AREQ(c)	areq[c]
#else
#define AREQ(c)	0
#endif

/* Client 1's calls on one reservation (late): 0 before the first, 1
 * after an abandon, 2 after a release or a completion, 3 done. A release
 * or a completion (LATE_RC, idempotent: shm_owns may start over) and an
 * abandon (0 -> 1, else 3) move it on. */
#define LATE_RC(l)	((l) == 1 || (l) == 3 -> 3 : 2)

/* a client's execution ids: c * 16 + its fill count (make_exec) */
#define MYEXEC(c, nfill)	((c) * 16 + (nfill))

/* ---------------------------------------------------------- shared state */
int  bk[NB];			/* bucket words */
byte tk[CAP];			/* ticket words */
byte en_bucket[CAP];		/* shm_entry: en_bucket */
byte en_id[CAP];		/* identity (en_len + en_ident) */
byte en_exec[CAP];		/* en_exec */
byte en_res[CAP];		/* result bytes / status / length, as one value */
byte seq;			/* sh_move_seq */

/* the environment: processes and connections */
bool dead[3];			/* carmyd holds the owner id for dead */
bool gone[3];			/* the process has exited (pid_gone) */
bool fin[3];			/* the client ran to its end */

/* requests to carmyd over the socket (one outstanding per client) */
bool creq[3];			/* WIRE_COMPLETE pending */
byte creq_e[3];
byte creq_x[3];
byte creq_id[3];		/* ghost: which identity it completes */
bool rreq[3];			/* WIRE_RECLAIM pending */
#ifndef NO_ABANDON
bool areq[3];			/* WIRE_ABANDON pending */
byte areq_e[3];
byte areq_x[3];
byte areq_id[3];		/* ghost: which identity it abandons */
byte arc[3];			/* its reply: A_OK, A_NOT_OWNER, A_NOT_RESERVED */
#endif

/* ---------------------------------------------------------- ghost state */
byte execs[4];			/* RESERVED answers not followed by a release */
byte done_res[4];		/* result recorded for an identity, 0 = none */
byte done_exec[4];
byte done_e[4];
byte occ[CAP];			/* identity whose reservation/record is in e */
#ifndef NO_ABANDON
byte ab_exec[4];		/* execution an ABANDON made uncertain, 0 = none */
byte ab_e[4];			/* and its entry */
bool ab_told[CAP];		/* carmyd answered an ABANDON of e with 0 */
#endif

/* one CAS on a bucket word */
inline cas_bk(bb, old, new, ok)
{
	atomic {
		if
		:: bk[bb] == old -> bk[bb] = new; ok = 1
		:: else -> ok = 0
		fi
	}
}

/* one CAS on a ticket word */
inline cas_tk(ee, old, new, ok)
{
	atomic {
		if
		:: tk[ee] == old -> tk[ee] = new; ok = 1
		:: else -> ok = 0
		fi
	}
}

/* ============================================================= clients */

/*
 * Client 1 may be killed (SIGKILL) at any point: it may stop for good before
 * any of its writes to shared memory or to its socket. Stopping before a
 * read is the same as stopping before the next write (a read changes
 * nothing another process can see), and a DIE point can be taken at any
 * time while the client sits at it, so these points cover "any point".
 * The kernel then closes its socket and carmyd sees EOF: gone and dead.
 */
#ifndef NO_KILL
#define DIE	if :: c == 1 -> goto c_died :: true fi
#else
#define DIE	skip
#endif

proctype Client(byte c)
{
	byte id, tkt, b, n, e, eb, eid, t, i, k, s, fe, fb, fst, res, ex, out;
	byte ops, cur, nfill, late;
	int w, nw, fw;
	bool ok, first, was_done, reclaimed, was_ab;
	bool misanswered;	/* ghost: named after what it catches */

	ops = (c == 1 -> 1 : NOPS2);
	cur = c % CAP;			/* owners start apart (carmy_connect) */
	if
	:: c == 1 -> id = IDX
	:: c == 2 -> id = IDX		/* the same identity */
#ifndef SAME_ID_ONLY
	:: c == 2 -> id = IDY		/* a colliding one: same home bucket */
#endif
	fi;

c_op:	/* carmy_begin */
	first = 1; reclaimed = 0;
c_again:
	tkt = NONE;
r_restart:
	atomic {
		(seq & 1) == 0;		/* spin while carmyd moves */
		s = seq;
		n = 0; b = HOME(id); w = 0; nw = 0; e = 0; eb = 0; eid = 0;
		if	/* ghost: did this call start after a completion? */
		:: first ->
			was_done = (done_res[id] != 0); first = 0;
#ifndef NO_ABANDON
			/* and after an ABANDON of the identity? */
			was_ab = (ab_exec[id] != 0)
#endif
		:: else
		fi
	}
r_probe:
	do
	:: n < NB ->
		w = bk[b];
		if
		:: ST(w) == FREE ->
			if
			:: tkt == NONE ->
r_claim:			i = cur; k = 0;
				do
				:: k < CAP ->
					DIE;
					atomic {
						if
						:: tk[i] == T_FREE ->
							/* P4: never an entry in use */
							assert(occ[i] == 0);
							tk[i] = HELD(c); tkt = i;
							cur = (i + 1) % CAP
						:: else -> i = (i + 1) % CAP
						fi;
						k++
					}
					if
					:: tkt != NONE -> break
					:: else
					fi
				:: else -> break
				od;
				atomic { i = 0; k = 0 }
				if
				:: tkt == NONE ->
					/* FULL is an "absent" verdict too: the
					 * sequence is re-checked first (OLD_FULL,
					 * variant B, does not) */
#ifndef OLD_FULL
					if
					:: seq != s -> goto r_restart
					:: else
					fi;
#endif
					out = 2; goto r_end
				:: else
				fi;
r_fill:				DIE;
				en_id[tkt] = id;
				DIE;
				atomic {
					nfill++;
					en_exec[tkt] = MYEXEC(c, nfill);
					en_res[tkt] = 0
				}
			:: else
			fi;
r_enbucket:		DIE;
			en_bucket[tkt] = b;
r_recheck:
#ifndef MUTATE_NO_SEQ_RECHECK
			if
			:: seq != s -> goto r_restart
			:: else
			fi;
#endif
r_publish:		nw = W(RUNNING, VER(w) + 1, id, tkt);
			DIE;
			cas_bk(b, w, nw, ok);
			if
			:: !ok -> goto r_restart
			:: else
			fi;
r_reread:
#ifndef MUTATE_NO_TICKET_REREAD
			if
			:: tk[tkt] != HELD(c) ->
r_withdraw:			DIE;
				cas_bk(b, nw, NEXT0(nw, TOMB), ok);
				out = 5; goto r_end		/* DEAD */
			:: else
			fi;
#endif
r_reserved:		atomic {
				/* P1: one execution at a time */
				assert(execs[id] == 0);
				/* P2: a completed identity is never reserved */
				assert(!was_done && done_res[id] == 0);
#ifndef NO_ABANDON
				/* nor an abandoned one (uncertain for good) */
				assert(!was_ab && ab_exec[id] == 0);
#endif
				/* P4: our entry holds nothing else */
				assert(occ[tkt] == 0);
				execs[id]++;
				occ[tkt] = id;
				fe = tkt; fw = nw; out = 0
			}
			goto r_end
		:: ST(w) == BLOCKED ->
r_blocked:
#ifndef MUTATE_NO_BLOCKED
			goto r_restart
#else
			skip	/* treated like a tombstone */
#endif
		:: ST(w) != FREE && ST(w) != BLOCKED &&
		   (ST(w) == TOMB || TAG(w) != id) -> skip	/* step over */
		:: LIVEST(ST(w)) && TAG(w) == id ->
r_match:		e = ENT(w);
			if
			:: e == tkt -> skip
			:: else ->
				eb = en_bucket[e];
				eid = en_id[e];
#ifndef MUTATE_NO_WORD_RECHECK
				if
				:: bk[b] != w -> goto r_restart
				:: else
				fi;
#endif
				if
				:: eb == b && eid == id ->
					if
					:: tkt != NONE ->
						DIE;
						cas_tk(tkt, HELD(c), T_FREE, ok)
					:: else
					fi;
					fe = e; fb = b; fw = w; fst = ST(w);
					out = 1; goto r_end		/* FOUND */
				:: else
				fi
			fi
		fi;
		n++; b = (b + 1) % NB
	:: else -> break
	od;
r_nofree:
	if
	:: seq != s -> goto r_restart
	:: else
	fi;
	if
	:: tkt != NONE ->
		DIE;
		cas_tk(tkt, HELD(c), T_FREE, ok)
	:: else
	fi;
	out = 3;					/* NOFREE */
r_end:
	atomic { n = 0; e = 0; eb = 0; eid = 0; w = 0; nw = 0 }
	if
	:: out == 3 && !reclaimed ->
		/* carmyd, reclaim please; then probe once more */
		reclaimed = 1;
		DIE;
		rreq[c] = 1;
		rreq[c] == 0;
		goto c_again
	:: out == 1 && fst == COMPLETED ->
r_replay:	b = fb;
		res = en_res[fe];
		ex = en_exec[fe];
		if
		:: bk[b] != fw -> goto c_again		/* -EAGAIN */
		:: else
		fi;
		/* P2: the one recorded result, and its execution id */
		assert(done_res[id] != 0 && res == done_res[id] &&
		       ex == done_exec[id]);
#ifndef NO_ABANDON
		/* an abandoned execution is never replayed as completed */
		assert(!was_ab)
#endif
	:: out == 1 && fst != COMPLETED ->
		/* EUNCERTAIN (running or interrupted) or ECONFLICT */
		assert(!was_done);
#ifndef NO_ABANDON
		/* after an abandon: uncertain (interrupted) */
		assert(!was_ab || fst == UNCERTAIN)
#endif
	:: out == 2 || (out == 3 && reclaimed) || out == 5 ->
		/* CAPACITY or DISCONNECTED: the identity was absent */
		assert(!was_done);
#ifndef NO_ABANDON
		assert(!was_ab)
#endif
	:: out == 0 ->
		/* RESERVED: the tool runs; then release, complete, abandon
		 * (client 1) or keep (a second call of client 2 only looks:
		 * it keeps). After an abandon, client 1 may still call
		 * release, complete or abandon on r, and after a release or
		 * completion abandon (late: 0 first, 1 after an abandon, 2
		 * after a release or completion, 3 done): libcarmy would
		 * refuse most of these itself (resv_done, owned), carmyd and
		 * shm_owns must refuse them all. */
c_use:
		if
		:: (c == 1 || ops == NOPS2) && late < 2 ->
c_release:		/* shm_release */
o_owns:			atomic {
				(seq & 1) == 0; s = seq;
#ifndef NO_ABANDON
				late = LATE_RC(late)
#endif
			}
			b = en_bucket[fe];
			w = bk[b];
			if
			:: seq != s -> goto o_owns
			:: else
			fi;
			if
			:: ST(w) == RUNNING && ENT(w) == fe ->
				t = tk[fe]
			:: else -> t = 0
			fi;
			if
			:: ST(w) == RUNNING && ENT(w) == fe && WHAT(t) == OWNER(c) ->
c_rel_cas:			DIE;
				atomic {
					if
					:: bk[b] == w ->
						bk[b] = NEXT0(w, TOMB); ok = 1;
#ifndef NO_ABANDON
						/* never after an abandon */
						assert(ab_exec[id] == 0);
#endif
						execs[id]--; occ[fe] = 0
					:: else -> ok = 0
					fi
				}
				if
				:: !ok -> goto o_owns
				:: else
				fi;
c_rel_ticket:			t = tk[fe];
				if
				:: WHAT(t) == OWNER(c) ->
					DIE;
					cas_tk(fe, t, T_FREE, ok)
				:: else
				fi
			:: else	/* ENOT_RESERVED / EDISCONNECTED */
			fi
		:: (c == 1 || ops == NOPS2) && late < 2 ->
c_complete:		DIE;
			atomic {
				creq_e[c] = fe; creq_x[c] = en_exec[fe];
				creq_id[c] = id; creq[c] = 1;
#ifndef NO_ABANDON
				late = LATE_RC(late)
#endif
			}
			creq[c] == 0
#ifndef NO_ABANDON
		:: c == 1 && late < 3 ->
c_abandon:		/* libclient/client.c:carmy_abandon: its ABANDON
			 * request (confirm) with the execution id it made */
			DIE;
			atomic {
				areq_e[c] = fe; areq_x[c] = MYEXEC(c, nfill);
				areq_id[c] = id; areq[c] = 1;
				late = (late == 0 -> 1 : 3)
			}
c_abandoned:		atomic {
				areq[c] == 0;
				/* the answer is 0 exactly when the execution is
				 * uncertain now (an UNCERTAIN bucket stays so,
				 * moved only by compaction with en_bucket) */
				b = en_bucket[fe]; w = bk[b];
				misanswered = ((arc[c] == A_OK) !=
					(ST(w) == UNCERTAIN && ENT(w) == fe &&
					 en_exec[fe] == MYEXEC(c, nfill)));
				assert(!misanswered);
				arc[c] = 0; b = 0; w = 0
			}
#endif
		:: late == 0	/* keep: still running when the client stops */
		fi;
#ifndef NO_ABANDON
		if
		:: atomic {
			c == 1 && late != 0 && late < 3 ->	/* a late call */
			b = 0; w = 0; t = 0; s = 0; ok = 0
		   };
		   goto c_use
		:: true
		fi
#endif
	fi;
	atomic { w = 0; t = 0; b = 0; s = 0; fb = 0; fw = 0; nw = 0; fst = 0; out = 0; res = 0; ex = 0; ok = 0; late = 0 }
	ops--;
	if
	:: ops > 0 -> goto c_op
	:: else
	fi;
	DIE;
	atomic {
		fin[c] = 1;
		id = 0; tkt = 0; fe = 0; ops = 0; cur = 0; nfill = 0;
		first = 0; was_done = 0; reclaimed = 0; was_ab = 0; late = 0
	}
	goto c_exit;
c_died:
	/* SIGKILL: the process is gone; the kernel closes its socket, and
	 * carmyd sees EOF (both at once here: carmyd may sweep later) */
	atomic {
		gone[c] = 1; dead[c] = 1;
		id = 0; tkt = 0; b = 0; n = 0; e = 0; eb = 0; eid = 0; t = 0;
		i = 0; k = 0; s = 0; fe = 0; fst = 0; res = 0; ex = 0; out = 0;
		ops = 0; cur = 0; nfill = 0; w = 0; nw = 0; fb = 0; fw = 0; ok = 0;
		first = 0; was_done = 0; reclaimed = 0; was_ab = 0; late = 0
	}
c_exit:
	skip
}

#ifdef RESTART
/* carmyd declares client 1's owner dead while its process keeps running
 * (a carmyd restart: daemon/store.c:`recover` sweeps every earlier owner
 * at start-up; the client may be in the middle of shm_reserve). */
proctype Killer()
{
	dead[1] = 1
}
#endif

/* ============================================================== carmyd */

/* P3, where carmyd gives a dead owner's ticket back: no bucket may name
 * its entry (it was never published, or its publication was withdrawn) */
inline P3_UNNAMED(e)
{
	for (i : 0 .. NB - 1) {
		freed_but_published = freed_but_published ||
			(LIVEST(ST(bk[i])) && ENT(bk[i]) == e)
	}
	assert(!freed_but_published);
	i = 0
}

/* shm/sweep.c:`compact`, the step for bucket p: its word's load; a live
 * entry's home; the walk from there to the first TOMB or FREE; if a TOMB,
 * the move (seq_open at the first move of the compaction: batch). Uses
 * the Daemon's locals. */
inline compact_at()
{
	w = bk[p];
	if
	:: LIVEST(ST(w)) ->
		e = ENT(w);
		eid = en_id[e];		/* shm_entry_home: hash + tag check */
		if
		:: eid == TAG(w) && HOME(eid) != p ->
			home = HOME(eid);
			tt = home;
			do
			:: tt != p ->
				wt = bk[tt];
				if
				:: ST(wt) == TOMB || ST(wt) == FREE -> break
				:: else -> tt = (tt + 1) % NB
				fi
			:: else -> break
			od;
			if
			:: tt != p && ST(wt) == TOMB ->
				if
				:: batch == 0 -> seq = seq | 1	/* seq_open */
				:: else
				fi;
				batch++;
				nw = W(ST(w), VER(wt) + 1, TAG(w), e);
				cas_bk(tt, wt, nw, ok);
				if
				:: ok ->
					atomic {
						if
						:: en_bucket[e] == p -> en_bucket[e] = tt; ok = 1
						:: else -> ok = 0
						fi
					}
					if
					:: ok -> cas_bk(p, w, NEXT0(w, TOMB), ok)
					:: else
					fi;
					if
					:: !ok ->	/* released through p: drop the copy */
						atomic {
							if
							:: en_bucket[e] == tt -> en_bucket[e] = p
							:: else
							fi
						}
						cas_bk(tt, nw, NEXT0(nw, TOMB), ok)
					:: else
					fi
				:: else
				fi
			:: else
			fi
		:: else
		fi
	:: else
	fi;
}

proctype Daemon()
{
	byte act, cc, e, t, sw, bb, p, tt, home, z, i, sidx, seen, f, clen;
	byte k, lowest, rel, eid, x, nsweep, nrecl, batch;
	int w, wt, nw, wf, blocked;
	bool ok, ok2, tombs, crossed, final, pg;
	/* ghosts for the checks, named after what they catch */
	bool freed_but_published, running_left, live_without_ticket;
	bool lost_identity, record_changed;
#ifndef NO_ABANDON
	byte rc;
	bool misabandoned, uncertain_changed;
#endif

d_loop:
	atomic {
		if
		:: creq[1] -> cc = 1; act = 1
		:: creq[2] -> cc = 2; act = 1
		:: rreq[1] -> cc = 1; act = 3
		:: rreq[2] -> cc = 2; act = 3
#ifndef NO_ABANDON
		:: areq[1] -> cc = 1; act = 4
		:: areq[2] -> cc = 2; act = 4
#endif
		:: dead[1] && nsweep < MAXSWEEP -> nsweep++; act = 2
		:: nrecl < MAXRECL -> nrecl++; cc = 0; act = 3
		:: ((fin[1] && !creq[1] && !rreq[1] && !AREQ(1)) || gone[1]) &&
		   fin[2] && !creq[2] && !rreq[2] && !AREQ(2) -> goto d_end
		fi
	}
	if
	:: act == 1 -> goto d_complete
	:: act == 2 -> goto d_sweep
	:: act == 3 -> goto d_reclaim
#ifndef NO_ABANDON
	:: act == 4 -> goto d_abandon
#endif
	fi;

	/* ------------------------------------------- shm_record_result */
d_complete:
	e = creq_e[cc];
	t = tk[e];
	if
	:: WHAT(t) != OWNER(cc) -> goto d_complete_done	/* ENOT_OWNER */
	:: else
	fi;
	bb = en_bucket[e];
	w = bk[bb];
	if
	:: !(LIVEST(ST(w)) && ENT(w) == e) || ST(w) != RUNNING ->
		goto d_complete_done			/* ENOT_RESERVED */
	:: else
	fi;
	x = en_exec[e];
	if
	:: x != creq_x[cc] -> goto d_complete_done
	:: else
	fi;
	en_res[e] = x;		/* the result: one value per execution */
	atomic {
		if
		:: bk[bb] == w ->
			bk[bb] = NEXTL(w, COMPLETED); ok = 1;
			/* ghost: the identity now has its record */
			eid = en_id[e];
			assert(eid == creq_id[cc]);
			assert(done_res[eid] == 0);	/* P2: never twice */
#ifndef NO_ABANDON
			/* never once abandoned: the late COMPLETE is refused */
			assert(ab_exec[eid] == 0);
#endif
			done_res[eid] = en_res[e];
			done_exec[eid] = en_exec[e];
			done_e[eid] = e;
			eid = 0
		:: else -> ok = 0			/* released meanwhile */
		fi
	}
	if
	:: ok -> cas_tk(e, t, T_LIVE, ok)
	:: else
	fi;
d_complete_done:
	atomic { creq[cc] = 0; e = 0; t = 0; bb = 0; w = 0; x = 0; ok = 0; cc = 0; act = 0 }
	goto d_loop

#ifndef NO_ABANDON
	/* ------------------------------------------------- shm_abandon */
d_abandon:
	e = areq_e[cc];
	t = tk[e];
	if
	:: WHAT(t) == T_LIVE ->
		/* sent again after a reconnect, the first one through (or
		 * swept meanwhile): uncertain as exec already, the answer 0 */
		bb = en_bucket[e];
		w = bk[bb];
		if
		:: LIVEST(ST(w)) && ENT(w) == e && ST(w) == UNCERTAIN ->
			x = en_exec[e];
			if
			:: x == areq_x[cc] -> rc = A_OK; goto d_abandon_done
			:: else
			fi
		:: else
		fi
	:: else
	fi;
#ifndef MUTATE_ABANDON_NO_OWNER
	if
	:: WHAT(t) != OWNER(cc) -> rc = A_NOT_OWNER; goto d_abandon_done
	:: else
	fi;
#endif
	bb = en_bucket[e];
	w = bk[bb];
	if
#ifndef MUTATE_ABANDON_ANY_STATE
	:: !(LIVEST(ST(w)) && ENT(w) == e) || ST(w) != RUNNING ->
#else
	:: !(LIVEST(ST(w)) && ENT(w) == e) ->	/* COMPLETED, UNCERTAIN too */
#endif
		rc = A_NOT_RESERVED; goto d_abandon_done
	:: else
	fi;
#ifndef MUTATE_ABANDON_NO_EXEC
	x = en_exec[e];
	if
	:: x != areq_x[cc] -> rc = A_NOT_RESERVED; goto d_abandon_done
	:: else
	fi;
#endif
	atomic {
		if
		:: bk[bb] == w ->
#ifndef MUTATE_ABANDON_TOMB
			bk[bb] = NEXTL(w, UNCERTAIN); ok = 1;
#else
			bk[bb] = NEXT0(w, TOMB); ok = 1;	/* as a release */
#endif
			/* ghost: the execution the request names, of the
			 * client that sent it, and it was not completed */
			eid = en_id[e];
			misabandoned = en_exec[e] != areq_x[cc] ||
				eid != areq_id[cc] || done_res[eid] != 0;
			assert(!misabandoned);
			ab_exec[eid] = en_exec[e]; ab_e[eid] = e;
			eid = 0
		:: else -> ok = 0			/* released meanwhile */
		fi
	}
	if
	:: !ok -> rc = A_NOT_RESERVED; goto d_abandon_done
	:: else
	fi;
#ifndef MUTATE_ABANDON_NO_TICKET
	cas_tk(e, t, T_LIVE, ok);
#endif
	rc = A_OK;
	/* (shm_withdraw_pending: no store, no waiters in the model) */
d_abandon_done:
	atomic {
		arc[cc] = rc;			/* on_abandon's reply */
		if
		:: rc == A_OK -> ab_told[e] = 1
		:: else
		fi;
		areq[cc] = 0;
		e = 0; t = 0; bb = 0; w = 0; x = 0; ok = 0; rc = 0; cc = 0;
		act = 0
	}
	goto d_loop;
#endif

	/* --------------------------------------------------- shm_sweep */
d_sweep:
	e = 0;
	do
	:: e < CAP ->
		t = tk[e];
		if
		:: WHAT(t) == T_SWEEPING ||
		   (WHAT(t) >= 16 && WHAT(t) <= 17 && dead[WHAT(t) - 15]) ->
d_sweep_ticket:		sw = TK(T_SWEEPING, PID(t));
			if
			:: WHAT(t) != T_SWEEPING -> cas_tk(e, t, sw, ok)
			:: else -> ok = 1
			fi;
			if
			:: ok ->
#ifndef OLD_PID_ORDER
				/* is the claimer gone? asked before looking,
				 * so that "not published" is final */
				pg = gone[PID(t)];
#endif
				do
				:: bb = en_bucket[e];
				   w = bk[bb];
#ifdef OLD_PID_ORDER
				   pg = gone[PID(t)];	/* asked after looking */
#endif
				   if
				   :: !(LIVEST(ST(w)) && ENT(w) == e) ->
					/* not published */
					if
					:: pg ->
						atomic {
							/* P3: never published */
							P3_UNNAMED(e);
							tk[e] = T_FREE
						}
					:: else -> tk[e] = TK(T_ORPHAN, PID(t))
					fi;
					break
				   :: LIVEST(ST(w)) && ENT(w) == e && ST(w) != RUNNING ->
					tk[e] = T_LIVE; break
				   :: ST(w) == RUNNING && ENT(w) == e ->
					cas_bk(bb, w, NEXTL(w, UNCERTAIN), ok);
					if
					:: ok -> tk[e] = T_LIVE; break
					:: else		/* released meanwhile: look again */
					fi
				   fi
				od
			:: else
			fi
		:: WHAT(t) == T_ORPHAN && gone[PID(t)] ->
#ifndef OLD_ORPHAN_FREE
d_settle_orphan:
			/* settle_orphan: its claimer is gone; withdraw a
			 * bucket it published but never withdrew, keep a
			 * final one, then free the ticket */
			cas_tk(e, t, TK(T_SWEEPING, PID(t)), ok);
			if
			:: ok ->
				do
				:: bb = en_bucket[e];
				   w = bk[bb];
				   if
				   :: LIVEST(ST(w)) && ENT(w) == e && ST(w) != RUNNING ->
					tk[e] = T_LIVE; break
				   :: else
				   fi;
				   bb = en_bucket[e];
				   w = bk[bb];
				   if
				   :: LIVEST(ST(w)) && ENT(w) == e ->
					cas_bk(bb, w, NEXT0(w, TOMB), ok2)
				   :: else -> ok2 = 1	/* not published */
				   fi;
				   if
				   :: ok2 ->
					atomic {
						P3_UNNAMED(e);
						tk[e] = T_FREE
					}
					break
				   :: else
				   fi
				od
			:: else
			fi
#else
			/* variant A: freed at once */
			atomic {
				if
				:: tk[e] == t ->
					P3_UNNAMED(e);
					tk[e] = T_FREE
				:: else
				fi
			}
#endif
		:: else
		fi;
		atomic { e++; t = 0; sw = 0; bb = 0; w = 0; ok = 0; ok2 = 0; pg = 0 }
	:: else -> break
	od;
	atomic { e = 0; act = 0 }
	if
	:: final -> goto d_check
	:: else -> goto d_loop
	fi;

	/* ------------------------------------------------- shm_reclaim */
d_reclaim:
d_findfree:
	/* Any FREE bucket: C starts after the last one at or before the
	 * ticks' cursor, which may be anywhere in the ring (a RECLAIM's is
	 * 0). One step: while carmyd scans, clients only turn FREE buckets
	 * non-FREE (nobody but carmyd frees one), so the scan's answer is
	 * what a snapshot at its last load gives. */
	select (z : 0 .. NB - 1);
	atomic {
		seen = 0;
		do
		:: seen < NB && ST(bk[(z + seen) % NB]) != FREE -> seen++
		:: else -> break
		od;
		z = (z + seen) % NB
	}
	if
	:: seen == NB -> goto d_nofree
	:: else
	fi;

d_walk:
	i = (z + 1) % NB; seen = 1;
	do
	:: seen < NB ->
		/* One cluster's forward scan in one step, as a snapshot at
		 * its last load (the FREE end): a bucket seen non-FREE stays
		 * so and a TOMB stays a TOMB, but a release during the scan
		 * may be missed; the real scan then skips a cluster that has
		 * a tombstone, which the "tombs -> skip" choice covers. */
		atomic {
			sidx = i; tombs = 0;
			do
			:: seen < NB && ST(bk[i]) != FREE ->
				tombs = tombs || ST(bk[i]) == TOMB;
				i = (i + 1) % NB; seen++
			:: else -> break
			od
		}
		if
		:: tombs -> skip	/* a release the real scan missed */
		:: tombs ->
			f = i;
			clen = (f - sidx + NB) % NB;
d_compact:		/* compact(v, s, len): this cluster's buckets */
			k = 0; batch = 0;
			do
			:: k < clen ->
				p = (sidx + k) % NB;
				compact_at();
				atomic { k++; p = 0; e = 0; eid = 0; home = 0; tt = 0; w = 0; wt = 0; nw = 0; ok = 0 }
			:: else -> break
			od;
			if
			:: batch != 0 -> seq = seq + 1	/* seq_close: the next even */
			:: else
			fi;
			atomic { k = 0; batch = 0 }
d_cluster:
			lowest = NONE;
			wf = bk[f];
			if
			:: ST(wf) != FREE -> goto d_cluster_done
			:: else
			fi;
#ifndef MUTATE_NO_BLOCKED
			blocked = NEXT0(wf, BLOCKED);
			cas_bk(f, wf, blocked, ok);
			if
			:: !ok -> goto d_cluster_done
			:: else
			fi;
#endif
			seq = seq | 1;			/* seq_open */
			k = clen;
			do
			:: k > 0 ->
				k--;
				bb = (sidx + k) % NB;
				w = bk[bb];
				if
				:: ST(w) == TOMB ->
					if
					:: lowest > k -> cas_bk(bb, w, NEXT0(w, FREE), ok)
					:: else
					fi
				:: LIVEST(ST(w)) ->
					rel = 0;	/* unknown home: crosses all */
					eid = en_id[ENT(w)];
					if
					:: eid == TAG(w) && (HOME(eid) - sidx + NB) % NB <= k ->
						rel = (HOME(eid) - sidx + NB) % NB
					:: else
					fi;
					if
					:: rel < lowest -> lowest = rel
					:: else
					fi
				:: else
				fi;
				atomic { w = 0; eid = 0; rel = 0; bb = 0; ok = 0 }
			:: else -> break
			od;
			seq = seq + 1;			/* seq_close */
#ifndef MUTATE_NO_BLOCKED
			bk[f] = NEXT0(blocked, FREE);	/* unblock */
#endif
d_cluster_done:
			atomic { f = 0; clen = 0; lowest = 0; wf = 0; blocked = 0; k = 0 }
		:: else
		fi;
		atomic { i = (i + 1) % NB; seen++; sidx = 0; w = 0 };
		if
		:: skip
		:: goto d_reclaim_done	/* its budget spent: a tick's stretch */
		fi
	:: else -> break
	od;
	goto d_reclaim_done;

d_nofree:
	/* No FREE bucket: the whole ring compacted as one cluster, then
	 * reclaim_without_free (no insert can be in flight) */
	p = 0; batch = 0;
	do
	:: p < NB ->
		compact_at();
		atomic { p++; e = 0; eid = 0; home = 0; tt = 0; w = 0; wt = 0; nw = 0; ok = 0 }
	:: else -> break
	od;
	if
	:: batch != 0 -> seq = seq + 1	/* seq_close: the next even */
	:: else
	fi;
	atomic { p = 0; batch = 0 };
	seq = seq | 1;
	tt = 0;
	do
	:: tt < NB ->
		wt = bk[tt];
		if
		:: ST(wt) == TOMB ->
			crossed = 0; p = 0;
			do
			:: p < NB && !crossed ->
				w = bk[p];
				if
				:: LIVEST(ST(w)) ->
					eid = en_id[ENT(w)];
					if
					:: eid != TAG(w) -> crossed = 1
					:: else ->
						home = HOME(eid);
						crossed = (p != tt &&
							   (tt - home + NB) % NB < (p - home + NB) % NB)
					fi
				:: else
				fi;
				atomic { p++; w = 0; eid = 0; home = 0 }
			:: else -> break
			od;
			if
			:: !crossed ->
				cas_bk(tt, wt, NEXT0(wt, FREE), ok);
				if
				:: ok -> break
				:: else
				fi
			:: else
			fi
		:: else
		fi;
		atomic { tt++; wt = 0; p = 0; crossed = 0; ok = 0 }
	:: else -> break
	od;
	seq = seq + 1;
	if
	:: ok ->	/* one freed: the walk goes on from a FREE bucket */
		atomic { ok = 0; tt = 0; wt = 0; p = 0; crossed = 0 };
		goto d_findfree
	:: else
	fi;

d_reclaim_done:
	atomic {
		if
		:: cc != 0 -> rreq[cc] = 0	/* the RECLAIM reply */
		:: else
		fi;
		z = 0; i = 0; seen = 0; tt = 0; wt = 0; ok = 0; cc = 0; act = 0;
		p = 0; crossed = 0; tombs = 0
	}
	goto d_loop;

	/* -------------------------------------------------- the end */
d_end:
	/* every client process exits; carmyd sees EOF on each connection */
	atomic { dead[1] = 1; gone[1] = 1; dead[2] = 1; gone[2] = 1; final = 1 }
	goto d_sweep;

d_check:
	atomic {
		assert((seq & 1) == 0);
		for (i : 0 .. NB - 1) {
			w = bk[i];
			/* P3: every owner is dead and swept, so no RUNNING entry
			 * is left (nor a BLOCKED bucket) */
			running_left = running_left ||
				ST(w) == RUNNING || ST(w) == BLOCKED;
			/* P3/P4: a live bucket's entry is held for good */
			live_without_ticket = live_without_ticket ||
				(LIVEST(ST(w)) && tk[ENT(w)] != T_LIVE)
		}
		assert(!running_left);
		assert(!live_without_ticket);
		/* P1/P2: an identity with an outstanding RESERVED answer or a
		 * record is found by a probe from its home (else the next
		 * call would run it again), a record with its result */
		for (x : IDX .. IDZ) {
			if
			:: execs[x] != 0 || done_res[x] != 0 ->
				bb = HOME(x); k = 0; e = NONE;
				do
				:: k < NB ->
					w = bk[bb];
					if
					:: ST(w) == FREE -> break
					:: LIVEST(ST(w)) && TAG(w) == x &&
					   en_bucket[ENT(w)] == bb && en_id[ENT(w)] == x ->
						e = ENT(w); break
					:: else -> k++; bb = (bb + 1) % NB
					fi
				:: else -> break
				od;
				lost_identity = (e == NONE);
				assert(!lost_identity);
				record_changed = done_res[x] != 0 &&
					!(ST(w) == COMPLETED && en_res[e] == done_res[x]);
				assert(!record_changed);
#ifndef NO_ABANDON
				/* an abandoned identity: still uncertain, as
				 * the execution abandoned */
				uncertain_changed = ab_exec[x] != 0 &&
					!(ST(w) == UNCERTAIN && en_exec[e] == ab_exec[x]);
				assert(!uncertain_changed)
#endif
			:: else
			fi
		}
	}
}

/* P2, all along: a completed identity's entry keeps its identity, result
 * and execution id, its ticket is never FREE, and the bucket en_bucket
 * names holds it COMPLETED. */
#define KEPT(x)	(done_res[x] == 0 || \
		 (en_id[done_e[x]] == x && en_res[done_e[x]] == done_res[x] && \
		  en_exec[done_e[x]] == done_exec[x] && \
		  tk[done_e[x]] != T_FREE && \
		  ST(bk[en_bucket[done_e[x]]]) == COMPLETED && \
		  ENT(bk[en_bucket[done_e[x]]]) == done_e[x]))

/* P4, all along: an entry holding a reservation (RESERVED answered, not
 * released) or a record never has a FREE ticket, so no claimer can take
 * it: the identities held never outnumber the tickets. */
#define HOLDS(e)	(occ[e] == 0 || tk[e] != T_FREE)
#if CAP > 2
#define ALL_HOLD	(HOLDS(0) && HOLDS(1) && HOLDS(2))
#else
#define ALL_HOLD	(HOLDS(0) && HOLDS(1))
#endif

/* An abandoned execution, all along: its entry keeps identity and
 * execution id, its ticket is never FREE, and the bucket en_bucket names
 * holds it UNCERTAIN (so it is neither completed, nor released, nor
 * reserved again); and once carmyd has answered an ABANDON of an entry
 * with 0, that entry's ticket is LIVE: held by no owner, so no late
 * complete or release of the owner can pass the owner check. */
#ifndef NO_ABANDON
#define KEPT_AB(x)	(ab_exec[x] == 0 || \
		 (en_id[ab_e[x]] == x && en_exec[ab_e[x]] == ab_exec[x] && \
		  tk[ab_e[x]] != T_FREE && \
		  ST(bk[en_bucket[ab_e[x]]]) == UNCERTAIN && \
		  ENT(bk[en_bucket[ab_e[x]]]) == ab_e[x]))
#define TOLD_LIVE(e)	(!ab_told[e] || tk[e] == T_LIVE)
#if CAP > 2
#define ALL_TOLD	(TOLD_LIVE(0) && TOLD_LIVE(1) && TOLD_LIVE(2))
#else
#define ALL_TOLD	(TOLD_LIVE(0) && TOLD_LIVE(1))
#endif
#define ALL_AB	(KEPT_AB(IDX) && KEPT_AB(IDY) && ALL_TOLD)
#else
#define ALL_AB	1
#endif

proctype Monitor()
{
	bool record_lost, ticket_lost, abandon_lost;
end_monitor:
	atomic {
		!(KEPT(IDX) && KEPT(IDY) && KEPT(IDZ) && ALL_HOLD && ALL_AB) ->
		record_lost = !(KEPT(IDX) && KEPT(IDY) && KEPT(IDZ));
		ticket_lost = !ALL_HOLD;
		abandon_lost = !ALL_AB;
		assert(!record_lost);
		assert(!ticket_lost);
		assert(!abandon_lost)
	}
}

init
{
	atomic {
		/* the table as carmyd left it */
		if
#if (!defined(INIT) && !defined(NO_INIT0)) || INIT == 0
		:: skip				/* empty */
#endif
#if (!defined(INIT) && !defined(NO_INIT1)) || INIT == 1
		:: bk[0] = W(TOMB, 1, 0, 0)	/* a released entry's tombstone */
#endif
#if (!defined(INIT) && !defined(NO_INIT2)) || INIT == 2
		:: /* Z completed in entry 2 at its home, tombstones all round */
		   bk[0] = W(TOMB, 1, 0, 0);
		   bk[1] = W(COMPLETED, 2, IDZ, CAP - 1);
		   bk[2] = W(TOMB, 1, 0, 0);
		   bk[3] = W(TOMB, 1, 0, 0);
		   tk[CAP - 1] = T_LIVE; en_bucket[CAP - 1] = 1;
		   en_id[CAP - 1] = IDZ; en_exec[CAP - 1] = 200;
		   en_res[CAP - 1] = 200; occ[CAP - 1] = IDZ;
		   done_res[IDZ] = 200; done_exec[IDZ] = 200;
		   done_e[IDZ] = CAP - 1
#endif
#if (!defined(INIT) && !defined(NO_INIT3)) || INIT == 3
		:: /* every ticket in use: Z at its home, X completed two
		    * buckets past its home (a TOMB and Z in between) */
		   bk[0] = W(TOMB, 1, 0, 0);
		   bk[1] = W(COMPLETED, 2, IDZ, CAP - 1);
		   bk[2] = W(COMPLETED, 2, IDX, 0);
		   bk[3] = W(TOMB, 1, 0, 0);
		   tk[CAP - 1] = T_LIVE; en_bucket[CAP - 1] = 1;
		   en_id[CAP - 1] = IDZ; en_exec[CAP - 1] = 200;
		   en_res[CAP - 1] = 200; occ[CAP - 1] = IDZ;
		   done_res[IDZ] = 200; done_exec[IDZ] = 200;
		   done_e[IDZ] = CAP - 1;
		   tk[0] = T_LIVE; en_bucket[0] = 2;
		   en_id[0] = IDX; en_exec[0] = 100;
		   en_res[0] = 100; occ[0] = IDX; execs[IDX] = 1;
		   done_res[IDX] = 100; done_exec[IDX] = 100;
		   done_e[IDX] = 0
#endif
		fi;
		run Monitor();
		run Daemon();
		run Client(1);
		run Client(2);
#ifdef RESTART
		run Killer()
#endif
	}
}
