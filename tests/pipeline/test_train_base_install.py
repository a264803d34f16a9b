"""`attnres train-pipeline` on a base install (no `train` extra): its help works, a run is one line naming the extra."""
from tests.helpers.base_install import run_on_base_install

RUN = """
    import sys
    from hf_attnres.cli import main
    sys.exit(main(["train-pipeline", *sys.argv[1:]]))
"""


def command(*argv: str):
    return run_on_base_install(RUN.replace("sys.argv[1:]", repr(list(argv))))


def test_without_deepspeed_one_line_names_the_extra():
    result = command("--steps", "1")
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines() == ['attnres train-pipeline: needs deepspeed (pipeline parallelism): '
                                          'pip install "hf-attnres[train]"'], result.stderr[-3000:]


def test_without_deepspeed_help_still_works():
    result = command("--help")
    assert result.returncode == 0 and "--num-stages" in result.stdout and not result.stderr, result.stderr[-3000:]
