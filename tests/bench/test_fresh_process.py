"""A measurement in a fresh process: its result, log lines and errors come back here, and
nothing of this process (its state, its patches) reaches it."""

import os
import signal

import pytest
import torch

from formers.bench.fresh_process import ProcessKilled, call_in_fresh_process


def report_process(tag: str, log) -> dict:
    log(f"{tag}: started")
    return {"pid": os.getpid(), "threads": torch.get_num_threads(), "tag": tag}


def fail(message: str, log) -> None:
    raise ValueError(message)


def die(log) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_the_result_and_log_lines_come_back_from_another_process_with_our_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        lines: list[str] = []
        result = call_in_fresh_process(report_process, "x", log=lines.append)
    finally:
        torch.set_num_threads(threads)
    assert result["pid"] != os.getpid() and result["tag"] == "x"
    assert result["threads"] == 1
    assert lines == ["x: started"]


def test_an_error_there_is_raised_here_with_its_type_and_message():
    with pytest.raises(ValueError, match="no such length"):
        call_in_fresh_process(fail, "no such length", log=lambda line: None)


def test_a_killed_process_is_reported_with_its_signal():
    with pytest.raises(ProcessKilled, match="killed by SIGKILL") as killed:
        call_in_fresh_process(die, log=lambda line: None)
    assert killed.value.exit_code == -signal.SIGKILL
