"""The example APIs (``examples/``) as built-in environments: what ``ludus synth`` makes of each,
without writing a package (docs/synth.md)."""

from __future__ import annotations

from ludus.core.env import require

require({"jsonschema": "pip install 'ludus[synth]'"}, "the synth environments")

from ludus.envs.synth import EXAMPLES  # noqa: E402 - after the check, which names the install command
from ludus.envs.synth.env import SynthEnv  # noqa: E402


class ShopApiEnv(SynthEnv):
    name = "synth-shop"
    description = "a corner shop's API (products, customers, orders) as tools; tasks graded on its final state"
    requires = {"jsonschema": "pip install 'ludus[synth]'"}
    spec_path = EXAMPLES / "shop.yaml"


class CalendarApiEnv(SynthEnv):
    name = "synth-calendar"
    description = "a team calendar's API (calendars, rooms, events) as tools; tasks graded on its final state"
    requires = {"jsonschema": "pip install 'ludus[synth]'"}
    spec_path = EXAMPLES / "calendar.yaml"


class TicketingApiEnv(SynthEnv):
    name = "synth-ticketing"
    description = "a help desk's API (queues, users, tickets) as tools; tasks graded on its final state"
    requires = {"jsonschema": "pip install 'ludus[synth]'"}
    spec_path = EXAMPLES / "ticketing.yaml"
