"""The peer for the local-embedder benchmark: sentence-transformers on the same inputs.

Usage: python st_peer.py MODEL_DIR INPUTS.jsonl OUT.json BATCH THREADS
Reads one JSON string per line, embeds them with the model (CPU, THREADS torch threads,
normalised, batch BATCH), and writes {"seconds": encode time, "vectors": [...]}. Model load
time is not counted, as on the Rust side.
"""
import json
import sys
import time

model_dir, inputs_path, out_path, batch, threads = sys.argv[1:6]
import torch  # noqa: E402

torch.set_num_threads(int(threads))
from sentence_transformers import SentenceTransformer  # noqa: E402

texts = [json.loads(line) for line in open(inputs_path, encoding="utf-8")]
model = SentenceTransformer(model_dir, device="cpu")
model.encode(texts[:8], batch_size=int(batch))  # warm-up, as the Rust side loads first
start = time.perf_counter()
vectors = model.encode(texts, batch_size=int(batch), normalize_embeddings=True)
seconds = time.perf_counter() - start
with open(out_path, "w", encoding="utf-8") as f:
    json.dump({"seconds": seconds, "vectors": vectors.tolist()}, f)
