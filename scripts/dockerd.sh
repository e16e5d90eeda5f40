#!/usr/bin/env bash
# Runs a private Docker Engine (Debian's docker.io dockerd) on its own socket and data
# root, so tests of the docker dialect touch no system daemon.
#
#   dockerd.sh start DIR [extra dockerd args...]   prints: export DOCKER_HOST=unix://DIR/docker.sock
#   dockerd.sh stop DIR
#
# Keep DIR short (e.g. /tmp/smd): containerd's socket lives under DIR/exec and unix
# socket paths are limited to 108 bytes.
#
# Client: Debian's daemon is 20.10 (API 1.41). /usr/bin/docker (Debian, 20.10) always
# matches it. A newer client such as /usr/local/bin/docker 28.x negotiates the API
# version down and works too (checked: version, import, run -d --init, exec -i, rm -f),
# so whichever `docker` is first on PATH is fine. If a client ever refuses the daemon's
# API version, export DOCKER_API_VERSION=1.41 or call /usr/bin/docker.
set -euo pipefail

usage() {
  echo "usage: $0 start DIR [dockerd args...] | $0 stop DIR" >&2
}

if [[ $# -lt 2 ]]; then
  usage
  exit 2
fi
action="$1"
dir="$2"
shift 2

mkdir -p "$dir"
dir="$(cd "$dir" && pwd)" # dockerd wants absolute paths
sock="$dir/docker.sock"
pidfile="$dir/dockerd.pid"
log="$dir/dockerd.log"

# Prints the pid of our dockerd if it is running.
running_pid() {
  local pid
  [[ -f "$pidfile" ]] || return 1
  pid="$(cat "$pidfile")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # Guard against a recycled pid belonging to something else.
  [[ "$(cat "/proc/$pid/comm" 2>/dev/null || true)" == "dockerd" ]] || return 1
  echo "$pid"
}

docker_ok() {
  DOCKER_HOST="unix://$sock" docker version >/dev/null 2>&1
}

case "$action" in
  start)
    if ! command -v dockerd >/dev/null; then
      echo "dockerd.sh: dockerd not found (apt-get install docker.io, or scripts/setup-engine.sh)" >&2
      exit 1
    fi
    started=""
    if pid="$(running_pid)"; then
      echo "dockerd.sh: already running (pid $pid)" >&2
    else
      mkdir -p "$dir/data" "$dir/exec"
      # setsid: the daemon must outlive this script and its terminal.
      setsid dockerd \
        --host "unix://$sock" \
        --data-root "$dir/data" \
        --exec-root "$dir/exec" \
        --pidfile "$pidfile" \
        "$@" >>"$log" 2>&1 </dev/null &
      started="$!"
      echo "dockerd.sh: started dockerd (pid $started), log $log" >&2
    fi
    deadline=$((SECONDS + 60))
    until docker_ok; do
      if [[ -n "$started" ]] && ! kill -0 "$started" 2>/dev/null; then
        echo "dockerd.sh: dockerd exited; log tail:" >&2
        tail -n 30 "$log" >&2 || true
        exit 1
      fi
      if ((SECONDS >= deadline)); then
        echo "dockerd.sh: dockerd did not answer within 60 s; log tail:" >&2
        tail -n 30 "$log" >&2 || true
        exit 1
      fi
      sleep 0.2
    done
    echo "export DOCKER_HOST=unix://$sock"
    ;;
  stop)
    if ! pid="$(running_pid)"; then
      echo "dockerd.sh: not running" >&2
      exit 0
    fi
    kill -TERM "$pid"
    # dockerd stops its containers and its managed containerd first: allow time.
    for _ in $(seq 1 300); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "dockerd.sh: dockerd (pid $pid) ignored SIGTERM for 30 s; sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
    echo "dockerd.sh: stopped dockerd (pid $pid)" >&2
    ;;
  *)
    usage
    exit 2
    ;;
esac
