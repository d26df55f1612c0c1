"""Writes a BERT encoder stored as a dynamically quantised ONNX graph (int8 weights behind
MatMulInteger and DequantizeLinear, as onnxruntime's quantize_dynamic writes them) back as a
sentence-transformers model directory trawl runs: config.json, model.safetensors (float32),
tokenizer.json, and config_sentence_transformers.json with the model's prompts.

    python onnx_to_model.py SRC_DIR OUT_DIR QUERY_PROMPT DOCUMENT_PROMPT

SRC_DIR holds model.onnx and tokenizer.json. Each weight is the int8 value less its zero
point, times its scale: the float model the quantiser started from, to int8's precision.
Needs onnx, numpy and safetensors.
"""

import json
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import numpy_helper
from safetensors.numpy import save_file


def param(node_name: str, suffix: str) -> str:
    """`/encoder/layer.0/attention/self/query/MatMul_quant` → `encoder.layer.0.attention.self.query.weight`."""
    return node_name.strip("/").removesuffix(suffix).replace("/", ".") + ".weight"


def main() -> None:
    src, out, query_prompt, document_prompt = sys.argv[1:5]
    graph = onnx.load(os.path.join(src, "model.onnx")).graph
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(a.t)
    producer = {o: n for n in graph.node for o in n.output}
    weights = {
        k: v
        for k, v in values.items()
        if k.startswith(("encoder.", "embeddings.")) and v.dtype == np.float32
        and not k.endswith(("_scale", "_zero_point", "_quantized"))
    }
    for node in graph.node:
        if node.op_type == "MatMulInteger":
            b, zero = node.input[1], node.input[3]
            scale = values[b.removesuffix("_quantized") + "_scale"]
            w = (values[b].astype(np.float32) - values[zero].astype(np.float32)) * scale
            # ONNX multiplies by [in, out]; a BERT checkpoint stores [out, in].
            weights[param(node.name, "/MatMul_quant")] = np.ascontiguousarray(w.T)
        elif node.op_type == "DequantizeLinear":
            x, scale, zero = node.input
            gather = producer[x]  # an embedding table, quantised, then gathered
            table = values[gather.input[0]].astype(np.float32)
            weights[param(gather.name, "/Gather")] = (table - values[zero].astype(np.float32)) * values[scale]
        elif node.op_type == "MatMul" and any(i in values for i in node.input):
            sys.exit(f"onnx_to_model: {node.name} multiplies by a float weight this script does not map")
    layers = 1 + max(int(k.split(".")[2]) for k in weights if k.startswith("encoder.layer."))
    hidden = weights["embeddings.word_embeddings.weight"].shape[1]
    need = [f"encoder.layer.{i}.{p}.weight" for i in range(layers) for p in (
        "attention.self.query", "attention.self.key", "attention.self.value",
        "attention.output.dense", "intermediate.dense", "output.dense")]
    missing = [k for k in need if k not in weights]
    if missing:
        sys.exit(f"onnx_to_model: the graph has no weight for {missing[0]} (and {len(missing) - 1} more)")
    os.makedirs(out, exist_ok=True)
    save_file(weights, os.path.join(out, "model.safetensors"))
    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": int(hidden),
        "num_hidden_layers": layers,
        "num_attention_heads": int(hidden) // 32,
        "intermediate_size": int(weights["encoder.layer.0.intermediate.dense.weight"].shape[0]),
        "hidden_act": "gelu",
        "vocab_size": int(weights["embeddings.word_embeddings.weight"].shape[0]),
        "max_position_embeddings": int(weights["embeddings.position_embeddings.weight"].shape[0]),
        "type_vocab_size": int(weights["embeddings.token_type_embeddings.weight"].shape[0]),
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(out, "config_sentence_transformers.json"), "w") as f:
        json.dump({"prompts": {"query": query_prompt, "document": document_prompt}}, f)
    shutil.copy(os.path.join(src, "tokenizer.json"), out)


if __name__ == "__main__":
    main()
