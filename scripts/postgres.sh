#!/usr/bin/env bash
# A throwaway PostgreSQL server for the store tests (and for trying `--db postgresql+psycopg://…`).
#
#   scripts/postgres.sh install            make sure initdb/pg_ctl exist (Debian's `postgresql`)
#   scripts/postgres.sh start [--no-install]
#       a new cluster in a temporary folder, on a free 127.0.0.1 port; prints two lines: the
#       SQLAlchemy URL, then the folder to give to `stop`
#   scripts/postgres.sh stop FOLDER        stop that server (the PID in its postmaster.pid) and
#                                          remove the folder
#
# initdb refuses to run as root: as root the cluster is owned by the system user `servegate-pg`
# (created when missing). Trust authentication on loopback only; fsync off: nothing here is kept.
set -euo pipefail
PG_USER=${SERVEGATE_PG_OS_USER:-servegate-pg}
MARK=.servegate-postgres
die() { echo "scripts/postgres.sh: $*" >&2; exit 1; }

find_bindir() {
  local d
  for d in "$(dirname "$(command -v pg_ctl 2>/dev/null || echo /nonexistent/x)")" \
           $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
      # /usr/local/bin may hold links into a version's bin; use the real folder.
      dirname "$(readlink -f "$d/pg_ctl")"
      return 0
    fi
  done
  return 1
}

install() {
  find_bindir >/dev/null && return 0
  command -v apt-get >/dev/null || die "no initdb/pg_ctl and no apt-get; install PostgreSQL"
  local sudo_=""
  [ "$(id -u)" = 0 ] || sudo_="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y --no-install-recommends postgresql >&2 \
    || { $sudo_ apt-get update >&2 && DEBIAN_FRONTEND=noninteractive \
         $sudo_ apt-get install -y --no-install-recommends postgresql >&2; }
  find_bindir >/dev/null || die "postgresql did not install (no initdb/pg_ctl found)"
}

as_owner() {  # run a command as the cluster's owner
  if [ "$(id -u)" = 0 ]; then
    runuser -u "$PG_USER" -- "$@"
  else
    "$@"
  fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  if [ "${1:-}" = --no-install ]; then
    find_bindir >/dev/null || die "initdb/pg_ctl not found (bash scripts/postgres.sh install)"
  else
    install
  fi
  local bin folder port try
  bin=$(find_bindir)
  if [ "$(id -u)" = 0 ] && ! id -u "$PG_USER" >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
      "$PG_USER" >&2 || die "cannot create the system user $PG_USER"
  fi
  folder=$(mktemp -d "${TMPDIR:-/tmp}/servegate-pg.XXXXXX")
  touch "$folder/$MARK"
  [ "$(id -u)" = 0 ] && chown -R "$PG_USER" "$folder"
  cd /  # the owner may not be allowed into the caller's folder
  as_owner "$bin/initdb" -D "$folder/data" -U servegate --auth=trust --encoding=UTF8 \
    --no-locale --no-sync >"$folder/initdb.log" 2>&1 \
    || { cat "$folder/initdb.log" >&2; rm -rf "$folder"; die "initdb failed"; }
  for try in 1 2 3; do
    port=$(free_port)
    if as_owner "$bin/pg_ctl" -D "$folder/data" -l "$folder/server.log" -w -t 60 \
        -o "-p $port -k $folder -c listen_addresses=127.0.0.1 -c fsync=off \
            -c synchronous_commit=off -c full_page_writes=off" start >/dev/null 2>&1; then
      echo "postgresql+psycopg://servegate@127.0.0.1:$port/postgres"
      echo "$folder"
      return 0
    fi
  done
  tail -20 "$folder/server.log" >&2 || true
  rm -rf "$folder"
  die "the server did not start"
}

stop() {
  local folder=${1:-} pid i
  [ -n "$folder" ] || die "usage: scripts/postgres.sh stop FOLDER"
  [ -f "$folder/$MARK" ] || die "$folder is not a folder made by scripts/postgres.sh start"
  if [ -f "$folder/data/postmaster.pid" ]; then
    pid=$(head -1 "$folder/data/postmaster.pid")
    if [ -n "$pid" ] && kill -INT "$pid" 2>/dev/null; then  # fast shutdown
      for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then kill -QUIT "$pid" 2>/dev/null || true; sleep 1; fi
    fi
  fi
  rm -rf "$folder"
}

case "${1:-}" in
  install) install ;;
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  *) echo "usage: scripts/postgres.sh install | start [--no-install] | stop FOLDER" >&2; exit 2 ;;
esac
