"""A probe of another runtime for the local model: OpenVINO (PyPI `openvino`) beside
sentence-transformers (torch CPU), all-MiniLM-L6-v2, 2 threads, on the embed bench's inputs.

Usage:
    TRAWL_BENCH_INPUTS=/tmp/inputs.jsonl TRAWL_BENCH_ONLY=local \
        cargo bench -p trawl-embed-worker --bench embed      # writes the 512 inputs
    python openvino_probe.py MODEL_DIR /tmp/inputs.jsonl [REPEATS]

The python needs torch, sentence-transformers and openvino. Engines, each timed over the
same inputs and alternated within each repeat (so that background load falls on all alike):
  st          sentence-transformers encode(batch_size=32, normalize): the embed bench's peer
  st-b8       the same with batch_size=8
  st-bf16     the same under torch.autocast(cpu, bfloat16)
  ov-*        OpenVINO, the model converted from the same torch module (transformer, mean
              pooling and L2 normalisation in the graph), dynamic [batch, seq] shapes,
              2 threads, f32/bf16 x LATENCY/THROUGHPUT x batch 8/32. Batches: the inputs
              sorted by token length, cut into groups of B, padded to the batch's longest.
              Tokenising is timed, as in ST's encode.
Model conversion and compilation are not timed (the Rust side loads first too). One warm-up
pass per engine. Prints chunks/s (best and median), each engine's speed against ST's in the
same repeat, and the cosine of its vectors against ST fp32's. Asserts nothing.
"""
import json
import statistics
import sys
import time

import numpy as np
import torch

torch.set_num_threads(2)
import openvino as ov  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

MODEL = sys.argv[1]
INPUTS = sys.argv[2]
REPEATS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
MAX_LEN = 256

texts = [json.loads(line) for line in open(INPUTS, encoding="utf-8")]
N = len(texts)
st = SentenceTransformer(MODEL, device="cpu")
st.max_seq_length = MAX_LEN
tok = AutoTokenizer.from_pretrained(MODEL)
lens = [min(len(ids), MAX_LEN) for ids in tok(texts, truncation=False)["input_ids"]]
order = sorted(range(N), key=lambda i: -lens[i])


def batches(b):
    return [order[i : i + b] for i in range(0, N, b)]


# ---- OpenVINO model: transformer + mean pooling + normalise, converted from torch ----
class Pooled(torch.nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        h = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(v, p=2, dim=1)


t0 = time.perf_counter()
bert = st[0].auto_model.eval()
ex = tok(texts[:2], padding=True, truncation=True, max_length=MAX_LEN, return_tensors="pt")
with torch.no_grad():
    ov_model = ov.convert_model(
        Pooled(bert),
        example_input=(ex["input_ids"], ex["attention_mask"], ex["token_type_ids"]),
        input=[
            ("input_ids", ov.PartialShape([-1, -1]), ov.Type.i64),
            ("attention_mask", ov.PartialShape([-1, -1]), ov.Type.i64),
            ("token_type_ids", ov.PartialShape([-1, -1]), ov.Type.i64),
        ],
    )
print(f"converted in {time.perf_counter() - t0:.1f}s", flush=True)
core = ov.Core()


def make_ov(precision, hint, b):
    cfg = {
        "INFERENCE_NUM_THREADS": 2,
        "PERFORMANCE_HINT": hint,
        "INFERENCE_PRECISION_HINT": precision,
    }
    cm = core.compile_model(ov_model, "CPU", cfg)
    bs = batches(b)
    streams = cm.get_property("NUM_STREAMS")
    nreq = cm.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")
    info = f"streams={streams} nireq={nreq} threads={cm.get_property('INFERENCE_NUM_THREADS')} prec={cm.get_property('INFERENCE_PRECISION_HINT')}"

    def feed(idx):
        enc = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=MAX_LEN, return_tensors="np")
        return {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}

    if hint == "LATENCY" or nreq <= 1:
        req = cm.create_infer_request()

        def run():
            out = np.zeros((N, 384), np.float32)
            for idx in bs:
                r = req.infer(feed(idx))
                out[idx] = next(iter(r.values()))
            return out
    else:
        q = ov.AsyncInferQueue(cm, nreq)
        out_holder = {}

        def cb(request, idx):
            out_holder["out"][idx] = request.get_output_tensor(0).data

        q.set_callback(cb)

        def run():
            out_holder["out"] = np.zeros((N, 384), np.float32)
            for idx in bs:
                q.start_async(feed(idx), idx)
            q.wait_all()
            return out_holder["out"]

    return run, info


def make_st(bf16, b=32):
    def run():
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return st.encode(texts, batch_size=b, normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)
        return st.encode(texts, batch_size=b, normalize_embeddings=True, convert_to_numpy=True)

    return run, "torch %s, threads=%d, batch %d" % (torch.__version__, torch.get_num_threads(), b)


engines = {"st": make_st(False), "st-b8": make_st(False, 8), "st-bf16": make_st(True)}
for prec in ("f32", "bf16"):
    for hint in ("LATENCY", "THROUGHPUT"):
        for b in (8, 32):
            engines[f"ov-{prec}-{hint.lower()}-b{b}"] = make_ov(prec, hint, b)
for name, (_, info) in engines.items():
    print(f"{name}: {info}", flush=True)

# warm-up: one full pass each (all shapes seen); keep the vectors of ST fp32 as the reference
vecs = {}
for name, (run, _) in engines.items():
    t = time.perf_counter()
    vecs[name] = run()
    print(f"warm-up {name}: {time.perf_counter() - t:.2f}s", flush=True)
ref = vecs["st"]

times = {name: [] for name in engines}
for rep in range(REPEATS):
    for name, (run, _) in engines.items():
        t = time.perf_counter()
        v = run()
        dt = time.perf_counter() - t
        times[name].append(dt)
        vecs[name] = v
        print(f"rep {rep} {name}: {dt:.2f}s = {N / dt:.1f} chunks/s", flush=True)


def cos(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(1)


tokens = sum(lens)
print(f"\n{N} inputs, {sum(map(len, texts)) / 1e3:.0f} KB, {tokens} tokens (mean {tokens / N:.0f}, "
      f"{sum(1 for x in tok(texts)['input_ids'] if len(x) > MAX_LEN)} truncated to {MAX_LEN}); "
      f"openvino {ov.get_version()}, torch {torch.__version__}, {REPEATS} repeats\n")
st_best = min(times["st"])
st_med = statistics.median(times["st"])
print("| engine | best chunks/s | median chunks/s | best vs st best | median vs st median | mean cos | min cos |")
print("|---|---|---|---|---|---|---|")
for name in engines:
    ts = times[name]
    c = cos(vecs[name], ref)
    print(f"| {name} | {N / min(ts):.1f} | {N / statistics.median(ts):.1f} | {st_best / min(ts):.2f} | "
          f"{st_med / statistics.median(ts):.2f} | {c.mean():.6f} | {c.min():.6f} |")
# per-repeat ratio to the ST run of the same repeat (robust against drifting background load)
print("\nper-repeat speed vs ST of the same repeat:")
for name in engines:
    print(name, [round(times["st"][r] / times[name][r], 2) for r in range(REPEATS)])
