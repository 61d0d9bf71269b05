"""Small ONNX models for the importer's tests (tests/onnx), built with the onnx package's helpers.

Each entry of MODELS is (name, builder, sizes): builder() returns a ModelProto, sizes is a list of
input-shape bindings ({symbol: size}) the test runs it at (a model with dim_param runs at two).
Weights are random but seeded, so the models are the same on every run.
"""
import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

F = TP.FLOAT
_rng = np.random.default_rng(27)


def w(name, *shape, scale=0.5):
    return nh.from_array((_rng.standard_normal(shape) * scale).astype(np.float32), name)


def i64(name, values):
    return nh.from_array(np.array(values, dtype=np.int64), name)


def model(nodes, inputs, outputs, inits=(), opset=17, functions=()):
    """A checked model; outputs given as names (or vi(name, None)) get their types by shape inference."""
    outs = [o if o.type.HasField("tensor_type") else h.make_empty_tensor_value_info(o.name) for o in outputs]
    g = h.make_graph(nodes, "g", inputs, outs, initializer=list(inits))
    opsets = [h.make_opsetid("", opset)] + ([h.make_opsetid("local", 1)] if functions else [])
    m = h.make_model(g, opset_imports=opsets, functions=list(functions))
    m.ir_version = 8 if opset < 21 else 10
    if any(not o.type.HasField("tensor_type") for o in outputs):
        inferred = onnx.shape_inference.infer_shapes(m)
        types = {v.name: v.type for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
        for o in m.graph.output:
            if o.name in types and types[o.name].HasField("tensor_type"):
                o.type.CopyFrom(types[o.name])
    onnx.checker.check_model(m)
    return m


def vi(name, shape, t=F):
    if shape is None:
        return onnx.ValueInfoProto(name=name)
    return h.make_tensor_value_info(name, t, shape)


def mlp():  # MatMul/Add/Relu/Gemm/Sigmoid, dynamic batch
    n = [h.make_node("MatMul", ["x", "w1"], ["a"]), h.make_node("Add", ["a", "b1"], ["b"]),
         h.make_node("Relu", ["b"], ["c"]),
         h.make_node("Gemm", ["c", "w2", "b2"], ["d"], transB=1),
         h.make_node("Gemm", ["d", "w3", "b3"], ["e"], alpha=0.5, beta=2.0),
         h.make_node("Sigmoid", ["e"], ["y"])]
    return model(n, [vi("x", ["batch", 16])], [vi("y", ["batch", 5])],
                 [w("w1", 16, 32), w("b1", 32), w("w2", 8, 32), w("b2", 8), w("w3", 8, 5), w("b3", 1, 5)])


def cnn():  # Conv (pads, groups, dilation) + BatchNorm + pools + Flatten + Gemm
    n = [h.make_node("Conv", ["x", "cw1", "cb1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
         h.make_node("BatchNormalization", ["c1", "g", "bt", "mu", "var"], ["bn"], epsilon=1e-3),
         h.make_node("Relu", ["bn"], ["r1"]),
         h.make_node("Conv", ["r1", "cw2"], ["c2"], group=4, dilations=[2, 2], pads=[2, 2, 2, 2]),
         h.make_node("MaxPool", ["c2"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
         h.make_node("AveragePool", ["p1"], ["p2"], kernel_shape=[2, 2], strides=[1, 1]),
         h.make_node("GlobalAveragePool", ["p2"], ["gp"]),
         h.make_node("Flatten", ["gp"], ["fl"], axis=1),
         h.make_node("Gemm", ["fl", "fw", "fb"], ["y"], transB=1)]
    var = nh.from_array((_rng.random(8) + 0.5).astype(np.float32), "var")
    return model(n, [vi("x", ["N", 3, 17, 15])], [vi("y", ["N", 10])],
                 [w("cw1", 8, 3, 3, 3), w("cb1", 8), w("g", 8), w("bt", 8), w("mu", 8), var,
                  w("cw2", 8, 2, 3, 3), w("fw", 10, 8), w("fb", 10)])


def conv_bn():  # Conv without bias -> BatchNorm (folded into the conv at import), and a Conv whose
    # output is also read elsewhere (not folded): both must give ONNX Runtime's results
    n = [h.make_node("Conv", ["x", "k1"], ["c1"], pads=[1, 1, 1, 1]),
         h.make_node("BatchNormalization", ["c1", "g1", "b1", "m1", "v1"], ["n1"], epsilon=1e-5),
         h.make_node("Relu", ["n1"], ["r1"]),
         h.make_node("Conv", ["r1", "k2", "kb2"], ["c2"]),
         h.make_node("BatchNormalization", ["c2", "g2", "b2", "m2", "v2"], ["n2"]),
         h.make_node("Add", ["n2", "c2"], ["y"])]
    pos = lambda name, c: nh.from_array((_rng.random(c) + 0.5).astype(np.float32), name)
    return model(n, [vi("x", ["N", 3, 9, 7])], [vi("y", ["N", 6, 9, 7])],
                 [w("k1", 4, 3, 3, 3), w("g1", 4), w("b1", 4), w("m1", 4), pos("v1", 4),
                  w("k2", 6, 4, 1, 1), w("kb2", 6), w("g2", 6), w("b2", 6), w("m2", 6), pos("v2", 6)])


def conv_pads():  # asymmetric pads, auto_pad SAME_UPPER, 1-D conv, count_include_pad=0
    n = [h.make_node("Conv", ["x", "k"], ["a"], pads=[0, 1, 2, 1]),
         h.make_node("Conv", ["a", "k2"], ["b"], auto_pad="SAME_UPPER"),
         h.make_node("AveragePool", ["b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0),
         h.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 2], pads=[0, 0, 1, 1]),
         h.make_node("Conv", ["s", "k1"], ["z"], pads=[1, 1], strides=[2])]
    return model(n, [vi("x", [2, 3, 9, 8]), vi("s", [2, 4, 11])], [vi("y", None), vi("z", None)],
                 [w("k", 5, 3, 3, 2), w("k2", 4, 5, 3, 3), w("k1", 6, 4, 3)])


def encoder():  # a transformer encoder layer with computed shapes, dynamic batch and sequence
    D, H = 32, 4
    n = [h.make_node("Shape", ["x"], ["sh"]),
         h.make_node("Gather", ["sh", "i0"], ["B"], axis=0), h.make_node("Gather", ["sh", "i1"], ["S"], axis=0),
         h.make_node("Unsqueeze", ["B", "ax0"], ["Bu"]), h.make_node("Unsqueeze", ["S", "ax0"], ["Su"]),
         h.make_node("Concat", ["Bu", "Su", "heads", "hd"], ["qshape"], axis=0),
         h.make_node("LayerNormalization", ["x", "ln_g", "ln_b"], ["ln"], axis=-1, epsilon=1e-5)]
    for p in "qkv":
        n += [h.make_node("MatMul", ["ln", f"w{p}"], [f"{p}0"]), h.make_node("Add", [f"{p}0", f"b{p}"], [f"{p}1"]),
              h.make_node("Reshape", [f"{p}1", "qshape"], [f"{p}2"]),
              h.make_node("Transpose", [f"{p}2"], [f"{p}3"], perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])]
    n += [h.make_node("MatMul", ["q3", "k3"], ["s0"]), h.make_node("Div", ["s0", "sqrtd"], ["s1"]),
          h.make_node("Equal", ["mask", "zero"], ["m0"]), h.make_node("Unsqueeze", ["m0", "ax12"], ["m1"]),
          h.make_node("Where", ["m1", "neg", "s1"], ["s2"]),
          h.make_node("Softmax", ["s2"], ["pr"], axis=-1), h.make_node("MatMul", ["pr", "v3"], ["o0"]),
          h.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
          h.make_node("Concat", ["Bu", "Su", "dm"], ["oshape"], axis=0),
          h.make_node("Reshape", ["o1", "oshape"], ["o2"]),
          h.make_node("MatMul", ["o2", "wo"], ["o3"]), h.make_node("Add", ["o3", "x"], ["r1"]),
          # RMS-style norm by hand (ReduceMean, Pow, Sqrt), then an erf GELU MLP
          h.make_node("Pow", ["r1", "two"], ["sq"]), h.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1]),
          h.make_node("Add", ["ms", "eps"], ["mse"]), h.make_node("Sqrt", ["mse"], ["rms"]),
          h.make_node("Div", ["r1", "rms"], ["nr"]),
          h.make_node("MatMul", ["nr", "w1"], ["f0"]), h.make_node("Div", ["f0", "sqrt2"], ["f1"]),
          h.make_node("Erf", ["f1"], ["f2"]), h.make_node("Add", ["f2", "one"], ["f3"]),
          h.make_node("Mul", ["f0", "f3"], ["f4"]), h.make_node("Mul", ["f4", "half"], ["f5"]),
          h.make_node("MatMul", ["f5", "w2"], ["f6"]), h.make_node("Add", ["f6", "r1"], ["y"])]
    sc = lambda name, v: nh.from_array(np.array(v, dtype=np.float32), name)
    inits = [i64("i0", 0), i64("i1", 1), i64("ax0", [0]), i64("heads", [H]), i64("hd", [D // H]), i64("dm", [D]),
             i64("ax12", [1, 2]), i64("zero", 0), w("ln_g", D), w("ln_b", D), w("wo", D, D), w("w1", D, 64),
             w("w2", 64, D), sc("sqrtd", np.sqrt(D // H)), sc("neg", -1e9), sc("two", 2.0), sc("eps", 1e-6),
             sc("sqrt2", np.sqrt(2.0)), sc("one", 1.0), sc("half", 0.5)]
    for p in "qkv":
        inits += [w(f"w{p}", D, D), w(f"b{p}", D)]
    return model(n, [vi("x", ["batch", "seq", D]), vi("mask", ["batch", "seq"], TP.INT64)],
                 [vi("y", ["batch", "seq", D])], inits, opset=17)


def attention():  # Attention (opset 23): 4-D, 3-D with grouped kv heads, causal, bool mask; RMSNormalization
    n = [h.make_node("Attention", ["q", "k", "v"], ["a"], is_causal=1),
         h.make_node("Attention", ["q3", "k3", "v3", "m"], ["b"], q_num_heads=4, kv_num_heads=2, scale=0.3),
         h.make_node("RMSNormalization", ["b", "rg"], ["y"], epsilon=1e-5)]
    return model(n, [vi("q", [2, 3, 5, 8]), vi("k", [2, 3, 7, 8]), vi("v", [2, 3, 7, 8]), vi("q3", [2, 5, 32]),
                     vi("k3", [2, 6, 16]), vi("v3", [2, 6, 16]), vi("m", [5, 6], TP.BOOL)],
                 [vi("a", None), vi("y", None)], [w("rg", 32)], opset=23)


def pointwise():  # the elementwise family, including decomposed activations
    ops = [("Sub", ["x", "p"]), ("Mul", ["x", "p"]), ("Div", ["x", "p"]), ("Tanh", ["x"]), ("Exp", ["x"]),
           ("Neg", ["x"]), ("Abs", ["x"]), ("Sin", ["x"]), ("Cos", ["x"]), ("Reciprocal", ["p"]), ("Sqrt", ["p"]),
           ("Log", ["p"]), ("Softplus", ["x"]), ("Softsign", ["x"]), ("Mish", ["x"]), ("HardSwish", ["x"]),
           ("Max", ["x", "p", "c"]), ("Min", ["x", "p"]), ("Sum", ["x", "p", "c"]), ("Mean", ["x", "p"]),
           ("PRelu", ["x", "c"])]
    n, outs = [], []
    for i, (op, ins) in enumerate(ops):
        n.append(h.make_node(op, ins, [f"o{i}"]))
        outs.append(vi(f"o{i}", None))
    n += [h.make_node("LeakyRelu", ["x"], ["l0"], alpha=0.2), h.make_node("Elu", ["x"], ["l1"], alpha=0.7),
          h.make_node("Selu", ["x"], ["l2"]), h.make_node("HardSigmoid", ["x"], ["l3"], alpha=0.3, beta=0.4),
          h.make_node("Clip", ["x", "lo", "hi"], ["l4"]), h.make_node("Clip", ["x", "", "hi"], ["l5"]),
          h.make_node("Pow", ["p", "c"], ["l6"]), h.make_node("Less", ["x", "c"], ["b0"]),
          h.make_node("Greater", ["x", "c"], ["b1"]), h.make_node("And", ["b0", "b1"], ["b2"]),
          h.make_node("Or", ["b0", "b1"], ["b3"]), h.make_node("Not", ["b0"], ["b4"]),
          h.make_node("Where", ["b0", "x", "p"], ["l7"]), h.make_node("Cast", ["b3"], ["l8"], to=TP.FLOAT),
          h.make_node("Cast", ["x"], ["l9"], to=TP.INT32), h.make_node("Gelu", ["x"], ["l10"], approximate="tanh"),
          h.make_node("Identity", ["x"], ["l11"]), h.make_node("Dropout", ["x"], ["l12"]),
          h.make_node("LessOrEqual", ["x", "c"], ["b5"]), h.make_node("GreaterOrEqual", ["x", "c"], ["b6"]),
          h.make_node("Xor", ["b5", "b6"], ["b7"])]
    outs += [vi(f"l{i}", None) for i in range(13)] + [vi(f"b{i}", None) for i in range(8)]
    lo = nh.from_array(np.array(-0.5, dtype=np.float32), "lo")
    hi = nh.from_array(np.array(0.7, dtype=np.float32), "hi")
    return model(n, [vi("x", [3, 4]), vi("p", [3, 4])], outs, [w("c", 4), lo, hi], opset=20)


def reductions():  # axes as attributes (opset 11) and as inputs (opset 18)
    def build(opset):
        ax = (lambda name: {"axes": [1]}) if opset < 13 else None
        def red(op, out, keep=1):
            if opset >= 18 or (op == "ReduceSum" and opset >= 13):
                return h.make_node(op, ["x", "axes"], [out], keepdims=keep)
            return h.make_node(op, ["x"], [out], axes=[1], keepdims=keep)
        n = [red("ReduceSum", "a"), red("ReduceMean", "b", 0), red("ReduceMax", "c"), red("ReduceMin", "d", 0),
             red("ReduceProd", "e"), red("ReduceL1", "f"), red("ReduceL2", "g"), red("ReduceSumSquare", "i"),
             red("ReduceLogSumExp", "j", 0), h.make_node("ArgMax", ["x"], ["k"], axis=2, keepdims=0),
             h.make_node("ArgMin", ["x"], ["l"], axis=1), h.make_node("GlobalMaxPool", ["x4"], ["m"]),
             h.make_node("LogSoftmax", ["x"], ["n"], axis=1), h.make_node("Softmax", ["x"], ["o"], axis=1)]
        outs = [vi(o, None) for o in "abcdefgijklmno"]
        return model(n, [vi("x", [2, 3, 4]), vi("x4", [2, 3, 4, 5])], outs, [i64("axes", [1])], opset=opset)
    return build


def shapes():  # shape ops on tensors and on folded shape values (opset 11: attributes; 13: inputs)
    def build(opset):
        def sq(op, x, out, axes):
            if opset >= 13:
                return [h.make_node(op, [x, f"ax_{out}"], [out])], [i64(f"ax_{out}", axes)]
            return [h.make_node(op, [x], [out], axes=axes)], []
        n, inits = [], [i64("st", [1, 0]), i64("en", [100, -1]), i64("axs", [2, 1]), i64("stp", [2, -1]),
                        i64("rep", [1, 2, 1]), i64("gi", [[2, 0], [1, 1]]), i64("cs", [2, 3]), i64("rs", [-1, 4]),
                        i64("e1", [2, 1, 4]), i64("lim", 6), i64("st0", 1), i64("dl", 2), i64("sp", [1, 2])]
        for node, init in [sq("Unsqueeze", "x", "u", [0, 3]), sq("Squeeze", "u", "s", [0])]:
            n += node
            inits += init
        n += [h.make_node("Slice", ["x", "st", "en", "axs", "stp"], ["sl"]),
              h.make_node("Tile", ["x", "rep"], ["ti"]), h.make_node("Gather", ["x", "gi"], ["ga"], axis=2),
              h.make_node("ConstantOfShape", ["cs"], ["co"], value=nh.from_array(np.array([1.5], dtype=np.float32))),
              h.make_node("Reshape", ["x", "rs"], ["re"]), h.make_node("Expand", ["c1", "e1"], ["ex"]),
              h.make_node("Range", ["st0", "lim", "dl"], ["ra"]),
              h.make_node("Split", ["x", "sp"] if opset >= 13 else ["x"], ["p0", "p1"], axis=1,
                          **({} if opset >= 13 else {"split": [1, 2]})),
              h.make_node("Concat", ["p1", "p0"], ["cc"], axis=1), h.make_node("Flatten", ["x"], ["fl"], axis=2),
              h.make_node("Transpose", ["x"], ["tr"]), h.make_node("Shape", ["x"], ["sh"]),
              h.make_node("Size", ["x"], ["sz"]), h.make_node("GatherElements", ["x", "ge"], ["gel"], axis=1),
              h.make_node("Constant", [], ["k"], value=nh.from_array(np.arange(4, dtype=np.float32), "k")),
              h.make_node("Mul", ["x", "k"], ["km"]), h.make_node("Constant", [], ["kf"], **({"value_floats": [1.0, 2.0]} if opset >= 12 else {"value": nh.from_array(np.array([1.0, 2.0], dtype=np.float32), "kf")}))]
        inits += [w("c1", 1, 4), i64("ge", np.array([[[0, 1, 2, 0]] * 2] * 2))]
        outs = [vi(o, None) for o in ["s", "sl", "ti", "ga", "co", "re", "ex", "ra", "cc", "fl", "tr", "sh", "sz", "gel", "km"]] + [vi("kf", [2])]
        return model(n, [vi("x", [2, 3, 4])], outs, inits, opset=opset)
    return build


def embedding():  # Gather on run-time indices (an embedding), dynamic batch/sequence, Cast, Range-free
    n = [h.make_node("Gather", ["emb", "ids"], ["e"], axis=0), h.make_node("ReduceSum", ["e", "ax"], ["y"], keepdims=0)]
    return model(n, [vi("ids", ["b", "s"], TP.INT64)], [vi("y", ["b", 8])], [w("emb", 50, 8), i64("ax", [1])], opset=13)


def function():  # a model-local function (with an attribute reference) inlined at import
    f = h.make_function("local", "ScaledGelu", ["a"], ["b"],
                        [h.make_node("Constant", [], ["s"], value_float=1.5),
                         h.make_node("Mul", ["a", "s"], ["t"]), h.make_node("LeakyRelu", ["t"], ["b"], alpha=0.1),
                         h.make_node("Softmax", ["b"], ["u"])],
                        opset_imports=[h.make_opsetid("", 17)], attributes=[])
    f.node[2].attribute[0].ref_attr_name = "slope"
    n = [h.make_node("ScaledGelu", ["x"], ["y"], domain="local", slope=0.3)]
    return model(n, [vi("x", ["n", 6])], [vi("y", ["n", 6])], functions=[f])


def index_more():  # Einsum (projection, q.k^T), GatherND on run-time indices (batch_dims 0 and 1), dynamic batch/sequence
    n = [h.make_node("Einsum", ["x", "pw"], ["e1"], equation="bsh,hd->bsd"),
         h.make_node("Einsum", ["e1", "e1"], ["y"], equation="bqd,bkd->bqk"),
         h.make_node("GatherND", ["tab", "gi"], ["z"]),
         h.make_node("GatherND", ["v", "gb"], ["u"], batch_dims=1)]
    return model(n, [vi("x", ["b", "s", 8]), vi("gi", ["b", 1], TP.INT64), vi("v", ["b", "s", 4]), vi("gb", ["b", 2, 1], TP.INT64)],
                 [vi("y", ["b", "s", "s"]), vi("z", ["b", 8]), vi("u", ["b", 2, 4])],
                 [w("pw", 8, 6), w("tab", 5, 8)], opset=17)


def structural():  # Einsum (diagonal, ellipsis, implicit output, three operands), DepthToSpace/SpaceToDepth,
    # CenterCropPad, ReverseSequence
    n = [h.make_node("Einsum", ["a"], ["d"], equation="...ii->...i"),
         h.make_node("Einsum", ["a", "d"], ["e"], equation="bij,bj"),
         h.make_node("Einsum", ["a", "a", "d"], ["f"], equation="bij,bjk,bk->bi"),
         h.make_node("DepthToSpace", ["x"], ["g"], blocksize=2, mode="CRD"),
         h.make_node("SpaceToDepth", ["g"], ["h"], blocksize=2),
         h.make_node("CenterCropPad", ["h", "cs"], ["k"], axes=[2, 3]),
         h.make_node("ReverseSequence", ["a", "sl"], ["r"], batch_axis=0, time_axis=1)]
    return model(n, [vi("a", [2, 4, 4]), vi("x", [1, 8, 3, 4])], [vi(o, None) for o in ("e", "f", "k", "r")],
                 [i64("cs", [5, 2]), i64("sl", [3, 1])], opset=18)


MODELS = [
    ("mlp", mlp, [{"batch": 2}, {"batch": 7}]),
    ("cnn", cnn, [{"N": 1}, {"N": 3}]),
    ("conv_bn", conv_bn, [{"N": 1}, {"N": 2}]),
    ("conv_pads", conv_pads, [{}]),
    ("encoder", encoder, [{"batch": 2, "seq": 5}, {"batch": 3, "seq": 9}]),
    ("attention", attention, [{}]),
    ("pointwise", pointwise, [{}]),
    ("reductions_opset11", lambda: reductions()(11), [{}]),
    ("reductions_opset18", lambda: reductions()(18), [{}]),
    ("shapes_opset11", lambda: shapes()(11), [{}]),
    ("shapes_opset13", lambda: shapes()(13), [{}]),
    ("embedding", embedding, [{"b": 2, "s": 3}, {"b": 4, "s": 6}]),
    ("function", function, [{"n": 2}, {"n": 5}]),
    ("index_more", index_more, [{"b": 2, "s": 3}, {"b": 4, "s": 5}]),
    ("structural", structural, [{}]),
]


def random_inputs(m, binding, rng):
    """Random inputs for the model's graph inputs at the given symbol binding."""
    feeds = {}
    inits = {i.name for i in m.graph.initializer}
    for inp in m.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else binding[d.dim_param] for d in tt.shape.dim]
        if tt.elem_type == TP.INT64:
            high = 50 if inp.name == "ids" else 2
            feeds[inp.name] = rng.integers(0, high, size=shape).astype(np.int64)
        elif tt.elem_type == TP.BOOL:
            a = rng.random(shape) > 0.3
            a[..., 0] = True  # every query sees at least one key
            feeds[inp.name] = a
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
            if inp.name == "p":
                feeds[inp.name] = np.abs(feeds[inp.name]) + 0.5
    return feeds
