/*
 * post.pml - a Promela model of posted requests (shm/post.c) and the bell
 * of the carmyd loop that takes them (daemon/server.c:`loop_run`,
 * daemon/request.c:`req_take_posts`), checked with spin: `make model`.
 *
 * One client makes NREQ requests on one connection, one at a time, as
 * libcarmy does (libclient/client.c:`exchange`): it posts each in its slot
 * and reads its loop's bell; a loop that may be asleep gets the request
 * taken back and sent on the socket. One loop takes posts between batches
 * of events, reads the socket, and before it sleeps says so in its bell
 * and looks at the slot once more. The socket is a channel; a post
 * carries the number of its request, as the slot carries the request
 * itself.
 *
 * Checked: every request is handled exactly once (never both taken from
 * the slot and read from the socket, never twice, never an old one), and
 * no wake-up is lost: a run in which the loop sleeps for ever while the
 * client waits for an answer is an invalid end state. The model is
 * sequentially consistent: shm_post's CAS and its shm_mb(), and the loop's
 * shm_bell_set() barrier before its last look, are what make the C code
 * behave so. Each load, store or CAS of a shared word is one step.
 *
 * Not modelled: other writers of the segment (a bell written over, a torn
 * post: the client's CARMY_ACK_CHECK_MS safety net and the sum cover
 * those; SAFETY_NET adds the net here), the generation (one connection),
 * the ack word (an answer is the flag `answered`).
 *
 * Map from the model to the C code, as file:`function` and the step in it:
 *
 *  proctype Client        libclient/client.c:`exchange` for a RESERVE to a
 *                         durable store (`confirm` builds the post)
 *    w = post ...         shm/post.c:`shm_post`: the post word's load (a
 *                         post not yet taken there: -ESTALE), the stores
 *                         of the body, the CAS to READY from the word
 *                         seen, `shm_mb`, the load of the bell (bl_awake)
 *    awake / else         the bell says awake: SHM_POSTED; asleep:
 *                         `shm_post`'s CAS READY -> NONE, won: SHM_WITHDRAWN
 *                         and `exchange` sends the request (`send_msg`);
 *                         lost: the loop has it, SHM_POSTED
 *    await_ack            libclient/client.c:`await_ack` (the ack word
 *                         awaited; `answered` stands for it); SAFETY_NET:
 *                         after ack_check_ms,
 *                         shm/post.c:`shm_post_withdraw` (the CAS READY ->
 *                         NONE) and the send
 *  proctype Loop          daemon/server.c:`loop_run`
 *    bell = 0; take       before a blocking epoll_wait:
 *                         shm/post.c:`shm_bell_set` (false, then its
 *                         barrier) and the last look,
 *                         daemon/request.c:`req_take_posts`;
 *                         one taken: `shm_bell_set` (true) and no sleep
 *    end_asleep           epoll_wait(-1), woken by input on the socket;
 *                         then `shm_bell_set` (true)
 *    :: true -> skip      a spinning epoll_wait(0) (--spin-us), which
 *                         leaves the bell alone
 *    sock ? r             the batch: daemon/request.c:`req_read` and the
 *                         request it reads
 *    take(seen)           daemon/request.c:`req_take_posts` for this
 *                         connection after the batch: the hint
 *                         (shm/post.c:`shm_post_ready`), then the CAS
 *                         READY -> TAKEN (`shm_post_take`; lost: taken
 *                         back, it comes on the socket); handle() is
 *                         `on_request` with the RESERVE taken
 *
 * Mutations, each of which spin must refute:
 *   MUTATE_NO_LAST_LOOK   the loop sleeps without looking at the slot after
 *                         clearing its bell
 *   MUTATE_BELL_FIRST     the client reads the bell before it posts
 *   MUTATE_SEND_ANYWAY    the client sends what it took back even when its
 *                         CAS lost (the loop had taken it)
 */
#define NREQ 3
#define NONE 0
#define READY 1
#define TAKEN 2

byte post = NONE;	/* the post word's state (ak_post & 3) */
byte post_req;		/* the request posted (the slot's body) */
bit bell = 1;		/* the loop is awake (shm_bell) */
chan sock = [NREQ] of { byte };
bit answered;		/* the answer to the request in hand */
byte handled[NREQ];	/* ghost: how often carmyd handled each request */
byte in_hand = 255;	/* ghost: the request the client waits for */

inline handle(r)
{
	assert(r == in_hand);
	handled[r]++;
	assert(handled[r] == 1);
	answered = 1
}

/* take_posts() for one connection: the hint, then the CAS. */
inline take(seen)
{
	seen = (post == READY);
	if
	:: seen ->
		if
		:: atomic { post == READY -> post = TAKEN; handle(post_req) }
		:: atomic { post != READY -> skip }	/* taken back */
		fi
	:: else -> skip
	fi
}

active proctype Client()
{
	byte i = 0, w;
	bit awake, won;

	do
	:: i < NREQ ->
		in_hand = i;
#ifdef MUTATE_BELL_FIRST
		awake = bell;
#endif
		/* shm_post: the word must not hold a post not yet taken; the
		 * body, then the CAS to READY from what was seen. */
		w = post;
		assert(w != READY);
		post_req = i;
		atomic { assert(post == w); post = READY };
#ifndef MUTATE_BELL_FIRST
		awake = bell;
#endif
		if
		:: awake -> skip
		:: else ->
			atomic {
				if
				:: post == READY -> post = NONE; won = 1
				:: else -> won = 0
				fi
			}
#ifdef MUTATE_SEND_ANYWAY
			sock ! i
#else
			if
			:: won -> sock ! i
			:: else -> skip
			fi
#endif
		fi;
		/* await_ack */
		do
		:: answered -> answered = 0; break
#ifdef SAFETY_NET
		:: atomic { post == READY -> post = NONE }; sock ! i
#endif
		od;
		i++
	:: else -> break
	od;
	/* every request answered once */
	i = 0;
	do
	:: i < NREQ -> assert(handled[i] == 1); i++
	:: else -> break
	od
}

active proctype Loop()
{
	byte r;
	bit seen;

	do
	::
		/* epoll_wait(-1) or, while spinning, epoll_wait(0) */
		if
		:: true ->
			bell = 0;
#ifdef MUTATE_NO_LAST_LOOK
			seen = 0;
#else
			take(seen);
#endif
			if
			:: seen -> bell = 1
			:: else ->
end_asleep:			nempty(sock);	/* woken by input */
				bell = 1
			fi
		:: true -> skip
		fi;
		/* the batch: whatever the socket has */
		if
		:: nempty(sock) -> sock ? r; handle(r)
		:: empty(sock) -> skip
		fi;
		/* between batches */
		take(seen)
	od
}
