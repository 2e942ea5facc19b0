"""Ludus environments and graders inside other trainers: TRL (:mod:`ludus.integrations.trl`) and
verl (:mod:`ludus.integrations.verl`); what both share is in :mod:`ludus.integrations.common`.

A trainer reads prompts from a dataset that ``ludus export`` writes; each row names its task by
environment, split and index, never by its answer. The grader rebuilds the task from the
environment's deterministic task source, replays the episode's ``reset`` with the row's seed and
scores the model's reply with the environment's own grader, so the dataset carries no gold
answers or hidden tests. The environment comes from an *env factory*, a callable returning an
:class:`~ludus.core.env.Env`: a registered name with its arguments by default, or any factory
(a :class:`~ludus.rollout.remote.RemoteEnv` on an env server, say) that behaves as one.
"""
