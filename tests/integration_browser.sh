#!/usr/bin/env bash
# The dashboard in a real browser: Debian's Chromium, headless, opens `/`
# (the token in the URL fragment, as an operator would), the bundled sample
# is replayed, and the test waits until the page has drawn at least N
# points and shows the density layer of the profile that keeps one,
# reading both back from the DOM over the DevTools protocol
# (tests/browser_cdp.py). The screenshot is left in
# $top_builddir/tests/dashboard.png to look at.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$CHROMIUM" ]; then
    echo "1..0 # SKIP $CHROMIUM is not installed (scripts/setup.sh installs chromium)"
    exit 77
fi
if [ ! -r /usr/share/javascript/leaflet/leaflet.js ]; then
    echo "1..0 # SKIP libjs-leaflet is not installed (scripts/setup.sh installs it)"
    exit 77
fi
PYTHON=${PYTHON:-/usr/bin/python3}
[ -x "$PYTHON" ] || fatal "$PYTHON is not installed (scripts/setup.sh installs python3)"
SAMPLE=$top_srcdir/data/sample/gowalla-nyc-sample.csv
ROWS=$(data_rows "$SAMPLE")
SCREENSHOT=$top_builddir/tests/dashboard.png
TOKEN=browser-test-token-0123456789abcdef
# A clear majority of the sample (93 users, a few over their budget) and
# the density layer of the geoind profile, which keeps one here.
MIN_POINTS=1500

# geoind keeps a density estimate over New York (the sample's city),
# published every second once 200 reports have come in.
start_daemon browser -o "http.token=$TOKEN" \
    -o "http.dashboard_dir=\"$top_srcdir/www\"" \
    -o profiles.geoind.density=true \
    -o 'profiles.geoind.region="40.55,-74.15,40.95,-73.70"' \
    -o profiles.geoind.rows=20 -o profiles.geoind.cols=24 \
    -o profiles.geoind.cycle_reports=200 -o output.density_publish_s=1
test -n "$HTTP_EP" || fatal "the ready line names no HTTP endpoint"
start_tail browser "$ROWS"

"$PYTHON" "$top_srcdir/tests/browser_cdp.py" --chromium "$CHROMIUM" \
    --url "http://$HTTP_EP/#token=$TOKEN" --ready-file "$TMPD/page.ready" \
    --min-points "$MIN_POINTS" --min-density-layers 1 \
    --screenshot "$TMPD/dashboard.png" --timeout 50 \
    >"$TMPD/browser.out" 2>"$TMPD/browser.err" &
BROWSER_PID=$!
background_pids+=("$BROWSER_PID")

# The page's feed must be open before the replay, or it would miss points.
tries=$(( 40 * 20 ))
while [ ! -e "$TMPD/page.ready" ] && is_running "$BROWSER_PID" && [ $tries -gt 0 ]; do
    sleep 0.05
    tries=$((tries - 1))
done
check "browser: the page opened its feed" test -e "$TMPD/page.ready"

replay "$SAMPLE"
wait_tail browser 60
SANITIZED=$(data_rows "$TAIL_OUT")
check_ge "sample: enough sanitized points to draw $MIN_POINTS" "$MIN_POINTS" "$SANITIZED"

if wait_for_pid "$BROWSER_PID" 60; then
    browser_status=$waited_status
else
    kill "$BROWSER_PID" 2>/dev/null
    browser_status=timeout
fi
check_eq "browser: the page drew at least $MIN_POINTS points and a density layer" 0 "$browser_status"
while IFS= read -r line; do note "$line"; done <"$TMPD/browser.out"
[ "$browser_status" = 0 ] || show_file "$TMPD/browser.err"
drawn=$(sed -n 's/.*points-drawn=\([0-9]*\).*/\1/p' "$TMPD/browser.out")
check_ge "browser: #points-drawn read back from the DOM" "$MIN_POINTS" "${drawn:-0}"
check "browser: no more points drawn than were published" test "${drawn:-0}" -le "$SANITIZED"
check "browser: Leaflet loaded from libjs-leaflet" grep -q 'leaflet=ok' "$TMPD/browser.out"
check "browser: no script error, failed load or CSP violation on the page" \
    grep -q 'page-errors=0' "$TMPD/browser.out"

# A PNG of the window's size: signature, then the IHDR width and height.
png_size() {
    "$PYTHON" -c 'import struct,sys
d = open(sys.argv[1], "rb").read(24)
assert d[:8] == b"\x89PNG\r\n\x1a\n" and d[12:16] == b"IHDR"
print("%dx%d" % struct.unpack(">II", d[16:24]))' "$1"
}
check_eq "browser: the screenshot is a 1280x800 PNG" 1280x800 "$(png_size "$TMPD/dashboard.png" 2>/dev/null)"
mkdir -p "$(dirname "$SCREENSHOT")"
cp "$TMPD/dashboard.png" "$SCREENSHOT" 2>/dev/null && note "screenshot: $SCREENSHOT"
check_ge "browser: the page's feed stream was served (token from the fragment)" 1 \
    "$(curl -s --max-time 5 -H "Authorization: Bearer $TOKEN" "http://$HTTP_EP/metrics" |
       awk '$1 == "tracesand_feed_streams_total{result=\"accepted\"}" { print $2 }')"
stop_daemon browser
check "the token never reaches the log" bash -c "! grep -q -- '$TOKEN' '$DAEMON_LOG'"

finish
