#!/usr/bin/env bash
# Install the Debian packages tracesan needs (only the missing ones), then
# configure and build in ./build. Safe to run again: every step is skipped
# when it has nothing to do. Arguments are passed through to ./configure.
#
#   scripts/setup.sh [--enable-sanitizers ...]
#
# Environment: BUILD_DIR (default build), SETUP_SKIP_PACKAGES=1 to skip the
# package step (e.g. on a machine without apt).
set -euo pipefail

cd "$(dirname "$0")/.."
top=$(pwd)
build_dir=${BUILD_DIR:-build}

say() { printf 'setup: %s\n' "$*"; }

packages=(
    build-essential autoconf automake libtool pkg-config
    libevent-dev libzmq3-dev libprotobuf-c-dev protobuf-c-compiler
    libconfig-dev libgsl-dev libglpk-dev libsodium-dev zlib1g-dev check uthash-dev
    valgrind liblmdb-dev gzip procps
    clang libclang-rt-14-dev
    libsystemd-dev curl python3
    libcairo2-dev libjs-leaflet chromium python3-zmq python3-protobuf protobuf-compiler
    nats-server libnats-dev openssl
    python3-venv python3-pip python3-setuptools python3-wheel
    debhelper dpkg-dev lintian help2man adduser systemd
    mosquitto mosquitto-clients libssl-dev
)

install_missing_packages() {
    if [ "${SETUP_SKIP_PACKAGES:-0}" = 1 ]; then
        say "skipping package check (SETUP_SKIP_PACKAGES=1)"
        return
    fi
    if ! command -v dpkg-query >/dev/null 2>&1; then
        say "dpkg-query not found: not a Debian system; install the equivalents of: ${packages[*]}"
        return
    fi
    local missing=() p status
    for p in "${packages[@]}"; do
        status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        case $status in
            *"ok installed") ;;
            *) missing+=("$p") ;;
        esac
    done
    if [ ${#missing[@]} -eq 0 ]; then
        say "all ${#packages[@]} Debian packages present"
        return
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            say "missing packages: ${missing[*]}"
            say "not root and sudo is not installed: install them as root and run again"
            exit 1
        fi
    fi
    say "installing missing packages: ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# autoreconf only when configure or Makefile.in is missing or older than
# its input (configure.ac, Makefile.am).
generate_configure() {
    local stale=0
    if [ ! -x configure ] || [ ! -f Makefile.in ] ||
       [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
        stale=1
    fi
    if [ $stale -eq 1 ]; then
        say "running autoreconf -fi"
        local log
        log=$(mktemp)
        if ! autoreconf -fi >"$log" 2>&1; then
            cat "$log" >&2
            rm -f "$log"
            say "autoreconf failed"
            exit 1
        fi
        rm -f "$log"
    fi
}

configure_build() {
    mkdir -p "$build_dir"
    local want="$*" have=""
    [ -f "$build_dir/.setup-configure-args" ] && have=$(cat "$build_dir/.setup-configure-args")
    # Re-run configure when never run, when its inputs changed, or when the
    # arguments differ from the last run.
    if [ ! -f "$build_dir/Makefile" ] || [ ! -f "$build_dir/config.status" ] ||
       [ configure -nt "$build_dir/config.status" ] || [ "$want" != "$have" ]; then
        say "configuring in $build_dir${want:+ ($want)}"
        (cd "$build_dir" && "$top/configure" -q "$@")
        printf '%s' "$want" >"$build_dir/.setup-configure-args"
    fi
}

build() {
    local jobs
    jobs=$(nproc 2>/dev/null || echo 2)
    say "building in $build_dir (make -j$jobs)"
    make -C "$build_dir" -j"$jobs" -s >/dev/null
    say "built $build_dir/tracesand and $build_dir/tracesan"
}

install_missing_packages
generate_configure
configure_build "$@"
build
