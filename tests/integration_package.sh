#!/usr/bin/env bash
# The Debian package on this machine (issue 29), as an operator meets it:
#
#   tests/integration_package.sh BUILD/deb/tracesan_VERSION_ARCH.deb
#
# lintian reports no error; `dpkg -i` installs the programs, the conffile
# /etc/tracesand/tracesand.conf, the system user tracesand and its state
# directory, the dashboard on libjs-leaflet, the manual pages and the
# unit, which `systemd-analyze verify` accepts. The installed daemon,
# started as tracesand with the installed configuration, serves /healthz
# and the page, and sanitizes the sample into /var/lib/tracesand. Where
# systemd runs, the unit is started and checked as well; elsewhere the
# check says why it is skipped. `dpkg -r` leaves only the conffile and the
# state directory; `dpkg -P` removes both.
#
# It changes the system, so scripts/test.sh runs it as a stage of its own
# (not make check), as root, and only when no tracesan package and no
# /etc/tracesand or /var/lib/tracesand are there already: it never
# replaces or purges an operator's installation. Whatever happens, it
# purges what it installed before exiting.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

DEB=${1:-}
PKG=tracesan
CONFFILE=/etc/tracesand/tracesand.conf
STATE=/var/lib/tracesand
UNIT=/lib/systemd/system/tracesand.service
LEAFLET_JS=/usr/share/javascript/leaflet/leaflet.js
SAMPLE=$top_srcdir/data/sample/gowalla-nyc-sample.csv

skip_all() { echo "1..0 # SKIP $*"; exit 77; }
[ -n "$DEB" ] && [ -f "$DEB" ] || fatal "usage: $0 PACKAGE.deb (make -C BUILD deb builds it)"
[ "$(id -u)" -eq 0 ] || skip_all "not root: installing a package needs root"
command -v dpkg >/dev/null 2>&1 || skip_all "dpkg is not installed"
command -v curl >/dev/null 2>&1 || fatal "curl is not installed (scripts/setup.sh installs it)"
status=$(dpkg-query -W -f='${db:Status-Status}' "$PKG" 2>/dev/null || true)
case ${status:-not-installed} in
    not-installed) ;;
    *) skip_all "package $PKG is '$status' on this machine: this test would replace and purge it" ;;
esac
for path in /etc/tracesand "$STATE"; do
    [ ! -e "$path" ] || skip_all "$path exists without the package: this test would delete it"
done

# dpkg ARGS...: dpkg, waiting up to 5 minutes for a lock held by another
# package manager (apt on a shared machine).
run_dpkg() {
    local tries=150 rc
    while :; do
        rc=0
        dpkg "$@" >"$TMPD/dpkg.out" 2>&1 || rc=$?
        cat "$TMPD/dpkg.out" >>"$TMPD/dpkg.log"
        if [ $rc -ne 0 ] && grep -q "lock" "$TMPD/dpkg.out" && [ $tries -gt 0 ]; then
            tries=$((tries - 1))
            sleep 2
            continue
        fi
        return $rc
    done
}

installed=0
purge_on_exit() {
    if [ $installed -eq 1 ]; then
        run_dpkg --purge "$PKG" || note "dpkg --purge $PKG failed: purge it by hand"
    fi
    cleanup
}
trap purge_on_exit EXIT

status_of() { curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$@"; }
url() { printf 'http://%s%s' "$HTTP_EP" "$1"; }

# --- lintian ----------------------------------------------------------------
if command -v lintian >/dev/null 2>&1; then
    # Unprivileged when nobody can read the package (lintian objects to root).
    lintian_as=()
    if setpriv --reuid=nobody --regid=nogroup --clear-groups test -r "$DEB" 2>/dev/null; then
        lintian_as=(env HOME=/tmp setpriv --reuid=nobody --regid=nogroup --clear-groups)
    fi
    lintian_rc=0
    "${lintian_as[@]}" lintian --fail-on error "$DEB" >"$TMPD/lintian.out" 2>&1 || lintian_rc=$?
    check_eq "lintian: no errors" 0 "$lintian_rc"
    note "lintian: $(grep -c '^E:' "$TMPD/lintian.out") errors, $(grep -c '^W:' "$TMPD/lintian.out") warnings"
    sed 's/^/#   /' "$TMPD/lintian.out"
else
    fail "lintian is not installed (scripts/setup.sh installs it)"
fi

# --- dpkg -i ----------------------------------------------------------------
if run_dpkg -i "$DEB"; then
    installed=1
    pass "dpkg -i installs the package"
else
    show_file "$TMPD/dpkg.log" 40
    fatal "dpkg -i $DEB failed"
fi
dpkg-query -L "$PKG" >"$TMPD/files"
check "files: tracesand and tracesan in /usr/bin" test -x /usr/bin/tracesand -a -x /usr/bin/tracesan
check "files: $CONFFILE is a conffile" \
    sh -c 'dpkg-query -W -f="\${Conffiles}\n" "$1" | grep -q "^ $2 "' sh "$PKG" "$CONFFILE"
check "files: the daemon's default configuration is the conffile" \
    sh -c '/usr/bin/tracesand --help 2>&1 | grep -q "$1"' sh "$CONFFILE"
check "files: the dashboard in /usr/share/tracesan/www" \
    test -f /usr/share/tracesan/www/index.html -a -f /usr/share/tracesan/www/dashboard.js
check "files: Leaflet is a dependency, not a copy" \
    sh -c '! grep -qi "leaflet" "$1" && dpkg-query -W -f="\${Depends}" "$2" | grep -q "libjs-leaflet"' \
    sh "$TMPD/files" "$PKG"
check "files: library dependencies from shlibs (libzmq5, liblmdb0)" \
    sh -c 'dpkg-query -W -f="\${Depends}" "$1" | grep -q "libzmq5" &&
           dpkg-query -W -f="\${Depends}" "$1" | grep -q "liblmdb0"' sh "$PKG"
check "files: manual pages for both programs" \
    test -f /usr/share/man/man1/tracesand.1.gz -a -f /usr/share/man/man1/tracesan.1.gz
check "files: the unit in $UNIT" test -f "$UNIT"

# --- the system user and the state directory -------------------------------
user_line=$(getent passwd tracesand || true)
check "user: tracesand exists" test -n "$user_line"
uid=$(printf '%s' "$user_line" | cut -d: -f3)
check "user: a system uid (< 1000)" test "${uid:-1000}" -lt 1000
check "user: no login shell" sh -c 'case $1 in *nologin|*/false) ;; *) false ;; esac' \
    sh "$(printf '%s' "$user_line" | cut -d: -f7)"
check_eq "state: $STATE is tracesand's, mode 700" "tracesand tracesand 700" \
    "$(stat -c '%U %G %a' "$STATE" 2>/dev/null)"

# --- the unit ---------------------------------------------------------------
check "unit: runs /usr/bin/tracesand -c $CONFFILE as tracesand" \
    sh -c 'grep -q "^ExecStart=/usr/bin/tracesand -c $2 " "$1" &&
           grep -q "^User=tracesand$" "$1"' sh "$UNIT" "$CONFFILE"
if command -v systemd-analyze >/dev/null 2>&1; then
    verify_rc=0
    systemd-analyze verify "$UNIT" >"$TMPD/verify.out" 2>&1 || verify_rc=$?
    check_eq "unit: systemd-analyze verify accepts it" 0 "$verify_rc"
    sed 's/^/#   /' "$TMPD/verify.out"
else
    fail "unit: systemd-analyze is not installed (Debian package systemd)"
fi
check "unit: enabled on install (multi-user.target wants it)" \
    test -L /etc/systemd/system/multi-user.target.wants/tracesand.service

# --- under systemd, where it runs -------------------------------------------
pid1=$(ps -o comm= -p 1 2>/dev/null || echo unknown)
if [ -d /run/systemd/system ]; then
    # The postinst started it, on the shipped ports. (The shipped
    # input.max_backdate_s rejects the 2010 sample as too_old: what counts
    # here is that every update is answered.)
    check "systemd: the unit is active after install" systemctl is-active --quiet tracesand
    HTTP_EP=127.0.0.1:9107
    check_eq "systemd: /healthz" ok "$(curl -s --max-time 5 "$(url /healthz)")"
    "$TRACESAN" replay --connect tcp://127.0.0.1:7001 "$SAMPLE" 2>>"$TMPD/replay.log"
    # The STATUS= line is refreshed every 5 s.
    for _ in $(seq 30); do
        systemctl status tracesand --no-pager >"$TMPD/status.out" 2>&1 || true
        grep -q "updates=$(data_rows "$SAMPLE") " "$TMPD/status.out" && break
        sleep 0.5
    done
    check "systemd: systemctl status shows every update counted" \
        grep -q "updates=$(data_rows "$SAMPLE") " "$TMPD/status.out"
    show_file "$TMPD/status.out" 12
    systemctl stop tracesand
    check "systemd: stopped" sh -c '! systemctl is-active --quiet tracesand'
else
    pass "systemd: start the unit, replay, /healthz, systemctl status # SKIP systemd is not running here (PID 1 is $pid1); systemd-analyze verify checked the unit instead"
fi

# --- the installed daemon, run directly as tracesand ------------------------
# The installed programs and configuration; free loopback ports, so that a
# daemon on the shipped ones cannot get in the way; the installed state dir.
TRACESAND=/usr/bin/tracesand
TRACESAN=/usr/bin/tracesan
SHIPPED_CONF=$CONFFILE
daemon_wrapper=(setpriv --reuid=tracesand --regid=tracesand --init-groups)
start_daemon installed -o "state.dir=\"$STATE\""
check_eq "daemon: /healthz is ok" ok "$(curl -s --max-time 5 "$(url /healthz)")"
check "daemon: serves the packaged page" \
    grep -q "info: dashboard: serving the page from /usr/share/tracesan/www$" "$DAEMON_LOG"
curl -s --max-time 5 "$(url /)" >"$TMPD/index.html"
check "daemon: GET / is the Leaflet page" \
    cmp -s "$TMPD/index.html" /usr/share/tracesan/www/index.html
check "daemon: GET /leaflet/leaflet.js is libjs-leaflet's" \
    cmp -s "$LEAFLET_JS" <(curl -s --max-time 5 "$(url /leaflet/leaflet.js)")
check "daemon: runs as tracesand" \
    sh -c 'test "$(ps -o user= -p "$1")" = tracesand' sh "$DAEMON_PID"
ROWS=$(data_rows "$SAMPLE")
start_tail installed "$ROWS"
replay "$SAMPLE"
wait_tail installed 60
FEED=$SAMPLE
check "daemon: one outcome per check-in" one_output_per_input "$TAIL_OUT" "$TAIL_REJ"
stop_daemon installed
check "state: the ledger is in $STATE, owned by tracesand" \
    sh -c 'test "$(stat -c %U "$1"/data.mdb)" = tracesand' sh "$STATE"
"$TRACESAN" state --dir "$STATE" stats >"$TMPD/stats.out" 2>&1
check "state: it holds the sample's users" grep -q "users.*93" "$TMPD/stats.out"
show_file "$TMPD/stats.out" 8

# --- dpkg -r: only the conffile and the state directory stay ---------------
if run_dpkg -r "$PKG"; then
    pass "dpkg -r removes the package"
else
    fail "dpkg -r failed"
    show_file "$TMPD/dpkg.log" 20
fi
left=$(while IFS= read -r path; do
           [ -e "$path" ] && [ ! -d "$path" ] && [ "$path" != "$CONFFILE" ] && echo "$path"
       done <"$TMPD/files")
check_eq "remove: no file of the package is left but the conffile" "" "$left"
check "remove: the conffile stays" test -f "$CONFFILE"
check "remove: the state directory stays, with the ledger" test -f "$STATE/data.mdb"
check "remove: /usr/share/tracesan is gone" test ! -e /usr/share/tracesan
check "remove: no tracesand process left" sh -c '! pgrep -u tracesand >/dev/null'
# debhelper keeps the unit's enable state until purge, so a reinstall keeps
# the administrator's choice (deb-systemd-helper's links and records).
note "left by debhelper until purge: $(find /etc/systemd/system /var/lib/systemd/deb-systemd-helper-enabled \
    /var/lib/systemd/deb-systemd-helper-masked -name 'tracesand.service*' 2>/dev/null | tr '\n' ' ')"

# --- dpkg -P: the conffile and the state go ---------------------------------
if run_dpkg -P "$PKG"; then
    installed=0
    pass "dpkg -P purges the package"
else
    fail "dpkg -P failed"
    show_file "$TMPD/dpkg.log" 20
fi
check "purge: the conffile is gone" test ! -e "$CONFFILE"
check "purge: /etc/tracesand is gone" test ! -e /etc/tracesand
check "purge: the state directory is gone" test ! -e "$STATE"
check_eq "purge: nothing of the unit is left in /etc/systemd/system" "" \
    "$(find /etc/systemd/system -name 'tracesand.service*' 2>/dev/null)"
check_eq "purge: dpkg knows the package no more" not-installed \
    "$(dpkg-query -W -f='${db:Status-Status}' "$PKG" 2>/dev/null || echo not-installed)"
note "the system user tracesand stays, as Debian keeps system users (docs/operations.md)"

finish
