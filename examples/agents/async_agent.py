"""An agent for an async framework: `AsyncOpenAI`, tools run concurrently with `asyncio.gather`.
It checks arithmetic with a `calculate` tool the model may call (several calls at once run
together), and answers with the model's final reply. Ludus awaits it on an event loop of its own:

    PYTHONPATH=. ludus eval agent --model oracle --env-args '{"agent": "examples.agents.async_agent:solve", "env": "arithmetic"}'
"""

from __future__ import annotations

import ast
import asyncio
import json
import operator

from openai import AsyncOpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "The value of an arithmetic expression of integers with + - * and parentheses.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.USub: operator.neg}


def evaluate(node: ast.AST) -> int:
    """Integers and + - * only: the model's expression is data, never code."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](evaluate(node.operand))
    raise ValueError("only integers and + - * are allowed")


async def calculate(arguments: str) -> str:
    try:
        expression = str(json.loads(arguments)["expression"])[:200]
        return str(evaluate(ast.parse(expression, mode="eval").body))
    except Exception as exc:  # noqa: BLE001 - the model's call was bad: tell it
        return f"Error: {exc}"


async def solve(context) -> str | None:
    async with AsyncOpenAI(base_url=context.base_url, api_key=context.api_key) as client:
        messages = [{"role": "user", "content": context.task["prompt"]}]
        for _ in range(4):
            reply = (await client.chat.completions.create(model="any", messages=messages, tools=TOOLS)).choices[0]
            messages.append(reply.message.model_dump(exclude_none=True))
            if not reply.message.tool_calls:
                return reply.message.content
            results = await asyncio.gather(*(calculate(c.function.arguments) for c in reply.message.tool_calls))
            messages += [
                {"role": "tool", "tool_call_id": c.id, "content": r}
                for c, r in zip(reply.message.tool_calls, results, strict=True)
            ]
    return None
