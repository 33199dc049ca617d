"""`infra.compiled.compile_once`: a module imported again (as the workflow sandbox does for every
workflow run) is executed afresh but compiled once."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra import compiled


@pytest.fixture
def package(tmp_path: Path) -> Iterator[str]:
    name = f"compiled_probe_{tmp_path.name.replace('-', '_')}"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "mod.py").write_text(
        "import sys\nsys.modules['builtins'].__dict__.setdefault('_runs', []).append(1)\nVALUE = 42\n"
    )
    sys.path.insert(0, str(tmp_path))
    before = list(sys.meta_path)
    try:
        yield name
    finally:
        sys.meta_path[:] = before
        sys.path.remove(str(tmp_path))
        for key in [k for k in sys.modules if k == name or k.startswith(f"{name}.")]:
            del sys.modules[key]
        import builtins

        builtins.__dict__.pop("_runs", None)


def test_a_module_imported_again_runs_again_but_is_compiled_once(
    package: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    compiles: list[str] = []
    original = compiled._CompiledOnceLoader.source_to_code

    def counting(self, data, path, **kwargs):  # type: ignore[no-untyped-def]
        compiles.append(str(path))
        return original(self, data, path, **kwargs)

    monkeypatch.setattr(compiled._CompiledOnceLoader, "source_to_code", counting)
    compiled.compile_once(package)
    compiled.compile_once(package)  # idempotent: one finder
    assert sum(isinstance(f, compiled.CompiledOnceFinder) for f in sys.meta_path) >= 1
    for _ in range(3):
        sys.modules.pop(f"{package}.mod", None)
        module = importlib.import_module(f"{package}.mod")
        assert module.VALUE == 42
    assert len(builtins.__dict__["_runs"]) == 3, "executed afresh each time"
    assert [p for p in compiles if p.endswith("mod.py")] == [str(Path(module.__file__ or ""))], (
        "compiled once"
    )


def test_other_modules_are_left_to_the_usual_finders(package: str) -> None:
    compiled.compile_once(package)
    finder = next(f for f in sys.meta_path if isinstance(f, compiled.CompiledOnceFinder))
    assert finder.find_spec("json", None) is None
    spec = finder.find_spec(package, None)
    assert spec is not None
    assert isinstance(spec.loader, compiled._CompiledOnceLoader)
