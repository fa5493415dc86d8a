"""README promises: each test checks what the user meets (output, exit code, screen). Every `sleep` a
test starts through tests.faults.helpers is killed when it ends (the fault tests' fixtures)."""

from tests.faults.conftest import _no_leftover_processes, workspace  # noqa: F401 (fixtures)
