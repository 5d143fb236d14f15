"""The sweep file's `where`: a filter over a point's values in a small grammar, parsed with
`ast` and walked here, never evaluated as Python (docs/sweeps.md, "where").

Allowed: axis names and other workload key paths, dotted ones included
(`deployment.moe.ep`); numbers, strings, true and false; comparisons (== != < <= > >=,
chained); and, or, not; + - * / % and unary minus, on numbers only.
Anything else (a call, an attribute of something not a name, a subscript, a lambda) is
refused before any point runs, and so is an expression longer than MAX_LENGTH or nested
deeper than MAX_DEPTH (the parser and the walk recurse). Arithmetic whose result no double
holds, and a comparison of a mapping or a list (a section's value) with anything else, are
refused on the point that meets them.
"""

from __future__ import annotations

import ast
import io
import math
import operator
import sys
import tokenize
from typing import Any, Callable, Collection, Mapping, Optional, Set

_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
            ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.Div: operator.truediv, ast.Mod: operator.mod}
_SYMBOLS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_WORDS = {"true": True, "false": False, "True": True, "False": False}
MAX_LENGTH = 10_000  # characters: far beyond a filter a person writes
MAX_DEPTH = 100  # operators nested in one another (a + b + c is two deep)


class WhereError(ValueError):
    """The expression is not in the grammar, names no axis, or cannot be evaluated."""


class Filter:
    """A compiled `where`: called with a mapping holding a value for each of its `names`."""

    def __init__(self, tree: ast.AST, names: Set[str]) -> None:
        self._tree, self.names = tree, frozenset(names)

    def __call__(self, point: Mapping[str, Any]) -> bool:
        try:
            return bool(_value(self._tree, point))
        except (TypeError, ZeroDivisionError, OverflowError) as e:
            raise WhereError(f"at {shown(dict(point))}: {e}") from None


def compile_where(text: str, axes: Collection[str],
                  not_a_key: Optional[Callable[[str], str]] = None) -> Filter:
    """A filter of a point's values (key -> value): its axes', and with `not_a_key` (why a
    name is no workload key path, "" when it is) any workload key's, the point's resolved
    value; WhereError for an expression outside the grammar or naming neither."""
    if len(text) > MAX_LENGTH:
        raise WhereError(f"expected an expression of at most {MAX_LENGTH:,} characters, got "
                         f"{len(text):,}")
    why = _too_long(text)
    if why:
        raise WhereError(why)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise WhereError(f"not an expression: {e.msg}") from None
    except (RecursionError, MemoryError):  # the parser's own limits on nesting
        raise WhereError(f"nested deeper than {MAX_DEPTH} levels") from None
    names: Set[str] = set()
    _check(tree.body, set(axes), not_a_key, names)
    return Filter(tree.body, names)


def digits_limit() -> int:
    """The most digits of an integer Python converts from or to text (0: no limit)."""
    return getattr(sys, "get_int_max_str_digits", lambda: 0)()


def _too_long(text: str) -> str:
    """Why an integer literal of `text` is refused: more digits than Python converts to or
    from text (its parser's message would advise raising the interpreter's limit, and such
    a number could not be shown); "" where none is, or the text does not tokenize (the
    parser then says why)."""
    limit = digits_limit()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline)) if limit else []
    except (tokenize.TokenError, SyntaxError):
        return ""
    for token in tokens:
        literal = token.string.replace("_", "")
        if token.type != tokenize.NUMBER:
            continue
        if literal.isdigit() and len(literal) > limit:
            digits = f"{len(literal):,}"
        elif literal[:2].lower() in ("0x", "0o", "0b") and int(literal, 0) >= 10**limit:
            digits = f"about {int(int(literal, 0).bit_length() * math.log10(2)) + 1:,}"
        else:
            continue
        return (f"expected numbers of at most {limit:,} digits, got an integer of {digits} "
                f"digits ({shown(token.string, quote=False)})")
    return ""


def _dotted(node: ast.AST) -> str:
    """`a.b.c` as text; "" where the node is not a name or a dotted name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _check(node: ast.AST, axes: set, not_a_key, names: Set[str], depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise WhereError(f"nested deeper than {MAX_DEPTH} levels")
    name = _dotted(node)
    if name:
        if name in _WORDS and name not in axes:
            return
        why = "" if name in axes else not_a_key(name) if not_a_key else "not a key"
        if why:
            raise WhereError(f"{name} is not an axis (the axes: {', '.join(sorted(axes))})"
                             + (f" and {why}" if not_a_key else ""))
        names.add(name)
        return
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, str, bool):
        return
    children = _children(node)
    if children is None:
        raise WhereError(f"{type(node).__name__} is not allowed (names, numbers, strings, "
                         f"comparisons, and/or/not, + - * / %)")
    for child in children:
        _check(child, axes, not_a_key, names, depth + 1)


def _children(node: ast.AST):
    """The operands of an allowed operator; None for a node outside the grammar."""
    if isinstance(node, ast.BoolOp):
        return node.values
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
        return [node.operand]
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        return [node.left, node.right]
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        return [node.left, *node.comparators]
    return None


def _value(node: ast.AST, point: Mapping[str, Any]) -> Any:
    name = _dotted(node)
    if name:
        return point[name] if name in point else _WORDS[name]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BoolOp):
        values = (_value(v, point) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp):
        operand = _value(node.operand, point)
        return not operand if isinstance(node.op, ast.Not) else \
            -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left, point), _value(node.right, point)
        if not all(isinstance(v, (int, float)) for v in (left, right)):  # 'x' * 10000000000
            raise TypeError(f"arithmetic takes numbers, got {shown(left)} and "
                            f"{shown(right)}")
        return _arithmetic(node, left, right)
    assert isinstance(node, ast.Compare)  # _check allowed nothing else
    left_node, left = node.left, _value(node.left, point)
    for op, right_node in zip(node.ops, node.comparators):
        right = _value(right_node, point)
        _comparable(left_node, left, right)
        _comparable(right_node, right, left)
        try:
            holds = _COMPARE[type(op)](left, right)
        except TypeError:  # < <= > >= of a number and a string, or of null
            pair = f"{ast.unparse(left_node)} {_SYMBOLS[type(op)]} {ast.unparse(right_node)}"
            raise TypeError(f"{shown(pair, quote=False)}: expected two numbers or two strings "
                            f"to order, got {shown(left)} ({_kind(left)}) and "
                            f"{shown(right)} ({_kind(right)})") from None
        if not holds:
            return False
        left_node, left = right_node, right
    return True


def _arithmetic(node: ast.BinOp, left, right):
    """The result where a double holds it: a larger integer or an infinity is compared as
    no point's value is, and Python's integers grow without end (a product of products of
    large values takes hours)."""
    try:
        result = _ARITHMETIC[type(node.op)](left, right)
    except OverflowError:  # a large integer divided, or meeting a float
        result = math.inf
    if isinstance(result, int) and abs(result) <= sys.float_info.max or \
            isinstance(result, float) and math.isfinite(result):
        return result
    raise OverflowError(f"{shown(ast.unparse(node), quote=False)} overflows: expected "
                        f"arithmetic whose result is a finite number of at most "
                        f"{sys.float_info.max:.4g}")


def _kind(value) -> str:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return {str: "a string", dict: "a mapping", list: "a list",
            type(None): "null"}.get(type(value), type(value).__name__)


def _comparable(node: ast.AST, value, other) -> None:
    """TypeError where a mapping or a list (a section's value) meets anything but its own
    kind: `engine == 1` would be false for every point, silently."""
    if isinstance(value, (dict, list)) and type(other) is not type(value):
        name = shown(ast.unparse(node), quote=False)
        what = f"a mapping (a section: compare one of its keys, {name}.KEY)" \
            if isinstance(value, dict) else "a list"
        raise TypeError(f"{name} is {what}, not comparable with {shown(other)}")


def shown(value, quote: bool = True) -> str:
    """A value as a message quotes it, a long one cut short with its length."""
    text = repr(value) if quote else str(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text):,} characters)"
