"""The pyramid demo builds and verifies a sparse global field."""

from __future__ import annotations

import pytest

from toolkit.examples.pyramid_demo import demo


@pytest.mark.slow
def test_demo_builds_and_verifies(tmp_path, local_cluster):
    reports = demo(tmp_path, cluster=local_cluster)
    assert reports[0].plan == "pyramid-mean"
    assert all(s.gate_have == s.gate_want for s in reports[0].stages)
    assert reports[1].plan.startswith("pyramid-verify")
