#!/usr/bin/env bash
# The pim and lm-delta profiles end to end: learn a model with
# `tracesan learn` from a synthetic multi-user CSV, start the daemon with
# both profiles added by -o overrides (the shipped config has them
# commented out: they need a model file), replay many users concurrently
# with a profile column, and check that every input yields one output,
# every sanitized row carries delta_set_size, no published point equals an
# input point, points outside the model's region are rejected, and the CLI
# serves the same profiles. Also: a missing model file is a config error.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

FEED=$TMPD/pim_feed.csv
MODEL=$TMPD/pim_model.bin
# 40 users, 50 fixes each one minute apart, random walks of up to 150 m
# per step inside a 5.5 x 5.1 km box (500 m cells); even users use pim,
# odd users lm-delta. User "away" reports 3 points outside the box.
awk 'BEGIN {
    srand(13)
    print "user,ts,lat,lon,profile"
    for (u = 0; u < 40; u++) {
        lat[u] = 39.905 + rand() * 0.04; lon[u] = 116.305 + rand() * 0.05
    }
    for (i = 0; i < 50; i++) {
        t = 1700000000 + 60 * i
        for (u = 0; u < 40; u++) {
            lat[u] += (rand() - 0.5) * 0.0027; lon[u] += (rand() - 0.5) * 0.0035
            if (lat[u] < 39.901) lat[u] = 39.901; if (lat[u] > 39.949) lat[u] = 39.949
            if (lon[u] < 116.301) lon[u] = 116.301; if (lon[u] > 116.359) lon[u] = 116.359
            printf "u%02d,%d,%.7f,%.7f,%s\n", u, t, lat[u], lon[u], (u % 2 ? "lmd" : "pim")
        }
        if (i < 3) printf "away,%d,40.2000000,116.3300000,pim\n", t
    }
}' >"$FEED"
ROWS=$(data_rows "$FEED")
AWAY=3

if ! "$TRACESAN" learn --region 39.9,116.3,39.95,116.36 --cell-m 500 \
        --tick-s 60 -o "$MODEL" "$FEED" 2>"$TMPD/learn.log"; then
    show_file "$TMPD/learn.log"
    fatal "tracesan learn failed"
fi
note "$(tail -n 3 "$TMPD/learn.log" | tr '\n' ' ')"

PROFILES=(-o profiles.pim.mechanism=pim -o "profiles.pim.model=\"$MODEL\""
          -o profiles.pim.points_per_window=1000
          -o profiles.lmd.mechanism=lm-delta -o "profiles.lmd.model=\"$MODEL\""
          -o profiles.lmd.points_per_window=1000 -o profiles.lmd.epsilon=2.0)

# Every row: the profile's mechanism and eps, a positive integer
# delta_set_size, and the running spend.
rows_ok() {
    tail -n +2 "$1" | sort -t, -k1,1 -k2,2n | awk -F, '
        function complain(msg) { if (bad++ < 10) print "# " msg ": " $0 }
        {
            if (NF != 11) complain("column count")
            want_mech = $9 == "pim" ? "pim" : "lm-delta"
            want_eps = $9 == "pim" ? 1 : 2
            if ($5 != want_mech) complain("mechanism")
            if ($6 != want_eps) complain("eps_point")
            if ($11 !~ /^[1-9][0-9]*$/) complain("delta_set_size")
            if ($1 != user) { user = $1; sum = 0 }
            sum += $6
            if ($7 != sum) complain("eps_spent is not the running sum")
            if ($10 != "") complain("predicted is not empty")
        }
        END { exit bad > 0 }'
}

# --- the daemon --------------------------------------------------------------
start_daemon pim "${PROFILES[@]}"
start_tail pim "$ROWS"
replay "$FEED"
wait_tail pim 120
stop_daemon pim
check "daemon: one sanitized row or rejection per input" \
    one_output_per_input "$TAIL_OUT" "$TAIL_REJ"
check_eq "daemon: header" "$SANITIZED_HEADER" "$(head -n 1 "$TAIL_OUT")"
check_eq "daemon: every in-region point sanitized" "$((ROWS - AWAY))" \
    "$(data_rows "$TAIL_OUT")"
check_eq "daemon: out-of-region points rejected (internal_error)" "$AWAY" \
    "$(count_reason internal_error)"
check "daemon: mechanism, eps, delta_set_size and spend on every row" \
    rows_ok "$TAIL_OUT"
check "daemon: no published point equals an input point" \
    no_input_point_published "$FEED" "$TAIL_OUT"
check "daemon: no input coordinate in the log" no_coordinates_in "$FEED" "$DAEMON_LOG"
check_eq "daemon: summary sanitized" "$((ROWS - AWAY))" "$(summary_value sanitized)"

# --- the CLI -------------------------------------------------------------------
for run in a b; do
    "$TRACESAN" sanitize --config "$SHIPPED_CONF" --seed 3 "${PROFILES[@]}" \
        "$FEED" >"$TMPD/pim_$run.csv" 2>"$TMPD/pim_$run.err" ||
        { show_file "$TMPD/pim_$run.err"; fatal "sanitize failed"; }
done
check "sanitize: the same seed gives the same output" \
    cmp -s "$TMPD/pim_a.csv" "$TMPD/pim_b.csv"
check_eq "sanitize: rows" "$((ROWS - AWAY))" "$(data_rows "$TMPD/pim_a.csv")"
check "sanitize: mechanism, eps, delta_set_size and spend on every row" \
    rows_ok "$TMPD/pim_a.csv"
check "sanitize: no published point equals an input point" \
    no_input_point_published "$FEED" "$TMPD/pim_a.csv"

# --- eval: RMSE and |ΔX| figures -------------------------------------------------
rc=0
"$TRACESAN" eval --format csv --series "$TMPD/pim_series.csv" "$FEED" \
    "$TMPD/pim_a.csv" >"$TMPD/pim_eval.csv" 2>"$TMPD/pim_eval.err" || rc=$?
check_eq "eval: exit status" 0 "$rc"
check_eq "eval: rmse_m next to the mean, |ΔX| columns at the end" \
    "user,n,dropped,mean_err_m,rmse_m,alpha90_m,pred_rate,rho,windows,exhausted,covered,dss_mean,dss_median,dss_min" \
    "$(head -n 1 "$TMPD/pim_eval.csv")"
check_eq "eval: every sanitized row matched" "$((ROWS - AWAY))" \
    "$(awk -F, '$1 == "(all)" { print $2 }' "$TMPD/pim_eval.csv")"
# RMS >= mean for any sample (Cauchy-Schwarz), min <= median, |ΔX| >= 1;
# user "away" has no sanitized row (all figures "-").
check "eval: rmse >= mean, 1 <= dss_min <= dss_median, per line" \
    awk -F, 'NR > 1 && $2 > 0 && !($5 + 0 >= $4 + 0 && $14 >= 1 && $14 <= $13 + 0) { exit 1 }' \
    "$TMPD/pim_eval.csv"
check_eq "eval --series: one row per sanitized row" "$((ROWS - AWAY))" \
    "$(data_rows "$TMPD/pim_series.csv")"
check_eq "eval --series: header" "user,ts,delta_set_size,error_m" \
    "$(head -n 1 "$TMPD/pim_series.csv")"
check_eq "eval --series: |ΔX| mean and min agree with the summary" \
    "$(awk -F, '$1 == "(all)" { print $12 "," $14 }' "$TMPD/pim_eval.csv")" \
    "$(awk -F, 'NR > 1 { s += $3; n++; if (n == 1 || $3 < m) m = $3 }
        END { printf "%.2f,%d\n", s / n, m }' "$TMPD/pim_series.csv")"
check_eq "eval --series: |ΔX| matches the sanitized output row by row" \
    "$(awk -F, 'NR > 1 { print $1 "," $2 "," $11 }' "$TMPD/pim_a.csv" | sort)" \
    "$(awk -F, 'NR > 1 { print $1 "," $2 "," $3 }' "$TMPD/pim_series.csv" | sort)"

# --- a missing model is a configuration error ------------------------------
"$TRACESAND" --check-config "$SHIPPED_CONF" -o profiles.pim.mechanism=pim \
    -o "profiles.pim.model=\"$TMPD/no_such_model.bin\"" \
    >/dev/null 2>"$TMPD/nomodel.err"
check_eq "check-config: a missing model fails" 1 "$?"
check "check-config: the error names the model key" \
    grep -q "model" "$TMPD/nomodel.err"

finish
