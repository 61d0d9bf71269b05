"""The transformer block of bench_compiled_block (benchmarks/cpu/transformer_block.h) under
torch.compile (Inductor, CPU), driven by the benchmark over stdin/stdout so that its rounds
interleave with Tessera's.

Usage: python3 torch_compile_block.py DTYPE THREADS   (DTYPE: f32 or bf16)
Prints "ready COMPILE_SECONDS" once the compiled block has run (compile and warm-up excluded from
every timing), then answers each line "trial SECONDS" with the milliseconds per call of one trial
that lasts at least SECONDS, and exits on "quit" or end of input.
"""
import math
import sys
import time

import torch

L, D, H, F = 512, 512, 8, 2048


def main():
    dt = {"f32": torch.float32, "bf16": torch.bfloat16}[sys.argv[1]]
    torch.set_num_threads(int(sys.argv[2]))
    torch.manual_seed(0)

    def w(o, i):
        return (torch.randn(o, i) / math.sqrt(i)).to(dt)

    def b(n):
        return (torch.randn(n) * 0.1).to(dt)

    p = dict(ln1w=1 + b(D), ln1b=b(D), wq=w(D, D), bq=b(D), wk=w(D, D), bk=b(D), wv=w(D, D), bv=b(D),
             wo=w(D, D), bo=b(D), ln2w=1 + b(D), ln2b=b(D), w1=w(F, D), b1=b(F), w2=w(D, F), b2=b(D))
    fn = torch.nn.functional

    def block(x):
        h = fn.layer_norm(x, (D,), p["ln1w"], p["ln1b"])
        q = fn.linear(h, p["wq"], p["bq"]).view(1, L, H, D // H).transpose(1, 2)
        k = fn.linear(h, p["wk"], p["bk"]).view(1, L, H, D // H).transpose(1, 2)
        v = fn.linear(h, p["wv"], p["bv"]).view(1, L, H, D // H).transpose(1, 2)
        a = fn.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(1, L, D)
        x1 = x + fn.linear(a, p["wo"], p["bo"])
        h2 = fn.layer_norm(x1, (D,), p["ln2w"], p["ln2b"])
        return x1 + fn.linear(fn.gelu(fn.linear(h2, p["w1"], p["b1"])), p["w2"], p["b2"])

    compiled = torch.compile(block, backend="inductor")
    x = torch.randn(1, L, D).to(dt)
    with torch.no_grad():
        t0 = time.perf_counter()
        for _ in range(3):
            compiled(x)
        print("ready", time.perf_counter() - t0, flush=True)
        for line in sys.stdin:
            cmd = line.split()
            if not cmd or cmd[0] != "trial":
                break
            seconds = float(cmd[1])
            n, t0 = 0, time.perf_counter()
            while True:
                compiled(x)
                n += 1
                elapsed = time.perf_counter() - t0
                if elapsed >= seconds:
                    break
            print(elapsed / n * 1e3, flush=True)


if __name__ == "__main__":
    main()
