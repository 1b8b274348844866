"""Attack workers are processes of their own: their threads and device, the same reconstructions however many
run, a time budget that returns the best so far (read on a clock the tests move themselves), and CPUs kept out of
Flower's Ray pool."""

import logging
import os

import pytest
import torch
from fake_clocks import jumping_past, stepping
from processes import alive

from adversary.inversion import clock, run_attack
from adversary.view import AttackerView, LocalTraining
from adversary.workers import AttackJob, ProcessAttackWorkers, WorkerSettings, settings_for
from fedsim.config import AttackOptions


def views(count: int) -> list[AttackerView]:
    """``count`` one-image clients of a small sigmoid network, each after one SGD step on its own image."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8), torch.nn.Sigmoid(), torch.nn.Linear(8, 3))
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out = []
    for client in range(count):
        image = torch.rand(1, 1, 4, 4)
        loss = torch.nn.functional.cross_entropy(model(image), torch.tensor([client % 3]))
        grads = torch.autograd.grad(loss, list(model.parameters()))
        sent = {name: start[name] - 0.1 * g for (name, _), g in zip(model.named_parameters(), grads)}
        out.append(
            AttackerView(
                round=1,
                tap="mitm",
                target=f"client:{client}",
                model=model,
                global_state=start,
                observed_state=sent,
                input_shape=(1, 4, 4),
                num_classes=3,
                num_samples=1,
                local_training=LocalTraining(0.1, 1, 1),
            )
        )
    return out


def thread_and_device() -> tuple[int, int, str]:
    from adversary import workers

    return os.getpid(), torch.get_num_threads(), str(workers._DEVICE)


def test_each_worker_process_sets_its_own_threads_and_device():
    threads_here = torch.get_num_threads()
    pool = ProcessAttackWorkers(WorkerSettings(count=2, threads=1, devices=("cpu",)))
    try:
        seen = {pool.call(thread_and_device).result(timeout=120) for _ in range(6)}
    finally:
        pool.shutdown()
    assert all(pid != os.getpid() for pid, _, _ in seen)
    assert {(threads, device) for _, threads, device in seen} == {(1, "cpu")}
    assert torch.get_num_threads() == threads_here  # nothing process-wide changed in the server


def test_a_ctrl_c_that_reaches_the_workers_is_left_to_the_server():
    import signal

    pool = ProcessAttackWorkers(WorkerSettings(count=1, threads=1, devices=("cpu",)))
    try:
        pid = pool.call(os.getpid).result(timeout=120)
        job = pool.submit(AttackJob(AttackOptions(name="ig", iterations=3000), views(1), seed=0))
        os.kill(pid, signal.SIGINT)  # what a terminal's Ctrl-C sends to every process of the run
        (rec,) = job.result(timeout=300)
    finally:
        pool.shutdown()
    assert rec.iterations == 3000 and not rec.cut


def test_worker_settings_follow_the_adversary_resources():
    assert settings_for(2, 1.5, torch.device("cpu")) == WorkerSettings(count=2, threads=1, devices=("cpu",))
    assert settings_for(1, 0.25, torch.device("cpu")).threads == 1
    assert settings_for(1, 3, torch.device("cpu")).threads == 3


def test_two_workers_give_the_reconstructions_of_one_and_of_an_attack_in_this_process():
    options = [
        AttackOptions(name="dlg", iterations=40, restarts=2),
        AttackOptions(name="ig", iterations=40, restarts=2),
    ]
    jobs = [AttackJob(options[i % 2], [view], seed=7 + i) for i, view in enumerate(views(4))]
    results = {}
    for count in (1, 2):
        pool = ProcessAttackWorkers(WorkerSettings(count=count, threads=1, devices=("cpu",)))
        try:
            futures = [pool.submit(job) for job in jobs]
            results[count] = [future.result(timeout=300)[0] for future in futures]
        finally:
            pool.shutdown()
    threads_here = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers' thread count: results are identical for a fixed count
    try:
        here = [run_attack(job.options, job.views, job.seed, torch.device("cpu"))[0] for job in jobs]
    finally:
        torch.set_num_threads(threads_here)
    for one, two, local in zip(results[1], results[2], here):
        assert torch.equal(one.images, two.images) and torch.equal(one.images, local.images)
        assert torch.equal(one.labels, two.labels) and torch.equal(one.labels, local.labels)
        assert one.restart_objectives == two.restart_objectives == local.restart_objectives


def test_a_failing_attack_fails_its_job_and_the_worker_serves_the_next():
    bad = views(1)[0]
    bad = AttackerView(**{**bad.__dict__, "num_classes": 5})  # no classifier with 5 outputs: labels cannot be read
    pool = ProcessAttackWorkers(WorkerSettings(count=1, threads=1, devices=("cpu",)))
    try:
        with pytest.raises(ValueError, match="label recovery"):
            pool.submit(AttackJob(AttackOptions(name="idlg", iterations=5), [bad], seed=0)).result(timeout=120)
        (rec,) = pool.submit(AttackJob(AttackOptions(name="idlg", iterations=5), views(1), seed=0)).result(timeout=120)
    finally:
        pool.shutdown()
    assert rec.images.shape == (1, 1, 4, 4)


@pytest.mark.parametrize("name", ["ig", "dlg"])
def test_past_its_time_limit_an_attack_returns_its_best_reconstruction_so_far_and_says_it_was_cut(name, monkeypatch):
    # the limit is read on a clock that moves 1/64 s per reading, whatever the machine's load: 0.5 s is 32 readings
    monkeypatch.setattr(clock, "now", stepping(1 / 64))
    options = AttackOptions(name=name, iterations=10**7, restarts=3, time_limit=0.5, log_every=1)
    recs = run_attack(options, views(2), seed=0, device=torch.device("cpu"))
    assert len(recs) == 2  # the batched problem (2 targets x 3 restarts) still gives one reconstruction per view
    for rec in recs:
        assert rec.cut and 0 < rec.iterations < 32  # stopped by the limit, not by the iterations
        assert rec.trajectory[-1].iteration == rec.iterations
        # the best iterate seen, not the last one: no point of the trajectory did better
        assert rec.objective <= min(point.objective for point in rec.trajectory)


@pytest.mark.parametrize("name", ["ig", "dlg", "ig-dip"])
def test_a_time_limit_that_runs_out_before_the_first_iteration_says_no_iteration_ran(name, monkeypatch):
    monkeypatch.setattr(clock, "now", jumping_past(1.0))
    options = AttackOptions(name=name, iterations=10**7, restarts=2, time_limit=0.5)
    for rec in run_attack(options, views(2), seed=0, device=torch.device("cpu")):
        assert rec.cut and rec.iterations == 0


def test_an_attack_within_its_time_limit_is_not_cut_and_unchanged(monkeypatch):
    monkeypatch.setattr(clock, "now", stepping(1 / 64))  # 30 iterations read it about 30 times: under 1 s
    options = AttackOptions(name="ig", iterations=30, restarts=2)
    free = run_attack(options, views(1), seed=0, device=torch.device("cpu"))[0]
    limited = run_attack(options.model_copy(update={"time_limit": 2}), views(1), seed=0, device=torch.device("cpu"))[0]
    assert not limited.cut and limited.iterations == 30
    assert torch.equal(free.images, limited.images) and free.restart_objectives == limited.restart_objectives


def test_a_worker_whose_server_was_killed_exits_instead_of_staying_orphaned(tmp_path):
    import subprocess
    import sys
    import time

    server = (
        "import os\n"
        "from adversary.workers import ProcessAttackWorkers, WorkerSettings\n"
        "pool = ProcessAttackWorkers(WorkerSettings(count=1, threads=1, devices=('cpu',)))\n"
        "print(pool.call(os.getpid).result(timeout=120), flush=True)\n"
        "os._exit(9)  # killed: no shutdown, no atexit\n"
    )
    result = subprocess.run([sys.executable, "-c", server], capture_output=True, text=True, timeout=300)
    worker = int(result.stdout.split()[0])
    deadline = time.monotonic() + 30
    while alive(worker):
        assert time.monotonic() < deadline, f"attack worker {worker} outlived its server by 30 s"
        time.sleep(0.2)


def test_a_worker_whose_server_was_killed_while_it_still_started_exits_too():
    """Killed before its worker finished importing torch: the worker, reparented by then, still knows its server."""
    import subprocess
    import sys
    import time

    server = (
        "import os\n"
        "from adversary.workers import ProcessAttackWorkers, WorkerSettings\n"
        "pool = ProcessAttackWorkers(WorkerSettings(count=1, threads=1, devices=('cpu',)))\n"
        "print(*pool._pool._processes, flush=True)  # spawned, not started yet\n"
        "os._exit(9)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", server], stdout=subprocess.PIPE, text=True)
    worker = int(process.stdout.readline().split()[0])  # not to the end: the worker shares the pipe
    process.wait(timeout=120)
    deadline = time.monotonic() + 60
    while alive(worker):
        assert time.monotonic() < deadline, f"attack worker {worker} outlived its server by 60 s"
        time.sleep(0.2)


def test_a_job_cancelled_by_terminating_the_pool_fails_quietly_instead_of_raising_in_its_callback(caplog):
    from concurrent.futures import CancelledError, Future

    from adversary.workers import _decoded

    queued = Future()  # a job still queued when a stopped run terminates the workers (cancel_futures=True)
    job = _decoded(queued)
    with caplog.at_level(logging.ERROR, logger="concurrent.futures"):
        queued.cancel()
    assert caplog.records == []  # was: "exception calling callback ... CancelledError", printed before the stop line
    assert isinstance(job.exception(timeout=0), CancelledError)


def log_progress(message: str) -> int:
    logging.getLogger("fedsim").info("progress %s", message)
    return os.getpid()


def test_what_a_worker_logs_reaches_the_runs_log_with_the_workers_number(caplog):
    pool = ProcessAttackWorkers(WorkerSettings(count=1, threads=1, devices=("cpu",)))
    with caplog.at_level(logging.INFO, logger="fedsim"):
        try:
            pid = pool.call(log_progress, "rung 0 of 3").result(timeout=120)
        finally:
            pool.shutdown()  # relays what the worker logged before it ended
    assert pid != os.getpid()
    assert "attack worker 0: progress rung 0 of 3" in caplog.messages


def test_a_long_attack_logs_its_iteration_objective_and_time_as_it_goes(monkeypatch, caplog):
    from adversary.inversion import solver

    monkeypatch.setattr(solver, "PROGRESS_EVERY_S", 0.0)  # every iteration, here
    with caplog.at_level(logging.INFO, logger="fedsim"):
        run_attack(AttackOptions(name="ig", iterations=3, time_limit=60), views(2), 0, torch.device("cpu"))
    lines = [line for line in caplog.messages if line.startswith("attack ig: iteration")]
    assert lines and "of 3 on 2 target(s) x 1 restart(s), best objective" in lines[-1]
    assert lines[-1].endswith("of its 60 s limit")


def test_an_attacks_restarts_split_over_workers_give_the_answer_of_one_run():
    from concurrent.futures import Future

    from adversary.workers import best_of, restart_shares

    options = AttackOptions(name="ig", iterations=5, restarts=5)
    shares = restart_shares(options, 2)
    assert [(share.first_restart, share.restarts) for share in shares] == [(0, 3), (3, 2)]
    assert restart_shares(options, 8)[-1].first_restart == 4 and len(restart_shares(options, 8)) == 5
    assert restart_shares(AttackOptions(name="ig", restarts=1), 4) == [AttackOptions(name="ig", restarts=1)]

    two = views(2)
    (alone_0, alone_1) = run_attack(options, two, 7, torch.device("cpu"))
    parts = []
    for _ in shares:
        part = Future()
        part.set_running_or_notify_cancel()
        parts.append(part)
    merged = best_of(parts)
    for part, share in zip(parts, shares):
        part.set_result(run_attack(share, two, 7, torch.device("cpu")))
    split_0, split_1 = merged.result(timeout=0)
    assert split_0.objective == alone_0.objective and torch.equal(split_0.images, alone_0.images)
    assert sorted(split_1.restart_objectives) == sorted(alone_1.restart_objectives)


def test_one_failing_share_of_an_attacks_restarts_fails_the_attack():
    from concurrent.futures import Future

    from adversary.workers import best_of

    ok, failed = Future(), Future()
    merged = best_of([ok, failed])
    failed.set_exception(RuntimeError("out of memory"))
    ok.set_result([])
    assert isinstance(merged.exception(timeout=0), RuntimeError)


def test_terminating_the_workers_leaves_no_pool_thread_for_the_interpreters_exit_to_race(monkeypatch):
    """A stopped run terminates its workers mid-attack. Python < 3.13 wakes a pool's manager thread at exit without
    its lock; were that thread still closing its pipes then (slow here, as on a loaded machine), the exit could print
    "OSError: [Errno 9] Bad file descriptor" after the run's last line. So terminate() returns after it ended."""
    import time
    from concurrent.futures import process as pool_process

    closing = pool_process._ExecutorManagerThread.join_executor_internals

    def slow_closing(manager):
        time.sleep(1.0)
        closing(manager)

    monkeypatch.setattr(pool_process._ExecutorManagerThread, "join_executor_internals", slow_closing)
    pool = ProcessAttackWorkers(WorkerSettings(count=1, threads=1, devices=("cpu",)))
    pool.call(os.getpid).result(timeout=120)
    manager = pool._pool._executor_manager_thread
    job = pool.submit(AttackJob(AttackOptions(name="ig", iterations=100_000), views(1), seed=0))
    pool.terminate()
    assert manager is not None and not manager.is_alive()
    assert job.exception(timeout=30) is not None
