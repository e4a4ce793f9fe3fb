"""Word-level syntactic trees: constituency (labelled spans) and dependency (heads).

These are the data every structure feature is computed from. They are plain
dataclasses with no parser attached; readers and writers for PTB brackets and CoNLL-U
live in :mod:`structnmt.syntax.io`.

Conventions:

* word positions are 0-based; spans are half-open ``[start, end)`` over words;
* dependency heads are 1-based with ``0`` = root (as in CoNLL-U), one per word;
* a constituency tree is a :class:`Node` hierarchy whose leaves are *preterminals*
  (a POS label over exactly one word); ``ConstituencyTree.root`` spans every word.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Node:
    """A constituent: ``label`` over words ``[start, end)``.

    A preterminal has no children and ``end == start + 1``; its label is the POS tag.
    """

    label: str
    start: int
    end: int
    children: list[Node] = field(default_factory=list)

    @property
    def is_preterminal(self) -> bool:
        return not self.children

    def walk(self) -> Iterator[Node]:
        """Pre-order traversal (self first)."""
        yield self
        for c in self.children:
            yield from c.walk()

    def depth_first_levels(self) -> Iterator[tuple[int, Node]]:
        """(depth, node) in pre-order; the node itself has depth 0."""
        stack = [(0, self)]
        while stack:
            d, n = stack.pop()
            yield d, n
            stack.extend((d + 1, c) for c in reversed(n.children))


@dataclass
class ConstituencyTree:
    words: list[str]
    root: Node

    @property
    def tags(self) -> list[str]:
        """POS tags (preterminal labels) in word order."""
        return [n.label for n in self.root.walk() if n.is_preterminal]

    def spans(self, include_preterminals: bool = False) -> list[tuple[int, int, str]]:
        """All labelled constituents as ``(start, end, label)``, pre-order."""
        return [(n.start, n.end, n.label) for n in self.root.walk() if include_preterminals or not n.is_preterminal]

    def __len__(self) -> int:
        return len(self.words)


@dataclass
class DependencyTree:
    words: list[str]
    heads: list[int]  # 1-based, 0 = root
    deprels: list[str]
    upos: list[str]
    xpos: list[str] | None = None
    lemmas: list[str] | None = None

    def __post_init__(self) -> None:
        n = len(self.words)
        for name in ("heads", "deprels", "upos"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"DependencyTree: {name} has {len(getattr(self, name))} entries for {n} words.")

    def __len__(self) -> int:
        return len(self.words)

    def children(self) -> list[list[int]]:
        """children[h] = 0-based dependents of word h (0-based), in order."""
        out: list[list[int]] = [[] for _ in self.words]
        for i, h in enumerate(self.heads):
            if h > 0:
                out[h - 1].append(i)
        return out

    @property
    def root_index(self) -> int:
        """0-based index of the (first) word attached to the root."""
        return self.heads.index(0)

    def edges(self) -> list[tuple[int, int]]:
        """(head, dependent) pairs, 0-based, root attachment excluded."""
        return [(h - 1, i) for i, h in enumerate(self.heads) if h > 0]


def node_to_list(node: Node) -> list:
    """Compact nested-list form ``[label, start, end, [children...]]`` (for storage as JSON)."""
    return [node.label, node.start, node.end, [node_to_list(c) for c in node.children]]


def node_from_list(data: list) -> Node:
    label, start, end, kids = data
    return Node(label, start, end, [node_from_list(k) for k in kids])


def trees_from_json(obj: dict, kinds: frozenset[str] = frozenset({"dependency", "constituency"})
                    ) -> tuple[DependencyTree | None, ConstituencyTree | None]:
    """Inverse of the storage format written by ``prepare`` (see structnmt.data.prepare);
    only the tree ``kinds`` asked for are built."""
    dep = const = None
    if "dep" in obj and "dependency" in kinds:
        words, heads, rels, upos, xpos = obj["dep"]
        dep = DependencyTree(words, heads, rels, upos, xpos)
    if "const" in obj and "constituency" in kinds:
        words, root = obj["const"]
        const = ConstituencyTree(words, node_from_list(root))
    return dep, const
