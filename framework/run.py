"""Run: a finished (or running) run directory, read back."""
import functools
import os

from .errors import RunDirError
from .rundir import is_run_dir, read_json

LOGS = {"loss": "loss.csv", "params": "params.csv", "grad_norm": "grad_norm.csv",
        "eval": "eval.csv", "checkpoints": "checkpoints.csv"}


class Run:
    """A run directory: ``.config`` and ``.meta`` (dicts), ``.loss``,
    ``.params``, ``.grad_norm``, ``.eval`` (DataFrames, empty when absent),
    ``.targets``; :meth:`network` rebuilds the trained network."""

    def __init__(self, path):
        self.dir = os.path.abspath(os.fspath(path))
        if not is_run_dir(self.dir):
            raise RunDirError(f"{path} is not a run directory (it has no run.json)")

    def __repr__(self):
        return f"Run({self.dir!r}, status={self.status!r})"

    @functools.cached_property
    def meta(self):
        return read_json(os.path.join(self.dir, "run.json"))

    @functools.cached_property
    def config(self):
        return read_json(os.path.join(self.dir, "config.json"))

    @property
    def run_id(self):
        return self.meta.get("run_id") or os.path.basename(self.dir)

    @property
    def status(self):
        return self.meta.get("status")

    @property
    def targets(self):
        return dict(self.meta.get("targets") or {})

    def read(self, name):
        """A log of this run as a DataFrame (``"loss"``, ``"params"``, ...)."""
        from callbacks import read_csv
        try:
            return read_csv(self.dir, LOGS.get(name, name))
        except Exception as exc:  # pandas' parser errors name no file
            raise RunDirError(f"{os.path.join(self.dir, LOGS.get(name, name))} is not a "
                              f"readable CSV ({str(exc).splitlines()[0]})") from None

    @functools.cached_property
    def loss(self):
        return self.read("loss")

    @functools.cached_property
    def params(self):
        return self.read("params")

    @functools.cached_property
    def grad_norm(self):
        return self.read("grad_norm")

    @functools.cached_property
    def eval(self):
        return self.read("eval")

    def checkpoint(self, best=False):
        """Path of the latest checkpoint, or of the newest best one, or None."""
        from callbacks import list_checkpoints
        found = list_checkpoints(self.dir, "best" if best else "last")
        return found[-1][2] if found else None

    def network(self, best=False):
        """Rebuild the experiment's network with the latest (or best)
        checkpoint loaded into it, ready for inference."""
        import mindspore as ms
        from .catalog import load_experiment
        path = self.checkpoint(best=best)
        if path is None:
            raise RunDirError(f"{self.dir} has no checkpoint")
        cls = load_experiment(self.meta["entry"])
        net = cls(self.config).network()
        ms.load_param_into_net(net, ms.load_checkpoint(path), strict_load=False)
        return net
