# Sourced by the e2e scripts that start ranks by hand. Rank 0 is given
# --coordinator 127.0.0.1:0: it listens on a port the system picks and
# prints it, and the other ranks are started with that address. (A port
# picked by the script, released and handed on could be taken by another
# socket of the parallel test run before rank 0 bound it.)

# coordinator_of LOG PID: waits for rank 0 (process PID, stderr in LOG) to
# say where it listens and prints HOST:PORT; fails if rank 0 exits first.
coordinator_of() {
  local log=$1 pid=$2 i addr
  for i in $(seq 1 1500); do
    addr=$(grep -o "coordinator listening on [^ ]*" "$log" 2> /dev/null | head -1 | cut -d' ' -f4)
    if [ -n "$addr" ]; then
      echo "$addr"
      return 0
    fi
    if ! kill -0 "$pid" 2> /dev/null; then
      echo "rank 0 exited before it listened:" >&2
      cat "$log" >&2
      return 1
    fi
    sleep 0.2
  done
  echo "rank 0 did not listen within 300 s: $log" >&2
  return 1
}
