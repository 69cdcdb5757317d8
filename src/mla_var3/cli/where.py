"""`--where EXPR`: keep the problems of a named grid for which EXPR holds, e.g.
`--grid=bench --where "s_q * h_q >= 128 and not varlen"`.

Why: a version that changes only some shapes (v29 pairs the row blocks when s_q * h_q >= 128)
needs its runs on those cells alone, without a grid of its own per experiment. EXPR is read as
Python syntax but only names of the problem's fields, numbers, strings, True/False, arithmetic
(+ - * // %), comparisons and and/or/not are accepted; nothing is executed.
"""
from __future__ import annotations

import ast
import operator

from mla_var3.errors import UsageError

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}


def compile_where(expr: str, fields: list[str]):
    """A predicate over a problem's `to_dict()`; a UsageError (one line) for anything else."""
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError:
        raise UsageError(f"--where: cannot read {expr!r} (e.g. \"s_q * h_q >= 128 and not varlen\")") from None
    _check(tree, expr, fields)
    return lambda values: bool(_eval(tree, values))


def _check(node, expr: str, fields: list[str]) -> None:
    if isinstance(node, ast.Name):
        if node.id not in fields:
            raise UsageError(f"--where: unknown field {node.id!r} in {expr!r} (fields: {', '.join(fields)})")
        return
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
        return
    if isinstance(node, ast.BoolOp) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub))):
        for child in (node.values if isinstance(node, ast.BoolOp) else [node.operand]):
            _check(child, expr, fields)
        return
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        _check(node.left, expr, fields)
        _check(node.right, expr, fields)
        return
    if isinstance(node, ast.Compare) and all(type(op) in _CMP for op in node.ops):
        for child in (node.left, *node.comparators):
            _check(child, expr, fields)
        return
    raise UsageError(f"--where: {ast.unparse(node)!r} is not allowed in {expr!r} (fields, numbers, + - * // %, "
                     f"comparisons, and/or/not)")


def _eval(node, values: dict):
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BoolOp):
        results = (_eval(v, values) for v in node.values)
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, values)
        return (not v) if isinstance(node.op, ast.Not) else -v
    if isinstance(node, ast.BinOp):
        return _BIN[type(node.op)](_eval(node.left, values), _eval(node.right, values))
    left = _eval(node.left, values)
    for op, right_node in zip(node.ops, node.comparators):
        right = _eval(right_node, values)
        if not _CMP[type(op)](left, right):
            return False
        left = right
    return True


def filter_grid(problems: list, expr: str, grid: str) -> list:
    """The problems of `grid` for which `expr` holds; a UsageError when none does."""
    fields = list(problems[0].to_dict()) if problems else []
    keep = compile_where(expr, fields)
    kept = [p for p in problems if keep(p.to_dict())]
    if not kept:
        raise UsageError(f"--where: no problem of grid {grid!r} matches {expr!r}")
    return kept
