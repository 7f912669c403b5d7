#!/bin/sh
# A command tool (examples/tools-command.toml, examples/agent-openai.toml): reads the call's
# arguments (JSON) on stdin and "sends" the email by appending a line to $NOTIFY_OUTBOX (default
# ./outbox.txt). Exit status: 0 done (stdout is the result), 65 refused (nothing done), 75 try
# later, 77 stale fencing token; anything else: outcome unknown (docs/RUNNER.md, "Real tools").
set -eu
args=$(cat)
case "$args" in
  *'"to":'*) ;;
  *) echo "no recipient in $args"; exit 65 ;;
esac
outbox=${NOTIFY_OUTBOX:-outbox.txt}
printf '%s %s %s\n' "$BROKERLAB_FENCE" "$BROKERLAB_STEP" "$args" >> "$outbox"
echo "sent"
