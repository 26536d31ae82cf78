#!/usr/bin/env bash
# The testbed's set-up and tear-down (scripts/testbed): a namespace is created and shaped, the
# command runs inside it, and every namespace is removed afterwards: on success, when the command
# fails, when the testbed is interrupted, and in hosts mode, where mpirun reaches each rank's
# namespace through the rsh agent. Exits 77 (skipped) where network namespaces cannot be made.
# Usage: tests/testbed_test.sh [BUILD_DIR]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
testbed="$root/scripts/testbed"
if [ "$(id -u)" -ne 0 ] || ! ip netns add pactrain-tb-probe 2>/dev/null; then
  echo "skipped: network namespaces need root and CAP_NET_ADMIN here"
  exit 77
fi
ip netns del pactrain-tb-probe
failures=0
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
ours() { ip netns list | grep -c '^pactrain-tb' || true; }
check() {  # check NAME CONDITION...
  local name="$1"
  shift
  if "$@"; then
    echo "ok: $name"
  else
    echo "FAILED: $name"
    sed 's/^/    /' "$out" | tail -15
    failures=$((failures + 1))
  fi
}
before=$(ours)

"$testbed" --rate 100mbit -- sh -c 'tc qdisc show dev lo; ip netns identify; echo "rate=$TESTBED_RATE"' >"$out" 2>&1
status=$?
check "shared: the command ran, in a namespace of its own" grep -q '^pactrain-tb[0-9]*$' "$out"
check "shared: loopback shaped by tbf at 100 Mbit/s" grep -q 'tbf .*rate 100Mbit' "$out"
check "shared: exit status 0 and TESTBED_RATE set" bash -c "[ $status -eq 0 ] && grep -q rate=100mbit '$out'"
check "shared: namespace removed" [ "$(ours)" -eq "$before" ]

"$testbed" --rate unlimited -- sh -c 'tc qdisc show dev lo | grep -q tbf && exit 9; exit 3' >"$out" 2>&1
status=$?
check "a failing command: its status (3) comes back, unshaped when unlimited" [ "$status" -eq 3 ]
check "a failing command: namespace removed" [ "$(ours)" -eq "$before" ]

# Ctrl-C and kill: with job control on, the background testbed does not ignore SIGINT. An odd
# sleep time, so that pgrep finds only this sleep.
set -m
for signal in INT TERM; do
  "$testbed" --rate 1gbit -- sleep 59.77 >"$out" 2>&1 &
  job=$!
  for _ in $(seq 100); do [ "$(ours)" -gt "$before" ] && break; sleep 0.05; done
  sleep 0.3
  kill -"$signal" "$job"
  start=$(date +%s)
  wait "$job"
  status=$?
  expected=$([ "$signal" = INT ] && echo 130 || echo 143)
  check "SIG$signal: exits at once with $expected" \
    bash -c "[ $status -eq $expected ] && [ $(($(date +%s) - start)) -lt 10 ]"
  check "SIG$signal: namespace removed, its processes gone" \
    bash -c "[ $(ours) -eq $before ] && ! pgrep -f '^sleep 59.77$' >/dev/null"
done
set +m

"$testbed" --rate bogus -- true >"$out" 2>&1
status=$?
check "a bad --rate is refused with a message, nothing created" \
  bash -c "[ $status -eq 2 ] && grep -q 'rate must be like' '$out' && [ $(ours) -eq $before ]"

"$testbed" --mode hosts --ranks 2 --rate 500mbit -- sh -c \
  'mpiexec --hostfile "$TESTBED_HOSTFILE" --mca plm_rsh_agent "$TESTBED_RSH" -n 2 \
     sh -c "ip -brief addr show eth0; tc qdisc show dev eth0"' >"$out" 2>&1
status=$?
check "hosts: mpirun reached both hosts through the rsh agent" \
  bash -c "[ $status -eq 0 ] && grep -q 10.77.0.1/24 '$out' && grep -q 10.77.0.2/24 '$out'"
check "hosts: each host's link shaped at 500 Mbit/s" \
  bash -c "[ \$(grep -c 'tbf .*rate 500Mbit' '$out') -eq 2 ]"
check "hosts: every namespace removed" [ "$(ours)" -eq "$before" ]

# A slow link paces a small message too: its token bucket holds about a millisecond of the rate,
# so 35 kB sent after the link was idle takes the 28 ms it takes at 10 Mbit/s, not the time of a
# burst at the interface's own speed (the 1 MB bucket of before let it through in under 2 ms).
receiver="$(mktemp --suffix .py)"
cat >"$receiver" <<'PY'
import socket
s = socket.socket()
s.bind(("10.77.0.2", 5555))
s.listen(1)
c, _ = s.accept()
n = 0
while n < 35000:
    n += len(c.recv(65536))
c.sendall(b"k")
PY
"$testbed" --mode hosts --ranks 2 --rate 10mbit -- /usr/bin/env python3 -c '
import os, socket, subprocess, sys, time
peer = subprocess.Popen([os.environ["TESTBED_RSH"], "10.77.0.2", "python3", sys.argv[1]])
for _ in range(200):
    try:
        s = socket.create_connection(("10.77.0.2", 5555))
        break
    except OSError:
        time.sleep(0.05)
time.sleep(0.5)  # idle: a bucket fills up
start = time.time()
s.sendall(b"x" * 35000)
s.recv(1)
took = time.time() - start
peer.wait()
print(f"35 kB in {1000 * took:.1f} ms")
sys.exit(0 if took > 0.02 else 1)' "$receiver" >"$out" 2>&1
status=$?
rm -f "$receiver"
check "hosts: 35 kB after an idle link takes at least 20 ms at 10 Mbit/s ($(tail -1 "$out"))" \
  [ "$status" -eq 0 ]

# The benchmarks' launcher for hosts mode leaves each rank every core of this machine: each
# "host" is this machine, and a binding per host would put every rank on core 0.
"$testbed" --mode hosts --ranks 2 --rate 500mbit -- sh -c "cd '$root/bench' && python3 -c \
  'import subprocess, testbed_bench; subprocess.run(testbed_bench.mpiexec(2) +
   [\"grep\", \"Cpus_allowed_list\", \"/proc/self/status\"], check=True)'" >"$out" 2>&1
status=$?
all_cores="$(grep Cpus_allowed_list /proc/self/status)"
check "hosts: the benchmarks' ranks may run on every core ($all_cores)" \
  bash -c "[ $status -eq 0 ] && [ \$(grep -c -F '$all_cores' '$out') -eq 2 ]"
exit $((failures > 0))
