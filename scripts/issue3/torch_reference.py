# The main job's tiny BERT in PyTorch/transformers (BertForMaskedLM, same sizes, tokenizer,
# AdamW, warm-up + linear decay, clipping, 15 % masking 80/10/10): a reference for how fast a
# tiny MLM learns on this corpus. Not a test. Usage, with scripts/bench-vs-pytorch.sh's venv:
#   .venv-bench/bin/python scripts/issue3/torch_reference.py TOKENIZER_JSON [STEPS LR BATCH SEQ]
# With LOCAL_INIT=1 in the environment, the first layer starts as the trainer's
# local_attention_init does (crates/mlm-train/src/model.rs); otherwise BERT's initialisation.
# Cleaning is approximate (bracketed markers dropped, paragraphs); held out: 1 file in 50.
import glob, math, os, random, re, sys, time, torch
from tokenizers import Tokenizer
from transformers import BertConfig, BertForMaskedLM
torch.manual_seed(0); random.seed(0)
args = sys.argv[1:] + [None] * 5
steps = int(args[1] or 400)
lr = float(args[2] or 2e-3)
batch = int(args[3] or 32)
seq = int(args[4] or 128)
torch.set_num_threads(2)
tok = Tokenizer.from_file(args[0])
V = tok.get_vocab_size()
files = sorted(glob.glob("data/corpus/**/*.txt", recursive=True))
ids_docs = []
for f in files:
    text = open(f, encoding="utf-8", errors="ignore").read()
    text = re.sub(r"\[[^\]]*\]", " ", text)
    paras = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    ids = []
    for enc in tok.encode_batch(paras, add_special_tokens=False):
        ids.extend(enc.ids)
    ids_docs.append(ids)
CLS, SEP, PAD, MASK = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]"), tok.token_to_id("[PAD]"), tok.token_to_id("[MASK]")
train, held = [], []
for i, ids in enumerate(ids_docs):
    chunks = [[CLS] + ids[j:j + seq - 2] + [SEP] for j in range(0, len(ids), seq - 2)]
    (held if i % 50 == 49 else train).extend(chunks)
print(len(files), "files", len(train), "train seqs", len(held), "held", flush=True)
special = {PAD, CLS, SEP, MASK, tok.token_to_id("[UNK]")}
def collate(rows, gen):
    L = max(len(r) for r in rows)
    x = torch.full((len(rows), L), PAD); att = torch.zeros((len(rows), L), dtype=torch.long)
    for i, r in enumerate(rows):
        x[i, :len(r)] = torch.tensor(r); att[i, :len(r)] = 1
    labels = x.clone()
    cand = att.bool() & (x != CLS) & (x != SEP)
    sel = (torch.rand(x.shape, generator=gen) < 0.15) & cand
    labels[~sel] = -100
    r = torch.rand(x.shape, generator=gen)
    inp = x.clone()
    inp[sel & (r < 0.8)] = MASK
    rnd = sel & (r >= 0.8) & (r < 0.9)
    inp[rnd] = torch.randint(5, V, x.shape, generator=gen)[rnd]
    return inp, att, labels
cfg = BertConfig(vocab_size=V, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=512, max_position_embeddings=128, hidden_dropout_prob=0.0,
                 attention_probs_dropout_prob=0.0)
model = BertForMaskedLM(cfg)
if os.environ.get("LOCAL_INIT"):
    d, heads, C = cfg.hidden_size, cfg.num_attention_heads, 2.5
    d_head, omega = d // heads, lambda i: math.pi * (i + 0.5) / (d // 2)
    p = torch.arange(cfg.max_position_embeddings, dtype=torch.float64)[:, None]
    angles = p * torch.tensor([omega(i) for i in range(d // 2)], dtype=torch.float64)
    table = torch.stack([angles.sin(), angles.cos()], dim=2).reshape(len(p), d)
    q, k = torch.zeros(d, d), torch.zeros(d, d)  # [in, out], as burn stores them
    for h in range(heads):
        offset = -(h // 2 + 1) if h % 2 == 0 else h // 2 + 1
        for j in range(d_head // 2):
            pair = (2 * j + h) % (d // 2)
            s_, c_ = math.sin(omega(pair) * offset), math.cos(omega(pair) * offset)
            rs, rc, a, b = 2 * pair, 2 * pair + 1, h * d_head + 2 * j, h * d_head + 2 * j + 1
            q[rs, a] = q[rc, b] = C
            k[rs, a], k[rc, a], k[rs, b], k[rc, b] = C * c_, -C * s_, C * s_, C * c_
    attention = model.bert.encoder.layer[0].attention
    with torch.no_grad():
        model.bert.embeddings.position_embeddings.weight.copy_(table * 0.02 * math.sqrt(2))
        attention.self.query.weight.copy_(q.T)
        attention.self.key.weight.copy_(k.T)
        attention.self.value.weight.copy_(torch.eye(d))
        attention.output.dense.weight.copy_(torch.eye(d))
opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, eps=1e-6)
warm = steps // 10
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: s / warm if s < warm else max(0.0, (steps - s) / (steps - warm)))
gen = torch.Generator().manual_seed(1)
egen = torch.Generator().manual_seed(2)
held_batches = [collate(held[i:i + 32], egen) for i in range(0, min(len(held), 512), 32)]
def evaluate():
    model.eval(); tot = n = 0
    with torch.no_grad():
        for inp, att, lab in held_batches:
            out = model(input_ids=inp, attention_mask=att, labels=lab)
            k = (lab != -100).sum().item(); tot += out.loss.item() * k; n += k
    model.train(); return tot / n
order = list(range(len(train))); random.shuffle(order); pos = 0
t0 = time.time()
for step in range(1, steps + 1):
    if pos + batch > len(order):
        random.shuffle(order); pos = 0
    rows = [train[i] for i in order[pos:pos + batch]]; pos += batch
    inp, att, lab = collate(rows, gen)
    loss = model(input_ids=inp, attention_mask=att, labels=lab).loss
    loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step(); sched.step(); opt.zero_grad()
    if step % 100 == 0 or step == steps:
        print(f"step {step} train {loss.item():.3f} held {evaluate():.4f} {time.time()-t0:.0f}s", flush=True)
