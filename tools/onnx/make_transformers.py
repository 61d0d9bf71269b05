#!/usr/bin/env python3
"""Small transformer models exported with PyTorch's torch.onnx, for the importer's tests.

  python3 tools/onnx/make_transformers.py OUT_DIR [--layers 2] [--hidden 64] [--heads 4] [--vocab 100]
      [--max-pos 128] [--legacy]

Writes bert.onnx (a BERT-base-shaped encoder: token + position + type embeddings, LayerNorm,
self-attention, GELU MLP; hidden 64, 4 heads) and gpt2.onnx (a GPT-2-small-shaped decoder:
pre-LayerNorm blocks with causal attention and a tied LM head), random weights (seed 0), with dynamic
batch and sequence, plus inputs and PyTorch's outputs as .npz next to them. --legacy uses the
TorchScript exporter (opset 17) instead of the dynamo one (opset 18+). The benchmarks
(benchmarks/onnx) make BERT-base-sized ones with --layers 12 --hidden 768 --heads 12 --vocab 30522
--max-pos 512.
"""
import argparse
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, causal, pre_norm):
        super().__init__()
        self.h, self.causal, self.pre = heads, causal, pre_norm
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attn(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.reshape(b, s, self.h, d // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))

    def forward(self, x, mask=None):
        if self.pre:
            x = x + self.attn(self.ln1(x), mask)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
        x = self.ln1(x + self.attn(x, mask))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class Bert(nn.Module):
    def __init__(self, layers, d=64, heads=4, vocab=100, max_pos=128):
        super().__init__()
        self.tok, self.pos, self.typ = nn.Embedding(vocab, d), nn.Embedding(max_pos, d), nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d)
        self.blocks = nn.ModuleList(Block(d, heads, False, False) for _ in range(layers))

    def forward(self, input_ids, attention_mask):
        s = input_ids.shape[1]
        pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
        x = self.ln(self.tok(input_ids) + self.pos(pos) + self.typ(torch.zeros_like(input_ids)))
        mask = (attention_mask[:, None, None, :] > 0)
        for b in self.blocks:
            x = b(x, mask)
        return x


class Gpt2(nn.Module):
    def __init__(self, layers, d=64, heads=4, vocab=100, max_pos=128):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_pos, d)
        self.blocks = nn.ModuleList(Block(d, heads, True, True) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, input_ids):
        s = input_ids.shape[1]
        pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
        x = self.tok(input_ids) + self.pos(pos)
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.tok.weight.t()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=100)
    ap.add_argument("--max-pos", type=int, default=128)
    ap.add_argument("--legacy", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.int64)
    mask[1, 5:] = 0
    for name, model, inputs, names in [("bert", Bert(args.layers, args.hidden, args.heads, args.vocab, args.max_pos), (ids, mask), ["input_ids", "attention_mask"]),
                                       ("gpt2", Gpt2(args.layers, args.hidden, args.heads, args.vocab, args.max_pos), (ids,), ["input_ids"])]:
        model.eval()
        path = os.path.join(args.out, f"{name}.onnx")
        dyn = {n: {0: "batch", 1: "sequence"} for n in names}
        if args.legacy:
            torch.onnx.export(model, inputs, path, input_names=names, output_names=["output"], dynamic_axes=dyn,
                              opset_version=17, dynamo=False)
        else:
            b, s = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("sequence", min=2, max=args.max_pos)
            shapes = {n: {0: b, 1: s} for n in names}
            torch.onnx.export(model, inputs, path, input_names=names, output_names=["output"],
                              dynamic_shapes=shapes, dynamo=True, external_data=False)
        with torch.no_grad():
            out = model(*inputs).numpy()
        np.savez(os.path.join(args.out, f"{name}_io.npz"), output=out, **{n: t.numpy() for n, t in zip(names, inputs)})
        print(path, os.path.getsize(path))


if __name__ == "__main__":
    main()
