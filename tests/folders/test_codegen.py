"""The one formatter and writer of both code generators (hf_attnres/folders/codegen.py): each function's output parses
back to what it was given, fits the line length, and keeps what must not change (a multi-line string's content, a
file whose text is unchanged)."""
import ast
import textwrap

import pytest

from hf_attnres.folders import codegen
from hf_attnres.folders.codegen import LINE_LENGTH

LONG = " ".join(f"word{i}" for i in range(60))  # one paragraph of about 400 characters


def run(source: str, namespace: dict | None = None) -> dict:
    namespace = dict(namespace or {})
    exec(compile(source, "<generated>", "exec"), namespace)
    return namespace


def fits(text: str) -> bool:
    return all(len(line) <= LINE_LENGTH for line in text.splitlines())


def class_doc(source: str) -> str:
    return ast.get_docstring(ast.parse(source).body[0]).strip()


def test_generated_note_names_the_source_or_the_mark_and_refuses_a_long_line():
    with_source = codegen.generated_note("python gen.py", source="modular_x.py")
    assert with_source.startswith("# ") and "modular_x.py" in with_source and "`python gen.py`" in with_source
    folder = codegen.generated_note("attnres repair-folder", generator="pkg.gen")
    assert folder.startswith(codegen.GENERATED_MARK + " (pkg.gen)") and "`attnres repair-folder`" in folder
    with pytest.raises(ValueError, match="longer than"):
        codegen.generated_note("x" * LINE_LENGTH, source="s.py")


@pytest.mark.parametrize("indent", ["", "    "])
def test_a_one_line_docstring_is_wrapped_in_the_line_length(indent):
    source = codegen.docstring(LONG, indent)
    assert source.count("\n") >= 3 and fits(source) and source.rstrip().endswith('"""')
    assert all(line.startswith(indent + ('"""' if n == 0 else "")) for n, line in enumerate(source.splitlines()))
    body = f"class C:\n{source}\n" if indent else f"{source}\n"
    tree = ast.parse(body)
    doc = ast.get_docstring(tree.body[0] if indent else tree)
    assert doc.split() == LONG.split()
    assert codegen.docstring("short.") == '"""short."""'


def test_a_docstring_of_several_lines_closes_on_its_own_line_unless_read_from_source():
    written = codegen.docstring("First line.\n\nSecond paragraph.")
    assert written.splitlines()[-1] == '"""' and ast.literal_eval(written) == "First line.\n\nSecond paragraph.\n"
    from_source = "Read.\n    Kept as written.\n    "
    kept = codegen.docstring(from_source, "    ", prefix="r")
    assert kept == f'    r"""{from_source}"""'


def test_wrap_fills_one_paragraph_at_its_indent():
    text = codegen.wrap(LONG, "    ")
    assert fits(text) and len(text.splitlines()) > 3 and all(line.startswith("    ") for line in text.splitlines())
    assert text.split() == LONG.split()


def test_file_header_is_the_note_then_the_docstring_then_the_noqa_line():
    note = codegen.generated_note("gen", source="src.py")
    header = codegen.file_header(note, "Topic.\n\n" + codegen.wrap(LONG), ("E501",))
    lines = header.splitlines()
    assert lines[0] == note and lines[-1] == "# ruff: noqa: E501" and header.endswith("\n") and fits(header)
    assert ast.get_docstring(ast.parse(header)).split() == ["Topic.", *LONG.split()]
    assert not codegen.file_header(note, "Topic.").rstrip().endswith("E501")


def test_write_generated_writes_atomically_and_only_a_changed_text(tmp_path):
    path = tmp_path / "out.py"
    assert codegen.write_generated(path, "a = 1\n") and path.read_text() == "a = 1\n"
    before = path.stat().st_mtime_ns
    assert not codegen.write_generated(path, "a = 1\n") and path.stat().st_mtime_ns == before
    assert codegen.write_generated(path, "a = 2\n") and path.read_text() == "a = 2\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.py"]  # no temporary sibling left behind


@pytest.mark.parametrize("value", ['say "hi"\n', ("one",), (), ("a", "b"), {"k": "v", "q": 'x"y'}])
def test_literal_reads_back_as_the_value_in_double_quotes(value):
    text = codegen.literal(value)
    assert ast.literal_eval(text) == value and "'" not in text


def test_fit_wraps_a_long_assignment_one_level_in():
    short = "    a, b = X, Y"
    assert codegen.fit(short) == short
    long = ("    first_name, second_name, third_name = "
            f"{'LongClassName' * 2}, {'OtherClassName' * 2}, {'ThirdClassName' * 2}")
    wrapped = codegen.fit(long)
    assert len(long) > LINE_LENGTH and fits(wrapped) and wrapped.splitlines()[-1] == "    )"
    assert wrapped.splitlines()[1].startswith("        LongClassName")
    names = {"LongClassName" * 2: 1, "OtherClassName" * 2: 2, "ThirdClassName" * 2: 3}
    assert [run(textwrap.dedent(wrapped), names)[n] for n in ("first_name", "second_name", "third_name")] == [1, 2, 3]


def test_assignment_writes_a_long_dict_one_entry_a_line():
    value = {f"flag_{i}": "a reason " * 3 for i in range(6)}
    text = codegen.assignment("refused", value, indent="")
    assert fits(text) and len(text.splitlines()) == len(value) + 2
    assert run(text)["refused"] == value
    assert codegen.assignment("names", ("a",)) == '    names = ("a",)'


def test_exports_fills_names_in_the_line_length():
    names = [f"SomeFamilyAttnResClassNumber{i}" for i in range(8)]
    text = codegen.exports(names)
    assert fits(text) and len(text.splitlines()) > 1 and run(text)["__all__"] == names
    assert codegen.exports(["A"]) == '__all__ = ["A"]'


def test_class_text_writes_docstring_attributes_and_a_hand_written_body():
    text = codegen.class_text("class C(Base):", LONG, ["    x = 1"], (None, "    def f(self):\n        return 2"))
    assert fits(text) and class_doc(text).split() == LONG.split()
    namespace = run("class Base:\n    pass\n\n" + text)
    assert namespace["C"].x == 1 and namespace["C"]().f() == 2
    replaced = codegen.class_text("class D:", "default", [], ("Given.\n    ", ""))
    assert class_doc(replaced) == "Given." and codegen.class_text("class E:", "", [], None) == "class E:\n    pass"
    decorated = codegen.class_text("@dataclass\nclass F:", "Doc.", ["    y: int = 3"], prefix="r")
    assert '    r"""Doc."""' in decorated and run("from dataclasses import dataclass\n" + decorated)["F"]().y == 3


SOURCE = 'a = 1\n\n\n\n\nb = """\nkeep\n\n\n\n\nthis"""\n\n\nc = 3\n'


def test_string_lines_are_the_lines_inside_a_multi_line_string():
    assert codegen.string_lines(SOURCE) == set(range(7, 13))


def test_collapse_blank_lines_cuts_runs_outside_strings_only():
    text = codegen.collapse_blank_lines(SOURCE)
    assert "a = 1\n\n\nb" in text and run(text)["b"] == run(SOURCE)["b"]
    assert codegen.collapse_blank_lines(SOURCE, most=1).startswith("a = 1\n\nb")


def test_indent_block_indents_code_but_not_a_string_content():
    text = codegen.indent_block(SOURCE)
    namespace = run("if True:\n" + text)
    assert namespace["b"] == run(SOURCE)["b"] and namespace["c"] == 3
    assert "\n    c = 3\n" in text and "\n\n\n\n\nthis" in text


def test_import_lines_sort_sections_and_names_as_isort_does():
    tree = ast.parse("from torch import nn\nimport os\nfrom typing import cast, Any, TYPE_CHECKING\nimport abc\n"
                     "from torch import Tensor as T\n")
    (block,) = codegen.import_lines(tree.body)
    assert block == ("import abc\nimport os\nfrom typing import TYPE_CHECKING, Any, cast\n\n"
                     "from torch import nn\nfrom torch import Tensor as T")
    assert codegen.import_lines([]) == []


def test_from_line_wraps_one_name_a_line_past_the_line_length():
    names = {(f"name_{i:02d}_of_a_long_list", None) for i in range(8)}
    text = codegen.from_line("package.module", names)
    assert fits(text) and len(text.splitlines()) == 10
    assert [a.name for a in ast.parse(text).body[0].names] == sorted(name for name, _ in names)


def test_import_from_file_lines_use_the_reexport_form_only_for_names_the_file_does_not_use():
    lines = codegen.import_from_file_lines(".attnres_core", ["Zeta", "Alpha", "Beta"], used={"Beta", "Zeta"})
    assert lines == ["from .attnres_core import Alpha as Alpha", "from .attnres_core import Beta, Zeta"]
    for line in lines:
        ast.parse(line)


def test_guarded_block_runs_its_code_only_where_the_package_imports():
    text = codegen.guarded_block("no_such_package_here", "VALUE = 1\n")
    space = {}
    exec(compile(text, "<generated>", "exec"), space)  # noqa: S102 (our own generated text)
    assert space["no_such_package_here"] is None and "VALUE" not in space
    space = {}
    exec(compile(codegen.guarded_block("json", "VALUE = 1\n"), "<generated>", "exec"), space)  # noqa: S102
    assert space["VALUE"] == 1
