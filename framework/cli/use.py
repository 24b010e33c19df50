"""Commands that use a run's network: ``evaluate``, ``predict``, ``export`` (the logic
is in mindexp.use)."""
import argparse
import os
import sys

from ..callbacks import schema
from .. import layout
from ._args import positive_int
from ._console import EXIT_OK
from ..errors import RunDirError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add evaluate, predict and export, each bound to its handler."""
    ev = subparsers.add_parser("evaluate", help="metrics of a run's checkpoint on a split")
    ev.add_argument("run_dir", metavar="RUN")
    ev.add_argument("--checkpoint", default="last", metavar="best|last|STEP")
    ev.add_argument("--split", default="eval", choices=("eval", "train"))
    ev.set_defaults(handler=_evaluate_run)
    pr = subparsers.add_parser("predict", help="the network's outputs for an input file")
    pr.add_argument("run_dir", metavar="RUN")
    pr.add_argument("--input", required=True, metavar="X.npy|X.csv")
    pr.add_argument("--output", metavar="Y.npy", help="save the outputs (default: print as CSV)")
    pr.add_argument("--checkpoint", default="last", metavar="best|last|STEP")
    pr.add_argument("--batch-size", type=positive_int, metavar="N",
                    help="samples per forward pass (default: the run's batch_size)")
    pr.set_defaults(handler=_predict_outputs)
    ex = subparsers.add_parser("export", help="the network as a MINDIR (or ONNX) file")
    ex.add_argument("run_dir", metavar="RUN")
    ex.add_argument("--format", default="MINDIR", metavar="MINDIR|ONNX")
    ex.add_argument("--checkpoint", default="last", metavar="best|last|STEP")
    ex.add_argument("--output", metavar="FILE",
                    help="default: RUN/exported/<checkpoint>.mindir, or .onnx with --format ONNX")
    ex.add_argument("--batch-size", type=positive_int, metavar="N",
                    help="fix the batch dimension of the exported input at N. MINDIR: fixed, "
                         "by default at the run's batch_size; ONNX: dynamic unless given "
                         "(fixed, with a warning, for a network whose graph computes with "
                         "its batch size)")
    ex.set_defaults(handler=_export_network)


def _evaluate_run(args: argparse.Namespace) -> int:
    from ..use import evaluate
    from ..use.evaluate import record_row
    row = evaluate(args.run_dir, _parse_checkpoint(args), split=args.split, record=False)
    print(f"{row[layout.EvalCol.CHECKPOINT]} (step {row[schema.Col.STEP]}, "
          f"epoch {row[schema.Col.EPOCH]}) on {row[layout.EvalCol.SPLIT]}:")
    for name, value in list(row.items())[5:]:
        print(f"  {name} = {value:.6g}")
    try:  # evaluating only reads the run: a read-only run still gets its metrics printed
        record_row(os.path.abspath(args.run_dir), row)
    except RunDirError as exc:
        print(f"mindexp: warning: {exc}", file=sys.stderr)
        return EXIT_OK
    print(f"appended to {os.path.join(os.path.abspath(args.run_dir), layout.EVALUATIONS_CSV)}")
    return EXIT_OK


def _predict_outputs(args: argparse.Namespace) -> int:
    import numpy as np
    from ..use import predict
    from ..use.predict import save_outputs
    from ..use._model import check_writable
    output = check_writable(args.output) if args.output else None
    y = predict(args.run_dir, args.input, _parse_checkpoint(args), batch_size=args.batch_size)
    if output is None:
        np.savetxt(sys.stdout, y.reshape(len(y), -1), delimiter=",", fmt="%.8g")
        return EXIT_OK
    save_outputs(output, y)
    print(f"wrote {output}: outputs of shape {y.shape}")
    return EXIT_OK


def _export_network(args: argparse.Namespace) -> int:
    from ..use import export
    path = export(args.run_dir, args.format, _parse_checkpoint(args), output=args.output,
                  batch_size=args.batch_size)
    print(f"wrote {path}")
    return EXIT_OK


def _parse_checkpoint(args):
    from ..rundir.checkpoints import parse_checkpoint
    return parse_checkpoint(args.checkpoint)
