#!/usr/bin/env bash
# Install, through apt and only when missing, what pgsync needs from the system:
# a PostgreSQL server (14 or newer), a Java 17+ runtime, the PostgreSQL JDBC driver and
# Chromium (headless, for the browser tests of the status page).
# A second run finds everything in place and installs nothing.
set -euo pipefail

missing=()

have_postgres() {
  local v
  for initdb in /usr/lib/postgresql/*/bin/initdb; do
    [ -x "$initdb" ] || continue
    v=$(basename "$(dirname "$(dirname "$initdb")")")
    [ "$v" -ge 14 ] 2>/dev/null && return 0
  done
  return 1
}

have_java() {
  command -v java >/dev/null 2>&1 || return 1
  local major
  major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
  [ -n "$major" ] && [ "$major" -ge 17 ]
}

have_postgres || missing+=(postgresql)
have_java || missing+=(default-jre-headless)
[ -e /usr/share/java/postgresql.jar ] || missing+=(libpostgresql-jdbc-java)
command -v runuser >/dev/null 2>&1 || missing+=(util-linux)
[ -x /usr/bin/chromium ] || missing+=(chromium)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "installing system packages: ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The Debian package starts its own cluster on port 5432; pgsync runs a private one.
if [[ " ${missing[*]} " == *" postgresql "* ]] && command -v pg_lsclusters >/dev/null 2>&1; then
  "${sudo_cmd[@]}" service postgresql stop >/dev/null 2>&1 || true
fi
