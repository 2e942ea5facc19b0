"""Training: the GRPO step (:mod:`ludus.train.grpo`, one file top to bottom), the loop around
it (:class:`Trainer`), asynchronous sampling (:mod:`ludus.train.sampler`), the run folder
(:mod:`ludus.train.run_folder`), the configuration (:class:`TrainConfig`) and the embedded
model's supervised warm-start (:mod:`ludus.train.supervised`).

Names load on first use, so reading a config (``ludus.train.config``) imports no torch.
"""

from ludus.core.lazy import lazy_exports

_EXPORTS = {
    "ConfigError": "config",
    "TrainConfig": "config",
    "load_config": "config",
    "RunFolder": "run_folder",
    "RunResult": "trainer",
    "Trainer": "trainer",
    "TrainingHalted": "trainer",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
