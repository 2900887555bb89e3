#!/usr/bin/env bash
# Check the closure memo in a real browser (issue 6). Optional tool, never run by tests.
#
# Renders memo.html of a quickstart gate (CPU) and of a simulated pack with headless
# Chromium (Debian: `apt-get install -y chromium poppler-utils`), with the network disabled:
#   - screenshots at desktop width (1280×2400) and phone width (390×844, full-page height);
#   - the page printed to PDF, its first pages rasterised with pdftoppm;
#   - the console log and any network request attempt, which must both be empty.
# Look at the PNGs under OUT (default target/memo-browser-check) afterwards.
#
# Usage: scripts/check_memo_in_browser.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/memo-browser-check}
mkdir -p "$out"
bin=target/release/sparsegate
[ -x "$bin" ] || cargo build --release
chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$chrome" ] || { echo "no chromium on PATH (apt-get install -y chromium)" >&2; exit 2; }
command -v pdftoppm >/dev/null || { echo "no pdftoppm (apt-get install -y poppler-utils)" >&2; exit 2; }

# Exit codes 0, 1 and 3 are verdicts; any gate still writes its memo.
gate() { "$bin" gate "$1" --out "$2" >"$2.log" 2>&1 || [ $? -ne 2 ] || { cat "$2.log" >&2; exit 2; }; }
gate scenarios/quickstart.yaml "$out/quickstart"
gate scenarios/examples/h100-bert.yaml "$out/h100-bert"
gate scenarios/examples/fallback.yaml "$out/fallback"

# No network at all: a proxy that does not exist, and every host mapped nowhere.
flags=(--headless=new --no-sandbox --disable-gpu --hide-scrollbars --no-first-run
  --proxy-server=127.0.0.1:9 --host-resolver-rules="MAP * ~NOTFOUND"
  --enable-logging=stderr --v=0 --user-data-dir="$out/profile")
status=0
for name in quickstart h100-bert fallback; do
  page="file://$(realpath "$out/$name/memo.html")"
  "$chrome" "${flags[@]}" --window-size=1280,2400 --screenshot="$out/$name-desktop.png" "$page" 2>"$out/$name-desktop.log"
  "$chrome" "${flags[@]}" --window-size=390,3000 --screenshot="$out/$name-phone.png" "$page" 2>"$out/$name-phone.log"
  "$chrome" "${flags[@]}" --no-pdf-header-footer --print-to-pdf="$out/$name.pdf" "$page" 2>"$out/$name-pdf.log"
  "$chrome" "${flags[@]}" --dump-dom "$page" >"$out/$name-dom.html" 2>"$out/$name-dom.log"
  pdftoppm -png -r 60 -f 1 -l 3 "$out/$name.pdf" "$out/$name-print"
  # Console messages and failed loads (net::ERR_*) both land in the log with these flags.
  if grep -hE "CONSOLE|Uncaught|net::ERR_|Failed to load" "$out/$name"-*.log; then
    echo "$name: console messages or network requests (above)" >&2
    status=1
  fi
  # The DOM as rendered must still carry no script and no external reference.
  if grep -nE "<script|src=\"http|href=\"http|url\(" "$out/$name-dom.html"; then
    echo "$name: external references in the rendered DOM" >&2
    status=1
  fi
  echo "$name: $(ls "$out/$name"-*.png | wc -l) PNGs, $(pdfinfo "$out/$name.pdf" 2>/dev/null | awk '/^Pages/ {print $2}') PDF page(s)"
done
[ "$status" -eq 0 ] && echo "no console errors, no network requests"
exit "$status"
