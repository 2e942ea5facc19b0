"""The ``judged`` environment's built-in prompts: open-ended requests with the key points a good
reply covers. The key points are the judge's reference (``Task.answer``, one ``- point`` a
line), never shown to the model. A file of your own: JSONL rows ``{"prompt", "reference"}``."""

from __future__ import annotations

from ludus.core.types import Task

# (request, key points): short, factual, so a reference-guided judge has something to check
PROMPTS: list[tuple[str, list[str]]] = [
    ("Explain why the sky looks blue during the day.", ["scattering", "shorter wavelengths", "sunlight"]),
    ("Explain what a hash table is to a new programmer.", ["key", "hash function", "constant time"]),
    ("Describe how vaccines protect people from disease.", ["immune system", "antibodies", "memory"]),
    ("Explain why ice floats on water.", ["less dense", "hydrogen bonds", "expands"]),
    ("Describe what a database index is for.", ["faster lookups", "extra storage", "slower writes"]),
    ("Explain how a bicycle stays upright while moving.", ["steering", "speed", "balance"]),
    ("Explain what inflation is in economics.", ["prices rise", "purchasing power", "money supply"]),
    ("Describe how photosynthesis works.", ["sunlight", "carbon dioxide", "oxygen", "glucose"]),
    ("Explain what version control is and why teams use it.", ["history", "branches", "merge"]),
    ("Describe the water cycle.", ["evaporation", "condensation", "precipitation"]),
    ("Explain why the moon has phases.", ["sunlight", "orbit", "half of the moon"]),
    ("Explain what a neural network learns during training.", ["weights", "loss", "gradient"]),
    ("Describe how a refrigerator keeps food cold.", ["refrigerant", "evaporates", "heat outside"]),
    ("Explain what an API is.", ["interface", "requests", "responses"]),
    ("Explain why we have seasons on Earth.", ["axial tilt", "angle of sunlight", "not distance"]),
    ("Describe what a compiler does.", ["source code", "machine code", "errors"]),
    ("Explain how a loan's interest works.", ["principal", "interest rate", "over time"]),
    ("Describe how sound travels.", ["vibrations", "medium", "cannot travel in a vacuum"]),
    ("Explain what recursion is in programming.", ["calls itself", "base case", "smaller problem"]),
    ("Explain why bread dough rises.", ["yeast", "carbon dioxide", "gluten"]),
    ("Describe what an operating system does.", ["hardware", "processes", "memory"]),
    ("Explain how a rainbow forms.", ["refraction", "water droplets", "reflection"]),
    ("Explain what a unit test is and why it helps.", ["small piece of code", "automated", "regressions"]),
    ("Describe how the heart pumps blood.", ["four chambers", "valves", "arteries"]),
    ("Explain what encryption is.", ["key", "unreadable", "decrypt"]),
    ("Explain why metals conduct electricity.", ["free electrons", "move", "current"]),
    ("Describe what a cache is in computing.", ["faster", "copy", "recently used"]),
    ("Explain how tides happen.", ["moon's gravity", "bulge", "twice a day"]),
    ("Explain what a function's time complexity tells you.", ["input size", "grows", "big o"]),
    ("Describe how a plant's roots help it survive.", ["water", "nutrients", "anchor"]),
    ("Explain what DNS does on the internet.", ["domain names", "ip addresses", "lookup"]),
    ("Explain why leaves change colour in autumn.", ["chlorophyll", "breaks down", "other pigments"]),
]


def reference_of(points: list[str]) -> str:
    return "\n".join(f"- {p}" for p in points)


def builtin_tasks(split: str) -> list[Task]:
    """Every fourth prompt is held out for evaluation."""
    return [
        Task(id=f"judged/{i}", prompt=prompt, answer=reference_of(points), source="judged")
        for i, (prompt, points) in enumerate(PROMPTS)
        if (i % 4 == 3) == (split == "eval")
    ]
