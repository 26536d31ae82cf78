#!/usr/bin/env bash
# Images per second per core of pactrain's image-folder loader against torchvision's ImageFolder
# and DataLoader, on the same generated JPEGs of ImageNet's typical size (about 400x350, quality
# 90, about 80 kB each), at 224: training's RandomResizedCrop and flip, and evaluation's resize
# and centre crop. One core each (pactrain on the calling thread, torchvision with no worker
# process), then every core (pactrain's threads, torchvision's worker processes); each case runs
# twice in alternation and keeps its best. pactrain once more with every JPEG decoded whole, to
# show what decoding at a reduced DCT scale gains.
# Usage: bench/run_loader.sh [IMAGES] (default 1280; made once under build/bench-images)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
images="${1:-1280}"

"$root/scripts/build.sh" >/dev/null
"$root/scripts/setup.sh" python3-torchvision  # the torchvision peer
folder="$build/bench-images/$images"
if [ ! -f "$folder/val/n00000009/val.JPEG" ]; then
  echo "making $images images in $folder" >&2
  /usr/bin/python3 "$root/tests/fixtures/make_image_folder.py" "$folder" --bench "$images"
fi
cores="$(nproc)"
batch=64
batches=$(((images / batch - 1) < 12 ? images / batch - 1 : 12))

best() {  # the best images_per_s of the lines on stdin
  awk '{ for (i = 1; i < NF; i++) if ($i == "images_per_s" && $(i + 1) > b) b = $(i + 1) } END { print b }'
}
ours() { OMP_NUM_THREADS=1 "$build/bench-loader" "$folder" --batch "$batch" --batches "$batches" "$@"; }
peer() { /usr/bin/python3 "$root/bench/peers/torch_loader.py" "$folder" --batch "$batch" --batches "$batches" "$@"; }

echo "| transform | parallel | pactrain images/s | torchvision images/s | per core, pactrain / torchvision |"
echo "|---|---|---:|---:|---:|"
for mode in train eval; do
  extra=()
  [ "$mode" = eval ] && extra=(--eval)
  for parallel in 1 "$cores"; do
    threads=$((parallel == 1 ? 0 : parallel))
    a="$( { ours --threads "$threads" "${extra[@]}"; ours --threads "$threads" "${extra[@]}"; } | best)"
    b="$( { peer --workers "$threads" "${extra[@]}"; peer --workers "$threads" "${extra[@]}"; } | best)"
    awk -v m="$mode" -v p="$parallel" -v a="$a" -v b="$b" \
      'BEGIN { printf "| %s | %s core(s) | %.0f | %.0f | %.2fx |\n", m, p, a, b, a / b }'
  done
done
full="$( { ours --threads 0 --full-decode; ours --threads 0 --full-decode; } | best)"
echo
echo "pactrain train, 1 core, every JPEG decoded whole (no DCT scaling): $full images/s"
echo "$images images in $folder, batch $batch, $batches timed batches after one warm-up;" \
  "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $cores cores;" \
  "torchvision $(/usr/bin/python3 -c 'import torchvision; print(torchvision.__version__)')," \
  "Pillow $(/usr/bin/python3 -c 'import PIL; print(PIL.__version__)')"
