"""Generated code files written as a package of their own under a temporary folder and importable, as a saved folder's
files are imported (relatively, as one package) where the generator's output is to be run."""
import sys


def write_package(root, name: str, files: dict, monkeypatch) -> None:
    """`files` (file name -> text) as the package `name` under `root`, importable for the test's duration; the
    package's modules are dropped from sys.modules afterwards by `forget_package`."""
    package = root / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    for file_name, text in files.items():
        (package / file_name).write_text(text)
    monkeypatch.syspath_prepend(str(root))


def forget_package(name: str) -> None:
    for module in [module for module in sys.modules if module == name or module.startswith(name + ".")]:
        del sys.modules[module]
