"""Spirals with a curriculum: the training arms start short (few turns, an easy
problem) and grow to the full length, epoch by epoch; evaluation always uses
the full spirals. ``curriculum=false`` trains on the full spirals from the
first epoch, with the same budget (epochs, steps, samples), for comparison."""
from dataclasses import dataclass

import numpy as np

from .spirals import Spirals, make_spirals


class SpiralsCurriculum(Spirals):
    """Two-class spirals learned from easy to hard.

    Epoch ``e`` trains on spirals of
    ``turns_start + (turns - turns_start) * min(1, (e - 1) / ramp_epochs)``
    turns, the points drawn from ``(seed, e)`` (so a resumed or rerun run
    sees the same data); every epoch has ``samples`` points.
    """

    name = "spirals_curriculum"

    @dataclass
    class Config(Spirals.Config):
        turns: float = 2.0
        """turns of each spiral arm at the end (and in the eval split)"""
        turns_start: float = 0.5
        """turns of the training arms in the first epoch"""
        ramp_epochs: int = 20
        """epochs over which the training arms grow to ``turns``"""
        curriculum: bool = True
        """false: the full spirals in every epoch (the same budget, no curriculum)"""

    def turns_at(self, epoch: int) -> float:
        """The training spirals' turns in epoch ``epoch`` (from 1)."""
        cfg = self.config
        if not cfg.curriculum:
            return cfg.turns
        done = min(1.0, (epoch - 1) / max(1, cfg.ramp_epochs))
        return cfg.turns_start + (cfg.turns - cfg.turns_start) * done

    def source(self, split, epoch=1):
        cfg = self.config
        if split != "train":
            return super().source(split)
        rng = np.random.default_rng([cfg.seed, 2, epoch])  # this epoch's own draw
        return make_spirals(cfg.samples // 2, self.turns_at(epoch), cfg.noise, rng)

    def validate(self):
        super().validate()
        from .. import ConfigError
        if not 0 < self.config.turns_start <= self.config.turns:
            raise ConfigError("config field 'turns_start' must be in (0, turns]. Received: "
                              f"turns_start={self.config.turns_start!r}", field="turns_start")
        if self.config.ramp_epochs < 1:
            raise ConfigError("config field 'ramp_epochs' must be >= 1. Received: "
                              f"ramp_epochs={self.config.ramp_epochs!r}", field="ramp_epochs")
