"""torchrun / elastic launcher output recorded with torch 2.13 (SIGKILLed rank, SIGTERMed survivor)."""

from __future__ import annotations

from _logs_helpers import of_kind, scan


def test_sigkill_child_failed_recorded() -> None:
    events = scan("recorded_elastic_sigkill.log")
    closing = of_kind(events, "elastic_closing_signal")
    assert len(closing) == 1 and closing[0].line_no == 1
    assert closing[0].fields["signal"] == "SIGTERM" and closing[0].time is not None
    failed = of_kind(events, "elastic_child_failed")
    agent, survivor, root = failed
    assert (agent.line_no, agent.rank, agent.severity) == (2, None, "error")
    assert agent.fields["exitcode"] == -9 and agent.fields["signal"] == "SIGKILL"
    assert agent.fields["local_rank"] == 1
    assert agent.fields["binary"].endswith("python")
    assert (survivor.line_no, survivor.rank) == (25, 0)
    assert survivor.fields["root_cause"] == 0 and survivor.fields["signal"] == "SIGTERM"
    assert (root.line_no, root.rank) == (34, 1)
    fields = dict(root.fields)
    for volatile in ("pid", "failure_time"):
        assert isinstance(fields.pop(volatile), (int, float))
    assert fields == {"root_cause": 1, "local_rank": 1, "exitcode": -9, "signal": "SIGKILL",
                      "host": "localhost", "error_file": "<N/A>",
                      "traceback": f"Signal 9 (SIGKILL) received by PID {root.fields['pid']}",
                      "rank_source": "content"}
    assert root.time == root.fields["failure_time"]
    assert agent.fields["pid"] == root.fields["pid"]
    # the launcher's own traceback is one event
    tbs = of_kind(events, "traceback")
    assert [t.fields["exc_type"] for t in tbs] == [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"]


def test_table_without_other_failures() -> None:
    events = scan("recorded_dataloader_timeout.log")
    failed = [e for e in of_kind(events, "elastic_child_failed") if "root_cause" in e.fields]
    assert len(failed) == 1 and failed[0].fields["root_cause"] == 1 and failed[0].rank == 0
