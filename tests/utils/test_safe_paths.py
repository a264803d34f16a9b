"""The one output rule (`hf_attnres.utils.safe_paths.check_output_folder`) as
every command that writes a folder applies it:
convert, push-to-hub, prepare-data and export, each run in-process through its cli main(). Names are literal: an
output that is a link is replaced as a link with --force (its target untouched), refused without; a link to the input,
the current folder or home is refused; glob characters in a name touch no other output's leftovers; a name too long
for the filesystem is one message."""
from __future__ import annotations

import os
from collections import namedtuple
from pathlib import Path

import pytest

from hf_attnres.cli import convert as convert_cli
from hf_attnres.cli import export as export_cli
from hf_attnres.cli import prepare_data as prepare_cli
from hf_attnres.cli import push_to_hub as push_cli
from hf_attnres.utils.safe_paths import UnsafeOutputError, check_output_folder, literal_path
from tests.helpers.bad_input_fixtures import SENTINEL, moonshot_checkpoint, saved_model, snapshot  # noqa: F401
from tests.helpers.processes import dead_pid, leftovers
from tests.helpers.train_fixtures import write_documents

# main: the command's cli main; argv(output): its arguments writing `output`; input: the folder it reads
Command = namedtuple("Command", "main argv input")


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    return write_documents(tmp_path_factory.mktemp("safe_paths") / "corpus", count=4)


def _convert(request):
    source = request.getfixturevalue("moonshot_checkpoint")
    return Command(convert_cli.main, lambda out: [source, out, "--no-progress"], source)


def _push_to_hub(request):
    model = request.getfixturevalue("saved_model")
    return Command(push_cli.main, lambda out: ["--model", model, "--output", out, "--dry-run"], model)


def _prepare_data(request):
    files = request.getfixturevalue("documents")
    flags = ["--tokenizer", "bpe", "--vocab-size", "260", "--seq-len", "8", "--validation-fraction", "0.5"]
    return Command(prepare_cli.main, lambda out: ["--files", *files, *flags, "--output-dir", out], files[0].parent)


def _export(request):
    source = request.getfixturevalue("moonshot_checkpoint")
    return Command(export_cli.main, lambda out: [source, out, "--to", "kimi-linear", "--no-progress"], source)


COMMANDS = {"convert": _convert, "push-to-hub": _push_to_hub, "prepare-data": _prepare_data, "export": _export}


@pytest.fixture(params=COMMANDS.values(), ids=COMMANDS.keys())
def command(request, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    work = tmp_path / "work"  # the current folder: neither an input nor an output
    work.mkdir()
    monkeypatch.chdir(work)
    return request.param(request)


def run(command, capsys, output, *flags) -> tuple[int, str]:
    """(exit code, stderr and any SystemExit message) of one run; refusals are 1 in every command."""
    try:
        result = command.main([*map(str, command.argv(output)), *flags])
    except SystemExit as stop:  # prepare-data refuses with SystemExit("error: ...")
        code, message = (1 if isinstance(stop.code, str) else stop.code), str(stop.code)
    else:
        code, message = (result if isinstance(result, int) else 0), ""
    err = capsys.readouterr().err + message
    assert "Traceback" not in err, err
    return code, err


def precious_folder(path: Path) -> Path:
    path.mkdir()
    (path / "keep.txt").write_text(SENTINEL)
    return path


def test_link_output_needs_force_and_is_replaced_as_a_link(command, tmp_path, capsys):
    precious = precious_folder(tmp_path / "precious")
    out = tmp_path / "out"
    out.symlink_to(precious)
    before = snapshot(precious)
    code, err = run(command, capsys, out)
    assert code == 1 and "already exists" in err and "--force" in err, err
    assert out.is_symlink() and snapshot(precious) == before
    code, err = run(command, capsys, out, "--force")
    assert code == 0, err
    assert not out.is_symlink() and out.is_dir() and any(out.iterdir())  # a real folder where the link was
    assert snapshot(precious) == before and sorted(os.listdir(precious)) == ["keep.txt"]
    assert not leftovers(tmp_path)


def test_dangling_link_output(command, tmp_path, capsys):
    out = tmp_path / "out"
    out.symlink_to(tmp_path / "nowhere")
    code, err = run(command, capsys, out)
    assert code == 1 and "already exists" in err and out.is_symlink(), err
    code, err = run(command, capsys, out, "--force")
    assert code == 0, err
    assert not out.is_symlink() and out.is_dir() and not os.path.lexists(tmp_path / "nowhere")
    assert not leftovers(tmp_path)


PROTECTED = {"input": "input", "cwd": "current folder", "home": "home folder"}


@pytest.mark.parametrize("target", PROTECTED, ids=PROTECTED)
def test_link_to_a_protected_folder_is_refused(command, tmp_path, capsys, monkeypatch, target):
    home = precious_folder(tmp_path / "home")
    monkeypatch.setenv("HOME", str(home))
    (Path.cwd() / "mine.txt").write_text(SENTINEL)
    folder = {"input": command.input, "cwd": Path.cwd(), "home": home}[target]
    out = tmp_path / "out"
    out.symlink_to(folder)
    before = snapshot(folder)
    code, err = run(command, capsys, out, "--force")
    assert code == 1 and PROTECTED[target] in err and "a link to" in err, err
    assert out.is_symlink() and snapshot(folder) == before


GLOB_NAMES = {"star": ("f*", "foo"), "brackets": ("[a]", "a"), "question_mark": ("?", "b")}


@pytest.mark.parametrize("name, other", GLOB_NAMES.values(), ids=GLOB_NAMES)
def test_glob_characters_touch_only_their_own_leftovers(command, tmp_path, capsys, name, other):
    """`f*` must not take `.foo.partial-PID` / `.foo.replaced-PID` (a crash of output `foo`) for its own."""
    dead = dead_pid()
    theirs = [precious_folder(tmp_path / f".{other}.{kind}-{dead}") for kind in ("partial", "replaced")]
    mine = precious_folder(tmp_path / f".{name}.partial-{dead}")  # its own: cleaned, so the check is not idle
    before = snapshot(*theirs)
    code, err = run(command, capsys, tmp_path / name)
    assert code == 0, err
    assert (tmp_path / name).is_dir() and not mine.exists()
    assert snapshot(*theirs) == before and not (tmp_path / other).exists()


def test_long_output_names(command, tmp_path, capsys):
    out = tmp_path / ("n" * 250)  # fits a file name (255 bytes), not with a `.partial-PID` added: hashed sibling
    code, err = run(command, capsys, out)
    assert code == 0, err
    assert out.is_dir() and any(out.iterdir()) and not leftovers(tmp_path)
    too_long = tmp_path / ("n" * 300)
    code, err = run(command, capsys, too_long)
    assert code == 1 and "300 bytes" in err and "shorter name" in err, err
    assert not leftovers(tmp_path) and sorted(os.listdir(tmp_path)) == sorted(["work", out.name])


# --- the routine itself --------------------------------------------------------------------------------------------

def test_literal_path_keeps_the_last_component(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    (tmp_path / "parent").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "link").symlink_to(tmp_path / "elsewhere")
    monkeypatch.chdir(tmp_path)
    assert literal_path("parent/link") == tmp_path / "real" / "link"  # the parent resolved, the link kept
    assert literal_path("parent/link/..") == tmp_path  # `..` names no entry: resolved (through the link)
    assert literal_path("real/.") == tmp_path / "real"


def test_check_output_folder_returns_the_link_itself(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    precious_folder(tmp_path / "precious")
    Path("out").symlink_to("precious")
    with pytest.raises(UnsafeOutputError, match="already exists, a link to precious"):
        check_output_folder("out")
    assert check_output_folder("out", force=True) == tmp_path / "out"
    assert check_output_folder("new") == tmp_path / "new"


def test_link_output_lying_inside_the_input_is_refused(tmp_path):
    """A link whose target lies inside the input: a write through it would land in the input."""
    source = precious_folder(tmp_path / "model")
    (tmp_path / "out").symlink_to(source / "sub")
    with pytest.raises(UnsafeOutputError, match="a link to .*lies inside the input"):
        check_output_folder(tmp_path / "out", inputs=[source], force=True)
