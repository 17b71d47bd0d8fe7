"""A fresh Python's JSON answer, with its environment pinned where asked (a page's GPU child)."""

import pytest

from trainer.child_process import ChildProcessError, run_python_json

PRINT_ENV = "import json, os; print(json.dumps([os.environ.get('CUDA_VISIBLE_DEVICES'), os.environ.get('HOME')]))"


def test_a_child_gets_the_given_variables_on_top_of_this_environment(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert run_python_json(["-c", PRINT_ENV], env={"CUDA_VISIBLE_DEVICES": "GPU-2aaa"})[0] == "GPU-2aaa"
    pinned_home = run_python_json(["-c", PRINT_ENV], env={"CUDA_VISIBLE_DEVICES": "GPU-2aaa"})[1]
    inherited = run_python_json(["-c", PRINT_ENV])
    assert inherited[0] == "0" and pinned_home == inherited[1]  # the rest of the environment is kept


def test_a_child_that_prints_no_json_is_one_line():
    with pytest.raises(ChildProcessError, match="^exit code 3: no json$"):  # the last line of its stderr
        run_python_json(["-c", "import sys; print('no json', file=sys.stderr); raise SystemExit(3)"])
