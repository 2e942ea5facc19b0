"""The verdict on every reasoning-gym dataset's scorer (docs/reasoning_gym.md has the table)."""

from __future__ import annotations

from ludus.envs.reasoning_gym.audit_a_m import AUDIT as A_TO_M
from ludus.envs.reasoning_gym.audit_n_z import AUDIT as N_TO_Z
from ludus.envs.reasoning_gym.verdicts import Verdict

# Datasets that keep rg's base scorer: full marks only for the answer string equal to the gold one
# (its partial credit for an answer that merely contains the gold is never paid, see verdicts.py).
EXACT_MATCH = Verdict("works", "rg's base scorer: full marks only for exactly the gold answer string")
BASE_SCORER = (
    "acre aiw arc_1d base_conversion basic_arithmetic bf binary_alternation caesar_cipher count_bits count_primes "
    "course_schedule gcd isomorphic_strings largest_island lcm leg_counting letter_counting list_functions "
    "mahjong_puzzle maze modulo_grid number_filtering number_sequence ransom_note rotate_matrix rotten_oranges "
    "simple_equations simple_geometry string_manipulation string_splitting string_synthesis syllogism "
    "word_sequence_reversal"
).split()

AUDIT: dict[str, Verdict] = {
    **dict.fromkeys(BASE_SCORER, EXACT_MATCH),
    "composite": Verdict(
        "refused", "a mixture of other datasets, not a task family: use Ludus's own mixtures (envs: [...]) instead"
    ),
    **A_TO_M,
    **N_TO_Z,
}
