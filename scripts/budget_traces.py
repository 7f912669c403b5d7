#!/usr/bin/env python3
"""The traces of docs/BAD_INPUT.md, "The memory budget": how closely --max-memory binds.

Writes into DIR (default .): mc1m.jsonl (1M Mooncake requests), bl1m.jsonl (1M Bailian
requests), dy200k.jsonl (200,000 one-turn Dynamo sessions). Then, for each, measure with
/usr/bin/time -v (peak RSS):

  brokerlab fleet replay --trace mc1m.jsonl --trace-block-size 512 --pods 1 --capacity 64 \
      --router round-robin --t-prefill-ns 1 --max-memory 2M -q
  brokerlab fleet replay --trace bl1m.jsonl --pods 1 --capacity 64 --router round-robin \
      --t-prefill-ns 1 --max-memory 2M -q
  brokerlab fleet replay --trace bl1m.jsonl --pods 1 --capacity 1024 --router round-robin \
      --engine batched --max-memory 3M -q
  brokerlab fleet replay --trace dy200k.jsonl --pods 1 --capacity 64 --router round-robin \
      --t-prefill-ns 1 --max-memory 20M -q

and the baseline, a one-line trace with the first command's flags.
"""
import os
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "."
with open(os.path.join(out, "mc1m.jsonl"), "w") as f:
    for i in range(1_000_000):
        f.write('{"timestamp": %d, "input_length": 1024, "output_length": 8, "hash_ids": [%d, %d]}\n'
                % (i // 10, i % 50, i))
with open(os.path.join(out, "bl1m.jsonl"), "w") as f:
    for i in range(1_000_000):
        f.write('{"chat_id": %d, "parent_chat_id": -1, "timestamp": %.3f, "input_length": 64, '
                '"output_length": 8, "type": "text", "turn": 1, "hash_ids": [%d, %d, %d, %d]}\n'
                % (i, i / 100, i % 50, i % 7, i, i + 1))
with open(os.path.join(out, "dy200k.jsonl"), "w") as f:
    for i in range(200_000):
        f.write('{"session_id": "s%d", "timestamp": %d, "input_length": 1024, "output_length": 8, '
                '"hash_ids": [%d, %d]}\n' % (i, i, i % 50, i))
