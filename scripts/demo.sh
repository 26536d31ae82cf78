#!/usr/bin/env bash
# The main job: build, then train ResNet-20 on half of Fashion-MNIST with two data-parallel ranks
# (mpirun -np 2) for three epochs, pruning it gradually to 80% sparsity by weight magnitude while
# the PacTrain compressor all-reduces only the kept gradient entries: the recipe
# apps/recipes/demo.toml. It ends with a table: test accuracy on the full test set, samples/s,
# density, and the gradient bytes each rank sent per step against what dense all-reduce would
# have sent. A few minutes on two cores, plus the first build's.
# Extra arguments are passed to `pactrain train` (e.g. --compress-opt enc=ternary).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"

echo "demo: set-up and build (the first build takes a few minutes on 2 cores)"
"$root/scripts/build.sh"
# OpenMPI refuses to start as root unless told; containers often lack ptrace rights for its
# shared-memory single copy.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
echo "demo: mpirun -np 2 build/pactrain train --config apps/recipes/demo.toml"
mpirun -np 2 "$build/pactrain" train --config "$root/apps/recipes/demo.toml" \
  --metrics "$build/demo-metrics.jsonl" --checkpoint "$build/demo.safetensors" "$@"
