# Sourced by scripts/test: make sure the PostgreSQL and Redis the tests use are up.
# Starts a locally installed server that is stopped; says clearly what is missing otherwise.

pg_url() { echo "${HEADROOM_TEST_DATABASE_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/headroom_test}"; }
redis_url() { echo "${HEADROOM_TEST_REDIS_URL:-redis://127.0.0.1:6379/15}"; }

probe() {  # probe pg|redis -> exit 0 when the server answers
  "$VENV/bin/python" - "$1" "$(pg_url)" "$(redis_url)" <<'PY'
import sys
kind, pg, rd = sys.argv[1:]
try:
    if kind == "pg":
        import psycopg
        from sqlalchemy.engine import make_url
        u = make_url(pg).set(drivername="postgresql", database="postgres")
        psycopg.connect(u.render_as_string(hide_password=False), connect_timeout=3).close()
    else:
        import redis
        redis.Redis.from_url(rd, socket_connect_timeout=3).ping()
except Exception as exc:
    print(f"   {kind}: {exc}".splitlines()[0], file=sys.stderr)
    sys.exit(1)
PY
}

wait_for() {
  for _ in $(seq 1 30); do probe "$1" 2>/dev/null && return 0; sleep 1; done
  probe "$1"
}

ensure_services() {
  if ! probe pg; then
    if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
      echo "==> PostgreSQL is installed but not answering; starting it" >&2
      pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
      wait_for pg
    else
      echo "!! PostgreSQL is not reachable at $(pg_url) and no local server is installed." >&2
      echo "!! Start one, or point HEADROOM_TEST_DATABASE_URL at a server (trust or password auth)." >&2
      return 1
    fi
  fi
  if ! probe redis; then
    if command -v redis-server >/dev/null; then
      echo "==> Redis is installed but not answering; starting it" >&2
      mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
      redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log
      wait_for redis
    else
      echo "!! Redis is not reachable at $(redis_url) and no local server is installed." >&2
      echo "!! Start one, or point HEADROOM_TEST_REDIS_URL at a server." >&2
      return 1
    fi
  fi
}
