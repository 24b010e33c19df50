"""W3's slow layer on MindSpore's CPU: Conv(16->32, 3x3, same) on 64x16x8x8, formulations.

    python benchmarks/conv_cpu.py [--mode graph|pynative] [--steps 30] [--quick] [variant ...]

Each variant is one layer trained alone (forward, backward and an SGD
update, an MSE loss) and timed per step after its first step (the graph
compile, printed apart). Variants: ``conv`` (nn.Conv2d over NCHW),
``conv1`` (the first layer, Conv(1->16), for scale), ``shift9`` (the same
convolution as 9 shifted matmuls over NHWC), ``im2col`` (the 9 shifted
slices concatenated, one matmul), ``mm`` (that matmul alone), ``padslice``
(the padding and two slices alone, with their gradients). Numbers are in
benchmarks/README.md; nothing here is used by mindexp itself.
"""
import argparse
import os
import sys
import time

# the variants' names, in the order of variants(): checked before MindSpore is imported,
# so that a bad name costs one line, not an import of MindSpore (seconds of CPU)
NAMES = ("conv", "conv1", "shift9", "im2col", "mm", "padslice")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("variant", nargs="*", help="default: conv shift9 im2col")
    p.add_argument("--mode", choices=("graph", "pynative"), default="graph")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--quick", action="store_true", help="2 steps each: checks the script runs")
    args = p.parse_args(argv)
    unknown = sorted(set(args.variant) - set(NAMES))
    if unknown:
        p.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    return args


if __name__ == "__main__":
    parse_args(sys.argv[1:])  # (exits 2 on a bad name)

os.environ.setdefault("GLOG_v", "3")
import numpy as np  # noqa: E402
import mindspore as ms  # noqa: E402
from mindspore import Parameter, Tensor, nn, ops  # noqa: E402


class Shift9(nn.Cell):
    """3x3 'same' convolution as 9 shifted matmuls over NHWC (weight 3,3,Cin,Cout)."""
    def __init__(self, cin, cout):
        super().__init__()
        self.w = Parameter(Tensor(np.random.randn(3, 3, cin, cout).astype(np.float32) * 0.1), name="w")
        self.b = Parameter(Tensor(np.zeros(cout, np.float32)), name="b")
        self.cin, self.cout = cin, cout
        self.pad = nn.Pad(((0, 0), (1, 1), (1, 1), (0, 0)))

    def construct(self, x):   # x: N,H,W,C
        n, h, w, c = x.shape
        xp = self.pad(x)
        out = None
        for dy in range(3):
            for dx in range(3):
                part = xp[:, dy:dy + h, dx:dx + w, :].reshape(n * h * w, c)
                y = ops.matmul(part, self.w[dy, dx])
                out = y if out is None else out + y
        return (out + self.b).reshape(n, h, w, self.cout)


class Im2col(nn.Cell):
    """The same as one matmul over the 9 shifted slices concatenated on channels."""
    def __init__(self, cin, cout):
        super().__init__()
        self.w = Parameter(Tensor(np.random.randn(9 * cin, cout).astype(np.float32) * 0.1), name="w")
        self.b = Parameter(Tensor(np.zeros(cout, np.float32)), name="b")
        self.cout = cout
        self.pad = nn.Pad(((0, 0), (1, 1), (1, 1), (0, 0)))
        self.cat = ops.Concat(axis=3)

    def construct(self, x):
        n, h, w, c = x.shape
        xp = self.pad(x)
        parts = (xp[:, 0:h, 0:w, :], xp[:, 0:h, 1:w + 1, :], xp[:, 0:h, 2:w + 2, :],
                 xp[:, 1:h + 1, 0:w, :], xp[:, 1:h + 1, 1:w + 1, :], xp[:, 1:h + 1, 2:w + 2, :],
                 xp[:, 2:h + 2, 0:w, :], xp[:, 2:h + 2, 1:w + 1, :], xp[:, 2:h + 2, 2:w + 2, :])
        cols = self.cat(parts).reshape(n * h * w, 9 * c)
        return (ops.matmul(cols, self.w) + self.b).reshape(n, h, w, self.cout)


class MM(nn.Cell):
    """The im2col matmul alone: (4096 x 144) @ (144 x 32)."""

    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(np.random.randn(144, 32).astype(np.float32) * 0.1), name="w")

    def construct(self, x):
        return ops.matmul(x, self.w)


class PadSlice(nn.Cell):
    """The padding and two of the shifted slices alone, with their gradients."""

    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(np.ones((1,), np.float32)), name="w")
        self.pad = nn.Pad(((0, 0), (1, 1), (1, 1), (0, 0)))

    def construct(self, x):
        xp = self.pad(x * self.w)
        return xp[:, 1:9, 0:8, :] + xp[:, 0:8, 1:9, :]


def bench(name, net, x, steps):
    step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    target = Tensor(np.zeros(net(x).shape, np.float32))
    t0 = time.perf_counter()
    step(x, target).asnumpy()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(steps):
        out = step(x, target)
    out.asnumpy()
    per_step = (time.perf_counter() - t0) / steps
    print(f"{name:30s} first step {first * 1e3:8.1f} ms, then {per_step * 1e3:7.2f} ms/step", flush=True)


def variants(rng):
    nchw = Tensor(rng.standard_normal((64, 16, 8, 8)).astype(np.float32))
    nhwc = Tensor(rng.standard_normal((64, 8, 8, 16)).astype(np.float32))
    one = Tensor(rng.standard_normal((64, 1, 8, 8)).astype(np.float32))
    cols = Tensor(rng.standard_normal((4096, 144)).astype(np.float32))
    return {
        "conv": ("nn.Conv2d 16->32, NCHW", lambda: nn.Conv2d(16, 32, 3, pad_mode="same", has_bias=True), nchw),
        "conv1": ("nn.Conv2d 1->16, NCHW", lambda: nn.Conv2d(1, 16, 3, pad_mode="same", has_bias=True), one),
        "shift9": ("9 shifted matmuls, NHWC", lambda: Shift9(16, 32), nhwc),
        "im2col": ("im2col: concat + 1 matmul, NHWC", lambda: Im2col(16, 32), nhwc),
        "mm": ("that matmul alone", MM, cols),
        "padslice": ("pad + 2 slices alone, NHWC", PadSlice, nhwc),
    }


def main(argv=None):
    args = parse_args(argv)
    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    table = variants(np.random.default_rng(0))
    assert tuple(table) == NAMES, (tuple(table), NAMES)
    print(f"MindSpore {ms.__version__}, {args.mode} mode, CPU")
    for key in args.variant or ["conv", "shift9", "im2col"]:
        name, make, x = table[key]
        bench(name, make(), x, 2 if args.quick else args.steps)


if __name__ == "__main__":
    main()
