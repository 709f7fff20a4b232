#!/usr/bin/env bash
# The dashboard of a build that was never installed (issue 29): the daemon
# started from the build tree with the shipped file and no
# http.dashboard_dir, as the README's "Running" says, serves GET / with the
# Leaflet page, from the installed copy when there is one and else from the
# source tree's www/, and logs which. A directory without the page, or
# without Leaflet, is a warning at start naming the setting, not a silent
# 404.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

command -v curl >/dev/null 2>&1 || fatal "curl is not installed (scripts/setup.sh installs it)"
require_programs "$TRACESAND"
LEAFLET_DIR=/usr/share/javascript/leaflet

status_of() { curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$@"; }
url() { printf 'http://%s%s' "$HTTP_EP" "$1"; }

# --- the README's command: -c conf/tracesand.conf -o 'state.dir=""' -------
# (start_daemon adds free loopback ports, so tests can run side by side.)
start_daemon uninstalled
test -n "$HTTP_EP" || fatal "the ready line names no HTTP endpoint"
served=$(sed -n 's/.*info: dashboard: serving the page from \(.*\)$/\1/p' "$DAEMON_LOG" | head -n 1)
# make check says how this build was configured (unset: by hand, default).
if [ -z "${SOURCE_DASHBOARD_DIR-unset}" ] && [ -z "$served" ]; then
    # --without-source-dashboard (the Debian package's build) and nothing
    # installed: no page, and the daemon must say so.
    note "configured --without-source-dashboard and not installed: no page to serve"
    check "without the source fallback: a warning that the page is missing" \
        grep -q "warn: dashboard: 3 of 3 dashboard files unreadable" "$DAEMON_LOG"
    check_eq "without the source fallback: GET / is 404" 404 "$(status_of "$(url /)")"
else
    check "start: the log names the directory of the page" test -n "$served"
    # The same directory, however spelt (distcheck's top_srcdir has "..").
    source_www=$(cd "$top_srcdir/www" && pwd -P)
    served_real=$(cd "${served:-/nonexistent}" 2>/dev/null && pwd -P || true)
    if [ -n "$served" ] && [ "$served_real" != "$source_www" ]; then
        # Only an installed copy may take precedence over the source tree.
        note "an installed copy is present ($served); it is served before $source_www"
        check "start: the page served instead of the source tree's is an installed copy" \
            sh -c 'case $1 in */share/tracesan/www) test -f "$1/index.html" ;; *) false ;; esac' \
            sh "$served"
    fi
    check "start: no warning about the page" \
        sh -c '! grep -q "warn: dashboard: .* dashboard files" "$1"' sh "$DAEMON_LOG"
    check_eq "GET / is 200" 200 "$(status_of "$(url /)")"
    curl -s --max-time 5 "$(url /)" >"$TMPD/index.html"
    check "GET / is the page of the directory the log names" \
        cmp -s "$TMPD/index.html" "${served:-/nonexistent}/index.html"
    check "GET / is the Leaflet page" \
        grep -q '<script src="leaflet/leaflet.js"></script>' "$TMPD/index.html"
    check_eq "GET /dashboard.js is 200" 200 "$(status_of "$(url /dashboard.js)")"
    check_eq "GET /dashboard.css is 200" 200 "$(status_of "$(url /dashboard.css)")"
    if [ -r "$LEAFLET_DIR/leaflet.js" ]; then
        check_eq "GET /leaflet/leaflet.js is 200 (libjs-leaflet)" 200 \
            "$(status_of "$(url /leaflet/leaflet.js)")"
    else
        note "libjs-leaflet is not installed: the Leaflet check is skipped"
    fi
fi
stop_daemon uninstalled

# --- a directory without the page, and no Leaflet: warnings at start ------
start_daemon missing -o "http.dashboard_dir=\"$TMPD/no-www\"" \
    -o "http.leaflet_dir=\"$TMPD/no-leaflet\""
check "missing page: a warning naming the file and http.dashboard_dir" \
    grep -q "warn: dashboard: 3 of 3 dashboard files unreadable ($TMPD/no-www/index.html: No such file or directory); they answer 404 (http.dashboard_dir names the directory)" \
    "$DAEMON_LOG"
check "missing Leaflet: a warning naming http.leaflet_dir" \
    grep -q "warn: dashboard: 7 of 7 Leaflet files unreadable ($TMPD/no-leaflet/leaflet.js: .*(http.leaflet_dir names the directory)" \
    "$DAEMON_LOG"
check "missing page: nothing claims to serve it" \
    sh -c '! grep -q "serving the page" "$1"' sh "$DAEMON_LOG"
check_eq "missing page: GET / is 404" 404 "$(status_of "$(url /)")"
check_eq "missing page: /healthz is still 200" 200 "$(status_of "$(url /healthz)")"
stop_daemon missing

finish
