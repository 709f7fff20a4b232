#!/usr/bin/env bash
# `tracesan eval --plot` and `tracesan privic --plot` on the bundled sample:
# the sample is sanitized with three shipped profiles (geoind,
# predictive-rate, and pim with a model learnt from the sample), then
#   - the SVG is cairo's, well-formed, of the asked size, with one panel
#     per figure that has data (3 with pim's |ΔX|, 2 without), a long
#     stepped CDF per profile in that profile's colour, and the legend's
#     names drawn as text (renaming a profile adds exactly its extra
#     glyphs to both legends it appears in);
#   - the PNG has the asked size in its IHDR and, decoded, shows each
#     profile's colour;
#   - the text report is the same with and without --plot;
#   - refusals (unknown extension, unknown --plot-user, --plot-size
#     without --plot, a bad size) exit 1 and leave no file;
#   - privic --plot draws the EMD of every cycle it prints.
. "${top_srcdir:-$(dirname "$0")/..}/tests/lib.sh"

PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || fatal "$PYTHON is not installed (scripts/setup.sh installs python3)"
require_programs "$TRACESAN"
"$TRACESAN" eval --help 2>/dev/null | grep -q -- '--plot' ||
    fatal "$TRACESAN eval has no --plot"

SAMPLE=$top_srcdir/data/sample/gowalla-nyc-sample.csv
OUT=$TMPD/out
mkdir -p "$OUT"

sanitize() { # PROFILE OUT [ARGS...]
    local profile=$1 out=$2
    shift 2
    "$TRACESAN" sanitize --config "$SHIPPED_CONF" --profile "$profile" \
        --seed 7 "$@" "$SAMPLE" >"$out" 2>"$out.err" ||
        { show_file "$out.err"; fatal "sanitize --profile $profile failed"; }
}
sanitize geoind "$TMPD/geoind.csv"
sanitize predictive-rate "$TMPD/predictive.csv"
"$TRACESAN" learn --region 40.55,-74.27,40.93,-73.68 --cell-m 2000 \
    --tick-s 3600 --max-speed-kmh 40 --output "$TMPD/nyc.model" "$SAMPLE" \
    2>"$TMPD/learn.err" || { show_file "$TMPD/learn.err"; fatal "learn failed"; }
sanitize pim "$TMPD/pim.csv" -o "profiles.pim.model=$TMPD/nyc.model"
check "pim's output has |ΔX|" \
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "delta_set_size") c = i }
             NR == 2 { exit !(c && $c >= 1) }' "$TMPD/pim.csv"

# The user the time panels follow by default: the one with the most rows.
TOP_USER=$(awk -F, 'NR > 1 { n[$1]++ } END { for (u in n) if (n[u] > best) { best = n[u]; who = u } print who }' "$SAMPLE")

eval_plot() { # NAME ARGS... (SANITIZED files last)
    local name=$1
    shift
    rc=0
    "$TRACESAN" eval "$@" >"$OUT/$name.stdout" 2>"$OUT/$name.err" || rc=$?
}

# --- SVG ----------------------------------------------------------------
eval_plot svg3 --plot "$OUT/three.svg" --plot-size 800x500 "$SAMPLE" \
    "$TMPD/geoind.csv" --compare "$TMPD/predictive.csv" --compare "$TMPD/pim.csv"
check_eq "eval --plot .svg: exit status" 0 "$rc"
[ "$rc" = 0 ] || show_file "$OUT/svg3.err"
eval_plot plain "$SAMPLE" "$TMPD/geoind.csv"
check "eval --plot: the report is the same as without --plot" \
    cmp -s "$OUT/plain.stdout" "$OUT/svg3.stdout"
eval_plot svg2 --plot "$OUT/two.svg" --plot-size 800x500 "$SAMPLE" \
    "$TMPD/geoind.csv" --compare "$TMPD/predictive.csv"
check_eq "eval --plot without a δ-set profile: exit status" 0 "$rc"

# SVG properties, by the XML parser: svg_facts FILE prints
#   root width height viewBox frames glyph_symbols glyph_uses
# then one line per palette colour: colour-index longest-stroked-path-vertices
svg_facts() {
    "$PYTHON" - "$1" <<'EOF'
import re
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}href"
root = ET.parse(sys.argv[1]).getroot()
# The frame of each panel is the only stroke in 30 % grey.
FRAME = "stroke:rgb(30%,30%,30%)"
PALETTE = ["rgb(12.156863%,46.666667%,70.588235%)",
           "rgb(100%,49.803922%,5.490196%)",
           "rgb(17.254902%,62.745098%,17.254902%)",
           "rgb(83.921569%,15.294118%,15.686275%)"]
frames = 0
longest = [0] * len(PALETTE)
for path in root.iter(NS + "path"):
    style = path.get("style", "")
    if FRAME in style:
        frames += 1
    for i, colour in enumerate(PALETTE):
        if "stroke:" + colour in style:
            vertices = len(re.findall(r"[ML] ", path.get("d", "")))
            longest[i] = max(longest[i], vertices)
symbols = [s for s in root.iter(NS + "symbol") if s.get("id", "").startswith("glyph")]
uses = [u for u in root.iter(NS + "use") if u.get(XLINK, "").startswith("#glyph")]
print(root.tag == NS + "svg", root.get("width"), root.get("height"),
      root.get("viewBox").replace(" ", "_"), frames, len(symbols), len(uses))
for i, n in enumerate(longest):
    print(i, n)
EOF
}

if svg_facts "$OUT/three.svg" >"$OUT/three.facts" 2>"$OUT/three.facts.err"; then
    read -r is_svg width height viewbox frames symbols uses <"$OUT/three.facts"
    check_eq "SVG: well-formed, root <svg>" True "$is_svg"
    check_eq "SVG: width as asked" 800px "$width"
    check_eq "SVG: height as asked" 500px "$height"
    check_eq "SVG: viewBox as asked" 0_0_800_500 "$viewbox"
    check_eq "SVG: three panels (CDF, error over time, |ΔX| over time)" 3 "$frames"
    check_ge "SVG: text drawn as glyphs" 20 "$symbols"
    # geoind, predictive-rate, pim (colours in order of appearance): the
    # CDF of 1600+ releases each is a long stepped path in its colour.
    for i in 0 1 2; do
        check_ge "SVG: colour $i has a long stroked path (a CDF)" 150 \
            "$(awk -v i="$i" 'NR > 1 && $1 == i { print $2 }' "$OUT/three.facts")"
    done
    check_eq "SVG: nothing drawn in a fourth series' colour" 0 \
        "$(awk 'NR > 1 && $1 == 3 { print $2 }' "$OUT/three.facts")"
else
    fail "SVG: well-formed XML"
    show_file "$OUT/three.facts.err"
fi
if svg_facts "$OUT/two.svg" >"$OUT/two.facts" 2>/dev/null; then
    check_eq "SVG without a δ-set profile: two panels, the empty one left out" 2 \
        "$(awk 'NR == 1 { print $5 }' "$OUT/two.facts")"
else
    fail "SVG without a δ-set profile: well-formed XML"
fi

# The legend's names are text: a longer profile name adds exactly its
# extra glyphs, once in each legend showing geoind (CDF, error over time).
SUFFIX=-with-a-longer-name
awk -F, -v OFS=, -v s="$SUFFIX" 'NR > 1 { $9 = $9 s } { print }' \
    "$TMPD/geoind.csv" >"$TMPD/renamed.csv"
eval_plot short --plot "$OUT/short.svg" "$SAMPLE" "$TMPD/geoind.csv"
eval_plot long --plot "$OUT/long.svg" "$SAMPLE" "$TMPD/renamed.csv"
short_uses=$(svg_facts "$OUT/short.svg" 2>/dev/null | awk 'NR == 1 { print $7 }')
long_uses=$(svg_facts "$OUT/long.svg" 2>/dev/null | awk 'NR == 1 { print $7 }')
check_eq "SVG: the legends draw the profile's name" \
    $(( ${#SUFFIX} * 2 )) $(( ${long_uses:-0} - ${short_uses:-0} ))

# --- PNG ----------------------------------------------------------------
eval_plot png --plot "$OUT/three.png" --plot-size 640x420 "$SAMPLE" \
    "$TMPD/geoind.csv" --compare "$TMPD/predictive.csv" --compare "$TMPD/pim.csv"
check_eq "eval --plot .png: exit status" 0 "$rc"
# png_facts FILE prints: signature-ok width height colour-type
# white-share and the pixels near each palette colour (0, 1, 2, 3).
png_facts() {
    "$PYTHON" - "$1" <<'EOF'
import struct
import sys
import zlib

data = open(sys.argv[1], "rb").read()
signature = data[:8] == b"\x89PNG\r\n\x1a\n"
pos, idat, header = 8, b"", None
while pos < len(data):
    (length,) = struct.unpack(">I", data[pos:pos + 4])
    kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
    if kind == b"IHDR":
        header = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT":
        idat += body
    pos += 12 + length
width, height, depth, colour_type, _, _, interlace = header
assert depth == 8 and interlace == 0 and colour_type in (2, 6)
bpp = 3 if colour_type == 2 else 4
stride = width * bpp
raw = zlib.decompress(idat)
previous = bytearray(stride)
pixels = []
for y in range(height):
    kind = raw[y * (stride + 1)]
    line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b = previous[x]
        c = previous[x - bpp] if x >= bpp else 0
        if kind == 1:
            line[x] = (line[x] + a) & 255
        elif kind == 2:
            line[x] = (line[x] + b) & 255
        elif kind == 3:
            line[x] = (line[x] + (a + b) // 2) & 255
        elif kind == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    pixels.extend(tuple(line[x:x + 3]) for x in range(0, stride, bpp))
    previous = line
palette = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40)]
near = [sum(1 for p in pixels if sum(abs(p[k] - c[k]) for k in range(3)) <= 40)
        for c in palette]
white = sum(1 for p in pixels if p == (255, 255, 255)) / len(pixels)
print(signature, width, height, colour_type, "%.2f" % white, *near)
EOF
}
if png_facts "$OUT/three.png" >"$OUT/png.facts" 2>"$OUT/png.facts.err"; then
    read -r signature width height ctype white near0 near1 near2 near3 <"$OUT/png.facts"
    check_eq "PNG: signature" True "$signature"
    check_eq "PNG: IHDR width as asked" 640 "$width"
    check_eq "PNG: IHDR height as asked" 420 "$height"
    check "PNG: mostly white background ($white)" \
        awk -v w="$white" 'BEGIN { exit !(w > 0.5 && w < 0.99) }'
    check_ge "PNG: geoind's colour is drawn" 100 "$near0"
    check_ge "PNG: predictive-rate's colour is drawn" 100 "$near1"
    check_ge "PNG: pim's colour is drawn" 100 "$near2"
    check "PNG: no fourth series' colour ($near3 pixels)" test "$near3" -lt 20
else
    fail "PNG: decodes"
    show_file "$OUT/png.facts.err"
fi

# --- --plot-user and the default user --------------------------------------
eval_plot user --plot "$OUT/user.svg" --plot-user "$TOP_USER" "$SAMPLE" "$TMPD/geoind.csv"
check_eq "eval --plot-user (the top user): exit status" 0 "$rc"
eval_plot default --plot "$OUT/default.svg" "$SAMPLE" "$TMPD/geoind.csv"
check "eval --plot: by default the time panels follow the user with the most rows" \
    cmp -s "$OUT/user.svg" "$OUT/default.svg"
OTHER_USER=$(awk -F, -v top="$TOP_USER" 'NR > 1 && $1 != top { print $1; exit }' "$SAMPLE")
eval_plot other --plot "$OUT/other.svg" --plot-user "$OTHER_USER" "$SAMPLE" "$TMPD/geoind.csv"
check "eval --plot-user: another user draws another figure" \
    test "$rc" = 0 -a -s "$OUT/other.svg" -a -n "$(cmp "$OUT/other.svg" "$OUT/default.svg")"

# --- refusals leave no file ---------------------------------------------------
rm -f "$OUT"/*.svg "$OUT"/*.png
refused() { # DESCRIPTION ARGS...
    local what=$1
    shift
    eval_plot refused "$@"
    check_eq "$what: exit status 1" 1 "$rc"
    check_eq "$what: nothing on stdout" "" "$(cat "$OUT/refused.stdout")"
    check_eq "$what: no file written" "" \
        "$(find "$OUT" -type f ! -name '*.stdout' ! -name '*.err' ! -name '*.facts')"
}
refused "eval --plot FILE.pdf" --plot "$OUT/figure.pdf" "$SAMPLE" "$TMPD/geoind.csv"
check "eval --plot FILE.pdf: says which extensions work" \
    grep -q 'must end in .svg or .png' "$OUT/refused.err"
refused "eval --plot without an extension" --plot "$OUT/figure" "$SAMPLE" "$TMPD/geoind.csv"
refused "eval --plot-user nobody" --plot "$OUT/figure.svg" --plot-user no-such-user \
    "$SAMPLE" "$TMPD/geoind.csv"
check "eval --plot-user nobody: names the user" grep -q "no user 'no-such-user'" "$OUT/refused.err"
refused "eval --plot-size without --plot" --plot-size 800x500 "$SAMPLE" "$TMPD/geoind.csv"
refused "eval --plot-size 10x10" --plot "$OUT/figure.png" --plot-size 10x10 \
    "$SAMPLE" "$TMPD/geoind.csv"
refused "eval --compare without --plot" --compare "$TMPD/predictive.csv" \
    "$SAMPLE" "$TMPD/geoind.csv"
refused "eval --identity --plot" --identity --plot "$OUT/figure.svg" \
    "$SAMPLE" "$TMPD/geoind.csv"
rc=0
"$TRACESAN" eval --plot "$OUT/missing-dir/figure.svg" "$SAMPLE" "$TMPD/geoind.csv" \
    >/dev/null 2>"$OUT/missing.err" || rc=$?
check_eq "eval --plot into a missing directory: exit status 1" 1 "$rc"
check "eval --plot into a missing directory: says so" \
    grep -q "cannot write $OUT/missing-dir/figure.svg" "$OUT/missing.err"

# --- privic --plot ------------------------------------------------------------
PRIVIC=(--config "$SHIPPED_CONF" --profile privic --seed 3
        -o 'profiles.privic.region="40.55,-74.27,40.93,-73.68"'
        -o profiles.privic.rows=10 -o profiles.privic.cols=12
        -o profiles.privic.cycle_reports=200)
rc=0
"$TRACESAN" privic "${PRIVIC[@]}" --plot "$OUT/privic.svg" --plot-size 700x400 \
    "$SAMPLE" >"$OUT/privic.csv" 2>"$OUT/privic.err" || rc=$?
check_eq "privic --plot: exit status" 0 "$rc"
[ "$rc" = 0 ] || show_file "$OUT/privic.err"
cycles=$(data_rows "$OUT/privic.csv")
check_ge "privic: several cycles on the sample" 5 "$cycles"
if svg_facts "$OUT/privic.svg" >"$OUT/privic.facts" 2>/dev/null; then
    read -r is_svg width height viewbox frames symbols uses <"$OUT/privic.facts"
    check_eq "privic SVG: size as asked" "True 700px 400px 0_0_700_400" \
        "$is_svg $width $height $viewbox"
    check_eq "privic SVG: one panel" 1 "$frames"
    # A marked line through every cycle, one per EMD.
    check_eq "privic SVG: emd_true_m has a vertex per cycle" "$cycles" \
        "$(awk 'NR > 1 && $1 == 0 { print $2 }' "$OUT/privic.facts")"
    check_eq "privic SVG: emd_prev_m has a vertex per cycle" "$cycles" \
        "$(awk 'NR > 1 && $1 == 1 { print $2 }' "$OUT/privic.facts")"
else
    fail "privic SVG: well-formed XML"
fi
rc=0
"$TRACESAN" privic "${PRIVIC[@]}" --compare-laplace --plot "$OUT/privic2.svg" \
    "$SAMPLE" >/dev/null 2>&1 || rc=$?
check_eq "privic --plot with --compare-laplace: refused" 1 "$rc"
check "privic --plot with --compare-laplace: no file" test ! -e "$OUT/privic2.svg"

finish
