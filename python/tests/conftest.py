# conftest.py: fixtures of the kda_conform tests: the kda binary, golden/L1 and its prompts.
# SPDX-License-Identifier: MIT
"""The judge is never optional: a missing kda or golden set is an error of the fixture (so a
failure of every test that needs it), never a skip.  pytester runs the plugin end to end."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)                      # fakes.py, author.py

import kda_conform  # noqa: E402

pytest_plugins = ["pytester"]


def pytest_configure(config):
    # make check-python runs `-m "not slow"`; make check-python-l1 runs the slow ones: whole
    # golden sets through the plugin, the example and the adapters (python/README.md, Tests).
    config.addinivalue_line("markers", "slow: scores a whole golden set (make check-python-l1)")


@pytest.fixture(scope="session")
def kda():
    return kda_conform.find_kda()


@pytest.fixture(scope="session")
def golden_l1(kda):
    return kda_conform.find_golden("L1", kda)


@pytest.fixture(scope="session")
def prompts(kda, golden_l1, tmp_path_factory):
    """The prompts of two cases of golden/L1 (a gdn case, a vk layout with h0)."""
    d = str(tmp_path_factory.mktemp("prompts"))
    kda_conform.export_prompts(golden_l1, d, kda, filters=["t17-gdn", "t65-lower-bound-vk"])
    return d


@pytest.fixture(scope="session")
def all_prompts(kda, golden_l1, tmp_path_factory):
    """Every prompt of golden/L1 (its cases and their serving prompts)."""
    d = str(tmp_path_factory.mktemp("all_prompts"))
    kda_conform.export_prompts(golden_l1, d, kda)
    return d
