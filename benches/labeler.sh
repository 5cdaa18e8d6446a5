#!/usr/bin/env bash
# The report labeler on real reports: the OpenI (Indiana University) chest X-ray reports with
# their manual MeSH coding, from the torchxrayvision 1.5.7 wheel on PyPI (fetched and unpacked by
# scripts/fetch-real-nih.sh, outside the repository; nothing committed). Prints precision and
# recall per NIH finding on the odd-numbered reports (the only ones the rules were tuned on) and
# on the even-numbered test reports, beside Wang et al. (2017)'s figures for NIH's labeler.
#
#   benches/labeler.sh [DEST]    (default ~/.cache/bpals/real-nih)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dest="$(bash "$root/scripts/fetch-real-nih.sh" "$@")"
cargo build --locked --quiet
bin="${CARGO_TARGET_DIR:-$root/target}/debug/bpals-release"
"$bin" bench labeler --openi "$dest/openi/ecgen-radiology" --split odd
"$bin" bench labeler --openi "$dest/openi/ecgen-radiology" --split even
