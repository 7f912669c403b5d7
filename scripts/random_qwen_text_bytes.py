#!/usr/bin/env python3
"""Characters and bytes per token of inference-perf's random-token prompts (docs/PUBLISHED.md,
"The Sticky EPP's in-flight token counter (sticky32)").

inference-perf builds its code-generation prompts by decoding uniform random Qwen3 token ids
(`conversation_replay_datagen.py` `_generate_random_token_text` @ 3c7c4a37) and sends the body
as `json.dumps(payload)` (`openai_client.py` L278: ensure_ascii, every non-ASCII character as a
\\uXXXX escape). The Sticky EPP hashes the prompt's UTF-8 bytes (64 per block) and estimates its
input tokens as the body's bytes / 4. This prints, per random id: the decoded text's characters,
its UTF-8 bytes, and its JSON-escaped bytes.

Qwen's byte-level BPE ranks: `dashscope/resources/qwen.tiktoken` from the PyPI wheel
`dashscope` 2.0.2 (151,643 regular tokens, the ids inference-perf samples; the Qwen3 tokenizer's
vocab_size):

    pip download dashscope==2.0.2 --no-deps -d /tmp/ds
    python3 -c "import zipfile; z = zipfile.ZipFile('/tmp/ds/dashscope-2.0.2-py3-none-any.whl'); \\
        open('/tmp/ds/qwen.tiktoken', 'wb').write(z.read('dashscope/resources/qwen.tiktoken'))"
    python3 scripts/random_qwen_text_bytes.py /tmp/ds/qwen.tiktoken

Decoding: the ids' bytes concatenated, invalid UTF-8 replaced by U+FFFD (the HF byte-level
decoder's `errors="replace"`). Seeded (Python's `random`, not numpy's stream: the figures are
averages over 5-20 prompts per length, not the run's exact prompts).
"""

import base64
import json
import random
import sys


def main() -> None:
    ranks = {}
    with open(sys.argv[1], "rb") as f:
        for line in f:
            tok, rank = line.split()
            ranks[int(rank)] = base64.b64decode(tok)
    vocab = len(ranks)
    assert vocab == 151_643, vocab
    rng = random.Random(1)
    print("ids per prompt | prompts | chars/id | UTF-8 bytes/id | JSON (ensure_ascii) bytes/id")
    for n, reps in ((3_000, 20), (15_000, 20), (100_000, 5)):
        chars = utf8 = js = 0
        for _ in range(reps):
            text = b"".join(ranks[rng.randrange(vocab)] for _ in range(n)).decode("utf-8", "replace")
            chars += len(text)
            utf8 += len(text.encode("utf-8"))
            js += len(json.dumps(text)) - 2  # without the quotes
        t = n * reps
        print(f"{n} | {reps} | {chars / t:.3f} | {utf8 / t:.3f} | {js / t:.3f}")


if __name__ == "__main__":
    main()
