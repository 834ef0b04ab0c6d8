"""The e2e harness starts the demo again on new ports when one was taken before the demo could
bind it (the dependency sets run side by side), and only then."""

from __future__ import annotations

import e2e_harness
import pytest


class FakeDemo:
    def __init__(self, state_dir, log_dir, failure: str | None):
        self.state_dir, self.log_dir, self.failure = state_dir, log_dir, failure

    def start(self):
        if self.failure is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            with open(self.log_dir / "hub.log", "a") as log:
                log.write(self.failure + "\n")
            raise RuntimeError("jupyterhub exited with status 1 during start-up")
        return self


def fake_starts(monkeypatch, failures: list[str | None]) -> list:
    made = []

    def demo_on_free_ports(state_dir, log_dir, **_options):
        made.append(FakeDemo(state_dir, log_dir, failures[len(made)]))
        return made[-1]

    monkeypatch.setattr(e2e_harness, "_demo_on_free_ports", demo_on_free_ports)
    return made


def test_a_port_taken_meanwhile_starts_the_demo_again_in_a_fresh_folder(monkeypatch, tmp_path):
    # an EADDRINUSE from an earlier run in the same log does not count
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "hub.log").write_text("listen EADDRINUSE (an earlier run)\n")
    made = fake_starts(monkeypatch, ["Error: listen EADDRINUSE: address already in use", None])
    demo = e2e_harness.start_demo(tmp_path / "demo", log_dir=tmp_path / "logs")
    assert demo is made[1]
    assert [d.state_dir for d in made] == [tmp_path / "demo", tmp_path / "demo" / "attempt-2"]
    assert {d.log_dir for d in made} == {tmp_path / "logs"}


def test_any_other_failure_is_raised_at_once(monkeypatch, tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "hub.log").write_text("listen EADDRINUSE (an earlier run)\n")
    made = fake_starts(monkeypatch, ["Traceback: a bug in the config", None])
    with pytest.raises(RuntimeError):
        e2e_harness.start_demo(tmp_path / "demo", log_dir=tmp_path / "logs")
    assert len(made) == 1


def test_it_gives_up_after_a_few_attempts(monkeypatch, tmp_path):
    made = fake_starts(monkeypatch, ["EADDRINUSE"] * e2e_harness.PORT_ATTEMPTS)
    with pytest.raises(RuntimeError):
        e2e_harness.start_demo(tmp_path / "demo", log_dir=tmp_path / "logs")
    assert len(made) == e2e_harness.PORT_ATTEMPTS
