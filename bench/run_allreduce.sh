#!/usr/bin/env bash
# All-reduce time by message size on 2, 4 and 8 ranks, each rank on its own shaped link
# (scripts/testbed --mode hosts; root), for pactrain's ring and recursive doubling and the MPI
# library's own MPI_Iallreduce: the table the switch points are read from. The rate is scaled
# with the ranks as in bench/run_scale.sh (10, 5, 2.5 Mbit/s: 8 ranks on 2 cores compute about
# 4x slower each). Writes out/scale/allreduce-P.txt and prints them.
# Usage: bench/run_allreduce.sh [SIZES] [RANKS...]   (default 4,256,1k,4k,16k,64k,256k; 2 4 8)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
sizes="${1:-4,256,1k,4k,16k,64k,256k}"
[ $# -gt 0 ] && shift
ranks_list=("$@")
[ ${#ranks_list[@]} -eq 0 ] && ranks_list=(2 4 8)

"$root/scripts/build.sh" >/dev/null
out="$root/out/scale"
mkdir -p "$out"
for ranks in "${ranks_list[@]}"; do
  case "$ranks" in 2) rate=10mbit ;; 4) rate=5mbit ;; 8) rate=2500kbit ;; *) rate=10mbit ;; esac
  echo "== $ranks ranks at $rate"
  # Every "host" is this machine: --bind-to none, or each host's daemon binds its rank to core 0.
  "$root/scripts/testbed" --mode hosts --rate "$rate" --ranks "$ranks" -- bash -c \
    'mpirun --oversubscribe --hostfile "$TESTBED_HOSTFILE" --mca plm_rsh_agent "$TESTBED_RSH" \
       --bind-to none -n '"$ranks"' '"$build"'/bench-allreduce --sizes '"$sizes"' \
       --algorithms ring,doubling,mpi --repeats 7' | tee "$out/allreduce-$ranks.txt"
done
