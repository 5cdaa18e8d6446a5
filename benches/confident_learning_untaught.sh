#!/usr/bin/env bash
# Confident learning's second demo: a model whose answers are weak on some findings while its
# features still see them. A tiny Qwen2-VL is trained from scratch (fixtures/vlm/train_tiny.py
# --untaught) never to see nor be asked about seven findings; a 3,000-image sample from the
# embedded sample's generator (fixtures/gen_sample.py, same planted noise) is built with
# confident learning under each feature definition, and `eval` compares the views against the
# sample's truth, overall and per finding.
#
#   benches/confident_learning_untaught.sh [WORK]     (default /tmp/bpals-untaught)
#
# Training takes about 20-40 minutes on two cores (once; the model is kept in WORK), each build
# a few minutes. Needs the Python of fixtures/vlm/requirements.txt as $PYTHON and a binary built
# with `--features vlm` as $BPALS_BIN (scripts/torch-env.sh sets up libtorch for it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${1:-/tmp/bpals-untaught}"
python="${PYTHON:-python3}"
bin="${BPALS_BIN:?set BPALS_BIN to a bpals-release built with --features vlm}"
untaught=(Atelectasis Infiltration Pneumonia Pneumothorax Mass Nodule Edema)
mkdir -p "$work"

if [[ ! -f "$work/model/qwen2_vl/model.safetensors" ]]; then
  "$python" "$root/fixtures/vlm/train_tiny.py" --families qwen2_vl --out "$work/model" --untaught "${untaught[@]}"
fi
if [[ ! -f "$work/sample/sample.json" ]]; then
  "$python" "$root/fixtures/gen_sample.py" --out "$work/sample" --images 3000
fi
# The sample's truth as generic gold (image_index, label, value).
awk -F, 'NR == 1 { print "image_index,label,value"; next } { print $1 "," $2 "," $3 }' "$work/sample/truth.csv" > "$work/gold.csv"

for definition in vision_tower_mean decoder_prefix_end; do
  cat > "$work/$definition.yaml" <<EOF
extends: $root/specs/s1a.yaml
model:
  backend: qwen2vl
  path: $work/model/qwen2_vl
  id: bpals/tiny-qwen2-vl-untaught
  revision: untaught-v1
  weight_license: apache-2.0
  demo_weights: synthetic
output:
  splits: [full]
signal:
  confident_learning: {features: $definition}
EOF
  rm -rf "$work/$definition"
  start=$(date +%s)
  BPALS_NIH_ROOT="$work/sample" "$bin" build "$work/$definition.yaml" --out "$work/$definition" --cache-dir "$work/cache" --no-progress \
    2> "$work/$definition.log"
  grep -E "^(infer|features|confident learning):" "$work/$definition.log" || true
  echo "$definition: built in $(( $(date +%s) - start )) s"
  "$bin" eval "$work/$definition" --gold "$work/gold.csv" --markdown "$work/$definition.md" > "$work/$definition.json"
  "$python" - "$work/$definition.json" "${untaught[@]}" <<'EOF'
import json, sys
views = json.load(open(sys.argv[1]))["views"]
untaught = set(sys.argv[2:])
names = ["answers", "confident_learning", "both", "stacked"]
print("| finding | NIH positives | wrong | " + " | ".join(f"{n} AP" for n in names) + " |")
print("|---|---:|---:|" + "---:|" * len(names))
print("| all findings | " + f"{views['answers']['mislabel']['n']} | {views['answers']['mislabel']['mislabeled']} | "
      + " | ".join(f"{views[n]['mislabel']['ap']:.2f}" for n in names) + " |")
for label, row in views["per_label"].items():
    if row["mislabeled"]:
        mark = " (untaught)" if label in untaught else ""
        print(f"| {label}{mark} | {row['n']} | {row['mislabeled']} | " + " | ".join("-" if ap is None else f"{ap:.2f}" for ap in row["ap"]) + " |")
EOF
done
