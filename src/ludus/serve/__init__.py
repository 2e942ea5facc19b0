"""Ludus over HTTP. ``model_server``: an OpenAI-compatible chat-completions server for any local
policy (``ludus serve-model``). The server modules need the ``serve`` extra (FastAPI, uvicorn),
so this package imports none of them itself."""
