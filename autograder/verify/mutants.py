"""First-order mutants of a reference solution: the syntactic slips a student makes, one at a time.

Each operator below rewrites one node of a solution cell's syntax tree, as mutmut and cosmic-ray do:
an arithmetic or comparison operator swapped, a constant nudged, a sign dropped, a statement deleted,
two arguments swapped, a reduction or keyword flag changed. `mutants(source)` yields every mutant of a
cell that still compiles, each with a one-line description that names where it is (line, operator),
so a reviewed-equivalent list can name a mutant stably across runs.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from dataclasses import dataclass

BINARY_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
                ast.Pow: ast.Mult, ast.Mod: ast.FloorDiv, ast.MatMult: ast.Mult}
COMPARE_SWAPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                 ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
BOOL_SWAPS = {ast.And: ast.Or, ast.Or: ast.And}
#: Method and function names whose slip is another of the same family (a reduction, a bound, a shape op).
NAME_SWAPS = {"sum": "mean", "mean": "sum", "max": "min", "min": "max", "maximum": "minimum", "minimum": "maximum",
              "argmax": "argmin", "argmin": "argmax", "amax": "amin", "amin": "amax", "exp": "log", "log": "exp",
              "zeros": "ones", "ones": "zeros", "zeros_like": "ones_like", "ones_like": "zeros_like",
              "detach": "clone", "cpu": "clone", "float": "double", "transpose": "permute", "T": "mT",
              "train": "eval", "eval": "train", "no_grad": "enable_grad", "relu": "sigmoid"}
#: Keyword arguments whose value a student gets wrong: a flag flipped, an axis moved.
KEYWORD_FLIPS = {"keepdims", "keepdim", "requires_grad", "training", "inplace", "retain_graph", "create_graph",
                 "shuffle", "drop_last", "non_blocking", "bias", "ceil_mode"}
AXIS_KEYWORDS = {"axis", "dim"}


@dataclass(frozen=True)
class Mutant:
    """One first-order mutant of a cell: its source and what was changed where."""

    source: str
    description: str


def _where(node: ast.AST) -> str:
    return f"line {getattr(node, 'lineno', '?')}"


class _Rewriter(ast.NodeTransformer):
    """Applies the `target`-th possible mutation in visiting order and records it; counts them all."""

    def __init__(self, target: int) -> None:
        self.target, self.seen, self.description = target, 0, ""

    def _hit(self, description: str) -> bool:
        hit = self.seen == self.target
        if hit:
            self.description = description
        self.seen += 1
        return hit

    def visit_BinOp(self, node: ast.BinOp | ast.AugAssign, kind: str = "") -> ast.AST:
        """An arithmetic operator swapped, in an expression or (kind "augmented ") an augmented assignment."""
        self.generic_visit(node)
        swap = BINARY_SWAPS.get(type(node.op))
        if swap and self._hit(f"{_where(node)}: {kind}{type(node.op).__name__} -> {swap.__name__}"):
            node.op = swap()
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        return self.visit_BinOp(node, "augmented ")

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            swap = COMPARE_SWAPS.get(type(op))
            if swap and self._hit(f"{_where(node)}: {type(op).__name__} -> {swap.__name__}"):
                node.ops[i] = swap()
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        swap = BOOL_SWAPS[type(node.op)]
        if self._hit(f"{_where(node)}: {type(node.op).__name__} -> {swap.__name__}"):
            node.op = swap()
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, (ast.USub, ast.Not)) and self._hit(f"{_where(node)}: {type(node.op).__name__} dropped"):
            return node.operand
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if isinstance(value, bool):
            if self._hit(f"{_where(node)}: {value} -> {not value}"):
                return ast.copy_location(ast.Constant(not value), node)
        elif isinstance(value, (int, float)):
            for nudged in (value + 1, value - 1) if isinstance(value, int) else (value * 2, 0.0):
                if nudged != value and self._hit(f"{_where(node)}: {value!r} -> {nudged!r}"):
                    return ast.copy_location(ast.Constant(nudged), node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        swap = NAME_SWAPS.get(node.attr)
        if swap and self._hit(f"{_where(node)}: .{node.attr} -> .{swap}"):
            node.attr = swap
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]) \
                and ast.dump(node.args[0]) != ast.dump(node.args[1]) \
                and self._hit(f"{_where(node)}: first two arguments swapped"):
            node.args[0], node.args[1] = node.args[1], node.args[0]
        for keyword in node.keywords:
            value = keyword.value
            if keyword.arg in KEYWORD_FLIPS and isinstance(value, ast.Constant) and isinstance(value.value, bool):
                if self._hit(f"{_where(node)}: {keyword.arg}={value.value} -> {not value.value}"):
                    keyword.value = ast.Constant(not value.value)
            elif keyword.arg in AXIS_KEYWORDS and isinstance(value, ast.Constant) and isinstance(value.value, int):
                moved = 0 if value.value != 0 else 1
                if self._hit(f"{_where(node)}: {keyword.arg}={value.value} -> {moved}"):
                    keyword.value = ast.Constant(moved)
        return node

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        """Statements of a block, one of which may be deleted (never a docstring, never the only one)."""
        kept = []
        for i, statement in enumerate(body):
            docstring = i == 0 and isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            if not docstring and len(body) > 1 and self._hit(f"{_where(statement)}: statement deleted"):
                continue
            kept.append(self.visit(statement))
        return kept or [ast.Pass()]

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        node.body = self._body(node.body)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_For(self, node: ast.For) -> ast.AST:
        node.iter = self.visit(node.iter)
        node.body = self._body(node.body)
        node.orelse = [self.visit(s) for s in node.orelse]
        return node

    def visit_If(self, node: ast.If) -> ast.AST:
        node.test = self.visit(node.test)
        node.body = self._body(node.body)
        node.orelse = [self.visit(s) for s in node.orelse]
        return node

    def visit_With(self, node: ast.With) -> ast.AST:
        node.items = [self.visit(i) for i in node.items]
        node.body = self._body(node.body)
        return node


def count(tree: ast.Module) -> int:
    """How many mutations `tree` offers."""
    rewriter = _Rewriter(-1)
    rewriter.visit(copy.deepcopy(tree))
    return rewriter.seen


def mutants(source: str) -> Iterator[Mutant]:
    """Every first-order mutant of `source` (a solution cell) that compiles, in a stable order."""
    tree = ast.parse(source)
    for target in range(count(tree)):
        rewriter = _Rewriter(target)
        mutated = ast.fix_missing_locations(rewriter.visit(copy.deepcopy(tree)))
        text = ast.unparse(mutated)
        try:
            compile(text, "<mutant>", "exec")
        except SyntaxError:
            continue
        yield Mutant(text, rewriter.description)
