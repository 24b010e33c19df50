"""Where a resumed run starts (:class:`Resume`), in a module of its own: the
training core's types name it without importing :mod:`~mindexp.train.resume`,
which builds the session's train cell to check a checkpoint loads."""
from typing import Any
import dataclasses

from ..errors import MindexpError


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Resume:
    """Where a resumed run starts, built by
    :func:`~mindexp.train.resume.resume_point` alone.

    ``path``, ``params``, ``step``, ``epoch``: the latest good checkpoint,
    its loaded parameters, global step and (1-based) epoch; ``time_offset``:
    the run's training time up to that step and ``loss`` the loss logged
    there (loss.csv's ``time_s`` and ``loss``, None when not logged);
    ``early_stopped``: the run had stopped early (its patience counter then
    restarts); ``run_dir``, ``meta`` (run.json), ``entry``: the run itself.
    """

    path: str
    params: dict
    step: int
    epoch: int
    time_offset: float
    loss: float | None
    early_stopped: bool
    run_dir: str
    meta: dict
    entry: str

    def load(self, cell: Any) -> None:
        """Load weights and optimizer state into the train cell."""
        import mindspore as ms
        # The learning rate comes from the (possibly changed) config, not the
        # checkpoint: `resume --set lr=...` must train with the new value.
        from ..callbacks.checkpoint import CALLBACK_STATE_KEY
        state = {k: v for k, v in self.params.items()
                 if k not in ("step", "epoch", "learning_rate", CALLBACK_STATE_KEY)}
        not_loaded, _ = ms.load_param_into_net(cell, state, strict_load=True)
        not_loaded = [n for n in not_loaded if n != "learning_rate"]
        if not_loaded:
            raise MindexpError(f"checkpoint {self.path} does not match the network: "
                               f"missing {not_loaded[:5]}")

    def position(self, steps_per_epoch: int) -> tuple[int, int]:
        """``(initial_epoch, first_batch)`` for Model.train: the 0-based epoch
        to start in and the batches of it already done."""
        done_in_epoch = self.step - (self.epoch - 1) * steps_per_epoch
        if done_in_epoch >= steps_per_epoch:
            return self.epoch, 0
        return self.epoch - 1, done_in_epoch
