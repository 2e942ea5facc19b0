"""Ludus's code verifier (bubblewrap isolation on) vs. two naive graders, in one run.

    python benchmarks/code_throughput.py [--quick] [--workers N] [--regenerate]

Data: HumanEval-format (task, correct completion) pairs in ``data/humaneval_synthetic.jsonl``,
generated deterministically (``--seed``) from the hand-written templates below when the file is
missing or ``--regenerate`` is given. Each template is a small function (arithmetic, strings,
lists, dict counting, recursion, sorting, searching) whose constants vary per instance; the
tests' expected values come from running the reference code on the host, and every generated
pair is executed once on the host before it is written.

Measured on the same pairs, with the same parallelism (``--workers``, default: all CPUs):

* Ludus — ``CodeVerifier(workers=W, backend="bwrap", cache_size=0).score_many(pairs)``, after a
  warm-up that is not timed. Each verification is two sandboxed executions (the solution, and
  the tests in a separate process that calls it over a socket).
* baseline (a) — one ``python -m pytest`` process per sample (solution file + test file), no
  isolation; measured on the first ``--baseline-a-samples`` pairs because it is slow.
* baseline (b) — one ``python file.py`` per sample (prompt + completion + test + ``check()``),
  no isolation; success is exit code 0.

Then the per-execution cost of the sandbox: N sequential runs of ``pass`` in a warm bubblewrap
pool, in a warm pool without isolation, as ``python -c pass`` subprocesses, and as cold
``bwrap ... python -c pass`` commands.

Targets (issue): Ludus ≥ 30× baseline (a) and ≥ 3× baseline (b) verifications per second. Exits
non-zero when an honest pair does not score 1.0 (or fails a baseline): that is a correctness
check; the speed targets are only reported. Not a test.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import string
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from string import Template as Text
from typing import Any

from ludus.envs.code.verifier import CodeVerifier
from ludus.sandbox import Sandbox
from ludus.sandbox.backend import bwrap_args, interpreter, python_paths

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data" / "humaneval_synthetic.jsonl"
DEFAULT_PAIRS = 240
TARGET_A, TARGET_B = 30.0, 3.0
SUBPROCESS_TIMEOUT_S = 120.0
METADATA = "METADATA = {\n    'author': 'ludus-benchmarks',\n    'dataset': 'humaneval-synthetic',\n}\n"

# ---- the templates ----

Params = Callable[[random.Random], dict[str, Any]]
Args = Callable[[random.Random, dict[str, Any]], tuple]


@dataclass(frozen=True)
class Template:
    name: str
    signature: str  # after the function name
    doc: str  # string.Template text: $param
    body: str  # string.Template text, unindented
    args: Args
    params: Params = field(default=lambda r: {})
    imports: str = ""


def ints(r: random.Random, lo_n: int, hi_n: int, lo: int = -50, hi: int = 50) -> list[int]:
    return [r.randint(lo, hi) for _ in range(r.randint(lo_n, hi_n))]


def text(r: random.Random, alphabet: str, lo: int, hi: int) -> str:
    return "".join(r.choice(alphabet) for _ in range(r.randint(lo, hi)))


def words(r: random.Random, lo: int, hi: int, alphabet: str = string.ascii_lowercase) -> list[str]:
    return [text(r, alphabet, 1, 7) for _ in range(r.randint(lo, hi))]


def nested(r: random.Random, depth: int = 0) -> list:
    out: list = []
    for _ in range(r.randint(0, 4)):
        out.append(nested(r, depth + 1) if depth < 3 and r.random() < 0.35 else r.randint(-9, 9))
    return out


def palindrome_or_not(r: random.Random) -> str:
    w = text(r, "abcde", 0, 5)
    s = w + r.choice(["", "x", "Z"]) + w[::-1] if r.random() < 0.5 else text(r, "abcde", 1, 9)
    return "".join(c.upper() if r.random() < 0.3 else c for c in s) + r.choice(["", "!", " ", ", "])


def brackets(r: random.Random, pairs: str) -> str:
    if r.random() < 0.5:  # balanced by construction
        out = ""
        for _ in range(r.randint(0, 4)):
            i = r.randrange(0, len(pairs), 2)
            out = r.choice([out + pairs[i] + pairs[i + 1], pairs[i] + out + pairs[i + 1]])
        return out + r.choice(["", "x", " y"])
    return text(r, pairs + "x", 0, 8)


def runs(r: random.Random) -> str:
    return "".join(r.choice("abc") * r.randint(1, 4) for _ in range(r.randint(0, 5)))


def bracket_params(r: random.Random) -> dict[str, Any]:
    chosen = r.sample(["()", "[]", "{}", "<>"], r.randint(1, 3))
    return {"chars": "".join(chosen), "pairs": repr({p[1]: p[0] for p in chosen})}


def remainder_params(r: random.Random) -> dict[str, Any]:
    k = r.randint(2, 7)
    return {"k": k, "r": r.randrange(k)}


def search_args(r: random.Random, p: dict) -> tuple:
    xs = sorted(r.sample(range(-50, 50), r.randint(0, 12)))
    return xs, r.choice(xs) if xs and r.random() < 0.6 else r.randint(-55, 55)


TEMPLATES: list[Template] = [
    Template(
        "scale_shift",
        "(x: int) -> int",
        "Return x times $a plus $b.",
        "return x * $a + $b",
        lambda r, p: (r.randint(-1000, 1000),),
        lambda r: {"a": r.randint(2, 9), "b": r.randint(-20, 20)},
    ),
    Template(
        "sum_multiples",
        "(n: int) -> int",
        "Return the sum of the non-negative integers below n that are divisible by $a or by $b.",
        "return sum(i for i in range(n) if i % $a == 0 or i % $b == 0)",
        lambda r, p: (r.randint(0, 400),),
        lambda r: {"a": r.randint(2, 7), "b": r.randint(3, 11)},
    ),
    Template(
        "count_char",
        "(s: str) -> int",
        "Count how many times the letter '$c' occurs in s, ignoring case.",
        "return s.lower().count('$c')",
        lambda r, p: (text(r, p["c"] + p["c"].upper() + "abxyz ", 0, 30),),
        lambda r: {"c": r.choice(string.ascii_lowercase)},
    ),
    Template(
        "reverse_words",
        "(s: str) -> str",
        "Split s on '$sep', reverse the order of the pieces and join them with '$sep' again.",
        "return '$sep'.join(reversed(s.split('$sep')))",
        lambda r, p: (p["sep"].join(words(r, 1, 6)),),
        lambda r: {"sep": r.choice([" ", ",", "-", ";", "/"])},
    ),
    Template(
        "is_palindrome",
        "(s: str) -> bool",
        "Return True if s reads the same backwards, considering only letters and digits and ignoring case.",
        """
        cleaned = [c.lower() for c in s if c.isalnum()]
        return cleaned == cleaned[::-1]
        """,
        lambda r, p: (palindrome_or_not(r),),
    ),
    Template(
        "fib_mod",
        "(n: int) -> int",
        "Return the n-th Fibonacci number (fib_mod(0) == 0, fib_mod(1) == 1) modulo $m.",
        """
        a, b = 0, 1
        for _ in range(n):
            a, b = b, (a + b) % $m
        return a
        """,
        lambda r, p: (r.randint(0, 300),),
        lambda r: {"m": r.choice([7, 10, 97, 1000, 12345, 10**9 + 7])},
    ),
    Template(
        "factorial_mod",
        "(n: int) -> int",
        "Return n! modulo $m, computed recursively (0! == 1).",
        """
        if n <= 1:
            return 1 % $m
        return n * factorial_mod(n - 1) % $m
        """,
        lambda r, p: (r.randint(0, 150),),
        lambda r: {"m": r.choice([13, 101, 997, 1000, 65537])},
    ),
    Template(
        "gcd_list",
        "(xs: List[int]) -> int",
        "Return the greatest common divisor of all numbers in xs (0 for an empty list).",
        """
        result = 0
        for x in xs:
            result = math.gcd(result, x)
        return result
        """,
        lambda r, p: ([p["base"] * r.randint(0, 30) for _ in range(r.randint(0, 6))],),
        lambda r: {"base": r.randint(1, 12)},
        imports="import math\n",
    ),
    Template(
        "letter_counts",
        "(s: str) -> Dict[str, int]",
        "Count each of the characters '$keep' in s; characters that do not occur are left out.",
        """
        counts = {}
        for c in s:
            if c in '$keep':
                counts[c] = counts.get(c, 0) + 1
        return counts
        """,
        lambda r, p: (text(r, "abcdefghij ", 0, 25),),
        lambda r: {"keep": "".join(sorted(r.sample("abcdefghij", r.randint(2, 5))))},
    ),
    Template(
        "word_lengths",
        "(s: str) -> Dict[str, int]",
        "Map each word of s (split on whitespace) that has at least $n letters to its length.",
        "return {w: len(w) for w in s.split() if len(w) >= $n}",
        lambda r, p: (" ".join(words(r, 0, 7)),),
        lambda r: {"n": r.randint(1, 5)},
    ),
    Template(
        "sort_by_remainder",
        "(xs: List[int]) -> List[int]",
        "Sort xs by the remainder of each number divided by $k, then by the number itself.",
        "return sorted(xs, key=lambda x: (x % $k, x))",
        lambda r, p: (ints(r, 0, 10),),
        lambda r: {"k": r.randint(2, 9)},
    ),
    Template(
        "running_max",
        "(xs: List[int]) -> List[int]",
        "Return, for each position of xs, the largest value seen up to and including it.",
        """
        result = []
        best = None
        for x in xs:
            best = x if best is None or x > best else best
            result.append(best)
        return result
        """,
        lambda r, p: (ints(r, 0, 10),),
    ),
    Template(
        "keep_remainder",
        "(xs: List[int]) -> List[int]",
        "Keep the numbers of xs whose remainder modulo $k is $r, in their original order.",
        "return [x for x in xs if x % $k == $r]",
        lambda r, p: (ints(r, 0, 12),),
        remainder_params,
    ),
    Template(
        "caesar",
        "(s: str) -> str",
        "Shift each lowercase letter of s $k places forward in the alphabet (wrapping around after z); "
        "leave other characters unchanged.",
        """
        out = []
        for c in s:
            if 'a' <= c <= 'z':
                out.append(chr((ord(c) - ord('a') + $k) % 26 + ord('a')))
            else:
                out.append(c)
        return ''.join(out)
        """,
        lambda r, p: (text(r, string.ascii_lowercase + " !A", 0, 20),),
        lambda r: {"k": r.randint(1, 25)},
    ),
    Template(
        "count_vowels",
        "(s: str) -> int",
        "Count the characters of s that are among '$v' (in either case).",
        "return sum(1 for c in s.lower() if c in '$v')",
        lambda r, p: (text(r, string.ascii_letters + " ", 0, 30),),
        lambda r: {"v": r.choice(["aeiou", "aeiouy", "aei", "ou"])},
    ),
    Template(
        "digit_sum",
        "(n: int) -> int",
        "Return the sum of the digits of the non-negative integer n written in base $b.",
        """
        total = 0
        while n:
            total += n % $b
            n //= $b
        return total
        """,
        lambda r, p: (r.randint(0, 10**6),),
        lambda r: {"b": r.randint(2, 16)},
    ),
    Template(
        "to_base",
        "(n: int) -> str",
        "Write the non-negative integer n in base $b with the digits 0-9 then a-z, recursively.",
        """
        digits = '0123456789abcdefghijklmnopqrstuvwxyz'
        if n < $b:
            return digits[n]
        return to_base(n // $b) + digits[n % $b]
        """,
        lambda r, p: (r.randint(0, 10**5),),
        lambda r: {"b": r.randint(2, 36)},
    ),
    Template(
        "flatten",
        "(nested: list) -> list",
        "Flatten arbitrarily nested lists into one list of their non-list items, each multiplied by $k.",
        """
        out = []
        for item in nested:
            if isinstance(item, list):
                out.extend(flatten(item))
            else:
                out.append(item * $k)
        return out
        """,
        lambda r, p: (nested(r),),
        lambda r: {"k": r.randint(1, 5)},
    ),
    Template(
        "nesting_depth",
        "(nested: list) -> int",
        "Return how deeply lists are nested in nested: [] and [1, 2] have depth 1, [[1]] has depth 2.",
        "return 1 + max((nesting_depth(x) for x in nested if isinstance(x, list)), default=0)",
        lambda r, p: (nested(r),),
    ),
    Template(
        "gaps",
        "(xs: List[int]) -> List[int]",
        "Return xs[i + $k] - xs[i] for every index i where both items exist.",
        "return [xs[i + $k] - xs[i] for i in range(len(xs) - $k)]",
        lambda r, p: (ints(r, 0, 10),),
        lambda r: {"k": r.randint(1, 3)},
    ),
    Template(
        "chunks",
        "(xs: List[int]) -> List[List[int]]",
        "Split xs into consecutive chunks of $k items; the last chunk may be shorter.",
        "return [xs[i:i + $k] for i in range(0, len(xs), $k)]",
        lambda r, p: (ints(r, 0, 11),),
        lambda r: {"k": r.randint(1, 5)},
    ),
    Template(
        "rotate_right",
        "(xs: List[int]) -> List[int]",
        "Rotate xs $k places to the right (the last item moves to the front each place).",
        """
        if not xs:
            return []
        k = $k % len(xs)
        return xs[len(xs) - k:] + xs[:len(xs) - k]
        """,
        lambda r, p: (ints(r, 0, 8),),
        lambda r: {"k": r.randint(0, 12)},
    ),
    Template(
        "most_common",
        "(xs: List[int]) -> int",
        "Return the most frequent value of the non-empty list xs; on a tie, the smallest such value.",
        """
        counts = {}
        for x in xs:
            counts[x] = counts.get(x, 0) + 1
        return min(counts, key=lambda x: (-counts[x], x))
        """,
        lambda r, p: (ints(r, 1, 12, 0, 5),),
    ),
    Template(
        "unique_above",
        "(xs: List[int]) -> List[int]",
        "Return the distinct values of xs greater than $t, in order of first appearance.",
        """
        seen = set()
        out = []
        for x in xs:
            if x > $t and x not in seen:
                seen.add(x)
                out.append(x)
        return out
        """,
        lambda r, p: (ints(r, 0, 12, -8, 8),),
        lambda r: {"t": r.randint(-5, 5)},
    ),
    Template(
        "collatz_steps",
        "(n: int) -> int",
        "Starting from n >= 1, replace an even n by n // 2 and an odd n by 3 * n + 1; "
        "return how many steps it takes until n is at most $stop.",
        """
        steps = 0
        while n > $stop:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            steps += 1
        return steps
        """,
        lambda r, p: (r.randint(1, 3000),),
        lambda r: {"stop": r.randint(1, 8)},
    ),
    Template(
        "count_primes",
        "(n: int) -> int",
        "Count the prime numbers p with n <= p < n + $w.",
        """
        def is_prime(m):
            if m < 2:
                return False
            d = 2
            while d * d <= m:
                if m % d == 0:
                    return False
                d += 1
            return True
        return sum(1 for m in range(n, n + $w) if is_prime(m))
        """,
        lambda r, p: (r.randint(0, 5000),),
        lambda r: {"w": r.randint(10, 200)},
    ),
    Template(
        "binary_search",
        "(xs: List[int], target: int) -> int",
        "Return the index of target in the sorted list xs of distinct numbers, or -1 if it is absent. "
        "Use binary search.",
        """
        lo, hi = 0, len(xs) - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            if xs[mid] == target:
                return mid
            if xs[mid] < target:
                lo = mid + 1
            else:
                hi = mid - 1
        return -1
        """,
        search_args,
    ),
    Template(
        "merge_sorted",
        "(a: List[int], b: List[int]) -> List[int]",
        "Merge two sorted lists into one sorted list without calling sorted().",
        """
        out = []
        i = j = 0
        while i < len(a) and j < len(b):
            if a[i] <= b[j]:
                out.append(a[i])
                i += 1
            else:
                out.append(b[j])
                j += 1
        return out + a[i:] + b[j:]
        """,
        lambda r, p: (sorted(ints(r, 0, 6)), sorted(ints(r, 0, 6))),
    ),
    Template(
        "snake_to_camel",
        "(s: str) -> str",
        "Turn a snake_case name into camelCase: drop the underscores and capitalise every word after the first.",
        """
        parts = [w for w in s.split('_') if w]
        if not parts:
            return ''
        return parts[0] + ''.join(w.capitalize() for w in parts[1:])
        """,
        lambda r, p: (r.choice(["", "_"]) + "_".join(words(r, 1, 4)),),
    ),
    Template(
        "transpose",
        "(m: List[List[int]]) -> List[List[int]]",
        "Return the transpose of the rectangular matrix m, given as a list of rows.",
        "return [list(col) for col in zip(*m)]",
        lambda r, p: ([ints(r, c, c, -9, 9) for c in [r.randint(1, 4)] for _ in range(r.randint(1, 4))],),
    ),
    Template(
        "count_inversions",
        "(xs: List[int]) -> int",
        "Count the pairs of positions i < j with xs[i] > xs[j].",
        "return sum(1 for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[i] > xs[j])",
        lambda r, p: (ints(r, 0, 10, 0, 20),),
    ),
    Template(
        "count_subsets",
        "(xs: List[int], target: int) -> int",
        "Count the subsets of the items of xs (items at different positions are different) that add up to target.",
        """
        if not xs:
            return 1 if target == 0 else 0
        return count_subsets(xs[1:], target) + count_subsets(xs[1:], target - xs[0])
        """,
        lambda r, p: (ints(r, 0, 10, 1, 9), r.randint(0, 20)),
    ),
    Template(
        "balanced",
        "(s: str) -> bool",
        "Return True if the brackets $chars are balanced and properly nested in s; other characters are ignored.",
        """
        pairs = $pairs
        stack = []
        for c in s:
            if c in pairs.values():
                stack.append(c)
            elif c in pairs:
                if not stack or stack.pop() != pairs[c]:
                    return False
        return not stack
        """,
        lambda r, p: (brackets(r, p["chars"]),),
        bracket_params,
    ),
    Template(
        "run_length",
        "(s: str) -> str",
        "Run-length encode s: each run of a repeated character becomes the character followed by the run's length.",
        """
        out = []
        i = 0
        while i < len(s):
            j = i
            while j < len(s) and s[j] == s[i]:
                j += 1
            out.append(s[i] + str(j - i))
            i = j
        return ''.join(out)
        """,
        lambda r, p: (runs(r),),
    ),
    Template(
        "mean_rounded",
        "(xs: List[int]) -> float",
        "Return the mean of the non-empty list xs, rounded to $d decimal places.",
        "return round(sum(xs) / len(xs), $d)",
        lambda r, p: (ints(r, 1, 9, -100, 100),),
        lambda r: {"d": r.randint(0, 4)},
    ),
    Template(
        "power_sum",
        "(n: int) -> int",
        "Return 1**$e + 2**$e + ... + n**$e (0 when n is 0).",
        "return sum(i ** $e for i in range(1, n + 1))",
        lambda r, p: (r.randint(0, 200),),
        lambda r: {"e": r.randint(1, 5)},
    ),
    Template(
        "longest_increasing_run",
        "(xs: List[int]) -> int",
        "Return the length of the longest run of consecutive items of xs that strictly increase (0 if xs is empty).",
        """
        best = run = 0
        prev = None
        for x in xs:
            run = run + 1 if prev is not None and x > prev else 1
            best = max(best, run)
            prev = x
        return best
        """,
        lambda r, p: (ints(r, 0, 12, 0, 9),),
    ),
    Template(
        "anagram_classes",
        "(words: List[str]) -> int",
        "Count the groups of anagrams among words: words made of the same letters in any order form one group.",
        "return len({''.join(sorted(w)) for w in words})",
        lambda r, p: ([text(r, "abc", 1, 3) for _ in range(r.randint(0, 8))],),
    ),
    Template(
        "min_max_scaled",
        "(xs: List[int]) -> Tuple[int, int]",
        "Return (smallest, largest) of the non-empty list xs, both multiplied by $k.",
        "return (min(xs) * $k, max(xs) * $k)",
        lambda r, p: (ints(r, 1, 10),),
        lambda r: {"k": r.randint(1, 6)},
    ),
]


# ---- generating the pairs ----


def _call(args: tuple) -> str:
    return ", ".join(repr(a) for a in args)


def make_pair(template: Template, rng: random.Random, index: int) -> dict[str, Any]:
    params = template.params(rng)
    body = textwrap.indent(Text(textwrap.dedent(template.body).strip()).substitute(params), "    ") + "\n"
    typing_names = [n for n in ("Dict", "List", "Tuple") if f"{n}[" in template.signature]
    imports = (f"from typing import {', '.join(typing_names)}\n" if typing_names else "") + template.imports
    header = f"def {template.name}{template.signature}:\n"

    reference: dict[str, Any] = {}
    exec(compile(imports + header + body, f"<{template.name}>", "exec"), reference)
    cases: list[tuple[tuple, Any]] = []
    seen: set[str] = set()
    want = rng.randint(3, 8)
    for _ in range(50 * want):
        args = template.args(rng, params)
        if _call(args) in seen:
            continue
        seen.add(_call(args))
        cases.append((args, reference[template.name](*copy.deepcopy(args))))
        if len(cases) == want:
            break
    if len(cases) < 3:
        raise RuntimeError(f"template {template.name}: could not draw 3 distinct test inputs")

    doc_lines = textwrap.wrap(Text(template.doc).substitute(params), 92)
    example_args, example_result = cases[0]
    doc = "\n    ".join([*doc_lines, f">>> {template.name}({_call(example_args)})", repr(example_result)])
    prompt = f'{imports}\n\n{header}    """{doc}\n    """\n'
    asserts = "".join(f"    assert candidate({_call(a)}) == {e!r}\n" for a, e in cases)
    test = f"\n\n{METADATA}\n\ndef check(candidate):\n{asserts}\n"
    # every fourth completion repeats the whole function (no docstring) instead of continuing the prompt
    completion = header + body if index % 4 == 3 else body
    task = {"task_id": f"Synthetic/{index}/{template.name}", "prompt": prompt, "entry_point": template.name}
    task["test"] = test
    pair = {"task": task, "completion": completion}
    scope: dict[str, Any] = {}
    exec(compile(host_program(pair), f"<pair {index}>", "exec"), scope)  # raises if the pair is wrong
    return pair


def generate(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` pairs cycling over the templates, so any prefix covers as many templates as it can."""
    rng = random.Random(seed)
    return [make_pair(TEMPLATES[i % len(TEMPLATES)], rng, i) for i in range(n)]


def host_program(pair: dict[str, Any]) -> str:
    """What baseline (b) runs: the HumanEval harness's prompt + completion + test + check()."""
    task = pair["task"]
    return task["prompt"] + pair["completion"] + "\n" + task["test"] + f"\ncheck({task['entry_point']})\n"


def load_pairs(path: Path, regenerate: bool, count: int, seed: int) -> list[dict[str, Any]]:
    if regenerate or not path.exists():
        pairs = generate(max(count, DEFAULT_PAIRS), seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(p) + "\n" for p in pairs))
        print(f"wrote {len(pairs)} pairs from {len(TEMPLATES)} templates (seed {seed}) to {path}", flush=True)
    pairs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if len(pairs) < count:
        raise SystemExit(f"{path} holds {len(pairs)} pairs, fewer than the {count} asked for; use --regenerate")
    return pairs[:count]


# ---- the graders ----


@dataclass
class Result:
    name: str
    samples: int
    passed: int
    seconds: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.samples / self.seconds


def run_parallel(commands: list[Callable[[], bool]], workers: int) -> tuple[int, float]:
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        outcomes = list(pool.map(lambda command: command(), commands))
    return sum(outcomes), time.perf_counter() - start


def run_subprocess(argv: list[str], cwd: str, env: dict[str, str] | None = None) -> bool:
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def baseline_file(pairs: list[dict[str, Any]], workers: int, scratch: Path) -> Result:
    """(b): one ``python file.py`` per sample; the file is written as part of the sample's work."""

    def one(k: int, pair: dict[str, Any]) -> Callable[[], bool]:
        def go() -> bool:
            folder = scratch / f"b{k}"
            folder.mkdir()
            (folder / "sample.py").write_text(host_program(pair))
            return run_subprocess([sys.executable, "sample.py"], str(folder))

        return go

    passed, seconds = run_parallel([one(k, p) for k, p in enumerate(pairs)], workers)
    return Result("baseline (b): python file.py", len(pairs), passed, seconds)


def baseline_pytest(pairs: list[dict[str, Any]], workers: int, scratch: Path, total: int, autoload: bool) -> Result:
    """(a): one ``python -m pytest`` per sample, on a solution module and a test file. Unless
    ``autoload``, installed pytest plugins are not loaded (PYTEST_DISABLE_PLUGIN_AUTOLOAD=1):
    stock pytest, so a heavy plugin that happens to be installed cannot flatter Ludus."""
    env = None if autoload else {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

    def one(k: int, pair: dict[str, Any]) -> Callable[[], bool]:
        def go() -> bool:
            task = pair["task"]
            folder = scratch / f"a{k}"
            folder.mkdir()
            (folder / "solution.py").write_text(task["prompt"] + pair["completion"])
            tests = f"from solution import *  # noqa\n{task['test']}\n\ndef test_check():\n"
            (folder / "test_solution.py").write_text(tests + f"    check({task['entry_point']})\n")
            argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_solution.py"]
            return run_subprocess(argv, str(folder), env)

        return go

    passed, seconds = run_parallel([one(k, p) for k, p in enumerate(pairs)], workers)
    notes = [f"measured on {len(pairs)} of {total} pairs"] if len(pairs) < total else []
    notes.append("installed plugins loaded" if autoload else "plugin autoload off")
    note = "; ".join(notes)
    return Result("baseline (a): python -m pytest", len(pairs), passed, seconds, note)


def ludus(pairs: list[dict[str, Any]], workers: int) -> tuple[Result, list[str]]:
    verifier = CodeVerifier(workers=workers, backend="bwrap", cache_size=0)
    problems: list[str] = []
    try:
        # warm-up (not timed): starts every worker of both pools; a few wrong completions must score 0
        warm = [(p["task"], p["completion"]) for p in pairs[: 2 * workers]]
        wrong = [(p["task"], p["completion"].replace("return ", "return None and ", 1)) for p in pairs[:4]]
        for (task, _), score in zip(wrong, verifier.score_many(warm + wrong)[len(warm) :], strict=True):
            if score.value != 0.0:
                problems.append(f"{task['task_id']}: a wrong completion scored {score.value} ({score.reason})")
        start = time.perf_counter()
        scores = verifier.score_many([(p["task"], p["completion"]) for p in pairs])
        seconds = time.perf_counter() - start
    finally:
        verifier.close()
    for pair, score in zip(pairs, scores, strict=True):
        if score.value != 1.0:
            problems.append(f"{pair['task']['task_id']}: scored {score.value} ({score.status}: {score.reason})")
    passed = sum(s.value == 1.0 for s in scores)
    return Result("Ludus CodeVerifier (bwrap)", len(pairs), passed, seconds), problems


# ---- per-execution overhead ----


def time_runs(run: Callable[[], bool], n: int) -> tuple[float, int]:
    """Milliseconds per run over ``n`` sequential runs, and how many failed."""
    failed = 0
    start = time.perf_counter()
    for _ in range(n):
        failed += not run()
    return (time.perf_counter() - start) * 1000 / n, failed


def warm_pool_ms(n: int) -> tuple[float, int]:
    with Sandbox(workers=1, backend_name="bwrap") as box:
        box.run("pass")  # starts the worker
        return time_runs(lambda: box.run("pass").ok, n)


def fork_once() -> bool:
    """The unisolated floor of the warm-fork design: fork this interpreter, run ``pass``, reap it."""
    pid = os.fork()
    if pid == 0:
        exec("pass")
        os._exit(0)
    return os.waitpid(pid, 0)[1] == 0


def overhead(n: int) -> list[tuple[str, float, int]]:
    plain = [sys.executable, "-c", "pass"]
    cold = [*bwrap_args(python_paths()), "--", interpreter(), "-c", "pass"]
    return [
        ("warm bwrap pool: Sandbox.run('pass')", *warm_pool_ms(n)),
        ("os.fork of a warm interpreter (no isolation)", *time_runs(fork_once, n)),
        ("subprocess: python -c pass (no isolation)", *time_runs(lambda: subprocess.run(plain).returncode == 0, n)),
        ("cold: bwrap ... python -c pass", *time_runs(lambda: subprocess.run(cold).returncode == 0, n)),
    ]


# ---- report ----


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--regenerate", action="store_true", help="rewrite the data file from the templates")
    parser.add_argument("--seed", type=int, default=0, help="seed for --regenerate")
    parser.add_argument("--pairs", type=int, default=None, help=f"pairs to verify (default {DEFAULT_PAIRS})")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallelism of every grader")
    parser.add_argument("--baseline-a-samples", type=int, default=40, help="pairs to run baseline (a) on")
    parser.add_argument(
        "--pytest-autoload", action="store_true", help="let baseline (a) load the installed pytest plugins"
    )
    parser.add_argument("--overhead-runs", type=int, default=None, help="sequential runs per overhead row (200)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 40 pairs, 50 overhead runs")
    args = parser.parse_args()
    count = args.pairs or (40 if args.quick else DEFAULT_PAIRS)
    runs_n = args.overhead_runs or (50 if args.quick else 200)
    workers = max(1, args.workers)

    pairs = load_pairs(Path(args.data), args.regenerate, count, args.seed)
    templates = len({p["task"]["entry_point"] for p in pairs})
    asserts = sum(p["task"]["test"].count("assert ") for p in pairs)
    print(
        f"{len(pairs)} pairs ({templates} templates, {asserts} asserts); {workers} workers; "
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )

    lu, problems = ludus(pairs, workers)
    print(f"  {lu.name}: {lu.rate:.1f}/s", flush=True)
    with tempfile.TemporaryDirectory(prefix="ludus-bench-") as scratch:
        b = baseline_file(pairs, workers, Path(scratch))
        print(f"  {b.name}: {b.rate:.1f}/s", flush=True)
        subset = pairs[: max(1, args.baseline_a_samples)]
        a = baseline_pytest(subset, workers, Path(scratch), len(pairs), args.pytest_autoload)
        print(f"  {a.name}: {a.rate:.2f}/s", flush=True)
    rows = overhead(runs_n)

    print(f"\n{'grader':34} {'samples':>8} {'passed':>7} {'seconds':>8} {'verif/s':>8} {'Ludus ×':>8}  note")
    for r in (lu, b, a):
        ratio = "" if r is lu else f"{lu.rate / r.rate:7.1f}×"
        print(f"{r.name:34} {r.samples:8d} {r.passed:7d} {r.seconds:8.2f} {r.rate:8.1f} {ratio:>8}  {r.note}")
    ratio_a, ratio_b = lu.rate / a.rate, lu.rate / b.rate
    verdict_a = "PASS" if ratio_a >= TARGET_A else "MISS"
    verdict_b = "PASS" if ratio_b >= TARGET_B else "MISS"
    print(f"\nLudus / baseline (a): {ratio_a:.1f}×  (target ≥ {TARGET_A:.0f}×: {verdict_a})")
    print(f"Ludus / baseline (b): {ratio_b:.1f}×  (target ≥ {TARGET_B:.0f}×: {verdict_b})")
    print(f"Ludus: {1000 * workers / lu.rate:.1f} ms per verification per worker (2 sandboxed executions each)")

    print(f"\nper-execution cost, {runs_n} sequential runs each (one worker / one process at a time):")
    print(f"{'execution':44} {'ms/exec':>8} {'failed':>7}")
    for name, ms, failed in rows:
        print(f"{name:44} {ms:8.2f} {failed:7d}")
    warm_bwrap, fork, subproc, cold = (ms for _, ms, _ in rows)
    print(
        f"sandbox overhead per execution: {warm_bwrap - fork:+.2f} ms over a bare unisolated fork; "
        f"{warm_bwrap - subproc:+.2f} ms vs. a plain python -c subprocess; a cold bwrap start costs {cold:.1f} ms"
    )

    failures = problems + [
        f"{r.name}: {r.samples - r.passed} of {r.samples} failed" for r in (b, a) if r.passed < r.samples
    ]
    failures += [f"overhead row '{name}': {failed} runs failed" for name, _, failed in rows if failed]
    all_ok = not failures
    print(
        f"\nverdict: Ludus {lu.rate:.1f} verifications/s with bubblewrap isolation = {ratio_a:.1f}× baseline (a) "
        f"[{verdict_a}, ≥{TARGET_A:.0f}×] and {ratio_b:.1f}× baseline (b) [{verdict_b}, ≥{TARGET_B:.0f}×]; "
        f"{'all pairs scored 1.0' if all_ok else 'CORRECTNESS FAILURES (see below)'}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    summary = {
        "pairs": len(pairs),
        "workers": workers,
        "ludus_per_s": lu.rate,
        "baseline_a_per_s": a.rate,
        "baseline_a_samples": a.samples,
        "baseline_b_per_s": b.rate,
        "ratio_a": ratio_a,
        "ratio_b": ratio_b,
        "overhead_ms": {name: ms for name, ms, _ in rows},
        "all_scored_1": all_ok,
    }
    print(json.dumps(summary))
    if failures:
        print("\n".join(["", "correctness failures:", *failures[:30]]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
