"""The suite runs on two workers (pytest-xdist, `-n 2 --dist loadgroup` in scripts/test): much
of it waits on a server or runs the engine on one thread (a CPU build scores with one thread
per worker), so two modules side by side keep both cores busy. Each module stays on one
worker, so its module-scoped servers and bundle are made once; the modules that read the
embedded-sample releases (helpers.sample_release) share a worker, so each release is built
once."""
import helpers
import pytest


# First, before xdist's own hook reads the groups into the tests' ids.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        module = item.module
        reads_samples = getattr(module, "sample_release", None) is helpers.sample_release
        item.add_marker(pytest.mark.xdist_group("sample-releases" if reads_samples else module.__name__))
