"""The PyTorch Lightning side of the benchmark, run in its own venv.

    .venv-lightning/bin/python benchmarks/lightning_side.py --serve

Reads one JSON request per line on stdin (``{"workload": {...}, "out": DIR,
"checkpoint": "throttled"|"default"}``) and answers one line
``@@BENCH {json}`` on stdout, so that the parent can interleave Lightning
with the MindSpore variants without paying torch's import every time.

Same shapes as the MindSpore side: the same arrays (workloads.py), a
per-sample ``DataLoader(shuffle=True, drop_last=True)`` (Lightning's
idiomatic input), ``CSVLogger`` with ``log_every_n_steps=1`` and the loss
logged on every step; no progress bar, no model summary (mindexp's quiet
run has neither). Checkpoints: ``throttled`` = ``ModelCheckpoint`` every 10
s of training (what mindexp's default Checkpoint does); ``default`` =
Lightning's own default (a save at every epoch end).

Timing as on the MindSpore side: from the end of the first step to the end
of the last one (``on_train_batch_end``), over ``steps - 1`` steps.
"""
import json
import logging
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads import Workload, data, eval_data, steps_per_s  # noqa: E402

PREFIX = "@@BENCH "


def run(w, out, checkpoint="throttled"):
    import datetime

    import lightning as L
    import torch
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    x, y = data(w)

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            if w.kind == "conv":   # W3: the same network as the MindSpore side
                self.net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(512, 64),
                                         nn.ReLU(), nn.Linear(64, 10))
            elif w.kind == "linear":
                self.net = nn.Linear(1, 1)
            else:
                self.net = nn.Sequential(nn.Linear(1, 256), nn.ReLU(), nn.Linear(256, 256),
                                         nn.ReLU(), nn.Linear(256, 1))
            self.loss = nn.CrossEntropyLoss() if w.kind == "conv" else nn.MSELoss()

        def training_step(self, batch, batch_idx):
            xb, yb = batch
            loss = self.loss(self.net(xb), yb)
            self.log("loss", loss, on_step=True, on_epoch=False)
            return loss

        def validation_step(self, batch, batch_idx):
            xb, yb = batch
            logits = self.net(xb)
            self.log("val_loss", self.loss(logits, yb))
            self.log("val_accuracy", (logits.argmax(1) == yb).float().mean())

        def configure_optimizers(self):
            if w.optimizer == "sgd":
                return torch.optim.SGD(self.parameters(), lr=w.lr)
            return torch.optim.Adam(self.parameters(), lr=w.lr)

    class Timer(Callback):
        n, t1, tn = 0, None, None

        def __init__(self):
            self.ends = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.n += 1
            self.tn = time.perf_counter()
            self.ends.append(self.tn)
            if self.n == 1:
                self.t1 = self.tn

    timer = Timer()
    callbacks = [timer]
    if checkpoint == "throttled":
        callbacks.append(ModelCheckpoint(train_time_interval=datetime.timedelta(seconds=10)))
    if w.kind == "conv":
        y = y.astype("int64")
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                        batch_size=w.batch, shuffle=True, drop_last=True)
    val = None
    if w.eval_samples:
        xe, ye = eval_data(w)
        val = DataLoader(TensorDataset(torch.from_numpy(xe), torch.from_numpy(ye.astype("int64"))),
                         batch_size=w.batch)
    trainer = L.Trainer(max_epochs=w.epochs, accelerator="cpu", devices=1,
                        logger=CSVLogger(out, name="lightning"), log_every_n_steps=1,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=callbacks, default_root_dir=out,
                        enable_checkpointing=True, num_sanity_val_steps=0,
                        limit_val_batches=1.0 if val is not None else 0)
    trainer.fit(Module(), loader, val)
    secs = timer.tn - timer.t1
    steps = sorted(b - a for a, b in zip(timer.ends, timer.ends[1:]))
    return {"steps": timer.n, "timed_steps": timer.n - 1, "seconds": secs,
            "steps_per_s": steps_per_s(timer.n - 1, secs),
            "median_step_ms": steps[len(steps) // 2] * 1e3 if steps else float("nan"),
            "torch_threads": torch.get_num_threads()}


def versions():
    import lightning
    import torch
    return {"torch": torch.__version__, "lightning": lightning.__version__}


def _quiet():
    warnings.filterwarnings("ignore")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)


def serve():
    _quiet()
    print(PREFIX + json.dumps({"ready": True, **versions()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            res = run(Workload(**req["workload"]), req["out"], req.get("checkpoint", "throttled"))
        except Exception as exc:  # report, keep serving
            res = {"error": f"{type(exc).__name__}: {exc}"}
        print(PREFIX + json.dumps(res), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        _quiet()
        from workloads import FULL
        for key in sys.argv[1:] or FULL:
            print(key, run(FULL[key], "/tmp/lightning-bench"))
