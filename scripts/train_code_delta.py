"""Trains the code-tuned model's low-rank delta (see scripts/train-code-delta.sh).

Pairs: a documented definition's first docstring sentence (the query) and its chunk (the answer:
header, a newline, the code, as trawl's local model reads it), for half of the pairs drawn in a
batch with the docstring taken out, so that the code itself must answer, and for the other half
whole, as the index holds it.
Model: all-MiniLM-L6-v2 frozen, a rank-R LoRA delta on every encoder matrix; mean pooling,
L2 normalisation; in-batch negatives at scale 20; AdamW, linear warm-up and decay; one epoch.
The shipped delta: 8,000 training pairs (250 steps of 32), ~25 min on 2 cores.
The delta is saved with B already scaled, as crates/embed/src/tuned.rs adds it: W + B·A.
"""
import argparse, collections, glob, json, math, os, random, re, time

import pyarrow.parquet as pq
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

ap = argparse.ArgumentParser()
ap.add_argument("--store", required=True)
ap.add_argument("--model", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--per-language", type=int, default=5000)
ap.add_argument("--rank", type=int, default=8)
ap.add_argument("--alpha", type=float, default=16)
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--doc-tokens", type=int, default=256)
ap.add_argument("--train-pairs", type=int, default=8000)
ap.add_argument("--mix", type=float, default=0.5, help="share of answers with their docstring kept")
ap.add_argument("--threads", type=int, default=os.cpu_count())
args = ap.parse_args()
torch.set_num_threads(args.threads)

# ---- pairs ----
DEFINITIONS = {"function", "method", "class", "interface", "struct", "enum", "trait", "impl", "type"}


def docstring(lang, text):
    """(docstring, text without it), or None."""
    lines = text.split("\n")
    if lang == "python":
        m = re.search(r'^(\s*)(?:async\s+)?(def|class)\b[^\n]*?:\s*\n(\s*)[rRbBuU]?("""|\'\'\')(.*?)\4[ \t]*\n?', text, re.S | re.M)
        return (m.group(5), text[: m.start(3)] + text[m.end():]) if m else None
    if lang == "rust":
        doc, rest, i = [], [], 0
        while i < len(lines) and (lines[i].strip().startswith(("///", "#[")) or not lines[i].strip()):
            (doc.append(lines[i].strip()[3:].strip()) if lines[i].strip().startswith("///") else rest.append(lines[i]))
            i += 1
        return ("\n".join(doc), "\n".join(rest + lines[i:])) if doc else None
    if lang == "go":
        i = 0
        while i < len(lines) and lines[i].strip().startswith("//"):
            i += 1
        return ("\n".join(l.strip()[2:].strip() for l in lines[:i]), "\n".join(lines[i:])) if i else None
    if lang in ("javascript", "typescript", "tsx", "jsx"):
        m = re.match(r"\s*/\*\*(.*?)\*/\s*\n", text, re.S)
        if not m:
            return None
        out = []
        for l in m.group(1).split("\n"):
            l = re.sub(r"^\s*\*\s?", "", l)
            if l.strip().startswith("@"):
                break
            out.append(l)
        return "\n".join(out), text[m.end():]
    return None


rows = []
for f in glob.glob(os.path.join(args.store, "chunks", "**", "*.parquet"), recursive=True):
    rows += pq.read_table(f, columns=["language", "kind", "path", "header", "text"]).to_pylist()
by_lang, seen = collections.defaultdict(list), set()
for r in rows:
    if r["kind"] not in DEFINITIONS or "/test" in r["path"] or "tests/" in r["path"] or r["path"].startswith("test"):
        continue
    x = docstring(r["language"], r["text"])
    if not x:
        continue
    doc, code = x
    q = re.split(r"(?<=[.!?])\s", re.sub(r"\s+", " ", doc).strip())[0].strip()
    q = re.sub(r"`|\[|\]|\{@link\s*|\}", "", q)
    if len(q.split()) < 4 or len(q) > 300 or code.count("\n") < 2 or q.lower() in seen:
        continue
    seen.add(q.lower())
    by_lang[r["language"]].append({"q": q, "doc": r["header"] + "\n" + code, "full": r["header"] + "\n" + r["text"]})
random.seed(7)
pairs = []
for lang in sorted(by_lang):
    random.shuffle(by_lang[lang])
    print(f"pairs: {lang} {len(by_lang[lang])}, taking {min(len(by_lang[lang]), args.per_language)}", flush=True)
    pairs += by_lang[lang][: args.per_language]
random.shuffle(pairs)
random.seed(1)
val, train = pairs[:1000], pairs[1000 : 1000 + args.train_pairs]

# ---- model: BERT written out, LoRA on every encoder matrix ----
cfg = json.load(open(os.path.join(args.model, "config.json")))
W = {k.removeprefix("bert."): v for k, v in load_file(os.path.join(args.model, "model.safetensors")).items()}
H, NH, L, EPS = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"], cfg["layer_norm_eps"]
R, SC = args.rank, args.alpha / args.rank
TARGETS = ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense", "intermediate.dense", "output.dense"]
gen = torch.Generator().manual_seed(0)
lora = {}
for i in range(L):
    for t in TARGETS:
        w = W[f"encoder.layer.{i}.{t}.weight"]
        a = (torch.randn(R, w.shape[1], generator=gen) / math.sqrt(w.shape[1])).requires_grad_()
        lora[f"encoder.layer.{i}.{t}"] = (a, torch.zeros(w.shape[0], R).requires_grad_())


def lin(x, name):
    y = x @ W[name + ".weight"].T + W[name + ".bias"]
    if name in lora:
        a, b = lora[name]
        y = y + SC * ((x @ a.T) @ b.T)
    return y


def ln(x, name):
    return torch.nn.functional.layer_norm(x, (H,), W[name + ".weight"], W[name + ".bias"], EPS)


def encode(ids, mask):
    T = ids.shape[1]
    x = W["embeddings.word_embeddings.weight"][ids] + W["embeddings.position_embeddings.weight"][:T] + W["embeddings.token_type_embeddings.weight"][0]
    x = ln(x, "embeddings.LayerNorm")
    bias = (1.0 - mask[:, None, None, :].float()) * -1e4
    heads = lambda y: y.view(y.shape[0], T, NH, H // NH).transpose(1, 2)
    for i in range(L):
        p = f"encoder.layer.{i}."
        q, k, v = (heads(lin(x, p + "attention.self." + n)) for n in ("query", "key", "value"))
        a = (torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(H // NH) + bias, -1) @ v).transpose(1, 2).reshape(x.shape[0], T, H)
        x = ln(x + lin(a, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        x = ln(x + lin(torch.nn.functional.gelu(lin(x, p + "intermediate.dense")), p + "output.dense"), p + "output.LayerNorm")
    m = mask[:, :, None].float()
    return torch.nn.functional.normalize((x * m).sum(1) / m.sum(1).clamp(min=1), dim=-1)


tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))


def batch(texts, max_len):
    tok.enable_truncation(max_len)
    tok.enable_padding(pad_id=0)
    enc = tok.encode_batch(texts)
    return torch.tensor([e.ids for e in enc]), torch.tensor([e.attention_mask for e in enc])


def evaluate():
    """MRR@10 of the held-out queries among the held-out answers."""
    with torch.no_grad():
        q = torch.cat([encode(*batch([p["q"] for p in val[i : i + 64]], 64)) for i in range(0, len(val), 64)])
        d = torch.cat([encode(*batch([p["doc"] for p in val[i : i + 64]], args.doc_tokens)) for i in range(0, len(val), 64)])
        s = q @ d.T
        r = (s > s.diag()[:, None]).sum(1) + 1
        return float(torch.where(r <= 10, 1.0 / r, torch.zeros_like(r, dtype=torch.float)).mean())


def save():
    out = {}
    for k, (a, b) in lora.items():
        out[k + ".lora_A"] = a.detach().half().contiguous()
        out[k + ".lora_B"] = (b * SC).detach().half().contiguous()
    save_file(out, args.out)


params = [p for ab in lora.values() for p in ab]
opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
steps = len(train) // args.batch
warm = max(1, steps // 10)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1, (s + 1) / warm) * max(0.0, (steps - s) / steps))
print(f"held-out MRR@10 before: {evaluate():.4f}", flush=True)
random.shuffle(train)
t0 = time.time()
for s in range(steps):
    b = train[s * args.batch : (s + 1) * args.batch]
    q = encode(*batch([p["q"] for p in b], 64))
    d = encode(*batch([p["full"] if random.random() < args.mix else p["doc"] for p in b], args.doc_tokens))
    loss = torch.nn.functional.cross_entropy(20 * q @ d.T, torch.arange(len(b)))
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    if s % 20 == 0:
        print(f"step {s}/{steps} loss {loss.item():.3f} {time.time() - t0:.0f}s", flush=True)
    if s % 200 == 199 or s == steps - 1:
        print(f"held-out MRR@10: {evaluate():.4f}", flush=True)
        save()
print(f"delta written to {args.out}")
