"""What our audit of reasoning-gym's scorers decided for each dataset (see docs/reasoning_gym.md).

Every rg scorer is reached through one rule the environment applies to all of them: only full
marks count (reasoning-gym pays partial credit, e.g. 0.01 for any parseable answer or a share for
a substring, which a policy learns to farm), and the scorer sees only the reply's extracted final
answer. A verdict says whether rg's own scorer is then trustworthy (``works``), whether Ludus
grades with its own code instead (``replaced``: the scorer evaluates model text, accepts wrong
answers or rejects right ones), or whether the dataset is not offered (``refused``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ludus.core.types import Score

# (the reply's final answer, already extracted and stripped; the rg entry) -> a Score of 1.0 or 0.0
Scorer = Callable[[str, dict[str, Any]], Score]
# the rg entry -> a final answer that earns full marks, for entries whose "answer" is None
Reference = Callable[[dict[str, Any]], str | None]


@dataclass(frozen=True)
class Verdict:
    kind: Literal["works", "replaced", "refused"]
    reason: str  # one sentence: what rg's scorer does and why we keep, replace or refuse it
    scorer: Scorer | None = None  # required for "replaced", None otherwise
    reference: Reference | None = None  # optional: an oracle answer when rg's entry has none

    def __post_init__(self) -> None:
        if (self.kind == "replaced") != (self.scorer is not None):
            raise ValueError(f"a {self.kind!r} verdict {'needs' if self.kind == 'replaced' else 'takes no'} scorer")
