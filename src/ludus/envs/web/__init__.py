"""The ``web`` family: tasks in a real Chromium driven by Playwright (docs/web.md).

* :class:`ShopEnv` (``web``): the built-in shop with an admin side (:mod:`ludus.envs.web.shop`),
  served per episode on 127.0.0.1 and graded from its database.
* :class:`MiniWoBEnv` (``miniwob``): the MiniWoB++ tasks of the ``miniwob`` package, graded by
  each task's own scorer.

Both share :class:`BrowserEnv` (the actions as tools, the page as text) and the process's
:class:`BrowserService` (warm Chromium processes, one context per episode). Needs the ``web``
extra and a Chromium (``scripts/system-deps``)."""

from ludus.envs.web.browser import BrowserService
from ludus.envs.web.env import BrowserEnv, ShopEnv
from ludus.envs.web.miniwob import MiniWoBEnv

__all__ = ["BrowserEnv", "BrowserService", "MiniWoBEnv", "ShopEnv"]
