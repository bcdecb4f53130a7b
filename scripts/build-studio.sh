#!/usr/bin/env bash
# Rebuild the studio's vendored browser bundles (src/cloudlet/studio/static/vendor/) from the
# pinned npm lock file. Node is needed only here: the bundles are committed, so installing or
# running cloudlet never needs it. Run after changing frontend/package.json; commit the result.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
front="$here/src/cloudlet/studio/frontend"
out="$here/src/cloudlet/studio/static/vendor"
cd "$front"
npm ci --no-audit --no-fund
esbuild="$front/node_modules/.bin/esbuild"
mkdir -p "$out"
common=(--bundle --minify --legal-comments=none --target=es2020)
# htmx loads as a classic script (before the page's modules); the others as ES modules that
# only the pages using them import.
"$esbuild" entries/htmx.js "${common[@]}" --format=iife --outfile="$out/htmx.min.js"
"$esbuild" entries/uplot.js "${common[@]}" --format=esm --outfile="$out/uplot.min.js"
"$esbuild" entries/dagre.js "${common[@]}" --format=esm --outfile="$out/dagre.min.js"
"$esbuild" entries/codemirror.js "${common[@]}" --format=esm --outfile="$out/codemirror.min.js"
cp node_modules/uplot/dist/uPlot.min.css "$out/uplot.min.css"
# Their licences, beside them.
mkdir -p "$out/licenses"
# Every package bundled (the build tools and the test-only axe-core are not shipped).
for dir in node_modules/* node_modules/@*/*; do
    pkg="${dir#node_modules/}"
    case "$pkg" in esbuild | @esbuild/* | axe-core) continue ;; esac
    licence="$(ls "$dir" | grep -iE '^(licen[cs]e|copying)' | head -1 || true)"
    [ -n "$licence" ] && cp "$dir/$licence" "$out/licenses/${pkg//\//__}.txt"
done
# axe-core is for the browser tests only (tests/browser/vendor/, with its licence).
mkdir -p "$here/tests/browser/vendor"
cp node_modules/axe-core/axe.min.js node_modules/axe-core/LICENSE "$here/tests/browser/vendor/"
# What each page pays: gzip sizes (docs/studio.md lists them).
for f in "$out"/*.js "$out"/*.css; do
    printf '%-24s %8d bytes  %7d gzip\n' "$(basename "$f")" "$(wc -c < "$f")" "$(gzip -9c "$f" | wc -c)"
done
