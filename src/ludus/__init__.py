"""Ludus: reinforcement learning with verifiable rewards for language models and agents."""

__version__ = "0.1.0"
