"""The built-in shop of the ``web`` environment: app, data, procedural tasks, grader and oracle.

* :mod:`~ludus.envs.web.shop.data`: the template database of a data seed and episode copies;
* :mod:`~ludus.envs.web.shop.app`: :class:`ShopApp`, one episode's server-rendered shop;
* :mod:`~ludus.envs.web.shop.tasks`: :class:`ShopTasks`, look-ups and edits at three levels;
* :mod:`~ludus.envs.web.shop.grade`: :func:`grade`, from the answer and the database, deny by default;
* :mod:`~ludus.envs.web.shop.oracle`: :func:`reference_actions` and :func:`cheats`.
"""

from ludus.envs.web.shop.app import ShopApp
from ludus.envs.web.shop.grade import grade
from ludus.envs.web.shop.oracle import cheats, reference_actions
from ludus.envs.web.shop.tasks import ShopTasks

__all__ = ["ShopApp", "ShopTasks", "cheats", "grade", "reference_actions"]
