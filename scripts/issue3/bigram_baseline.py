# Held-out cross-entropy of a unigram and a smoothed left-bigram model, P(w | previous token),
# counted on the training split of data/corpus with a run's tokenizer: how much local signal
# the text holds for the main job. Usage:
#   .venv-bench/bin/python scripts/issue3/bigram_baseline.py runs/tiny-bert/tokenizer.json
import glob, math, re, sys
from collections import Counter, defaultdict
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
files = sorted(glob.glob("data/corpus/**/*.txt", recursive=True))
train, held = [], []
for i, f in enumerate(files):
    text = re.sub(r"\[[^\]]*\]", " ", open(f, encoding="utf-8", errors="ignore").read())
    paras = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    ids = [t for e in tok.encode_batch(paras, add_special_tokens=False) for t in e.ids]
    (held if i % 50 == 49 else train).append(ids)
uni = Counter(t for d in train for t in d); N = sum(uni.values()); V = tok.get_vocab_size()
big = defaultdict(Counter)
for d in train:
    for a, b in zip(d, d[1:]):
        big[a][b] += 1
def pu(w): return (uni[w] + 0.1) / (N + 0.1 * V)
def pl(w, l, lam=0.6):
    c = big[l]; n = sum(c.values()) if c else 0
    return lam * (c[w] / n if n else 0) + (1 - lam) * pu(w) if n else pu(w)
hu = hl = 0; m = 0
for d in held:
    for i in range(1, len(d) - 1):
        w, l = d[i], d[i - 1]
        hu -= math.log(pu(w)); hl -= math.log(pl(w, l))
        m += 1
print(f"tokens train {N} held {m}; unigram CE {hu/m:.3f}; left-bigram CE {hl/m:.3f}")
