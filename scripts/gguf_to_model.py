"""Writes a NomicBERT GGUF file (nomic-embed-text-v1.5, as llama.cpp stores it) as a
sentence-transformers model directory that trawl's local embedder reads: config.json,
model.safetensors (the tensors under Hugging Face's NomicBert names, f16 kept f16),
tokenizer.json (the GGUF's WordPiece vocabulary as a BERT tokenizer), sentence_bert_config.json,
modules.json, 1_Pooling/config.json and config_sentence_transformers.json (the model's
`search_query: ` / `search_document: ` prompts).

    python3 scripts/gguf_to_model.py MODEL.gguf OUT_DIR [MAX_SEQ_LENGTH]

Needs the PyPI packages gguf, numpy, safetensors and tokenizers (scripts/fetch-model.sh
installs them in a throwaway virtual environment). MAX_SEQ_LENGTH (default 256) is how many
tokens of a chunk the model reads: the model knows 2,048, and costs grow with the length.
"""

import json
import os
import re
import sys

import numpy as np
from gguf import GGUFReader
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece


def field(reader, key):
    f = reader.fields[key]
    v = f.parts[f.data[0]]
    if f.types[0].name == "STRING":
        return bytes(v).decode()
    return v.tolist()[0]


def main():
    src, out = sys.argv[1], sys.argv[2]
    max_seq = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    r = GGUFReader(src)
    arch = field(r, "general.architecture")
    if arch != "nomic-bert":
        sys.exit(f"{src}: architecture {arch!r}, only nomic-bert is converted")
    layers = field(r, "nomic-bert.block_count")
    hidden = field(r, "nomic-bert.embedding_length")
    names = {
        "token_embd.weight": "embeddings.word_embeddings.weight",
        "token_types.weight": "embeddings.token_type_embeddings.weight",
        "token_embd_norm.weight": "emb_ln.weight",
        "token_embd_norm.bias": "emb_ln.bias",
    }
    for i in range(layers):
        at = f"encoder.layers.{i}"
        names.update(
            {
                f"blk.{i}.attn_qkv.weight": f"{at}.attn.Wqkv.weight",
                f"blk.{i}.attn_output.weight": f"{at}.attn.out_proj.weight",
                f"blk.{i}.ffn_up.weight": f"{at}.mlp.fc11.weight",
                f"blk.{i}.ffn_gate.weight": f"{at}.mlp.fc12.weight",
                f"blk.{i}.ffn_down.weight": f"{at}.mlp.fc2.weight",
                f"blk.{i}.attn_output_norm.weight": f"{at}.norm1.weight",
                f"blk.{i}.attn_output_norm.bias": f"{at}.norm1.bias",
                f"blk.{i}.layer_output_norm.weight": f"{at}.norm2.weight",
                f"blk.{i}.layer_output_norm.bias": f"{at}.norm2.bias",
            }
        )
    tensors = {}
    for t in r.tensors:
        if t.name not in names:
            sys.exit(f"{src}: unexpected tensor {t.name}")
        if t.tensor_type.name not in ("F16", "F32"):
            sys.exit(f"{src}: {t.name} is {t.tensor_type.name}; only F16 and F32 are converted")
        # GGUF lists dimensions fastest first; the data's numpy shape is already row-major.
        tensors[names[t.name]] = np.ascontiguousarray(t.data)
    if len(tensors) != len(names):
        missing = sorted(set(names.values()) - set(tensors))
        sys.exit(f"{src}: tensors missing: {missing[:5]}")

    # llama.cpp writes a word's first piece as `▁piece` and a continuation as `piece`;
    # WordPiece spells them `piece` and `##piece`. Control tokens (`[CLS]`) and the unused
    # slots (`[unused0]`) stay as they are.
    tokens = r.fields["tokenizer.ggml.tokens"]
    kinds = r.fields["tokenizer.ggml.token_type"]
    vocab = {}
    for n, (i, k) in enumerate(zip(tokens.data, kinds.data)):
        piece = bytes(tokens.parts[i]).decode()
        control = int(kinds.parts[k][0]) == 3 or re.fullmatch(r"\[unused\d+\]", piece)
        if not control:
            piece = piece[1:] if piece.startswith("\u2581") else "##" + piece
        vocab.setdefault(piece, n)
    tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    tok.decoder = decoders.WordPiece(prefix="##")

    os.makedirs(os.path.join(out, "1_Pooling"), exist_ok=True)
    save_file(tensors, os.path.join(out, "model.safetensors"))
    tok.save(os.path.join(out, "tokenizer.json"))
    config = {
        "architectures": ["NomicBertModel"],
        "model_type": "nomic_bert",
        "n_embd": hidden,
        "n_head": field(r, "nomic-bert.attention.head_count"),
        "n_layer": layers,
        "n_inner": field(r, "nomic-bert.feed_forward_length"),
        "n_positions": field(r, "nomic-bert.context_length"),
        "layer_norm_epsilon": field(r, "nomic-bert.attention.layer_norm_epsilon"),
        "rotary_emb_base": field(r, "nomic-bert.rope.freq_base"),
        "rotary_emb_fraction": 1.0,
        "rotary_emb_interleaved": False,
        "activation_function": "swiglu",
        "qkv_proj_bias": False,
        "mlp_fc1_bias": False,
        "mlp_fc2_bias": False,
        "prenorm": False,
        "type_vocab_size": 2,
        "vocab_size": len(vocab),
        "pad_token_id": field(r, "tokenizer.ggml.padding_token_id"),
    }
    files = {
        "config.json": config,
        "sentence_bert_config.json": {"max_seq_length": max_seq, "do_lower_case": False},
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ],
        "1_Pooling/config.json": {"word_embedding_dimension": hidden, "pooling_mode_mean_tokens": True},
        "config_sentence_transformers.json": {
            "prompts": {"query": "search_query: ", "document": "search_document: "},
            "default_prompt_name": None,
        },
    }
    for name, value in files.items():
        with open(os.path.join(out, name), "w") as f:
            json.dump(value, f, indent=2)
    print(f"model: wrote {field(r, 'general.name')} ({len(tensors)} tensors) to {out}")


if __name__ == "__main__":
    main()
