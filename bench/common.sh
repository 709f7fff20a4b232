# Shared by every bench and evaluation script: where the sources and the
# build are, the shared data set's default path, skipping when it is
# absent, a scratch directory, the held-out test users, and the median. Source after setting BENCH (the script's name for
# messages).

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=$(cd "$here/.." && pwd)
GEOLIFE=$srcdir/../shared/data/geolife-beijing-20users.csv.gz
if [ -n "${BUILD_DIR:-}" ]; then
    build=$(cd "$BUILD_DIR" && pwd)
elif [ -x ./tracesand ] && [ -x ./tracesan ]; then
    build=$(pwd)
else
    build=$srcdir/build
fi
tracesan=${TRACESAN:-$build/tracesan}

# need_programs PATH...: each must be built.
need_programs() {
    for p in "$@"; do
        [ -x "$p" ] || { echo "$BENCH: $p not built (make -C $build all bench)" >&2; exit 1; }
    done
}

# need_data FILE: the shared GeoLife subset is not part of the repository;
# without it the script says so and exits 0.
need_data() {
    if [ ! -f "$1" ]; then
        echo "$BENCH: $1 not found; skipping (the GeoLife subset is not" \
             "part of the repository)" >&2
        exit 0
    fi
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# scratch_dir: sets tmp to a new directory, removed when the script exits.
scratch_dir() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/tracesan-$BENCH.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
}

# test_users DATA EVERY FROM: prints TEST_USERS when set, else the sorted
# user ids of DATA (a gzip CSV with the user first) numbered from 1, those
# whose number is FROM modulo EVERY, comma-separated.
test_users() {
    if [ -n "${TEST_USERS:-}" ]; then
        echo "$TEST_USERS"
    else
        gzip -dc "$1" | awk -F, 'NR > 1 { print $1 }' | sort -u -n |
            awk -v every="$2" -v from="$3" 'NR % every == from' | paste -sd, -
    fi
}
