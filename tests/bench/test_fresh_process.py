"""A measurement in a fresh process: its result, log lines and errors come back here, and
nothing of this process (its state, its patches) reaches it."""

import os
import signal

import pytest
import torch

from formers import cpu_allocator
from formers.bench.fresh_process import ProcessKilled, call_in_fresh_process


def report_process(tag: str, log) -> dict:
    log(f"{tag}: started")
    return {
        "pid": os.getpid(),
        "tag": tag,
        "threads": torch.get_num_threads(),
        "malloc kept": cpu_allocator.freed_memory_is_kept(),
        "ignores Ctrl-C": signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
    }


def fail(message: str, log) -> None:
    raise ValueError(message)


def die(log) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("kept", [True, False])
def test_the_result_and_log_lines_come_back_from_a_process_set_up_as_this_one(monkeypatch, kept):
    monkeypatch.setattr(cpu_allocator, "_kept", kept)  # as if malloc was (not) changed here
    threads = torch.get_num_threads()
    torch.set_num_threads(3)  # no machine's default: the child must be told
    try:
        lines: list[str] = []
        result = call_in_fresh_process(report_process, "x", log=lines.append)
    finally:
        torch.set_num_threads(threads)
    assert result["pid"] != os.getpid() and result["tag"] == "x"
    assert lines == ["x: started"]
    assert result["threads"] == 3
    assert result["malloc kept"] is (kept and cpu_allocator.keep_freed_memory())
    assert result["ignores Ctrl-C"]  # this process gets it too, and ends the child


def test_an_error_there_is_raised_here_with_its_type_message_and_traceback():
    with pytest.raises(ValueError, match="no such length") as error:
        call_in_fresh_process(fail, "no such length", log=lambda line: None)
    notes = "\n".join(error.value.__notes__)
    assert "in the measuring process" in notes and "in fail\n    raise ValueError" in notes


def test_a_killed_process_is_reported_with_its_signal():
    with pytest.raises(ProcessKilled, match="killed by SIGKILL") as killed:
        call_in_fresh_process(die, log=lambda line: None)
    assert killed.value.exit_code == -signal.SIGKILL


def test_a_signal_without_a_name_is_reported_by_its_number():
    assert "killed by signal 99" in str(ProcessKilled(-99))
    assert "ended with exit code 1" in str(ProcessKilled(1))
