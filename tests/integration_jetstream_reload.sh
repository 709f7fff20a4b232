#!/usr/bin/env bash
# SIGHUP in the JetStream mode (docs/scale-out.md): a reload that changes a
# profile's parameters reaches every partition's pipeline between two
# groups, and users keep their windows and spend, as on the ZeroMQ path.
# Here geoind's points_per_window goes from 30 to 60, so every point
# released after the reload spends half of what one spent before, in the
# same budget window; a reload that changes the set of profiles is
# refused and changes nothing.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"
. "$top_srcdir/tests/jetstream_lib.sh"

require_nats

USERS=40
PER_USER=3
POINTS=$((USERS * PER_USER))

start_nats_single
CONF=$TMPD/tracesand.conf
cp "$SHIPPED_CONF" "$CONF"
grep -q 'points_per_window = 30;' "$CONF" || fatal "the shipped geoind block changed"
make_trace "$TMPD/before.csv" $USERS $PER_USER
# The same users an hour later: still in their one-day windows.
awk -F, -v OFS=, 'NR == 1 { print; next } { $2 += 3600; print }' \
    "$TMPD/before.csv" >"$TMPD/after.csv"

SHIPPED_CONF=$CONF start_instance a -o nats.lease_ttl_s=2
A_PID=$INSTANCE_PID A_LOG=$INSTANCE_LOG A_HTTP=$INSTANCE_HTTP
wait_owned "$A_HTTP" 10
check_eq "a owns all 16 partitions" 16 "$OWNED"

replay() {
    "$TRACESAN" replay --jetstream "$NATS_URL" --partitions 16 "$1" \
        2>>"$TMPD/replay.log" || fatal "replay of $1 failed"
}
# eps_of FROM: the distinct eps of the outputs from the FROMth on (one
# value expected).
eps_of() {
    "$TRACESAN" jetstream --server "$NATS_URL" outputs |
        tail -n +"$(($1 + 1))" | awk -F, '$3 == "sanitized" { print $8 }' | sort -u
}

replay "$TMPD/before.csv"
wait_distinct_outputs $POINTS 30 || fail "outputs before the reload missing"
before=$(eps_of 1)
check_eq "before the reload: one eps per point" 1 "$(printf '%s\n' "$before" | wc -l)"

# A reload that adds a profile is refused as a whole: nothing changes.
cp "$CONF" "$TMPD/good.conf"
sed -i 's/^profiles = {$/profiles = {\n    extra = { mechanism = "geoind"; };/' "$CONF"
grep -q 'extra = { mechanism' "$CONF" || fatal "could not add a profile"
kill -HUP "$A_PID"
wait_for_log() { # PATTERN SECONDS
    local deadline=$(( $(date +%s) + $2 ))
    while ! grep -q -e "$1" "$A_LOG"; do
        [ "$(date +%s)" -lt $deadline ] || return 1
        sleep 0.1
    done
}
if wait_for_log 'reload refused' 10; then
    pass "a reload that adds a profile is refused"
else
    fail "no refusal logged"; show_file "$A_LOG" 20
fi

cp "$TMPD/good.conf" "$CONF"
sed -i '0,/points_per_window = 30;/s//points_per_window = 60;/' "$CONF"
kill -HUP "$A_PID"
if wait_for_log 'reload: profiles applied to 16 active partitions' 10; then
    pass "the reload reaches all 16 partitions"
else
    fail "the partitions did not take the reload"; show_file "$A_LOG" 20
fi
check_eq "the refused reload was not applied to the partitions" 1 \
    "$(grep -c 'reload: profiles applied' "$A_LOG")"

replay "$TMPD/after.csv"
wait_distinct_outputs $((2 * POINTS)) 30 || fail "outputs after the reload missing"
after=$(eps_of $((POINTS + 1)))
check_eq "after the reload: one eps per point" 1 "$(printf '%s\n' "$after" | wc -l)"
if awk -v a="$after" -v b="$before" 'BEGIN { r = a / b; exit !(r > 0.5 - 1e-9 && r < 0.5 + 1e-9) }'; then
    pass "points_per_window 30 -> 60 halves the eps per point ($before -> $after)"
else
    fail "eps per point $before -> $after, expected half"
fi
# Same window: the spend goes on from where it was (3 points at eps, then
# 3 at eps/2), so the last spent of a user is 4.5 eps.
read_streams
spent=$(awk -F, '$3 == "sanitized" && $4 == "u1" { s = $9 } END { print s }' "$TMPD/outputs.csv")
if awk -v s="$spent" -v e="$before" 'BEGIN { r = s / e; exit !(r > 4.5 - 1e-6 && r < 4.5 + 1e-6) }'; then
    pass "the user's window goes on: spent 4.5 x the old eps after 6 points"
else
    fail "u1 spent $spent, expected 4.5 x $before"
fi

DAEMON_PID=$A_PID DAEMON_LOG=$A_LOG stop_daemon a
finish
