#!/usr/bin/env bash
# Make sure the loopback services the integration tests talk to are up: Mosquitto on 127.0.0.1:1883 and
# PostgreSQL on 127.0.0.1:5432 (trust auth). Starts whichever is down; idempotent.
set -euo pipefail
log() { echo "[start-services] $*"; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if port_open 1883; then
  log "mosquitto: up on 127.0.0.1:1883"
else
  log "mosquitto: starting"
  if [ -f /etc/mosquitto/mosquitto.conf ]; then mosquitto -d -c /etc/mosquitto/mosquitto.conf; else mosquitto -d -p 1883; fi
  for _ in $(seq 50); do port_open 1883 && break; sleep 0.1; done
  port_open 1883 || { log "ERROR: mosquitto did not start"; exit 1; }
fi

if port_open 5432; then
  log "postgresql: up on 127.0.0.1:5432"
elif command -v pg_ctlcluster >/dev/null 2>&1; then
  log "postgresql: starting"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  for _ in $(seq 100); do port_open 5432 && break; sleep 0.1; done
  port_open 5432 || log "WARNING: postgresql is not reachable; PostgreSQL tests will fail"
else
  log "WARNING: no PostgreSQL server installed; PostgreSQL tests will fail"
fi
