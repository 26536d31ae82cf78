#!/usr/bin/env bash
# Draws the diagrams of docs/ from their Graphviz sources (docs/diagrams/*.dot -> *.svg).
# Needs Debian's graphviz package; only run when a diagram changes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v dot >/dev/null || { echo "draw_diagrams: install graphviz (apt-get install graphviz)" >&2; exit 1; }
for source in "$root"/docs/diagrams/*.dot; do
  dot -Tsvg "$source" -o "${source%.dot}.svg"
  echo "drew ${source%.dot}.svg"
done
