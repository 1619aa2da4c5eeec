"""A measurement in a fresh process: its result, log lines and errors come back here, and
nothing of this process (its state, its patches) reaches it."""

import os
import signal
import time

import pytest
import torch

from formers import cpu_allocator
from formers.bench.fresh_process import ProcessKilled, TimeLimitReached, call_in_fresh_process


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


def work_for(seconds: float, log) -> str:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.1)
    return "done"


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


def test_a_process_still_working_at_its_time_limit_is_ended():
    start = time.monotonic()
    with pytest.raises(TimeLimitReached, match="did not finish in 15 s") as reached:
        call_in_fresh_process(work_for, 120, log=print, time_limit=15)
    # it returns once the process is gone (joined): ended at its limit, not left to finish
    assert time.monotonic() - start < 100
    assert reached.value.seconds == 15


def test_a_process_that_answers_in_time_is_not_ended():
    result = call_in_fresh_process(report_process, "y", log=lambda line: None, time_limit=300)
    assert result["tag"] == "y"
