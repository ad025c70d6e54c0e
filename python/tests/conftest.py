# conftest.py: fixtures of the kda_conform tests: the kda binary, golden/L1 and its prompts.
# SPDX-License-Identifier: MIT
"""Tests that need `kda` skip when it is missing, unless KDA_REQUIRE_KDA=1 (make
check-python sets it), where a missing kda is a failure."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)                      # fakes.py

import kda_conform  # noqa: E402
from kda_conform.score import help_text  # noqa: E402 (kda_conform.score is the function)


def _need(reason):
    if os.environ.get("KDA_REQUIRE_KDA") == "1":
        pytest.fail(reason + " (KDA_REQUIRE_KDA=1)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def kda():
    try:
        return kda_conform.find_kda()
    except kda_conform.ScoreError as e:
        _need(str(e))


@pytest.fixture(scope="session")
def golden_l1(kda):
    try:
        return kda_conform.find_golden("L1", kda)
    except kda_conform.ScoreError as e:
        _need(str(e))


@pytest.fixture(scope="session")
def prompts(kda, golden_l1, tmp_path_factory):
    d = str(tmp_path_factory.mktemp("prompts"))
    kda_conform.export_prompts(golden_l1, d, kda)
    return d


@pytest.fixture(scope="session")
def knows_not_supported(kda):
    """Whether this runner scores a candidate's not_supported as NotSupported (SPEC §7.9)."""
    return "not_supported" in help_text(kda)
