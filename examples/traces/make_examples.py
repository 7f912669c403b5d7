#!/usr/bin/env python3
"""Writes the small example traces the README's commands replay (deterministic: no randomness).

    python3 examples/traces/make_examples.py   # from the repository root; rewrites the three files

bailian-sample.jsonl  Alibaba Qwen-Bailian lines (seconds, 16-token hash ids, chat_id/parent/type/turn)
dynamo-sessions.jsonl NVIDIA Dynamo session lines (session_id, ms timestamps/delays, 512-token hash ids)
tokens-sample.jsonl   token-id prompts ({"timestamp", "token_ids", "output_length"})
Field rules: docs/MODEL.md, "Trace formats".
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def write(name, rows):
    with open(os.path.join(HERE, name), "w") as f:
        for r in rows:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


# Bailian: 6 conversations of 4 turns; each turn's prompt is the previous prompt plus 64 tokens,
# so a conversation's blocks repeat (a system prompt of 256 tokens shared by all).
rows, chat = [], 0
system = list(range(1, 17))  # 16 blocks x 16 tokens
for conv in range(6):
    history = []
    parent = -1
    for turn in range(4):
        history += [1000 * (conv + 1) + turn * 4 + k for k in range(4)]
        ids = system + history
        rows.append({
            "chat_id": chat, "parent_chat_id": parent, "timestamp": round(conv * 0.5 + turn * 3.25, 3),
            "input_length": 16 * len(ids), "output_length": 40 + 10 * turn,
            "type": ["text", "search"][conv % 2], "turn": turn, "hash_ids": ids,
        })
        parent, chat = chat, chat + 1
rows.sort(key=lambda r: r["timestamp"])
write("bailian-sample.jsonl", rows)

# Dynamo: 4 sessions of 3 turns; turn k+1 arrives `delay` ms after turn k completes.
rows = []
for s in range(4):
    ids = [10 * s + 1, 10 * s + 2]
    for turn in range(3):
        ids = ids + [100 * (s + 1) + turn]
        row = {"session_id": f"s{s}", "input_length": 512 * len(ids), "output_length": 64, "hash_ids": list(ids)}
        if turn == 0:
            row["timestamp"] = 250 * s
        else:
            row["delay"] = 1000
        rows.append(row)
write("dynamo-sessions.jsonl", rows)

# Token ids: 12 prompts sharing a 128-token prefix, each with its own 40-token question.
rows = []
prefix = [(7 * i) % 50000 for i in range(128)]
for r in range(12):
    rows.append({"timestamp": 100 * r, "token_ids": prefix + [(r * 131 + k) % 50000 for k in range(40)], "output_length": 20})
write("tokens-sample.jsonl", rows)
