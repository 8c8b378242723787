"""Groups linked transitively: things that are "the same" pairwise, gathered into their connected groups.

Used where a pairwise test says two memories belong together (two lessons of one piece of work, two experiences
learnt on the same data) and every memory linked to a member joins its group. Pure.
"""

from __future__ import annotations


class Groups:
    """Union-find over the indexes 0…n-1: `join(i, j)` links two, `of(i)` names the group of one."""

    def __init__(self, count: int) -> None:
        self._parent = list(range(count))

    def of(self, index: int) -> int:
        parent = self._parent
        while parent[index] != index:
            parent[index] = parent[parent[index]]  # halve the path on the way up
            index = parent[index]
        return index

    def join(self, a: int, b: int) -> None:
        self._parent[self.of(a)] = self.of(b)

    def labels(self) -> list[int]:
        """The group of every index, in order."""
        return [self.of(index) for index in range(len(self._parent))]
