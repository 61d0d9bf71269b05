#!/usr/bin/env python3
"""RNN, GRU, LSTM and the two loss ops (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss) made at
random and run through `tessera run` against ONNX Runtime (ctest onnx.rnn_loss): every direction,
layout (layout 1 against ONNX Runtime's layout 0 on transposed data, which it lacks), initial state,
bias, clip, linear_before_reset, peepholes, input_forget and activation (with and without
alpha/beta), dynamic batch; losses over reductions, weights, ignore_index, ranks, float/double,
int32/int64 targets and dynamic dims. A wrong result fails, and so does a refusal other than the
ones expected (sequence_lens shorter than the sequence; Affine, ScaledTanh and ThresholdedRelu
without alpha/beta, whose defaults ONNX and ONNX Runtime disagree on).

  python3 tools/onnx/rnn_loss_tests.py --tessera build/release/bin/tessera
"""

import argparse
import itertools
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper as h

RESULTS = {}
TMP = ""
TESSERA = ""
rng = np.random.default_rng(0)
EXPECTED_REFUSALS = (
    "seqlens_var",
    "act_Affine",
    "act_ScaledTanh",
    "act_ThresholdedRelu",
    "act_ScaledTanh_Elu",
    "GRU_act_bidir",
    "act_Sigmoid_Relu_Affine",
    "LSTM_act_bidir",
)


def run(
    name,
    op,
    attrs,
    seq,
    batch,
    inp,
    hid,
    dirs,
    layout=0,
    B=True,
    h0=False,
    c0=False,
    P=False,
    dyn_batch=False,
    seqlens=None,
    outs=("Y", "Y_h", "Y_c"),
):
    G = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    bdim = "N" if dyn_batch else batch
    xs = [seq, batch, inp] if layout == 0 else [batch, seq, inp]
    xsd = [seq, bdim, inp] if layout == 0 else [bdim, seq, inp]
    ss = [dirs, batch, hid] if layout == 0 else [batch, dirs, hid]
    ssd = [dirs, bdim, hid] if layout == 0 else [bdim, dirs, hid]
    feeds = {
        "X": rng.standard_normal(xs).astype(np.float32),
        "W": rng.standard_normal([dirs, G * hid, inp]).astype(np.float32) * 0.5,
        "R": rng.standard_normal([dirs, G * hid, hid]).astype(np.float32) * 0.5,
    }
    shapes = {"X": xsd, "W": [dirs, G * hid, inp], "R": [dirs, G * hid, hid]}
    names = ["X", "W", "R"]

    def opt(flag, nm, shape, dshape=None, dtype=np.float32):
        if flag:
            feeds[nm] = (
                rng.standard_normal(shape).astype(dtype) if dtype == np.float32 else np.asarray(flag, dtype=dtype)
            )
            shapes[nm] = dshape or shape
            names.append(nm)
        else:
            names.append("")

    opt(B, "B", [dirs, 2 * G * hid])
    if seqlens is not None:
        feeds["sequence_lens"] = np.array(seqlens, dtype=np.int32)
        shapes["sequence_lens"] = [batch]
        names.append("sequence_lens")
    else:
        names.append("")
    opt(h0, "initial_h", ss, ssd)
    if op == "LSTM":
        opt(c0, "initial_c", ss, ssd)
        opt(P, "P", [dirs, 3 * hid])
    while names and names[-1] == "":
        names.pop()
    outs = [o for o in outs if op == "LSTM" or o != "Y_c"]
    node = h.make_node(op, names, outs, hidden_size=hid, **attrs)
    ins = [h.make_tensor_value_info(n, TP.INT32 if n == "sequence_lens" else TP.FLOAT, shapes[n]) for n in names if n]
    ys = [seq, dirs, bdim, hid] if layout == 0 else [bdim, seq, dirs, hid]
    outv = [h.make_tensor_value_info(o, TP.FLOAT, None) for o in outs if o]
    m = h.make_model(h.make_graph([node], name, ins, outv), opset_imports=[h.make_opsetid("", 22)])
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    onnx.save(m, f"{d}/m.onnx")
    if layout == 1:  # ONNX Runtime has no batch-first recurrences: the reference runs layout 0
        a2 = dict(attrs)
        a2["layout"] = 0
        n2 = h.make_node(op, names, outs, hidden_size=hid, **a2)
        f2 = {k: (np.swapaxes(v, 0, 1) if k in ("X", "initial_h", "initial_c") else v) for k, v in feeds.items()}
        ins2 = [h.make_tensor_value_info(n, TP.INT32 if n == "sequence_lens" else TP.FLOAT, None) for n in names if n]
        m2 = h.make_model(h.make_graph([n2], name, ins2, outv), opset_imports=[h.make_opsetid("", 22)])
        onnx.save(m2, f"{d}/m0.onnx")
        ref = ort.InferenceSession(f"{d}/m0.onnx", providers=["CPUExecutionProvider"]).run(None, f2)
        ref = [np.transpose(r, [2, 0, 1, 3]) if r.ndim == 4 else np.swapaxes(r, 0, 1) for r in ref]
    else:
        ref = ort.InferenceSession(f"{d}/m.onnx", providers=["CPUExecutionProvider"]).run(None, feeds)
    args = []
    for k, v in feeds.items():
        np.save(f"{d}/{k}.npy", v)
        args += ["--bind" if k == "sequence_lens" else "--input", f"{k}={d}/{k}.npy"]
    r = subprocess.run([TESSERA, "run", f"{d}/m.onnx", "--output", f"{d}/o.npz"] + args, capture_output=True, text=True)
    if r.returncode != 0:
        RESULTS[name] = ("refused", r.stderr.strip().splitlines()[-1] if r.stderr.strip() else str(r.returncode))
        return
    got = np.load(f"{d}/o.npz")
    ok = True
    for o, e in zip([o for o in outs if o], ref):
        g = got[o]
        if g.shape != e.shape or not np.allclose(g, e, rtol=1e-3, atol=1e-5):
            ok = False
            RESULTS[name] = (
                "wrong",
                f"{o}: shape {g.shape} vs {e.shape}, maxdiff {np.abs(g-e).max() if g.shape==e.shape else '-'}",
            )
    if ok:
        RESULTS[name] = ("pass", "")


def recurrent_cases():
    for op in ["RNN", "GRU", "LSTM"]:
        for direction, layout, h0, B in itertools.product(
            ["forward", "reverse", "bidirectional"], [0, 1], [False, True], [False, True]
        ):
            dirs = 2 if direction == "bidirectional" else 1
            attrs = {"direction": direction, "layout": layout}
            run(
                f"{op}_{direction}_l{layout}_h{int(h0)}_b{int(B)}",
                op,
                attrs,
                4,
                3,
                5,
                6,
                dirs,
                layout,
                B,
                h0,
                h0,
                P=(op == "LSTM" and B),
            )
        # features
        run(f"{op}_clip", op, {"clip": 0.7}, 3, 2, 4, 5, 1, h0=True, c0=True)
        run(f"{op}_dyn_batch", op, {"direction": "bidirectional"}, 3, 2, 4, 5, 2, h0=True, c0=True, dyn_batch=True)
        run(f"{op}_seqlens_full", op, {}, 3, 2, 4, 5, 1, seqlens=[3, 3])
        run(f"{op}_seqlens_var", op, {}, 3, 2, 4, 5, 1, seqlens=[3, 2])
        run(f"{op}_only_Yh", op, {}, 3, 2, 4, 5, 1, outs=("", "Y_h"))
    acts = {
        "RNN": [
            ["Relu"],
            ["LeakyRelu"],
            ["Affine"],
            ["ScaledTanh"],
            ["HardSigmoid"],
            ["Elu"],
            ["Softsign"],
            ["Softplus"],
            ["ThresholdedRelu"],
            ["Sigmoid"],
        ],
        "GRU": [["HardSigmoid", "Softsign"], ["Sigmoid", "Relu"], ["ScaledTanh", "Elu"]],
        "LSTM": [["HardSigmoid", "Tanh", "Softplus"], ["Sigmoid", "Relu", "Affine"]],
    }
    for op, lst in acts.items():
        for a in lst:
            n = len(a)
            alpha = [0.3 + 0.1 * k for k in range(n)]
            beta = [0.2 + 0.1 * k for k in range(n)]
            run(f"{op}_act_{'_'.join(a)}", op, {"activations": a}, 3, 2, 4, 5, 1, h0=True, c0=True)
            run(
                f"{op}_act_ab_{'_'.join(a)}",
                op,
                {"activations": a, "activation_alpha": alpha, "activation_beta": beta},
                3,
                2,
                4,
                5,
                1,
                h0=True,
                c0=True,
            )
        run(
            f"{op}_act_bidir",
            op,
            {"activations": lst[0] + lst[-1], "direction": "bidirectional"},
            3,
            2,
            4,
            5,
            2,
            h0=True,
            c0=True,
        )
    for lbr in [0, 1]:
        for direction in ["forward", "bidirectional"]:
            for h0 in [False, True]:
                for B in [False, True]:
                    run(
                        f"GRU_lbr{lbr}_{direction}_h{int(h0)}_b{int(B)}",
                        "GRU",
                        {"linear_before_reset": lbr, "direction": direction},
                        4,
                        3,
                        5,
                        6,
                        2 if direction == "bidirectional" else 1,
                        0,
                        B,
                        h0,
                    )
    run("LSTM_input_forget", "LSTM", {"input_forget": 1}, 3, 2, 4, 5, 1, h0=True, c0=True, P=True)
    run("LSTM_P_noc0", "LSTM", {}, 3, 2, 4, 5, 1, h0=True, P=True)
    run("LSTM_c0_noh0", "LSTM", {"direction": "bidirectional", "layout": 1}, 3, 2, 4, 5, 2, layout=1, c0=True, P=True)


def loss_cases():
    rng = np.random.default_rng(3)
    NP = {TP.FLOAT: np.float32, TP.DOUBLE: np.float64, TP.FLOAT16: np.float16}
    k = 0
    for op, red, w, ii, shape, dt, tdt, dyn in itertools.product(
        ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"],
        ["none", "sum", "mean"],
        [False, True],
        [None, -1, 2, 7],
        [(4, 5), (3, 5, 6), (2, 5, 3, 2)],
        [TP.FLOAT, TP.DOUBLE],
        [TP.INT64, TP.INT32],
        [False, True],
    ):
        if dyn and len(shape) < 3:
            continue
        N, C = shape[:2]
        rest = shape[2:]
        x = rng.standard_normal(shape).astype(NP[dt])
        t = rng.integers(0, C, size=(N,) + rest).astype(np.int64 if tdt == TP.INT64 else np.int32)
        if ii is not None:
            t.flat[::3] = ii
        attrs = {"reduction": red}
        if ii is not None:
            attrs["ignore_index"] = ii
        names = ["x", "t"] + (["w"] if w else [])
        feeds = {"x": x, "t": t}
        if w:
            feeds["w"] = rng.random(C).astype(NP[dt])
        outs = ["z"] + (["lp"] if op.startswith("Softmax") and k % 2 else [])
        k += 1
        xs = list(shape)
        ts = [N] + list(rest)
        if dyn:
            xs[0] = "N"
            ts[0] = "N"
            xs[-1] = "D"
            ts[-1] = "D"
        n = h.make_node(op, names, outs, **attrs)
        ins = [h.make_tensor_value_info("x", dt, xs), h.make_tensor_value_info("t", tdt, ts)] + (
            [h.make_tensor_value_info("w", dt, [C])] if w else []
        )
        m = h.make_model(
            h.make_graph([n], "g", ins, [h.make_tensor_value_info(o, dt, None) for o in outs]),
            opset_imports=[h.make_opsetid("", 13 if k % 3 else 22)],
        )
        m.ir_version = 8
        path = os.path.join(TMP, "l.onnx")
        onnx.save(m, path)
        try:
            ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
        except Exception as e:
            RESULTS[f"loss {k}"] = ("skipped", "ONNX Runtime: " + str(e)[:100])
            continue
        args = []
        for kk, v in feeds.items():
            f = os.path.join(TMP, kk + ".npy")
            np.save(f, v)
            args += ["--input", f"{kk}={f}"]
        out = os.path.join(TMP, "o.npz")
        r = subprocess.run([TESSERA, "run", path, "--output", out] + args, capture_output=True, text=True)
        tag = (op[:3], red, w, ii, shape, dt, tdt, dyn)
        if r.returncode:
            RESULTS[str(tag)] = ("refused", r.stderr.strip().splitlines()[-1])
            continue
        o = np.load(out)
        RESULTS[str(tag)] = ("pass", "")
        for nm, e in zip(outs, ref):
            g = o[nm]
            if g.shape != e.shape or not np.allclose(g, e, rtol=1e-3, atol=1e-6, equal_nan=True):
                RESULTS[str(tag)] = ("wrong", f"{nm}: {g.shape} vs {e.shape}")


def main():
    global TMP, TESSERA
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    TESSERA = args.tessera
    with tempfile.TemporaryDirectory() as tmp:
        TMP = tmp
        recurrent_cases()
        loss_cases()
    bad = []
    for name, (status, why) in sorted(RESULTS.items()):
        expected_refusal = any(name.endswith(e) for e in EXPECTED_REFUSALS)
        if status == "wrong" or (status == "refused") != expected_refusal and status != "skipped":
            bad.append(f"{status} {name}: {why}")
    counts = {s: sum(1 for v in RESULTS.values() if v[0] == s) for s in ("pass", "refused", "wrong", "skipped")}
    for b in bad:
        print("FAIL:", b)
    print(f"{len(RESULTS)} configurations against ONNX Runtime: {counts}")
    return 1 if bad or counts["pass"] == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
