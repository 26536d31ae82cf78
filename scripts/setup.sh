#!/usr/bin/env bash
# Installs the Debian packages pactrain needs to build and test. Idempotent: silent when all are
# present, and runs `apt-get update` only when something must be installed. Extra package names
# given as arguments are installed too (scripts/fuzz.sh adds clang's).
set -euo pipefail

packages=(cmake g++ ninja-build libfmt-dev doctest-dev libopenblas-dev libdnnl-dev ocl-icd-opencl-dev zlib1g-dev libcli11-dev
  nlohmann-json3-dev libturbojpeg0-dev libpng-dev python3-pil dataset-fashion-mnist libopenmpi-dev openmpi-bin iproute2 python3 "$@")

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >/dev/null
