#!/usr/bin/env bash
# Deliveries and answers lost on their way (issue 30), as a server that
# goes away with them leaves them:
#
# - A pull request's answer lost: the consumer's delivery count jumps, the
#   partition stops taking input there and is rebuilt once its groups in
#   flight retired. A gap seen on the first message of a fetch once left
#   an open group with no input that nothing would ever seal, so the
#   rebuild waited for it for ever and the partition's outputs never came
#   (a whole partition's 1,500 outputs missing in CI).
# - A changelog append's answer lost although the server stored the
#   record: the record is sent again, expecting the same sequence; the
#   server refuses it (the stored copy is the subject's last record now),
#   and the refusal is settled by reading that record back: ours, so the
#   group is committed and goes on, with no rebuild and no second copy.
# - A lease's take failing (the lease bucket electing its leader): taken
#   again after a pause. A failed take once made the instance forget the
#   lease until the bucket's watcher showed it again, which it never did
#   when nothing else wrote it, so the lease was never taken again (the
#   order test, CI: all 16 partitions lost at once, none taken back).
# - An outcome's answer lost although the stream stored it: the group's
#   outcomes not acknowledged are sent again after a while (the stored
#   one dropped there as a duplicate by its message id), with no rebuild.
# - A lease renewal's answer lost although the bucket stored it: the next
#   renewal, expecting the old revision, is refused, and the refusal is
#   settled by reading the lease back: ours at the newer revision, so the
#   lease is kept. Before, the refusal read as a taker's, and a lone
#   instance dropped its leases right after a node's loss (cluster test).
#
# The test hooks TRACESAND_TEST_FAIL_TAKES=N (the first N takes fail),
# TRACESAND_TEST_GAP_EVERY=N (every Nth fetch with input
# takes its first message as lost) and
# TRACESAND_TEST_DROP_APPEND_ANSWER_EVERY=N (every Nth stored append is
# taken as unanswered), TRACESAND_TEST_DROP_OUTCOME_ANSWER_EVERY=N (the
# same for outcomes) and TRACESAND_TEST_DROP_RENEWAL_ANSWER_EVERY=N (the
# same for lease renewals) make all five happen (environment variables, for tests
# only). One nats-server, one instance, groups in flight: every input
# still has exactly one output, and the ledger, budget and ownership
# checks of the other JetStream tests hold.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"
. "$top_srcdir/tests/jetstream_lib.sh"

require_nats

TTL=2
USERS=160
PER_USER=25
POINTS=$((USERS * PER_USER))
GAP_EVERY=7
FAIL_TAKES=3
DROP_EVERY=5
DROP_OUTCOME_EVERY=97
DROP_RENEWAL_EVERY=50

start_nats_single
make_trace "$TMPD/trace.csv" $USERS $PER_USER

TRACESAND_TEST_FAIL_TAKES=$FAIL_TAKES TRACESAND_TEST_GAP_EVERY=$GAP_EVERY \
    TRACESAND_TEST_DROP_APPEND_ANSWER_EVERY=$DROP_EVERY \
    TRACESAND_TEST_DROP_OUTCOME_ANSWER_EVERY=$DROP_OUTCOME_EVERY \
    TRACESAND_TEST_DROP_RENEWAL_ANSWER_EVERY=$DROP_RENEWAL_EVERY \
    start_instance a \
    -o nats.lease_ttl_s=$TTL -o nats.groups_in_flight=4 \
    -o nats.fetch_batch=2
A_PID=$INSTANCE_PID A_LOG=$INSTANCE_LOG A_HTTP=$INSTANCE_HTTP
wait_owned "$A_HTTP" 20
check_eq "a owns all 16 partitions (its first $FAIL_TAKES takes failed)" 16 "$OWNED"

"$TRACESAN" replay --jetstream "$NATS_URL" --partitions 16 --batch 5 \
    "$TMPD/trace.csv" 2>"$TMPD/replay.log" &
REPLAY_PID=$!
background_pids+=("$REPLAY_PID")
wait_replay "$REPLAY_PID" 60 "replay exits 0"

if wait_distinct_outputs $POINTS 90; then pass "TRACESAN_OUT holds $POINTS outputs"
else fail "outputs missing"; show_file "$A_LOG" 30; fi
gaps=$(grep -c "a gap in the consumer's deliveries" "$A_LOG")
check_ge "the hook made gaps (the rebuild path ran)" 5 "${gaps:-0}"
settled=$(grep -c "a changelog append answered late was stored" "$A_LOG")
check_ge "appends whose answer was lost were sent again and found stored" 5 \
    "${settled:-0}"
check "no append loss led to a rebuild" \
    bash -c "! grep -q 'a changelog append failed' '$A_LOG'"
resent=$(grep -c "outcomes unanswered; sending those not acknowledged again" "$A_LOG")
check_ge "groups whose outcome answers were lost sent them again" 5 \
    "${resent:-0}"
check "no lost outcome answer led to a rebuild" \
    bash -c "! grep -q 'publishing outcomes' '$A_LOG'"
kept=$(grep -c "a lease renewal answered late was stored" "$A_LOG")
check_ge "renewals whose answer was lost were found stored, the lease kept" 3 \
    "${kept:-0}"
check "no lease was dropped as taken (a is alone)" \
    bash -c "! grep -q 'reason=lease taken' '$A_LOG'"
# Every output stored does not mean every group retired: a group whose
# outcome answers the hook dropped waits for its resend before its inputs
# are acknowledged. What must not happen is a group that never retires.
stuck=""
for _ in $(seq 60); do
    stuck=$(curl -s "http://$A_HTTP/metrics" |
                awk '/^tracesand_partition_groups_in_flight\{/ { s += $2 } END { print s + 0 }')
    [ "$stuck" = 0 ] && break
    sleep 0.5
done
check_eq "no group left in flight once the input is served (within 30 s)" 0 "$stuck"
DAEMON_PID=$A_PID DAEMON_LOG=$A_LOG stop_daemon a

read_streams
stream_checks "$A_LOG"
finish
