"""Tool environments made from an API description (issue 36, in progress; docs/design.md)."""

from pathlib import Path

EXAMPLES = Path(__file__).parent / "examples"  # API descriptions written for the project
