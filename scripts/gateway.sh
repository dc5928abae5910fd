#!/usr/bin/env bash
# make gateway (docs/gateway.md): the example gateway with a redis-server
# beside it and a Linger server receiving its probe, for a person to try.
# Everything listens on 127.0.0.1; Ctrl-C stops all three. Redis keeps
# nothing on disk; the probe's traces go to $OUT/traces.
#
#   GATEWAY_FLAGS   the gateway's flags (default --leaky: every leak on;
#                   "" for the fixed gateway)
#   GATEWAY_ADDR    default 127.0.0.1:8080
#   LINGER_ADDR     default 127.0.0.1:8888
#   REDIS_PORT      default 6380 (not Redis's own 6379, which a system
#                   Redis may hold)
#   OUT             default out/gateway
set -euo pipefail
cd "$(dirname "$0")/.."

GATEWAY_FLAGS=${GATEWAY_FLAGS---leaky}
GATEWAY_ADDR=${GATEWAY_ADDR:-127.0.0.1:8080}
LINGER_ADDR=${LINGER_ADDR:-127.0.0.1:8888}
REDIS_PORT=${REDIS_PORT:-6380}
OUT=${OUT:-out/gateway}

if ! command -v redis-server >/dev/null; then
	echo "redis-server not found: apt-get install -y redis-server (Debian's)" >&2
	exit 1
fi
for b in bin/linger bin/gateway; do
	[ -x "$b" ] || { echo "$b not built: run make gateway" >&2; exit 1; }
done
mkdir -p "$OUT/redis" "$OUT/traces"
OUT=$(cd "$OUT" && pwd) # redis-server opens its log after changing to its --dir
token=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')

pids=()
# The gateway first (its probe posts its last events and ends its
# trace), then Linger, then Redis.
stop() {
	trap - EXIT INT TERM
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill "${pids[i]}" 2>/dev/null || true
		wait "${pids[i]}" 2>/dev/null || true
	done
}
trap stop EXIT INT TERM

redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
	--dir "$OUT/redis" --logfile "$OUT/redis/redis.log" --daemonize no &
pids+=($!)
bin/linger serve --dir "$OUT" --trace-dir "$OUT/traces" --addr "$LINGER_ADDR" --token "$token" &
pids+=($!)
for _ in $(seq 50); do
	curl -fsS -o /dev/null "http://$LINGER_ADDR/api/status?token=$token" 2>/dev/null && break
	sleep 0.2
done
# shellcheck disable=SC2086 # GATEWAY_FLAGS is a list of flags
bin/gateway --addr "$GATEWAY_ADDR" --redis "127.0.0.1:$REDIS_PORT" \
	--linger "http://$LINGER_ADDR/" --linger-token "$token" $GATEWAY_FLAGS &
pids+=($!)
sleep 1
cat <<EOF

The gateway (flags: ${GATEWAY_FLAGS:-none, the fixed one}) serves http://$GATEWAY_ADDR/, its probe
posting to Linger at http://$LINGER_ADDR/?token=$token
(the root page lists it under Services; its timeline is /timeline/live/gateway).

Load it from another terminal, for example for 30 seconds:

    bin/linger load http://$GATEWAY_ADDR/v1/generate --concurrency 8 --duration 30s

then watch what lingers on its timeline. Redis: redis-cli -p $REDIS_PORT --scan --pattern 'linger:gw:*'
Ctrl-C stops the gateway, Linger and Redis.

EOF
wait -n "${pids[@]}" || true
echo "one of redis-server, linger serve and the gateway ended (its log is above): stopping the others" >&2
