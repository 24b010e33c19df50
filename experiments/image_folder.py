"""Images on disk: a folder of PNGs read by MindSpore's ``ImageFolderDataset``.

The folder holds ``train/`` and ``eval/`` (``eval/`` optional), each with
one sub-folder per class (``ImageFolderDataset``'s layout). Images are
decoded, made grayscale, augmented (a random crop of the padded image, when
``augment``) and scaled by ``mindspore.dataset.vision`` in MindSpore's
pipeline with ``workers_io`` parallel workers; mindexp shuffles, shards and
batches the samples. :func:`write_shapes` writes such a folder of synthetic
shapes (nothing is downloaded).
"""
import dataclasses
import os
from dataclasses import dataclass
from typing import Tuple

import numpy as np

from .. import ConfigError, Experiment

SHAPES = ("square", "disc", "cross", "bar")


def write_shapes(folder, per_class=500, side=16, seed=0, eval_per_class=None, pad_bytes=0):
    """Write ``per_class`` grayscale PNGs of each of :data:`SHAPES` into
    ``folder/train/<class>/`` and ``eval_per_class`` (default: a fifth of
    ``per_class``; 0: none) into ``folder/eval/<class>/``, so that
    ``mindexp run image_folder --set data_dir=folder`` has its eval split.

    Each shape has a random size and position, on noise. ``pad_bytes`` adds
    an uncompressible text chunk to every file (on-disk size for benchmarks).
    Returns ``folder``.
    """
    from PIL import Image, PngImagePlugin
    rng = np.random.default_rng(seed)
    extra = None
    if pad_bytes:
        extra = PngImagePlugin.PngInfo()
        extra.add_text("pad", rng.bytes(pad_bytes).hex()[:pad_bytes])
    if eval_per_class is None:
        eval_per_class = max(1, per_class // 5)
    splits = [("train", per_class)] + ([("eval", eval_per_class)] if eval_per_class else [])
    for split, count in splits:
        for label, shape in enumerate(SHAPES):
            path = os.path.join(folder, split, f"{label}_{shape}")
            os.makedirs(path, exist_ok=True)
            for i in range(count):
                image = _draw(shape, side, rng)
                Image.fromarray(image, mode="L").save(os.path.join(path, f"{i:05d}.png"),
                                                      pnginfo=extra)
    return folder


def _draw(shape, side, rng):
    image = rng.integers(0, 60, size=(side, side)).astype(np.uint8)
    r = int(rng.integers(side // 6, side // 3 + 1))
    cy, cx = rng.integers(r, side - r, size=2)
    yy, xx = np.mgrid[:side, :side]
    dy, dx = np.abs(yy - cy), np.abs(xx - cx)
    mask = {"square": (dy <= r) & (dx <= r),
            "disc": dy ** 2 + dx ** 2 <= r * r,
            "cross": ((dy <= r) & (dx <= 1)) | ((dx <= r) & (dy <= 1)),
            "bar": (dy <= 1) & (dx <= r)}[shape]
    image[mask] = rng.integers(180, 256)
    return image


class ImageFolder(Experiment):
    """Grayscale images in class folders on disk: a one-conv CNN, eval accuracy.

    ``data_dir`` holds ``train/<class>/*.png`` (and ``eval/<class>/*.png``).
    Reaches eval accuracy >= 0.9 on :func:`write_shapes` folders (4 classes,
    500 16x16 images each) in 6 epochs.
    """

    name = "image_folder"
    columns = ("image", "label")

    @dataclass
    class Config(Experiment.Config):
        data_dir: str = ""
        side: int = 16
        classes: int = 4
        augment: bool = True
        workers_io: int = 2
        channels: int = 8
        hidden: int = 64
        epochs: int = 6
        batch_size: int = 32
        optimizer: str = "adam"
        lr: float = 0.005
        loss: str = "cross_entropy"
        metrics: Tuple[str, ...] = ("accuracy", "loss")
        checkpoint_interval_s: float = 0.0

    def source(self, split):
        import mindspore.dataset as ds
        folder = os.path.join(self.config.data_dir, split)
        if split != "train" and not os.path.isdir(folder):
            return None
        data = ds.ImageFolderDataset(folder, decode=False,
                                     num_parallel_workers=self.config.workers_io)
        data = data.map(self._transforms(split == "train"), input_columns="image",
                        num_parallel_workers=self.config.workers_io)
        return data.map(_as_int32(), input_columns="label")

    def _transforms(self, train):
        import mindspore.dataset.transforms as transforms
        import mindspore.dataset.vision as vision
        side = self.config.side
        ops = [vision.Decode()]  # HWC RGB; a grayscale PNG's three channels are equal
        if train and self.config.augment:
            ops.append(vision.RandomCrop(side, padding=2))
        # keep one channel: CPU Conv2d is slow beyond one input channel
        return ops + [vision.Rescale(1.0 / 255.0, 0.0), vision.HWC2CHW(),
                      transforms.Slice(slice(0, 1))]

    def figures(self, network, split):
        """The confusion matrix and the misclassified images of (up to 512 of) ``split``."""
        from ._figures import classifier_figures, first_samples
        images, labels = first_samples(self.source(split), 512)
        return classifier_figures(network, images.astype(np.float32), labels, self.config.classes)

    def network(self):
        from ._nets import SmallCNN
        cfg = self.config
        return SmallCNN(cfg.side, cfg.classes, channels=cfg.channels, hidden=cfg.hidden)

    def validate(self):
        cfg = self.config
        if not cfg.data_dir:
            raise ConfigError("config field 'data_dir' must name a folder with train/<class>/ "
                              "image folders (see mindexp.experiments.image_folder.write_shapes). "
                              "Received: data_dir=''", field="data_dir")
        for name in ("side", "classes", "workers_io", "channels", "hidden"):
            if getattr(cfg, name) < 1:
                raise ConfigError(f"config field {name!r} must be an integer >= 1. "
                                  f"Received: {name}={getattr(cfg, name)!r}", field=name)
        if cfg.side % 2:
            raise ConfigError(f"config field 'side' must be even. Received: side={cfg.side}",
                              field="side")
        if "metrics" not in self.config_set and \
                not os.path.isdir(os.path.join(cfg.data_dir, "eval")):
            # eval/ is optional: without it, no eval metrics unless asked for
            self.config = dataclasses.replace(cfg, metrics=())


def _as_int32():
    import mindspore.dataset.transforms as transforms
    import mindspore as ms
    return transforms.TypeCast(ms.int32)
