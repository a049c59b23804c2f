/*
 * The claim protocol of pgq-supervisor, model-checked with spin (Debian's `spin`).
 *
 * What is modelled, one process per moving part:
 *   - Producer: commits jobs 0 and 1 (a batch with a `then` job) in either order (a late commit
 *     can land below a child's claim cursor), and retries the request behind job 0 (unique key K)
 *     as job 2 whenever no job holds K.
 *   - Child c (c = 0, 1; one per host): claims from its cursor or from the head, runs, and ends
 *     the attempt fenced on the claim's token: completed, failed (retried or discarded), or
 *     cancelled; it may die mid-job, lose a claim's reply, have its session cut mid-question.
 *   - Master c: requeues a dead child's jobs at once (by the child's incarnation), respawns it,
 *     renews its live children's leases, and at a shutdown deadline gives a job back unspent.
 *   - Clock: expires a lease that nobody renews (its host is cut off).
 *   - Rescuer, Reconciler (outcome unknown), Operator (a cancel, a replay).
 * Jobs 0 and 2 are of a kind with effects outside the database (`effects: external`).
 *
 * Each step that is one SQL statement is one atomic step: PostgreSQL re-checks an UPDATE's
 * WHERE on the row's latest version once it holds the row lock, so a fenced single-row write
 * is atomic. The batch's counters, which span rows and statements, are modelled step by step.
 *
 * Invariants (assertions; the final ones when nothing more can happen):
 *   I1 no job is recorded by a worker that lost it (the fence);
 *   I2 a job runs again only when its previous run could not be recorded (and an external one
 *      only after a recorded failure, a resolved retry or a replay: never while unknown);
 *   I3 two runs of one job overlap only across a network partition;
 *   I4 a job is cancelled only when a cancel was asked for since its last replay;
 *   I5 the batch's `then` job is enqueued exactly once, after every member ended;
 *   I6 no second job for a unique key while the first one's outcome is unknown;
 *   I7 at the end, no committed job is lost: every job is finished (done, dead, cancelled),
 *      none is stranded running, waiting unclaimed below a cursor, or unknown.
 *
 * Broken variants (-D...), each one a defect fixed in an earlier round, must each fail:
 *   BROKEN_NO_FENCE          completion matched on the job's id alone
 *   BROKEN_ATTEMPT_FENCE     fence on the attempt number, which a give-back decrements (ABA)
 *   BROKEN_RENEWAL_STARVED   lease renewal that a held horizon times out (issue 30)
 *   BROKEN_UNKNOWN_REQUEUE   a dead child's external job requeued instead of held unknown
 *   BROKEN_UNKNOWN_FREES_KEY the unique key not held by an unknown job (issue 30)
 *   BROKEN_REPLAY_KEEPS_CANCEL a replayed dead letter keeps its old cancel request
 *   BROKEN_SNAPSHOT_COUNT    the batch's last member found by a snapshot read of the counters
 *   BROKEN_NO_HEAD_CLAIM     claims only from the cursor, never from the head
 *   BROKEN_NO_GIVEBACK       a claim whose reply was lost is never given back on reconnect
 *   BROKEN_CUT_IS_LOST       a lease question on a cut session read as "lease lost"
 */

#define NJ 3
#define NC 2
#define MAXATT 2
#define EXT(j) (j != 1)
#define MEMBER(j) (j < 2 && member[j])
#define TERMINAL(j) (state[j] == DONE || state[j] == DEAD || state[j] == CANCELLED)
#ifdef BROKEN_UNKNOWN_FREES_KEY
#define HOLDS_KEY(j) (state[j] == AVAIL || state[j] == RUNNING)
#else
#define HOLDS_KEY(j) (state[j] == AVAIL || state[j] == RUNNING || state[j] == UNKNOWN)
#endif
#define ME(c) (c * 16 + inc[c] + 1)
/* A child claims past its cursor (jobs in id order here), or from the head. */
#ifdef BROKEN_NO_HEAD_CLAIM
#define CLAIMABLE(c, j) (state[j] == AVAIL && cursor[c] < j + 1)
#else
#define CLAIMABLE(c, j) (state[j] == AVAIL)
#endif
/* A lease expires only when nobody renews it: its host is cut off from the database. */
#ifdef BROKEN_RENEWAL_STARVED
#define UNRENEWED(j) true
#else
#define UNRENEWED(j) (!connected[owner[j] / 16])
#endif
#define EXPIRABLE(j) (state[j] == RUNNING && !expired[j] && owner[j] > 0 && UNRENEWED(j))

mtype = { ABSENT, AVAIL, RUNNING, DONE, DEAD, UNKNOWN, CANCELLED };

mtype state[NJ];
byte token[NJ];          /* lease_id: a new one for every claim, never reused */
byte owner[NJ];          /* the child incarnation holding it (locked_by); 0 for none */
byte attempts[NJ];
bool expired[NJ];        /* its lease expired on the database's clock */
bool cancel_req[NJ];
bool asked_cancel[NJ];   /* a cancel was asked for since its last replay */
bool member[2];          /* jobs 0 and 1 belong to the batch until a replay takes them out */
byte runs[NJ];           /* handler executions started */
byte running[NJ];        /* handler executions under way */
byte rerun_ok[NJ];       /* runs the protocol allows beyond the first */
byte ext_ok[NJ];         /* the same for an external kind: failure, resolved retry, replay */
bool key_was_unknown;    /* job 2 was enqueued while job 0 was unknown */
byte next_token;

byte inc[NC];            /* each child slot's incarnation */
bool alive[NC];
bool connected[NC];
bool partitioned;        /* a partition happened: overlapping runs are then allowed */
bool writing[NC];        /* the child's handler ended and its outcome's write is on the way */
bool doomed[NC];         /* the master stopped the child at its deadline: it dies after that write */
byte cursor[NC];         /* 0: none; else 1 + the id of the last job claimed */

/* Fault budgets, zero unless a check's scenario gives them (-DCRASHES=1 ...): each scenario
 * turns on the faults its invariants are about, so that every one is checked exhaustively. */
#ifndef CRASHES
#define CRASHES 0
#endif
#ifndef PARTITIONS
#define PARTITIONS 0
#endif
#ifndef LOST_REPLIES
#define LOST_REPLIES 0
#endif
#ifndef CUTS
#define CUTS 0
#endif
#ifndef DEADLINES
#define DEADLINES 0
#endif
#ifndef CANCELS
#define CANCELS 0
#endif
#ifndef REPLAYS
#define REPLAYS 0
#endif
#ifndef RETRY_RESOLUTIONS
#define RETRY_RESOLUTIONS 0
#endif
byte crashes = CRASHES;
byte partitions = PARTITIONS;
byte lost_replies = LOST_REPLIES;
byte cuts = CUTS;
byte deadlines = DEADLINES;
byte cancels = CANCELS;
byte replays = REPLAYS;
byte retry_resolutions = RETRY_RESOLUTIONS;

/* the batch: one shard per member, as pgq.batch_shards with shards = 2 */
byte remaining[2];
byte pending[2];         /* 1 + the pid of the transaction whose decrement is not committed */
byte shards_left = 2;
bool batch_locked;
bool finished;
byte thens;

inline become_cancelled(j) {
    assert(asked_cancel[j]);                                    /* I4 */
    state[j] = CANCELLED
}

/* A member's end, in the statement that records it: its shard row's decrement. */
inline end_member(j) {
    if
    :: MEMBER(j) -> remaining[j] = remaining[j] - 1; pending[j] = _pid + 1
    :: else -> skip
    fi
}

inline fire_then() {
    assert(!finished);                                          /* I5 */
    assert(TERMINAL(0) || !member[0]);
    assert(TERMINAL(1) || !member[1]);
    thens++;
    finished = 1
}

/* The rest of a member's ending transaction, then its commit. Clean (pgq.batch_ended): a shard
 * that reached zero decrements the batch row's shards_left under that row's lock, and the one
 * that brings it to zero finishes the batch. */
inline settle_batch(j) {
    if
    :: j < 2 && pending[j] == _pid + 1 ->
#ifdef BROKEN_SNAPSHOT_COUNT
        /* the statement's snapshot sees the other shard as it was last committed */
        atomic {
            if
            :: remaining[j] == 0 && !finished &&
               (!member[1 - j] || remaining[1 - j] == 0 && pending[1 - j] == 0) -> fire_then()
            :: else -> skip
            fi
        };
        pending[j] = 0
#else
        if
        :: remaining[j] == 0 ->
            atomic { !batch_locked -> batch_locked = 1 };
            shards_left--;
            if
            :: shards_left == 0 && !finished -> fire_then()
            :: else -> skip
            fi;
            batch_locked = 0
        :: else -> skip
        fi;
        pending[j] = 0
#endif
    :: else -> skip
    fi
}

/* A job whose attempt ran without an outcome (its child died, its lease was rescued): unknown
 * for an external kind, cancelled when asked, dead when out of attempts, else available with its
 * attempt spent. */
inline give_back_spent(j) {
    owner[j] = 0;
    expired[j] = 0;
    if
#ifndef BROKEN_UNKNOWN_REQUEUE
    :: EXT(j) -> state[j] = UNKNOWN
#endif
    :: else ->
        if
        :: cancel_req[j] -> become_cancelled(j); end_member(j)
        :: !cancel_req[j] && attempts[j] >= MAXATT -> state[j] = DEAD; end_member(j)
        :: !cancel_req[j] && attempts[j] < MAXATT -> state[j] = AVAIL; rerun_ok[j]++
        fi
    fi
}

/* Given back without spending the attempt: it never ran (or its run is not to count). */
inline give_back_unspent(j, me) {
    if
    :: state[j] == RUNNING && owner[j] == me -> state[j] = AVAIL; owner[j] = 0; attempts[j]--
    :: else -> skip
    fi
}

proctype Producer() {
    /* jobs 0 and 1 commit in either order: a late commit lands below a cursor */
    if
#ifdef BATCH
    /* a batch's members commit together, with the batch */
    :: atomic { state[0] = AVAIL; state[1] = AVAIL }
#else
    :: atomic { state[0] = AVAIL }; atomic { state[1] = AVAIL }
    :: atomic { state[1] = AVAIL }; atomic { state[0] = AVAIL }
#endif
    fi;
#ifdef KEY_RETRY
    /* the request behind job 0 retried: a new job only while no job holds the key */
    atomic {
        !HOLDS_KEY(0) ->
        key_was_unknown = (state[0] == UNKNOWN);
        state[2] = AVAIL
    }
#endif
}

proctype Child(byte c) {
    byte j;
    byte tok;
    byte att;
    byte me;
    bool in_hand;
end_idle:
    do
    :: atomic {
        alive[c] && connected[c] && (CLAIMABLE(c, 0) || CLAIMABLE(c, 1) || CLAIMABLE(c, 2)) ->
        if
        :: CLAIMABLE(c, 0) -> j = 0
        :: CLAIMABLE(c, 1) -> j = 1
        :: CLAIMABLE(c, 2) -> j = 2
        fi;
        if
        :: cursor[c] < j + 1 -> cursor[c] = j + 1
        :: else -> skip
        fi;
        next_token++;
        tok = next_token;
        token[j] = tok;
        me = ME(c);
        owner[j] = me;
        expired[j] = 0;
        state[j] = RUNNING;
        attempts[j]++;
        att = attempts[j];
        in_hand = 1;
        /* the claim committed as the connection died: its reply never arrives */
        if
        :: lost_replies > 0 -> lost_replies--; in_hand = 0
        :: true -> skip
        fi
       };
       if
       :: !in_hand ->
#ifndef BROKEN_NO_GIVEBACK
            /* reconnected: what is ours on paper but not in hand goes back unspent */
            atomic { alive[c] && connected[c] -> give_back_unspent(j, me) }
#else
            skip
#endif
       :: in_hand ->
            atomic {
                assert(runs[j] <= (EXT(j) -> ext_ok[j] : rerun_ok[j]));   /* I2 */
                assert(running[j] == 0 || partitioned);                 /* I3 */
                assert(!(j == 2 && key_was_unknown));                   /* I6 */
                runs[j]++;
                running[j]++
            };
            if
            :: atomic { crashes > 0 -> crashes--; running[j]--; alive[c] = 0 }
            :: atomic { running[j]-- };
               /* a lease question asked on a session cut for a moment */
               if
               :: cuts > 0 -> cuts--;
#ifdef BROKEN_CUT_IS_LOST
                    /* read as lost: the result dropped, the job given back unspent */
                    atomic { alive[c] && connected[c] -> give_back_unspent(j, me) };
                    goto next
#else
                    skip   /* the last answer stands */
#endif
               :: true -> skip
               fi;
               writing[c] = 1;
               /* the attempt's outcome, fenced on the claim's token */
               atomic {
                    alive[c] && connected[c] ->
                    if
#if defined(BROKEN_NO_FENCE)
                    :: state[j] == RUNNING ->
#elif defined(BROKEN_ATTEMPT_FENCE)
                    :: state[j] == RUNNING && attempts[j] == att ->
#else
                    :: state[j] == RUNNING && token[j] == tok ->
#endif
                        assert(owner[j] == me);                         /* I1 */
                        owner[j] = 0;
                        if
                        :: state[j] = DONE; end_member(j)
                        :: cancel_req[j] -> become_cancelled(j); end_member(j)
                        :: attempts[j] >= MAXATT -> state[j] = DEAD; end_member(j)
                        :: attempts[j] < MAXATT && !cancel_req[j] ->
                            state[j] = AVAIL; rerun_ok[j]++; ext_ok[j]++
                        fi
                    :: else -> skip   /* not ours any more: the result is dropped */
                    fi;
                    writing[c] = 0;
                    if
                    :: doomed[c] -> doomed[c] = 0; alive[c] = 0
                    :: else -> skip
                    fi
               };
               settle_batch(j)
            fi
       fi;
next:
       skip
    od
}

proctype Master(byte c) {
    byte j;
    bool ended[NJ];
end_watch:
    do
    :: atomic {
        /* the child died: its jobs requeued at once, by its incarnation, and it is replaced */
        !alive[c] && connected[c] ->
        for (j : 0 .. NJ - 1) {
            ended[j] = 0;
            if
            :: state[j] == RUNNING && owner[j] == ME(c) -> give_back_spent(j); ended[j] = 1
            :: else -> skip
            fi
        }
        inc[c]++;
        cursor[c] = 0;
        alive[c] = 1
       };
       for (j : 0 .. 1) {
           if
           :: ended[j] -> settle_batch(j)
           :: else -> skip
           fi
       }
    :: atomic {
        /* the shutdown deadline: a job that ran but was not recorded goes back unspent as its
         * child is killed, while the child's last write may still be on the way */
        deadlines > 0 && alive[c] && connected[c] && writing[c] &&
        state[1] == RUNNING && owner[1] == ME(c) ->
        deadlines--;
        doomed[c] = 1;
        give_back_unspent(1, ME(c));
        rerun_ok[1]++
       }
    :: atomic { partitions > 0 && connected[c] -> partitions--; connected[c] = 0; partitioned = 1 }
    :: atomic { !connected[c] -> connected[c] = 1 }
    od
}

proctype Clock() {
end_tick:
    do
    :: atomic { EXPIRABLE(0) -> expired[0] = 1 }
    :: atomic { EXPIRABLE(1) -> expired[1] = 1 }
    :: atomic { EXPIRABLE(2) -> expired[2] = 1 }
    od
}

/* Fleet-wide, on whichever host holds the duty (one host at most is cut off). */
proctype Rescuer() {
    byte j;
end_rescue:
    do
    :: atomic {
        (state[0] == RUNNING && expired[0] || state[1] == RUNNING && expired[1] ||
         state[2] == RUNNING && expired[2]) ->
        if
        :: state[0] == RUNNING && expired[0] -> j = 0
        :: state[1] == RUNNING && expired[1] -> j = 1
        :: state[2] == RUNNING && expired[2] -> j = 2
        fi;
        rerun_ok[j]++;
        give_back_spent(j)
       };
       settle_batch(j)
    od
}

proctype Reconciler() {
    byte j;
end_reconcile:
    do
    :: atomic {
        (state[0] == UNKNOWN || state[2] == UNKNOWN) ->
        if
        :: state[0] == UNKNOWN -> j = 0
        :: state[2] == UNKNOWN -> j = 2
        fi;
        if
        :: state[j] = DONE; end_member(j)
        :: state[j] = DEAD; end_member(j)
        :: retry_resolutions > 0 -> retry_resolutions--;
            state[j] = AVAIL; rerun_ok[j]++; ext_ok[j]++
        fi
       };
       settle_batch(j)
    od
}

#define CANCELLABLE(j) (state[j] == AVAIL || state[j] == RUNNING)
#define REPLAYABLE(j) (state[j] == DEAD && (j == 1 || !HOLDS_KEY(0) && !HOLDS_KEY(2)))

proctype Operator() {
    byte j;
end_ops:
    do
    :: atomic {
        cancels > 0 && (CANCELLABLE(0) || CANCELLABLE(1) || CANCELLABLE(2)) ->
        if
        :: CANCELLABLE(0) -> j = 0
        :: CANCELLABLE(1) -> j = 1
        :: CANCELLABLE(2) -> j = 2
        fi;
        cancels--;
        asked_cancel[j] = 1;
        if
        :: state[j] == AVAIL -> become_cancelled(j); end_member(j)
        :: else -> cancel_req[j] = 1
        fi
       };
       settle_batch(j)
    :: atomic {
        replays > 0 && (REPLAYABLE(0) || REPLAYABLE(1) || REPLAYABLE(2)) ->
        if
        :: REPLAYABLE(0) -> j = 0
        :: REPLAYABLE(1) -> j = 1
        :: REPLAYABLE(2) -> j = 2
        fi;
        replays--;
        state[j] = AVAIL;
        attempts[j] = 0;
        asked_cancel[j] = 0;
#ifndef BROKEN_REPLAY_KEEPS_CANCEL
        cancel_req[j] = 0;
#endif
        /* replayed, it runs on its own: its batch counted it when it ended */
        if
        :: j < 2 -> member[j] = 0
        :: else -> skip
        fi;
        rerun_ok[j]++;
        ext_ok[j]++
       }
    od
}

/* When nothing more can happen, nothing may be left behind. */
proctype Finale() {
    byte j;
    timeout ->
    for (j : 0 .. NJ - 1) {
        assert(state[j] != RUNNING && state[j] != AVAIL && state[j] != UNKNOWN);   /* I7 */
    }
#ifdef BATCH
    assert(thens == 1);                                                        /* I5 */
#endif
    skip
}

init {
    byte c;
    atomic {
        state[0] = ABSENT; state[1] = ABSENT; state[2] = ABSENT;
#ifdef BATCH
        member[0] = 1; member[1] = 1;
        remaining[0] = 1; remaining[1] = 1;
#endif
        for (c : 0 .. NC - 1) { alive[c] = 1; connected[c] = 1 }
        run Producer();
        for (c : 0 .. NC - 1) { run Child(c); run Master(c) }
        run Clock();
        run Rescuer();
        run Reconciler();
        run Operator();
        run Finale()
    }
}
