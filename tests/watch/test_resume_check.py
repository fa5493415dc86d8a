"""A resume proves it carried on (#39): the first steps after a resume against the tail before the stop, from
hand-written log records (the loss band, the learning rate, the step, the data position)."""

from __future__ import annotations

from backend.contract.events import Log, RunBegin
from backend.watch.resume_detectors import ResumeDetector


def _log(step: int, loss: float, lr: float, epoch: float) -> Log:
    return Log(step=step, loss=loss, learning_rate=lr, epoch=epoch, time=float(step))


# cosine after a warm-up of 10 steps to 1e-4; the run stopped after step 40, checkpoint-40; 0.01 epoch a step
BEFORE = [_log(s, 1.2 - 0.01 * s, 1e-4 * (1 - (s - 10) / 200), 0.01 * s) for s in range(30, 41)]


def _feed(detector: ResumeDetector, logs: list[Log], start_step: int = 40) -> list:
    found = detector.on_event(RunBegin(start_step=start_step))
    for log in logs:
        found += detector.on_event(log)
    return found


def test_a_clean_resume_is_said_once_and_raises_nothing() -> None:
    detector = ResumeDetector(BEFORE, logs=3)
    after = [_log(s, 1.2 - 0.01 * s, 1e-4 * (1 - (s - 10) / 200), 0.01 * s) for s in (41, 42, 43, 44)]
    assert _feed(detector, after) == []
    assert detector.clean == ("resume check: the run carried on from step 40 (loss 0.78 within the band before the "
                              "stop, learning rate 8.45e-05 continuing 8.5e-05)")


def test_a_schedule_back_at_warm_up_and_a_loss_out_of_the_band_are_said_with_the_numbers() -> None:
    detector = ResumeDetector(BEFORE, logs=3)
    after = [_log(41, 2.1, 1e-5, 0.41), _log(42, 2.0, 2e-5, 0.42), _log(43, 1.9, 3e-5, 0.43)]
    [finding] = _feed(detector, after)
    assert finding.kind == "resume_drift" and finding.step == 43
    assert finding.message == (
        "after the resume from step 40: loss 2 is 2.2x the band before the stop (0.8-0.89); "
        "learning rate 1e-05 at step 41 against 8.5e-05 at step 40 before the stop (12%): back at warm-up")
    assert finding.evidence["loss_band_before"] == [0.8, 0.89] and finding.evidence["lr_after"] == 1e-5
    assert detector.clean is None


def test_a_data_position_that_restarted_is_said() -> None:
    detector = ResumeDetector(BEFORE, logs=2)
    after = [_log(41, 0.79, 8.45e-5, 0.01), _log(42, 0.78, 8.4e-5, 0.02)]
    [finding] = _feed(detector, after)
    assert finding.message == ("after the resume from step 40: data position: epoch 0.01 at step 41, the steps "
                               "before predict 0.41")


def test_a_resume_that_began_at_step_0_started_over() -> None:
    [finding] = _feed(ResumeDetector(BEFORE), [], start_step=0)
    assert finding.message == ("the resumed run began again at step 0; before the stop it had reached step 40: its "
                               "checkpoint was not loaded")


def test_a_first_attempt_checks_nothing() -> None:
    detector = ResumeDetector([], logs=1)
    assert _feed(detector, [_log(1, 9.0, 1e-6, 0.0)], start_step=0) == [] and detector.clean is None
