#!/usr/bin/env bash
# tracesan learn --held-out-users and --smoothing (issue 17): 12 synthetic
# users walk a city of 500 m cells the way GeoLife users do at a one-minute
# tick (mostly staying, sometimes one cell on). Users u10 and u11 are held
# out. Checks: the held-out users are not learnt from (the model equals the
# one learnt with --exclude-users), their transitions are scored (none
# impossible), the displacement back-off predicts them better than the
# uniform smoothing of the first learner, and both models drive the pim
# profile with the paper's rules and with the defaults, the observer's
# replay matching every published |ΔX|.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

FEED=$TMPD/walks.csv
awk 'BEGIN {
    srand(17)
    print "user,ts,lat,lon"
    for (u = 0; u < 12; u++) {
        r = int(rand() * 18) + 1; c = int(rand() * 18) + 1
        for (i = 0; i < 300; i++) {
            x = rand()
            if (x > 0.6) { d = int(rand() * 4)
                if (d == 0 && c < 19) c++; if (d == 1 && c > 0) c--
                if (d == 2 && r < 19) r++; if (d == 3 && r > 0) r-- }
            printf "u%02d,%d,%.7f,%.7f\n", u, 1700000000 + 60 * i,
                39.9 + (r + 0.5) * 0.0045, 116.3 + (c + 0.5) * 0.00585
        }
    }
}' >"$FEED"
REGION=39.9,116.3,39.99,116.417
learn() { "$TRACESAN" learn --region "$REGION" --cell-m 500 --tick-s 60 "$@"; }

learn --held-out-users u10,u11 --output "$TMPD/held.model" "$FEED" \
    2>"$TMPD/held.log" || { show_file "$TMPD/held.log"; fatal "learn failed"; }
learn --exclude-users u10,u11 --output "$TMPD/excluded.model" "$FEED" \
    2>"$TMPD/excluded.log" || { show_file "$TMPD/excluded.log"; fatal "learn failed"; }
check "held-out users are not learnt from" cmp -s "$TMPD/held.model" "$TMPD/excluded.model"

held=$(grep "held out:" "$TMPD/held.log")
note "$held"
check_eq "both held-out users scored" "users=2" "$(grep -o 'users=[0-9]*' <<<"$held")"
check_ge "their transitions scored" 500 "$(sed -n 's/.*transitions=\([0-9]*\).*/\1/p' <<<"$held")"
check_eq "no held-out transition impossible" "impossible=0" "$(grep -o 'impossible=[0-9]*' <<<"$held")"

learn --smoothing uniform --held-out-users u10,u11 --output "$TMPD/uniform.model" \
    "$FEED" 2>"$TMPD/uniform.log" || { show_file "$TMPD/uniform.log"; fatal "learn failed"; }
lik() { sed -n 's/.* mean_log_lik=\([-0-9.]*\).*/\1/p' "$1"; }
note "held-out mean log-likelihood: displacement $(lik "$TMPD/held.log"), uniform $(lik "$TMPD/uniform.log")"
check "displacement back-off predicts held-out users better than uniform" \
    awk -v d="$(lik "$TMPD/held.log")" -v u="$(lik "$TMPD/uniform.log")" 'BEGIN { exit !(d > u + 0.05) }'

# Both models, the paper's rules and the defaults: sanitize the held-out
# users and replay them.
awk -F, 'NR == 1 || $1 == "u10" || $1 == "u11"' "$FEED" >"$TMPD/test.csv"
CONF=$TMPD/delta.conf
cat >"$CONF" <<'EOF'
default_profile = "pim";
profiles = { pim = { mechanism = "pim"; model = ""; points_per_window = 1000;
                     belief_capacity = 512; }; };
EOF
for model in held uniform; do
    for rules in defaults paper; do
        opts=(-o "profiles.pim.model=\"$TMPD/$model.model\"")
        [ "$rules" = paper ] &&
            opts+=(-o 'profiles.pim.likelihood="paper"' -o profiles.pim.break_ticks=0)
        "$TRACESAN" sanitize --config "$CONF" --seed 3 "${opts[@]}" "$TMPD/test.csv" \
            >"$TMPD/out.csv" 2>"$TMPD/sanitize.log" ||
            { show_file "$TMPD/sanitize.log"; fatal "sanitize failed"; }
        check_eq "$model model, $rules: every point released" 600 "$(data_rows "$TMPD/out.csv")"
        "$TRACESAN" eval --config "$CONF" "${opts[@]}" "$TMPD/test.csv" "$TMPD/out.csv" \
            >/dev/null 2>"$TMPD/eval.log" || { show_file "$TMPD/eval.log"; fatal "eval failed"; }
        check "$model model, $rules: the replay matches every |ΔX|" \
            grep -q "replayed 600 releases .* dss_mismatches=0 errors=0" "$TMPD/eval.log"
    done
done
finish
