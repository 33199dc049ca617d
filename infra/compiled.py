"""Workflow modules compiled once per process, however often the workflow sandbox imports them.

Temporal's sandbox imports each module that defines a workflow class again for every workflow it
runs (so that no state is shared between runs, and the sandbox checks the module's code). Each
import compiles the module from source unless Python finds its bytecode in `__pycache__`, which it
does not where bytecode is never written: `PYTHONDONTWRITEBYTECODE=1` (this machine's
environment), or an image whose source directory the worker may not write (Colony's runs as
nobody). Compiling `workflows/workspace/workflow.py` and its package took about a third of
creating a workspace's workflow instance, once per workspace (`bench.throughput`'s profile).

`compile_once("workflows")` puts a finder first on `sys.meta_path` whose loader keeps each
module's code object in memory, by path and modification time, as `__pycache__` would on disk:
the module is still executed afresh in every sandbox (its own namespace, restrictions applied), only
not compiled again. `worker.py` installs it for `workflows`; `bench.ceiling` for its own workflow
too, so that the ceiling it compares with is measured the same way.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Sequence
from types import CodeType, ModuleType
from typing import ClassVar


class _CompiledOnceLoader(importlib.machinery.SourceFileLoader):
    """A source loader whose code objects are kept for the process's life (see the module)."""

    _codes: ClassVar[dict[tuple[str, float], CodeType]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def get_code(self, fullname: str) -> CodeType:
        key = (self.path, self.path_stats(self.path)["mtime"])
        with self._lock:
            code = self._codes.get(key)
        if code is None:
            code = super().get_code(fullname)
            if code is None:  # a source loader always has code; the base class's type says maybe
                raise ImportError(f"no code for {fullname}", name=fullname)
            with self._lock:
                self._codes[key] = code
        return code


class CompiledOnceFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of `packages` as the path finder does, loading them through
    `_CompiledOnceLoader`; every other module is left to the finders after it."""

    def __init__(self, packages: Sequence[str]) -> None:
        self.packages = tuple(packages)

    def _ours(self, name: str) -> bool:
        return any(name == p or name.startswith(f"{p}.") for p in self.packages)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if not self._ours(fullname):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and type(spec.loader) is importlib.machinery.SourceFileLoader:
            spec.loader = _CompiledOnceLoader(spec.loader.name, spec.loader.path)
        return spec


def compile_once(*packages: str) -> None:
    """Keep the compiled code of `packages`' modules for the process's life (idempotent per
    package). Modules imported already keep the loader they were imported with; the sandbox's
    imports, which come later, use this one."""
    installed = {
        package
        for finder in sys.meta_path
        if isinstance(finder, CompiledOnceFinder)
        for package in finder.packages
    }
    wanted = [package for package in packages if package not in installed]
    if wanted:
        sys.meta_path.insert(0, CompiledOnceFinder(wanted))
