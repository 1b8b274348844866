"""While a run waits for its attacks, one line says which are under way, for how long, against which budget."""

from __future__ import annotations

from concurrent.futures import Future

from adversary.attack_progress import AttackProgress


def test_the_line_names_each_attack_under_way_with_its_elapsed_time_and_budget():
    progress = AttackProgress(every_s=30)
    done, running, queued = Future(), Future(), Future()
    progress.note(done, "idlg on round 1 (1 target(s))", None)
    progress.note(running, "dlg on round 1 (2 target(s))", 120.0)
    progress.note(queued, "portfolio of 3 attack(s) on round 2 (1 target(s))", None)
    done.set_result([])
    running.set_running_or_notify_cancel()
    submitted = min(job.submitted for _, job in progress._jobs.values())
    assert progress.line(now=submitted + 100) == (
        "1 of 3 attack job(s) done; under way: dlg on round 1 (2 target(s)) 1m40s of 2m00s budget; "
        "portfolio of 3 attack(s) on round 2 (1 target(s)) 1m40s (no time budget), queued"
    )


def test_a_line_is_due_every_period_while_waiting():
    progress = AttackProgress(every_s=30)
    start = progress._last
    assert not progress.due(now=start + 10)
    assert progress.due(now=start + 31)
    assert not progress.due(now=start + 40)
