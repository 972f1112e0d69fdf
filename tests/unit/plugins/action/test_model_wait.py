"""The model wait's readiness predicate (the loop itself is _waiter.wait)."""
import pytest

from ansible_collections.gpufleet.sglang.plugins.action.model_wait import finished


@pytest.mark.parametrize("status,done", [
    ({"finished": 0, "started": 1}, False),
    ({"finished": 1, "rc": 0}, True),
    ({"failed": True, "msg": "could not find job"}, True),  # async_status failed outright
    ({"failed": True, "finished": 0}, False),  # the job itself is still running
])
def test_finished(status, done):
    assert finished(status) is done
