"""EvalMonitor: eval metrics after each evaluation to eval.csv."""

from ._common import check_directory, global_step, log_path, to_float
from ._log_callback import LogCallback
from .csv_log import CsvLog

__all__ = ["EvalMonitor"]


class EvalMonitor(LogCallback):
    """Write ``epoch,step,<metric>...`` to ``<directory>/eval.csv``.

    Reads the results ``Model.fit`` puts in ``eval_results`` after each
    evaluation (``valid_frequency``), at the epoch's end.

    Args:
        directory: folder of ``eval.csv``.
        metrics: metric names, in column order.
        all_ranks: ranks other than 0 write ``eval.rankN.csv``.
    """

    FILENAME = "eval.csv"

    def __init__(self, directory, metrics, all_ranks=False):
        super().__init__()
        self.directory = check_directory(directory)
        self.metrics = list(metrics)
        if not self.metrics:
            raise ValueError(f"`metrics` must name at least one metric. Received: metrics={metrics!r}")
        self.all_ranks = bool(all_ranks)
        self.last = {}
        self._log = None

    def on_train_begin(self, run_context):
        path = log_path(self.directory, self.FILENAME, self.all_ranks)
        self._log = CsvLog(path, ["epoch", "step"] + self.metrics, flush_rows=1).open() if path else None

    def on_train_epoch_end(self, run_context):
        cb_params = run_context.original_args()
        results = cb_params.get("eval_results") or cb_params.get("metrics")
        if not results:
            return
        self.last = {k: to_float(results.get(k)) for k in self.metrics}
        if self._log is not None:
            self._log.write([int(cb_params.cur_epoch_num), global_step(cb_params)] +
                            [self.last[k] for k in self.metrics])

