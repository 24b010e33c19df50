"""Before a run directory exists: load and check the data, the data-dependent
config limits, the network's output shape, the labels' values, the eval
metrics, the device."""
from typing import TYPE_CHECKING, Any
from ..define import sources, transforms
from ..errors import ConfigError, DataError, MindexpError
from ..define.metrics import check_metric_names
from .failures import user_code_error
from .labels import check_data, check_label_types

if TYPE_CHECKING:
    import numpy as np

    from ..define.experiment import BaseExperiment
    from ..define.sources import Split


class Plan:
    """Everything checked before a run directory exists."""

    def __init__(self, train: "Split", eval_: "Split | None", steps_per_epoch: int,
                 input_state: "dict[str, np.ndarray] | None" = None) -> None:
        self.train, self.eval = train, eval_
        self.steps_per_epoch = steps_per_epoch
        self.input_state = input_state  # the fitted input transform's state (None: none)


def prepare(exp: "BaseExperiment", workers: int = 1, check_network: bool = True) -> Plan:
    """Load and check the data, the data-dependent config limits, the eval
    metrics and the device."""
    cfg = exp.config
    check_device(cfg.device)
    train, eval_ = _train_split(exp), _split(exp, "eval")
    train, eval_, input_state = transforms.fit_splits(exp, train, eval_)
    n, per_step = sources.split_size(train), cfg.batch_size * cfg.grad_accumulation
    if isinstance(train, sources.Finished):  # its batches are the user's
        n, per_step = n * workers, 1
    if per_step * workers > n:
        what = f"batch_size x grad_accumulation ({cfg.batch_size} x {cfg.grad_accumulation})" \
            if cfg.grad_accumulation > 1 else f"batch_size ({cfg.batch_size})"
        raise ConfigError(f"config field 'batch_size': {what} x workers ({workers}) must be at "
                          f"most the training set size {n}. Received: batch_size={cfg.batch_size}",
                          field="batch_size")
    steps_per_epoch = n // per_step // workers
    total = steps_per_epoch * cfg.epochs
    if cfg.warmup_steps > total:
        raise ConfigError(f"config field 'warmup_steps' must be at most the run's {total} steps. "
                          f"Received: warmup_steps={cfg.warmup_steps}", field="warmup_steps")
    # NaN/Inf and class ids of in-memory arrays; lazy, memory-mapped and pipeline
    # sources are read only while training (reading them here would defeat them)
    in_memory = {k: v for k, v in (("train", train), ("eval", eval_)) if _in_memory(v)}
    check_label_types(exp, in_memory)  # a wrong loss first, then the network's shape
    out_shape = check_output_shape(exp, train) if check_network else None
    if check_network:
        check_loss_components(exp, train)
    check_data(exp, in_memory, out_shape)
    _check_eval(exp, eval_)
    from .monitors import check_monitors
    check_monitors(exp, eval_, workers)
    return Plan(train, eval_, steps_per_epoch, input_state)


# Losses that compare output and label element by element (and would
# silently broadcast (b, 1) against (b,) into a (b, b) loss).
_ELEMENTWISE = ("mse", "mae", "l1", "huber", "bce")


def check_output_shape(exp: "BaseExperiment", train: Any) -> Any:
    """Run the network on one batch (PyNative, before anything is created) and
    reject an output that cannot match the labels, naming both shapes.
    Returns the output shape (None when not probed)."""
    train = sources.first_rows(train, exp.config.batch_size)
    if exp.has_own_loss_network() or train is None or len(train) != 2:
        return None  # a custom loss cell decides what matches; a pipeline is not read here
    out_shape, labels = _forward_shape(exp, train[0][:exp.config.batch_size]), train[1]
    if out_shape is None:
        return None  # the network fails on its own: training reports it as a failed run
    label_shape = (min(len(labels), exp.config.batch_size),) + labels.shape[1:]
    if exp.config.loss in _ELEMENTWISE:
        ok = tuple(out_shape) == label_shape
    else:  # sparse cross-entropy: (b, classes) logits for (b,) labels
        ok = len(out_shape) == 2 and out_shape[0] == label_shape[0] and len(label_shape) == 1
    if not ok:
        raise DataError(f"the network's output shape {tuple(out_shape)} does not match the labels' "
                        f"shape {label_shape} (column {exp.columns[1]!r}, loss {exp.config.loss!r}); "
                        "make the network return one value per label")
    return out_shape


def _forward_shape(exp: "BaseExperiment", batch: Any) -> Any:
    import mindspore as ms
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        return exp.network()(ms.Tensor(batch)).shape
    except Exception:  # the user's network: a failure here is the run's to report
        return None
    finally:
        ms.set_context(mode=mode)


def check_loss_components(exp: "BaseExperiment", train: Any) -> None:
    """With ``loss_components`` declared, run the loss network on one batch
    (PyNative) and reject outputs other than ``(total, c1, ..., ck)`` scalars."""
    names = tuple(exp.loss_components)
    if not names:
        return
    outputs = _loss_outputs(exp, [column[:exp.config.batch_size] for column in train])
    if outputs is None:
        return  # the loss network fails on its own: training reports it
    want = f"(total, {', '.join(names)})"
    if not isinstance(outputs, (tuple, list)) or len(outputs) != len(names) + 1:
        got = f"a tuple of {len(outputs)}" if isinstance(outputs, (tuple, list)) else "one value"
        raise DataError(f"{type(exp).__name__}.loss_network() must return {want} for "
                        f"loss_components={names!r}. Received: {got}")
    for name, value in zip(("total",) + names, outputs):
        shape = tuple(getattr(value, "shape", ()))
        if getattr(value, "size", 1) != 1:
            raise DataError(f"loss component {name!r} must be a scalar (one value per step). "
                            f"Received: {name} of shape {shape}")


def _loss_outputs(exp: "BaseExperiment", batch: Any) -> Any:
    import mindspore as ms
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        return exp.loss_network(exp.network())(*(ms.Tensor(c) for c in batch))
    except Exception:  # the user's network: a failure here is the run's to report
        return None
    finally:
        ms.set_context(mode=mode)


def _in_memory(data: Any) -> bool:
    import numpy as np
    return isinstance(data, tuple) and not any(isinstance(a, np.memmap) for a in data)


def _check_eval(exp: "BaseExperiment", eval_: "Split | None") -> None:
    """Metric names are known, and asked for only when there is an eval split."""
    if eval_ is not None:
        check_metric_names(exp.metrics())
    elif exp.config.metrics:
        raise ConfigError(f"config field 'metrics' needs an eval split, and "
                          f"{exp.experiment_name()}.source('eval') gives none. "
                          f"Received: metrics={','.join(exp.config.metrics)}", field="metrics")


def _train_split(exp: "BaseExperiment") -> "Split":
    """The train split, which every run needs."""
    train = _split(exp, "train")
    if train is None:
        method, accepted = ("dataset", "a mindspore.dataset Dataset") \
            if sources.takes_only_split(exp) else ("source", sources.ACCEPTED)
        raise DataError(f"{type(exp).__name__}.{method}('train') must give the training data; "
                        f"accepted: {accepted}. Received: None")
    return train


def _split(exp: "BaseExperiment", split: str) -> "Split | None":
    """A split's data as the session takes it (see :mod:`mindexp.define.sources`)."""
    if sources.takes_only_split(exp):
        first = _user_call(exp.dataset, exp, "dataset", split)
        return sources.Finished(exp, split, first) if first is not None else None
    return sources.load_split(exp, split, _user_call(exp.source, exp, "source", split))


def _user_call(method: Any, exp: "BaseExperiment", name: str, split: str) -> Any:
    try:
        return method(split)
    except MindexpError:
        raise
    except NotImplementedError:
        raise
    except Exception as exc:  # the user's code: say where it failed
        raise user_code_error(f"{type(exp).__name__}.{name}({split!r}) raised", exc) from None


def check_device(device: str) -> None:
    """ConfigError, before any run directory exists, when MindSpore has no
    ``device`` backend here (``ms.set_device`` would only fail later)."""
    if device == "CPU":
        return
    import mindspore as ms
    if not ms.hal.is_available(device):
        raise ConfigError(f"config field 'device': this MindSpore installation cannot use "
                          f"{device} (mindspore.hal.is_available({device!r}) is False); accepted: "
                          f"CPU, or GPU/Ascend with the matching mindspore package and drivers. "
                          f"Received: device={device!r}", field="device")
