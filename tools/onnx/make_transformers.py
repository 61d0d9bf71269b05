#!/usr/bin/env python3
"""Exports a BERT-shaped encoder and a GPT-2-shaped decoder from PyTorch to ONNX, with random weights
and dynamic batch and sequence, the way applications export their models (torch.onnx).

    python3 tools/onnx/make_transformers.py OUT_DIR [--size small|base] [--seed N]

small (the test data committed under tests/onnx/data/): hidden 64, 4 heads, 2 layers, vocabulary 512.
base (benchmarks): BERT-base / GPT-2-small shapes: hidden 768, 12 heads, 12 layers, vocabulary 30522
(BERT) and 50257 (GPT-2), written to OUT_DIR, never committed.
Writes bert_<size>.onnx and gpt2_<size>.onnx. The models are written here, in plain PyTorch, after
the layouts of BERT (post-norm, GELU erf, padding mask) and GPT-2 (pre-norm, tanh GELU, causal mask,
tied embeddings), so no other package is needed.
"""
import argparse
import math
import os

import torch
from torch import nn


class BertLayer(nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(h, 3 * h)
        self.out = nn.Linear(h, h)
        self.ln1 = nn.LayerNorm(h, eps=1e-12)
        self.fc1 = nn.Linear(h, ffn)
        self.fc2 = nn.Linear(ffn, h)
        self.ln2 = nn.LayerNorm(h, eps=1e-12)

    def forward(self, x, mask_bias):
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=-1)
        q = q.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        k = k.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        v = v.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads) + mask_bias
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = self.ln1(x + self.out(ctx))
        return self.ln2(x + self.fc2(nn.functional.gelu(self.fc1(x))))


class Bert(nn.Module):
    def __init__(self, vocab, h, heads, layers, ffn, max_pos=512):
        super().__init__()
        self.word = nn.Embedding(vocab, h)
        self.pos = nn.Embedding(max_pos, h)
        self.token_type = nn.Embedding(2, h)
        self.ln = nn.LayerNorm(h, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(h, heads, ffn) for _ in range(layers))
        self.pool = nn.Linear(h, h)

    def forward(self, input_ids, attention_mask):
        s = input_ids.shape[1]
        pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
        x = self.ln(self.word(input_ids) + self.pos(pos) + self.token_type(torch.zeros_like(input_ids)))
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        return x, torch.tanh(self.pool(x[:, 0]))


class Gpt2Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc = nn.Linear(h, 4 * h)
        self.fc_proj = nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q = q.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        k = k.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        v = v.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(ctx)
        return x + self.fc_proj(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, vocab, h, heads, layers, max_pos=1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(max_pos, h)
        self.blocks = nn.ModuleList(Gpt2Block(h, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)

    def forward(self, input_ids):
        s = input_ids.shape[1]
        pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


SIZES = {
    "small": dict(bert=dict(vocab=512, h=64, heads=4, layers=2, ffn=256), gpt2=dict(vocab=512, h=64, heads=4, layers=2)),
    "base": dict(bert=dict(vocab=30522, h=768, heads=12, layers=12, ffn=3072),
                 gpt2=dict(vocab=50257, h=768, heads=12, layers=12)),
}


def export(model, args, path, input_names, output_names):
    """torch.onnx's exporter (torch.export based), batch and sequence dynamic in every input."""
    model.eval()
    batch, sequence = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("sequence", min=2, max=512)
    dynamic = tuple({0: batch, 1: sequence} for _ in args)
    program = torch.onnx.export(model, args, input_names=input_names, output_names=output_names,
                                dynamic_shapes=dynamic, opset_version=18, external_data=False)
    program.save(path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--size", choices=SIZES, default="small")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    cfg = SIZES[a.size]
    with torch.no_grad():
        bert = Bert(**cfg["bert"])
        for prm in bert.parameters():  # BERT's init: N(0, 0.02)
            prm.normal_(0.0, 0.02)
        ids = torch.randint(0, cfg["bert"]["vocab"], (2, 7))
        mask = torch.ones(2, 7, dtype=torch.int64)
        export(bert, (ids, mask), os.path.join(a.out, f"bert_{a.size}.onnx"), ["input_ids", "attention_mask"],
               ["last_hidden_state", "pooler_output"])
        gpt2 = Gpt2(**cfg["gpt2"])
        for prm in gpt2.parameters():
            prm.normal_(0.0, 0.02)
        ids = torch.randint(0, cfg["gpt2"]["vocab"], (2, 7))
        export(gpt2, (ids,), os.path.join(a.out, f"gpt2_{a.size}.onnx"), ["input_ids"], ["logits"])
    print(f"wrote bert_{a.size}.onnx and gpt2_{a.size}.onnx to {a.out}")


if __name__ == "__main__":
    main()
