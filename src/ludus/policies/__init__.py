"""Model backends behind one interface (``Policy``): the embedded tiny model, transformers
checkpoints and OpenAI-compatible HTTP servers. ``load_policy`` picks one from a short spec.

Names load on first use, so telling a saved folder's kind (:func:`saved_kind`, read when a
training config is checked) imports no torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ludus.core.lazy import lazy_exports

if TYPE_CHECKING:
    from ludus.policies.base import Policy

_EXPORTS = {
    "Completion": "base",
    "Policy": "base",
    "PolicyError": "base",
    "SamplingParams": "base",
    "TrainablePolicy": "base",
}

__all__ = sorted([*_EXPORTS, "load_policy", "saved_kind"])

__getattr__ = lazy_exports(__name__, _EXPORTS)

SPEC_HELP = (
    "'tiny' (a fresh embedded model), a folder saved by ludus (tiny or transformers: a training run's final/ "
    "or checkpoints/step_NNNNNN/), "
    "'hf:PATH' (a transformers checkpoint folder), or 'http(s)://HOST/v1' with model=... "
    "(an OpenAI-compatible server such as vLLM)"
)


def load_policy(spec: str, **options: Any) -> Policy:
    """A policy from ``spec`` (see ``SPEC_HELP``); ``options`` go to the backend's constructor."""
    if spec == "tiny":  # options: TinyConfig fields (d_model, n_layers, n_heads, max_len) and seed
        from ludus.policies.tiny import TinyConfig, TinyPolicy  # noqa: PLC0415 - backends load on demand

        seed = options.pop("seed", 0)
        try:
            config = TinyConfig(**options)
        except TypeError:
            known = ", ".join(f for f in TinyConfig.__dataclass_fields__ if f != "vocab_size")
            raise ValueError(
                f"unknown option(s) {sorted(options)} for the tiny model; it takes {known} and seed"
            ) from None
        return TinyPolicy(config, seed=seed)
    if spec.startswith(("http://", "https://")):
        from ludus.policies.openai import OpenAIPolicy  # noqa: PLC0415

        return OpenAIPolicy(spec, **options)
    if spec.startswith("hf:"):
        from ludus.policies.hf import HFPolicy  # noqa: PLC0415

        return HFPolicy.load(spec[3:], **options)
    folder = Path(spec)
    kind = saved_kind(folder)
    if kind == "tiny":
        from ludus.policies.tiny import TinyPolicy  # noqa: PLC0415

        if options:
            raise ValueError(
                f"{spec} holds a tiny model, which takes no loading options ({', '.join(sorted(options))}); "
                "those apply to transformers models"
            )
        return TinyPolicy.load(folder)
    if kind is not None:
        from ludus.policies.hf import HFPolicy  # noqa: PLC0415

        return HFPolicy.load(folder, **options)
    if (folder / "config.yaml").is_file():
        raise ValueError(
            f"{spec} is a training run's folder: its model is {folder / 'final'} (or a checkpoint, "
            f"{folder / 'checkpoints' / 'step_NNNNNN'})"
        )
    raise ValueError(f"cannot load a policy from {spec!r}: expected {SPEC_HELP}")


def saved_kind(folder: str | Path) -> str | None:
    """What a model folder holds, from its config.json and without loading weights: the ``kind``
    ludus records there (``"tiny"``), ``"transformers"`` for a checkpoint without one, ``None``
    when there is no config.json."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text())
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a model's configuration (a JSON object), got {type(config).__name__}")
    return config.get("kind", "transformers")
